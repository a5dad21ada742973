use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_utp::packet::{self, Header, PacketType};

use super::*;

const LIMIT: Duration = Duration::from_secs(20);

async fn pair(cfg: UtpConfig) -> (UtpSocket, UtpSocket) {
    let p = NetPolicy::loopback();
    let a = UtpSocket::bind(&p, "127.0.0.1:0".parse().unwrap(), cfg.clone())
        .await
        .unwrap();
    let b = UtpSocket::bind(&p, "127.0.0.1:0".parse().unwrap(), cfg)
        .await
        .unwrap();
    (a, b)
}

fn data(n: usize) -> Vec<u8> {
    let mut r = fastrand::Rng::with_seed(7);
    (0..n).map(|_| r.u8(..)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_carries_bytes_both_ways_and_ends_at_the_fin() {
    let (a, b) = pair(UtpConfig::default()).await;
    let to = b.utp().local_addr().unwrap();
    let payload = data(8 << 20);
    let sent = payload.clone();
    let server = tokio::spawn({
        let utp = b.utp().clone();
        async move {
            let mut s = utp.accept().await.expect("an incoming connection");
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            s.write_all(b"thanks").await.unwrap();
            s.shutdown().await.unwrap();
            got
        }
    });
    let r = tokio::time::timeout(LIMIT, async {
        let mut c = a.utp().connect(to).await.unwrap();
        c.write_all(&sent).await.unwrap();
        c.shutdown().await.unwrap();
        let mut back = Vec::new();
        c.read_to_end(&mut back).await.unwrap();
        (back, server.await.unwrap())
    })
    .await
    .expect("transfer within the limit");
    assert_eq!(r.0, b"thanks");
    assert!(r.1 == payload, "{} bytes came, not the same", r.1.len());
}

#[tokio::test]
async fn a_connect_nobody_answers_fails_and_outside_the_policy_sends_nothing() {
    let mut cfg = UtpConfig::default();
    cfg.endpoint.syn_retries = 0;
    let (a, _b) = pair(cfg).await;
    // A bound UDP socket that never answers.
    let mute = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let e = a
        .utp()
        .connect(mute.local_addr().unwrap())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
    let before = a.utp().stats().sent;
    let e = a
        .utp()
        .connect("192.0.2.1:6881".parse().unwrap())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    assert_eq!(a.utp().stats().sent, before);
    assert_eq!(a.utp().stats().connections, 0);
}

fn syn(conn_id: u16, seq: u16) -> Vec<u8> {
    let h = Header {
        ptype: PacketType::Syn,
        conn_id,
        timestamp_us: 1,
        timestamp_diff_us: 0,
        wnd_size: 1 << 20,
        seq_nr: seq,
        ack_nr: 0,
    };
    let mut b = BytesMut::new();
    packet::encode(&h, None, 0, &[], &mut b);
    b.to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_syn_flood_stays_within_the_half_open_bound_and_real_peers_still_connect() {
    let (a, b) = pair(UtpConfig::default()).await;
    let to = b.utp().local_addr().unwrap();
    let bound = b.utp().shared.lock().ep.config().max_half_open;
    let flood = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut peak = 0;
    for i in 0..20_000u32 {
        let _ = flood.send_to(&syn(i as u16 * 2, i as u16), to).await;
        if i % 500 == 499 {
            tokio::task::yield_now().await;
            peak = peak.max(b.utp().stats().connections);
        }
    }
    // Every SYN read (the kernel may drop some): the last counted ones.
    tokio::time::timeout(LIMIT, async {
        while b.utp().stats().endpoint.accepted < 1000 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the flood was read");
    let s = b.utp().stats();
    peak = peak.max(s.connections);
    assert!(
        peak <= bound,
        "{peak} connections held for a flood of unconfirmed SYNs (bound {bound}): {s:?}"
    );
    assert!(s.endpoint.half_open_evicted > 0, "{s:?}");
    assert_eq!(s.backlog, 0, "unconfirmed connections reached the backlog");
    // A real peer still gets through.
    let server = tokio::spawn({
        let utp = b.utp().clone();
        async move {
            let mut s = utp.accept().await.unwrap();
            let mut buf = [0u8; 5];
            s.read_exact(&mut buf).await.unwrap();
            buf
        }
    });
    let mut c = tokio::time::timeout(LIMIT, a.utp().connect(to))
        .await
        .unwrap()
        .unwrap();
    c.write_all(b"hello").await.unwrap();
    let got = tokio::time::timeout(LIMIT, server).await.unwrap().unwrap();
    assert_eq!(&got, b"hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_backlog_resets_newcomers_instead_of_growing() {
    let cfg = UtpConfig {
        accept_backlog: 3,
        ..UtpConfig::default()
    };
    let (a, b) = pair(cfg).await;
    let to = b.utp().local_addr().unwrap();
    // Nobody accepts: 10 peers connect and speak first (what confirms).
    let mut streams = Vec::new();
    for _ in 0..10 {
        let mut c = a.utp().connect(to).await.unwrap();
        c.write_all(b"x").await.unwrap();
        streams.push(c);
    }
    tokio::time::timeout(LIMIT, async {
        while b.utp().stats().backlog_refused < 7 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("backlog not enforced: {:?}", b.utp().stats()));
    let s = b.utp().stats();
    assert_eq!((s.backlog, s.backlog_refused), (3, 7), "{s:?}");
}

/// A hand-made peer: a raw socket speaking uTP with the packet codec.
struct Raw {
    sock: tokio::net::UdpSocket,
    to: SocketAddr,
    id: u16,
}

impl Raw {
    async fn send(&self, ptype: PacketType, seq: u16, ack: u16, payload: &[u8]) {
        let h = Header {
            ptype,
            conn_id: if ptype == PacketType::Syn {
                self.id
            } else {
                self.id.wrapping_add(1)
            },
            timestamp_us: 1,
            timestamp_diff_us: 0,
            wnd_size: 1 << 20,
            seq_nr: seq,
            ack_nr: ack,
        };
        let mut b = BytesMut::new();
        packet::encode(&h, None, 0, payload, &mut b);
        self.sock.send_to(&b, self.to).await.unwrap();
    }

    /// The next packet's header (timeouts fail the test).
    async fn recv(&self) -> Header {
        let mut buf = vec![0u8; 70_000];
        let (n, _) = tokio::time::timeout(LIMIT, self.sock.recv_from(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        packet::decode(&buf[..n]).unwrap().header
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packets_with_bad_sequence_numbers_deliver_nothing_and_break_nothing() {
    let (_a, b) = pair(UtpConfig::default()).await;
    let raw = Raw {
        sock: tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap(),
        to: b.utp().local_addr().unwrap(),
        id: 1000,
    };
    let isn = 500u16;
    raw.send(PacketType::Syn, isn, 0, &[]).await;
    let st = raw.recv().await;
    assert_eq!(st.ptype, PacketType::State);
    assert_eq!(st.ack_nr, isn);
    let their_last = st.seq_nr.wrapping_sub(1);
    // Far out of window (behind and ahead), an ACK of data never sent, a
    // duplicate of the SYN's number, a FIN far ahead: none is delivered.
    for (seq, ack) in [
        (isn.wrapping_sub(3000), their_last),
        (isn.wrapping_add(30_000), their_last),
        (isn.wrapping_add(1), st.seq_nr.wrapping_add(5000)),
        (isn, their_last),
    ] {
        raw.send(PacketType::Data, seq, ack, b"BAD!").await;
    }
    raw.send(PacketType::Fin, isn.wrapping_add(20_000), their_last, &[])
        .await;
    // Then the right one.
    raw.send(PacketType::Data, isn.wrapping_add(1), their_last, b"good")
        .await;
    let mut s = tokio::time::timeout(LIMIT, b.utp().accept())
        .await
        .expect("confirmed by the good packet")
        .unwrap();
    let mut buf = [0u8; 4];
    tokio::time::timeout(LIMIT, s.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf, b"good");
    // The connection still works: the next in-order packet arrives.
    raw.send(PacketType::Data, isn.wrapping_add(2), their_last, b"more")
        .await;
    tokio::time::timeout(LIMIT, s.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf, b"more");
    // Only the two good payloads were taken in: nothing bad is held.
    let stats = s.conn_stats().unwrap();
    assert_eq!(stats.bytes_received, 8, "{stats:?}");
    assert_eq!(stats.recv_buffered, 0, "{stats:?}");
}
