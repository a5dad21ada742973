//! Batches on real loopback sockets.

use std::time::Duration;

use weir_core::policy::NetPolicy;

use super::*;

/// The `i`th test datagram: `len` bytes carrying `i` in every byte and its
/// index in the first two.
fn datagram(i: usize, len: usize) -> Vec<u8> {
    let mut d = vec![i as u8; len.max(2)];
    d[..2].copy_from_slice(&(i as u16).to_be_bytes());
    d
}

/// A sender and a receiver on loopback under the loopback policy, and the
/// receiver's address.
async fn pair() -> (PolicedUdp, PolicedUdp, SocketAddr) {
    let policy = NetPolicy::loopback();
    let tx = bind(&policy, "127.0.0.1:0").await;
    let rx = bind(&policy, "127.0.0.1:0").await;
    let to = rx.local_addr().unwrap();
    (tx, rx, to)
}

async fn bind(policy: &NetPolicy, addr: &str) -> PolicedUdp {
    let s = PolicedUdp::bind(policy, addr.parse().unwrap())
        .await
        .unwrap();
    let _ = socket2::SockRef::from(s.as_socket()).set_recv_buffer_size(4 << 20);
    s
}

/// The next datagram on `sock` (within 10 s).
async fn next(sock: &PolicedUdp, buf: &mut [u8]) -> (Vec<u8>, SocketAddr) {
    let (n, from) = tokio::time::timeout(Duration::from_secs(10), sock.recv_from(buf))
        .await
        .expect("a datagram within 10 s")
        .unwrap();
    (buf[..n].to_vec(), from)
}

/// Nothing more waits on `sock` (after a short wait).
async fn nothing_more(sock: &PolicedUdp, buf: &mut [u8]) {
    let r = tokio::time::timeout(Duration::from_millis(200), sock.recv_from(buf)).await;
    assert!(r.is_err(), "an unexpected datagram: {r:?}");
}

/// Datagram `i` of `lens[i].1` bytes to `lens[i].0`, each, sent in one
/// batch from `tx`: the items and what the sender counted.
async fn send_all(
    tx: &PolicedUdp,
    to: impl IntoIterator<Item = (SocketAddr, usize)>,
) -> (Vec<(SocketAddr, Vec<u8>)>, SendCount) {
    let items: Vec<(SocketAddr, Vec<u8>)> = to
        .into_iter()
        .enumerate()
        .map(|(i, (a, len))| (a, datagram(i, len)))
        .collect();
    let c = BatchSender::new()
        .send(tx, &items, |(a, d)| (*a, &d[..]))
        .await;
    (items, c)
}

#[tokio::test]
async fn a_batch_arrives_whole_and_in_order() {
    let (tx, rx, to) = pair().await;
    // More than two system calls' worth, of many lengths.
    let n = 2 * MAX_BATCH + 7;
    let (items, c) = send_all(&tx, (0..n).map(|i| (to, 1 + (i * 97) % 1400))).await;
    assert_eq!(
        c,
        SendCount {
            sent: n as u64,
            refused: 0,
            errors: 0
        }
    );
    let mut buf = vec![0; 2000];
    for (i, (_, want)) in items.iter().enumerate() {
        let (got, from) = next(&rx, &mut buf).await;
        assert_eq!(&got, want, "datagram {i}");
        assert_eq!(from, tx.local_addr().unwrap());
    }
    nothing_more(&rx, &mut buf).await;
}

#[tokio::test]
async fn a_refused_destination_is_counted_and_the_rest_sent() {
    let (tx, rx, to) = pair().await;
    let outside: SocketAddr = "192.0.2.1:6881".parse().unwrap();
    let dsts = [to, to, outside, to, outside];
    let (_, c) = send_all(&tx, dsts.map(|a| (a, 100))).await;
    assert_eq!(
        c,
        SendCount {
            sent: 3,
            refused: 2,
            errors: 0
        }
    );
    let mut buf = vec![0; 200];
    for i in [0, 1, 3] {
        assert_eq!(next(&rx, &mut buf).await.0, datagram(i, 100));
    }
    nothing_more(&rx, &mut buf).await;
}

#[tokio::test]
async fn a_datagram_the_system_refuses_is_counted_and_the_batch_goes_on() {
    // The kernel takes the first two, stops at the one too long for UDP
    // (a short count), fails it alone on the next call, then takes the
    // rest.
    let (tx, rx, to) = pair().await;
    let lens = [10, 20, 70_000, 30, 40];
    let (_, c) = send_all(&tx, lens.map(|l| (to, l))).await;
    assert_eq!(
        c,
        SendCount {
            sent: 4,
            refused: 0,
            errors: 1
        }
    );
    let mut buf = vec![0; 200];
    for i in [0, 1, 3, 4] {
        assert_eq!(next(&rx, &mut buf).await.0, datagram(i, lens[i]));
    }
    nothing_more(&rx, &mut buf).await;
}

/// Reads batches from `rx` until `want` datagrams came (within 10 s):
/// what each call returned.
async fn read_batches(
    rx: &PolicedUdp,
    rb: &mut RecvBatch,
    want: usize,
) -> Vec<Vec<(SocketAddr, Vec<u8>, bool)>> {
    let mut calls = Vec::new();
    let mut total = 0;
    tokio::time::timeout(Duration::from_secs(10), async {
        while total < want {
            rx.readable().await.unwrap();
            match rb.try_recv(rx) {
                Ok(n) => {
                    assert_eq!(n, rb.len());
                    total += n;
                    calls.push(
                        rb.iter()
                            .map(|d| (d.from, d.data.to_vec(), d.truncated))
                            .collect(),
                    );
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await
    .expect("every datagram within 10 s");
    calls
}

#[tokio::test]
async fn one_call_reads_many_and_flags_the_oversized() {
    let (tx, rx, to) = pair().await;
    let max = 1000;
    let mut rb = RecvBatch::new(16, max);
    let n = 40;
    let want: Vec<Vec<u8>> = (0..n)
        .map(|i| datagram(i, if i == 5 { 1500 } else { 50 + i * 20 }))
        .collect();
    for d in &want {
        tx.send_to(d, to).await.unwrap();
    }
    let calls = read_batches(&rx, &mut rb, n).await;
    // 40 queued datagrams in 16 slots: three calls (the first is made
    // once all are queued: loopback delivers within send_to).
    assert_eq!(calls.iter().map(Vec::len).collect::<Vec<_>>(), [16, 16, 8]);
    let got: Vec<_> = calls.into_iter().flatten().collect();
    for (i, (from, data, truncated)) in got.iter().enumerate() {
        assert_eq!(*from, tx.local_addr().unwrap());
        if i == 5 {
            // Kept to max + 1 bytes, flagged.
            assert!(*truncated);
            assert_eq!(data.len(), max + 1);
            assert_eq!(data[..], want[5][..max + 1]);
        } else {
            assert!(!truncated, "datagram {i}");
            assert_eq!(data, &want[i], "datagram {i}");
        }
    }
    // Drained: the next call finds nothing.
    let e = rb.try_recv(&rx).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    assert!(rb.is_empty());
}

#[tokio::test]
async fn datagrams_from_outside_the_policy_are_dropped_from_a_batch() {
    let only_one = NetPolicy::parse("127.0.0.1").unwrap();
    let rx = bind(&only_one, "127.0.0.1:0").await;
    let to = rx.local_addr().unwrap();
    let loopback = NetPolicy::loopback();
    let inside = bind(&loopback, "127.0.0.1:0").await;
    let outside = bind(&loopback, "127.0.0.2:0").await;
    for i in 0..6 {
        let s = if i % 2 == 0 { &inside } else { &outside };
        s.send_to(&datagram(i, 30), to).await.unwrap();
    }
    let mut rb = RecvBatch::new(32, 100);
    let calls = read_batches(&rx, &mut rb, 3).await;
    let got: Vec<_> = calls.into_iter().flatten().collect();
    assert_eq!(got.len(), 3);
    for (k, (from, data, _)) in got.iter().enumerate() {
        assert_eq!(*from, inside.local_addr().unwrap());
        assert_eq!(data, &datagram(2 * k, 30));
    }
}
