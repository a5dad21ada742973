//! The engine (`weir_runtime::engine`, what `weir get` runs) against
//! hostile peers and servers on loopback (small tokio programs in this
//! test): dials and handshakes past the limits, idle connections, a
//! tracker's huge answer, a tracker that never answers `stopped`, many
//! torrents starting at once against one tracker, a peer
//! that does not read its answers, and an eD2k server asking for
//! callbacks. The bounds are held by the session
//! (limits) and the engine (write queues, timeouts, the accept loop);
//! `weir ed2k-server`'s own are in `ed2k_server.rs`.

mod engine_common;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use engine_common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir_ed2k::Md4Hash;
use weir_ed2k::client::{ClientMessage, OwnHello};
use weir_ed2k::server::ServerToClient;
use weir_runtime::engine::Engine;

/// Every test ends within this, or fails.
const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dials_in_progress_are_limited() {
    tokio::time::timeout(LIMIT, async {
        let dir = tmp("dials");
        let meta = torrent(&dir, 256 * 1024);
        // 40 peers that accept and never shake hands: every dial stays in
        // progress until its timeout, or until the peer hangs up.
        let peers = Holders::start(40).await;
        let mut cfg = config();
        cfg.session.global.max_peers = 50;
        cfg.session.global.max_half_open = 8;
        cfg.session.per_transfer.max_half_open = 50;
        let e = Engine::start(cfg).await.unwrap();
        e.add_torrent(download_source(
            meta,
            &tmp("dials-dst"),
            peers.addrs.clone(),
        ))
        .await
        .unwrap();
        // Eight at once, then one more for each that ends.
        peers.cycle(8, 12).await;
        stop(e).await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_incoming_connections_give_way_and_time_out_and_honest_peers_get_in() {
    tokio::time::timeout(LIMIT, async {
        let dir = tmp("idle-src");
        let meta = torrent(&dir, 1 << 20);
        let mut cfg = config();
        cfg.session.global.max_handshakes = 4;
        cfg.handshake_timeout = Duration::from_secs(3);
        let (seed, _) = seeder(meta.clone(), &dir, cfg).await;
        let addr = seed.bt_addr.unwrap();
        // Ten connections that never say a word.
        let mut idle = Vec::new();
        for _ in 0..10 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        let connected = Instant::now();
        // The six oldest were dropped for newer ones at once.
        for (i, s) in idle.iter_mut().take(6).enumerate() {
            assert!(
                read_to_close(s, Duration::from_secs(2)).await.is_some(),
                "idle connection {i} kept past the handshake limit"
            );
        }
        // An honest leecher still gets in (the oldest idle one gives way
        // to it) and downloads.
        let leech = Engine::start(config()).await.unwrap();
        let id = leech
            .add_torrent(download_source(meta.clone(), &tmp("idle-dst"), vec![addr]))
            .await
            .unwrap();
        let summary = leech.wait().await.unwrap();
        let t = summary.transfers.iter().find(|t| t.id == id).unwrap();
        assert!(t.complete_at.is_some(), "the honest leecher did not finish");
        assert_eq!(t.bytes_had, meta.info.total_length());
        assert!(
            read_to_close(&mut idle[6], Duration::from_secs(6))
                .await
                .is_some()
        );
        // The others go at the handshake timeout (3 s), not before.
        for (i, s) in idle.iter_mut().enumerate().skip(7) {
            assert!(
                read_to_close(s, Duration::from_secs(6)).await.is_some(),
                "idle connection {i} kept past the handshake timeout"
            );
            let at = connected.elapsed();
            assert!(
                (Duration::from_millis(2500)..Duration::from_secs(6)).contains(&at),
                "idle connection {i} closed after {at:?} (timeout 3 s)"
            );
        }
        stop(seed).await;
    })
    .await
    .unwrap();
}

/// A fake HTTP tracker answering every announce with `peers` compact
/// IPv4 peers on 127.0.0.0/8; counts the announces.
async fn huge_tracker(peers: u32) -> SocketAddr {
    let mut compact = Vec::with_capacity(peers as usize * 6);
    for i in 0..peers {
        let ip = Ipv4Addr::from(0x7f00_0000 | (i + 2));
        compact.extend_from_slice(&ip.octets());
        compact.extend_from_slice(&(6000u16 + (i % 1000) as u16).to_be_bytes());
    }
    let mut body = format!("d8:intervali1800e5:peers{}:", compact.len()).into_bytes();
    body.extend_from_slice(&compact);
    body.push(b'e');
    http_tracker(body).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_tracker_answer_adds_a_bounded_number_of_peers() {
    tokio::time::timeout(LIMIT, async {
        let dir = tmp("tracker");
        let tracker = huge_tracker(170_000).await;
        let meta = torrent_with(
            &dir,
            256 * 1024,
            vec![vec![format!("http://{tracker}/announce")]],
        );
        let mut cfg = config();
        cfg.use_trackers = true;
        let e = Engine::start(cfg).await.unwrap();
        let id = e
            .add_torrent(download_source(meta, &tmp("tracker-dst"), Vec::new()))
            .await
            .unwrap();
        // The answer is taken in as one input: the first snapshot that
        // knows any peer knows all it will.
        let s = progress_until(&e, Duration::from_secs(20), "peers", |s| {
            info(s, id).is_some_and(|t| t.known > 0)
        })
        .await;
        let known = info(&s, id).unwrap().known;
        let max = weir_core::peers::BookConfig::default().max_per_answer;
        assert!(
            (max / 2..=max).contains(&known),
            "{known} peers known of 170,000 (at most {max} per answer)"
        );
        stop(e).await;
    })
    .await
    .unwrap();
}

fn encode(m: &ClientMessage) -> BytesMut {
    let mut b = BytesMut::new();
    m.encode(&mut b);
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ed2k_peer_that_does_not_read_is_dropped_at_the_queue_bound() {
    tokio::time::timeout(LIMIT, async {
        let log = Log::capture();
        let dir = tmp("noread");
        let mut cfg = config();
        cfg.ed2k_listen = Some("127.0.0.1:0".parse().unwrap());
        cfg.keep_running = true;
        let e = Engine::start(cfg).await.unwrap();
        e.share(share(&dir, 100_000)).await.unwrap();
        let addr = e.ed2k_addr.unwrap();
        // A small receive buffer of our own: weir's writer is stuck soon.
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.set_recv_buffer_size(64 * 1024).unwrap();
        let mut s = sock.connect(addr).await.unwrap();
        let hello = OwnHello::weir("hostile", 0, false).hello(Md4Hash([9; 16]), 1, 4662);
        s.write_all(&encode(&ClientMessage::Hello(hello)))
            .await
            .unwrap();
        // Each 6-byte PUBLICIP_REQ earns a 10-byte answer; none is read.
        let one = encode(&ClientMessage::PublicIpReq);
        let mut burst = BytesMut::new();
        for _ in 0..10_000 {
            burst.extend_from_slice(&one);
        }
        let mut sent = 0u64;
        let limit = 200u64 << 20;
        while sent < limit {
            match tokio::time::timeout(Duration::from_secs(5), s.write_all(&burst)).await {
                Ok(Ok(())) => sent += burst.len() as u64,
                // Dropped (reset), or no longer read: stop flooding.
                Ok(Err(_)) | Err(_) => break,
            }
        }
        // Weir closed it, for not reading, with no more queued for it than
        // the eD2k core's upload watermark plus one read plus 1 MiB of
        // control messages, and not much less.
        let got = read_to_close(&mut s, Duration::from_secs(20)).await;
        assert!(got.is_some(), "a peer that does not read was kept");
        let core = weir_ed2k::transfer::ClientConfig::new(Md4Hash([0; 16]));
        let bound = core.upload_watermark + u64::from(core.max_read) + (1 << 20);
        // (Other tests of this process log too: this one's drop is the one
        // at the eD2k bound.)
        let all = log.lines("peer is not reading");
        let lines: Vec<&String> = all
            .iter()
            .filter(|l| l.contains(&format!("(limit {bound})")))
            .collect();
        assert_eq!(lines.len(), 1, "{all:?}");
        let queued = queued_when_dropped(lines[0]);
        assert!(
            (bound - (1 << 20)..=bound).contains(&queued),
            "dropped with {queued} bytes queued (bound {bound}), {sent} bytes asked"
        );
        stop(e).await;
    })
    .await
    .unwrap();
}

/// A fake eD2k server: takes the login, gives a high id, then asks for
/// `n` callbacks to the addresses in `to`, in turn.
async fn callback_server(to: Vec<SocketAddr>, n: usize) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let Ok((mut s, _)) = l.accept().await else {
            return;
        };
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf).await;
        let mut out = BytesMut::new();
        ServerToClient::IdChange {
            id: 0x0100_007f,
            flags: 0,
        }
        .encode(&mut out);
        for i in 0..n {
            let SocketAddr::V4(a) = to[i % to.len()] else {
                unreachable!()
            };
            ServerToClient::CallbackRequested {
                ip: *a.ip(),
                port: a.port(),
            }
            .encode(&mut out);
        }
        let _ = s.write_all(&out).await;
        // Keep the session open.
        while let Ok(k) = s.read(&mut buf).await {
            if k == 0 {
                break;
            }
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_callbacks_go_through_the_dial_limits() {
    tokio::time::timeout(LIMIT, async {
        let dir = tmp("callbacks");
        let peers = Holders::start(20).await;
        let server = callback_server(peers.addrs.clone(), 2000).await;
        let mut cfg = config();
        cfg.keep_running = true;
        cfg.session.global.max_peers = 5;
        let e = Engine::start(cfg).await.unwrap();
        e.share(share(&dir, 10_000)).await.unwrap();
        e.add_server(server).await;
        // 2,000 callbacks asked: the server's connection and four
        // callbacks fill the five peer slots; each callback that ends lets
        // one more in.
        peers.cycle(4, 8).await;
        stop(e).await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_incoming_ed2k_connections_give_way_and_time_out_and_honest_peers_get_in() {
    tokio::time::timeout(LIMIT, async {
        let dir = tmp("ed2k-idle-src");
        let mut cfg = config();
        cfg.ed2k_listen = Some("127.0.0.1:0".parse().unwrap());
        cfg.keep_running = true;
        cfg.session.global.max_handshakes = 4;
        cfg.handshake_timeout = Duration::from_secs(3);
        let seed = Engine::start(cfg).await.unwrap();
        let shared = share(&dir, 300_000);
        let link = weir_ed2k::link::FileLink {
            name: "s.bin".into(),
            size: shared.hashes.size,
            hash: shared.hashes.file_hash,
            aich: None,
            part_hashes: None,
            sources: Vec::new(),
        };
        seed.share(shared).await.unwrap();
        let addr = seed.ed2k_addr.unwrap();
        // Ten connections that never send their hello.
        let mut idle = Vec::new();
        for _ in 0..10 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        let connected = Instant::now();
        // The six oldest were dropped for newer ones at once.
        for (i, s) in idle.iter_mut().take(6).enumerate() {
            assert!(
                read_to_close(s, Duration::from_secs(2)).await.is_some(),
                "idle eD2k connection {i} kept past the handshake limit"
            );
        }
        // An honest downloader still gets in (the oldest idle one gives way
        // to it) and downloads.
        let leech = Engine::start(config()).await.unwrap();
        let id = leech
            .add_ed2k(weir_runtime::engine::Ed2kSource {
                link,
                dir: tmp("ed2k-idle-dst"),
                open: weir_runtime::storage::OpenOptions::download(),
                peers: vec![addr],
                seed: false,
                paused: false,
            })
            .await
            .unwrap();
        let summary = tokio::time::timeout(Duration::from_secs(20), leech.wait())
            .await
            .expect("the honest downloader did not finish in time")
            .unwrap();
        let t = summary.transfers.iter().find(|t| t.id == id).unwrap();
        assert!(
            t.complete_at.is_some(),
            "the honest downloader did not finish"
        );
        assert_eq!(t.bytes_had, 300_000);
        assert!(
            read_to_close(&mut idle[6], Duration::from_secs(6))
                .await
                .is_some()
        );
        // The others go at the handshake timeout (3 s), not before.
        for (i, s) in idle.iter_mut().enumerate().skip(7) {
            assert!(
                read_to_close(s, Duration::from_secs(6)).await.is_some(),
                "idle eD2k connection {i} kept past the handshake timeout"
            );
            let at = connected.elapsed();
            assert!(
                (Duration::from_millis(2500)..Duration::from_secs(6)).contains(&at),
                "idle eD2k connection {i} closed after {at:?} (timeout 3 s)"
            );
        }
        stop(seed).await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ed2k_peer_asking_before_its_hello_is_closed_unanswered() {
    tokio::time::timeout(LIMIT, async {
        let dir = tmp("before-hello");
        let mut cfg = config();
        cfg.ed2k_listen = Some("127.0.0.1:0".parse().unwrap());
        cfg.keep_running = true;
        let e = Engine::start(cfg).await.unwrap();
        e.share(share(&dir, 100_000)).await.unwrap();
        let mut s = TcpStream::connect(e.ed2k_addr.unwrap()).await.unwrap();
        // 6 MB of PUBLICIP_REQ and no hello: the first one ends it.
        let one = encode(&ClientMessage::PublicIpReq);
        let mut burst = BytesMut::new();
        for _ in 0..10_000 {
            burst.extend_from_slice(&one);
        }
        for _ in 0..100 {
            if !matches!(
                tokio::time::timeout(Duration::from_secs(5), s.write_all(&burst)).await,
                Ok(Ok(()))
            ) {
                break;
            }
        }
        let got = read_to_close(&mut s, Duration::from_secs(10)).await;
        assert_eq!(got, Some(0), "answered before its hello, or kept");
        stop(e).await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bt_peer_pushing_blocks_nobody_asked_for_is_dropped_and_nothing_kept() {
    tokio::time::timeout(LIMIT, async {
        let dir = tmp("unasked-src");
        let meta = torrent(&dir, 1 << 20);
        // A "seeder" that never unchokes and pushes 16 KiB blocks of piece
        // 1 (never block 0) until it is dropped.
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let info_hash = meta.info_hash;
        let pusher = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut theirs = [0u8; weir_bt::wire::Handshake::LEN];
            s.read_exact(&mut theirs).await.unwrap();
            let mut out = BytesMut::new();
            weir_bt::wire::Handshake::new(info_hash, *b"-XX0000-pusher-test0").encode(&mut out);
            let block = vec![0x55u8; 16 * 1024];
            let mut pushed = 0u64;
            let mut begin = 16 * 1024u32;
            while pushed < 64 << 20 {
                weir_bt::wire::encode(
                    &weir_bt::wire::Message::Piece {
                        index: 1,
                        begin,
                        data: bytes::Bytes::from(block.clone()),
                    },
                    &mut out,
                );
                begin = if begin >= 48 * 1024 {
                    16 * 1024
                } else {
                    begin + 16 * 1024
                };
                match tokio::time::timeout(Duration::from_secs(5), s.write_all(&out)).await {
                    Ok(Ok(())) => pushed += out.len() as u64,
                    Ok(Err(_)) | Err(_) => break,
                }
                out.clear();
            }
            let closed = read_to_close(&mut s, Duration::from_secs(10)).await;
            (pushed, closed)
        });
        // The pusher speaks plaintext and answers one connection only: no
        // MSE attempt first.
        let mut cfg = config();
        cfg.encryption = weir_bt::mse::Encryption::Off;
        let e = Engine::start(cfg).await.unwrap();
        let id = e
            .add_torrent(download_source(meta, &tmp("unasked-dst"), vec![addr]))
            .await
            .unwrap();
        let (pushed, closed) = pusher.await.unwrap();
        assert!(closed.is_some(), "kept after {pushed} bytes pushed unasked");
        let s = progress_until(&e, Duration::from_secs(10), "the violation counted", |s| {
            info(s, id).is_some_and(|t| t.protocol_errors >= 1)
        })
        .await;
        let t = info(&s, id).unwrap();
        assert_eq!((t.bytes_had, t.downloaded.0), (0, 0), "unasked data kept");
        assert!(pushed < 64 << 20, "all {pushed} bytes taken");
        stop(e).await;
    })
    .await
    .unwrap();
}

/// A tracker answering every announce with no peer (those whose line
/// holds `hold_if` never), and the request lines it got.
async fn quiet_tracker(
    hold_if: Option<&'static str>,
) -> (SocketAddr, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    http_tracker_holding(b"d8:intervali1800e5:peers0:e".to_vec(), hold_if).await
}

/// An engine that announces to trackers.
async fn tracked_engine() -> Engine {
    let mut cfg = config();
    cfg.use_trackers = true;
    Engine::start(cfg).await.unwrap()
}

/// Adds the `i`th download of a test `tag`, a torrent naming `tracker`.
async fn add_tracked(e: &Engine, tracker: SocketAddr, tag: &str, i: usize) {
    let src = tmp(&format!("{tag}-src-{i}"));
    let meta = torrent_with(
        &src,
        64 * 1024 + i,
        vec![vec![format!("http://{tracker}/announce")]],
    );
    let dst = tmp(&format!("{tag}-dst-{i}"));
    e.add_torrent(download_source(meta, &dst, Vec::new()))
        .await
        .unwrap();
}

/// How many requests the tracker got whose line holds `what`.
fn heard(log: &std::sync::Mutex<Vec<String>>, what: &str) -> usize {
    log.lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains(what))
        .count()
}

/// `n` torrents of an engine announce to a tracker holding the requests
/// whose line holds `hold_if`; once each has sent `started` the engine is
/// stopped: how many `stopped` the tracker heard, and how long the stop
/// took.
async fn stop_with_tracker_holding(
    hold_if: &'static str,
    n: usize,
    tag: &str,
) -> (usize, Duration) {
    let (tracker, log) = quiet_tracker(Some(hold_if)).await;
    let e = tracked_engine().await;
    for i in 0..n {
        add_tracked(&e, tracker, tag, i).await;
    }
    let count = |event: &str| heard(&log, event);
    until(Duration::from_secs(20), "every torrent announced", || {
        count("event=started") == n
    })
    .await;
    let start = Instant::now();
    stop(e).await;
    let took = start.elapsed();
    (count("event=stopped"), took)
}

/// An engine of many torrents whose tracker never answers `stopped` stops
/// in one stop's bounded time, having sent every torrent's `stopped`: the
/// announcers were stopped one after another, each waiting out its
/// timeout, so a daemon of 12 such torrents took 30 s to stop (of 1,000,
/// 40 minutes; a service manager kills it long before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tracker_silent_at_stop_holds_a_stop_once_not_per_torrent() {
    tokio::time::timeout(LIMIT, async {
        const N: usize = 12;
        let (stopped, took) = stop_with_tracker_holding("event=stopped", N, "silent").await;
        assert_eq!(stopped, N, "not every torrent sent stopped");
        // One stop's bound (5 s and a second's grace), not one per torrent.
        assert!(took < Duration::from_secs(9), "stopping took {took:?}");
    })
    .await
    .unwrap();
}

/// A stop while a torrent's announce is still out (here a tracker that
/// never answers `started`) cuts that announce short and still tells the
/// tracker `stopped`, within the stop's bound: the announce held the
/// announcer until the engine's stop gave up on it, and `stopped` was
/// never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_an_unanswered_announce_still_says_stopped() {
    tokio::time::timeout(LIMIT, async {
        let (stopped, took) = stop_with_tracker_holding("event=started", 1, "held").await;
        assert_eq!(stopped, 1, "stopped was not announced");
        assert!(took < Duration::from_secs(4), "stopping took {took:?}");
    })
    .await
    .unwrap();
}

/// Many torrents starting at once (a daemon's restart) do not open a
/// connection each to their tracker at once: announces start at most 50 a
/// second (after a burst of 50), and every torrent is announced in the
/// end. Before the schedule, 120 torrents sent 120 `started` within the
/// time the adds took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_torrents_starting_at_once_announce_at_a_bounded_rate() {
    tokio::time::timeout(LIMIT, async {
        const N: usize = 120;
        let (tracker, log) = quiet_tracker(None).await;
        let e = tracked_engine().await;
        let started = || heard(&log, "event=started");
        // No announce can start before this: the bound counts from here.
        let t0 = Instant::now();
        let bound = |t0: Instant| 50.0 + 50.0 * t0.elapsed().as_secs_f64() + 1.0;
        let mut most_over = f64::MIN;
        for i in 0..N {
            add_tracked(&e, tracker, "rate", i).await;
            let seen = started() as f64;
            most_over = most_over.max(seen - bound(t0));
        }
        until(Duration::from_secs(30), "every torrent announced", || {
            let seen = started();
            most_over = most_over.max(seen as f64 - bound(t0));
            seen == N
        })
        .await;
        assert!(
            most_over <= 0.0,
            "announces started faster than 50 a second: {most_over:.1} over the bound"
        );
        stop(e).await;
    })
    .await
    .unwrap();
}

/// At shutdown the `stopped` of many torrents goes out at most 50 at a
/// time, all within the stop's bound: a tracker that never answers hears
/// two rounds of 50 (each waits out half the bound), not all 120 at the
/// same instant as before; one that answers hears every torrent's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stops_at_shutdown_go_out_a_bounded_number_at_a_time() {
    tokio::time::timeout(LIMIT, async {
        const N: usize = 120;
        let (stopped, took) = stop_with_tracker_holding("event=stopped", N, "stopmany").await;
        assert!(
            (50..=100).contains(&stopped),
            "a silent tracker heard {stopped} stops at shutdown"
        );
        assert!(took < Duration::from_secs(7), "stopping took {took:?}");
        // A tracker that answers hears them all.
        let (stopped, _) = stop_with_tracker_holding("never-held", N, "stopall").await;
        assert_eq!(stopped, N);
    })
    .await
    .unwrap();
}
