//! The engine's DHT node on its UDP socket, engine to engine on loopback
//! (each engine on its own 127.0.0.x: a DHT table keeps one node per IP):
//! a seeder announces to a plain DHT node, a getter bootstrapped to that
//! node finds the seeder (for a torrent, and for a magnet before its
//! metadata); the routing table is saved and reused; garbage and floods of
//! queries stay within the bounds; nothing is sent outside the policy.

mod engine_common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use engine_common::*;
use weir_runtime::engine::{DhtSettings, DhtStatus, Engine, EngineConfig, EngineHandle};
use weir_session::Phase;

/// A configuration listening for BitTorrent on `ip` with a DHT
/// bootstrapped from `bootstrap`.
fn dht_config(ip: &str, bootstrap: Vec<SocketAddr>) -> EngineConfig {
    let mut cfg = config();
    cfg.bt_listen = Some(format!("{ip}:0").parse().unwrap());
    cfg.dht = Some(DhtSettings {
        bootstrap,
        ..DhtSettings::default()
    });
    cfg
}

/// A plain DHT node: an engine with no transfer, on `ip`.
async fn dht_node(ip: &str) -> Engine {
    let mut cfg = dht_config(ip, Vec::new());
    cfg.keep_running = true;
    Engine::start(cfg).await.unwrap()
}

/// Waits (bounded) until the engine's DHT figures satisfy `f`.
async fn dht_until(
    h: &EngineHandle,
    limit: Duration,
    what: &str,
    mut f: impl FnMut(&DhtStatus) -> bool,
) -> DhtStatus {
    let deadline = Instant::now() + limit;
    loop {
        let s = h.dht_status().await.expect("a DHT");
        if f(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_getter_finds_a_seeder_through_the_dht_only() {
    let node = dht_node("127.0.0.2").await;
    let node_addr = node.dht_addr.unwrap();
    // The UDP socket sits beside the BitTorrent listener: same address.
    assert_eq!(node_addr.ip(), node.bt_addr.unwrap().ip());
    let src = tmp("dht-src");
    let dst = tmp("dht-dst");
    let meta = torrent(&src, 700_000);
    let (seed, _) = seeder(meta.clone(), &src, dht_config("127.0.0.3", vec![node_addr])).await;
    assert_eq!(seed.dht_addr.unwrap().port(), seed.bt_addr.unwrap().port());
    // The seeder's announce is confirmed by the node.
    let s = dht_until(
        &seed.handle(),
        Duration::from_secs(10),
        "the announce",
        |s| s.announces_acked >= 1,
    )
    .await;
    assert_eq!(s.torrents, 1);
    let n = node.handle().dht_status().await.unwrap();
    assert_eq!(n.node.stored_hashes, 1, "{n:?}");
    assert_eq!(n.node.stored_peers, 1, "{n:?}");

    // The getter knows no peer: only the DHT node.
    let t0 = Instant::now();
    let getter = Engine::start(dht_config("127.0.0.4", vec![node_addr]))
        .await
        .unwrap();
    let gh = getter.handle();
    let id = getter
        .add_torrent(download_source(meta.clone(), &dst, Vec::new()))
        .await
        .unwrap();
    let summary = tokio::time::timeout(Duration::from_secs(20), getter.wait())
        .await
        .expect("the download ends in time")
        .unwrap();
    let t = summary.transfers.iter().find(|t| t.id == id).unwrap();
    assert!(t.complete_at.is_some());
    assert_eq!(t.bytes_had, meta.info.total_length());
    assert_eq!(
        std::fs::read(dst.join("t.bin")).unwrap(),
        std::fs::read(src.join("t.bin")).unwrap()
    );
    println!(
        "found the seeder through the DHT and downloaded in {:.3} s",
        t0.elapsed().as_secs_f64()
    );
    drop(gh);
    stop(seed).await;
    stop(node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_magnet_gets_its_metadata_from_a_peer_the_dht_found() {
    let node = dht_node("127.0.0.5").await;
    let node_addr = node.dht_addr.unwrap();
    let src = tmp("dht-msrc");
    let meta = torrent(&src, 300_000);
    let (seed, _) = seeder(meta.clone(), &src, dht_config("127.0.0.6", vec![node_addr])).await;
    dht_until(
        &seed.handle(),
        Duration::from_secs(10),
        "the announce",
        |s| s.announces_acked >= 1,
    )
    .await;
    let getter = Engine::start(dht_config("127.0.0.7", vec![node_addr]))
        .await
        .unwrap();
    let magnet = weir_bt::magnet::Magnet::parse(&format!(
        "magnet:?xt=urn:btih:{}",
        meta.info_hash
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    ))
    .unwrap();
    let from_dht = getter.handle().dht_peers(meta.info_hash).await.unwrap();
    let opts = weir_runtime::magnet::FetchOptions {
        policy: weir_core::policy::NetPolicy::loopback(),
        peers: Vec::new(),
        peer_id: weir_runtime::engine::new_peer_id(),
        port: getter.bt_addr.unwrap().port(),
        local_ip: Some("127.0.0.7".parse().unwrap()),
        use_trackers: false,
        timeout: Duration::from_secs(15),
        max_dials: 8,
        dht_port: getter.dht_addr.map(|a| a.port()),
    };
    let got = weir_runtime::magnet::fetch_with(&magnet, &opts, Some(from_dht))
        .await
        .expect("metadata through a DHT peer");
    assert_eq!(got.metainfo.info_hash, meta.info_hash);
    assert_eq!(got.metainfo.info.total_length(), 300_000);
    let g = getter.handle().dht_status().await.unwrap();
    assert!(g.peers_found >= 1, "{g:?}");
    // The watch ends with its receiver.
    let g = dht_until(
        &getter.handle(),
        Duration::from_secs(10),
        "the watch ends",
        |s| s.watches == 0 || s.node.lookups == 0,
    )
    .await;
    assert!(g.watches <= 1);
    stop(getter).await;
    stop(seed).await;
    stop(node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_routing_table_is_saved_and_reused() {
    let node = dht_node("127.0.0.8").await;
    let node_addr = node.dht_addr.unwrap();
    let dir = tmp("dht-table");
    let table = dir.join("dht.table");
    let mut cfg = dht_config("127.0.0.9", vec![node_addr]);
    cfg.keep_running = true;
    cfg.dht.as_mut().unwrap().table = Some(table.clone());
    let e = Engine::start(cfg.clone()).await.unwrap();
    let first = dht_until(&e.handle(), Duration::from_secs(10), "a good node", |s| {
        s.node.good_nodes >= 1
    })
    .await;
    assert_eq!(first.loaded_nodes, 0);
    stop(e).await;
    let blob = std::fs::read(&table).expect("the table is saved at the stop");
    let saved = weir_dht::SavedTable::decode(&blob).unwrap();
    assert_eq!(saved.id.0, first.id);
    assert!(saved.nodes.iter().any(|n| n.addr == node_addr), "{saved:?}");
    // Started again with no bootstrap node: same id, the saved node used.
    cfg.dht.as_mut().unwrap().bootstrap.clear();
    let e = Engine::start(cfg).await.unwrap();
    let again = dht_until(
        &e.handle(),
        Duration::from_secs(10),
        "the saved node answers",
        |s| s.node.good_nodes >= 1,
    )
    .await;
    assert_eq!(again.id, first.id);
    assert_eq!(again.loaded_nodes, saved.nodes.len());
    stop(e).await;
    stop(node).await;
    // A damaged table: started cold, not refused.
    std::fs::write(&table, b"d2:id3:xyze").unwrap();
    let mut cfg = dht_config("127.0.0.9", Vec::new());
    cfg.dht.as_mut().unwrap().table = Some(table);
    let e = Engine::start(cfg).await.unwrap();
    let cold = e.handle().dht_status().await.unwrap();
    assert_eq!(cold.loaded_nodes, 0);
    stop_idle(e).await;
}

/// Stops an engine with nothing to do (it may already have ended).
async fn stop_idle(e: Engine) {
    e.stop().await;
    let _ = tokio::time::timeout(Duration::from_secs(20), e.wait())
        .await
        .expect("the engine did not stop in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_goes_outside_the_policy() {
    // A loopback policy with no bootstrap: no router, no node, nothing sent.
    let policy = weir_core::policy::NetPolicy::loopback();
    let s = DhtSettings::new(Vec::new(), &policy, None);
    assert!(s.routers.is_empty() && s.bootstrap.is_empty());
    let all = weir_core::policy::NetPolicy::allow_all();
    assert_eq!(
        DhtSettings::new(Vec::new(), &all, None).routers.len(),
        weir_runtime::engine::dht::DEFAULT_ROUTERS.len()
    );
    let mut cfg = dht_config("127.0.0.10", vec!["192.0.2.1:6881".parse().unwrap()]);
    cfg.keep_running = true;
    let e = Engine::start(cfg).await.unwrap();
    let h = e.handle();
    // A node outside the policy given by hand: its ping is refused.
    h.dht_add_nodes(vec!["198.51.100.7:6881".parse().unwrap()])
        .await;
    let s = dht_until(&h, Duration::from_secs(10), "the refused ping", |s| {
        s.udp.send_refused >= 1
    })
    .await;
    assert_eq!(s.udp.sent, 0, "{s:?}");
    assert_eq!(s.udp.send_errors, 0, "{s:?}");
    stop(e).await;
}

/// A KRPC query `q` with transaction `t` from node id `id` and `args`.
fn query(q: &str, t: u16, id: [u8; 20], args: &[u8]) -> Vec<u8> {
    let mut m = b"d1:ad2:id20:".to_vec();
    m.extend_from_slice(&id);
    m.extend_from_slice(args);
    m.extend_from_slice(format!("e1:q{}:{q}1:t2:", q.len()).as_bytes());
    m.extend_from_slice(&t.to_be_bytes());
    m.extend_from_slice(b"1:y1:qe");
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_query_floods_stay_bounded() {
    let mut cfg = dht_config("127.0.0.11", Vec::new());
    cfg.keep_running = true;
    let e = Engine::start(cfg).await.unwrap();
    let h = e.handle();
    let to = e.dht_addr.unwrap();
    let started = Instant::now();
    let sock = tokio::net::UdpSocket::bind("127.0.0.12:0").await.unwrap();
    // 1. Garbage: random bytes, truncated and lying bencode, uTP-looking
    //    packets, oversized datagrams.
    let mut rng = fastrand::Rng::with_seed(7);
    let mut sent_krpc_like = 0u64;
    for i in 0..3_000u32 {
        let d: Vec<u8> = match i % 5 {
            0 => (0..rng.usize(1..300)).map(|_| rng.u8(..)).collect(),
            1 => {
                sent_krpc_like += 1;
                b"d1:ad2:id20:short".iter().copied().chain(*b"e").collect()
            }
            2 => {
                sent_krpc_like += 1;
                b"d1:t999999999:xe".to_vec()
            }
            3 => {
                let mut p = vec![0x41, 1];
                p.resize(40, 0xee);
                p
            }
            _ => vec![b'd'; 20_000],
        };
        let _ = sock.send_to(&d, to).await;
        if i % 200 == 0 {
            tokio::task::yield_now().await;
        }
    }
    // 2. A flood of queries: pings and get_peers from many ports and ids.
    let mut socks = Vec::new();
    for _ in 0..8 {
        socks.push(tokio::net::UdpSocket::bind("127.0.0.12:0").await.unwrap());
    }
    let mut queries = 0u64;
    for i in 0..8_000u32 {
        let mut id = [0u8; 20];
        rng.fill(&mut id);
        let q = if i % 2 == 0 {
            query("ping", i as u16, id, b"")
        } else {
            let mut a = b"9:info_hash20:".to_vec();
            let mut ih = [0u8; 20];
            rng.fill(&mut ih);
            a.extend_from_slice(&ih);
            query("get_peers", i as u16, id, &a)
        };
        let _ = socks[i as usize % socks.len()].send_to(&q, to).await;
        queries += 1;
        if i % 200 == 0 {
            tokio::task::yield_now().await;
        }
    }
    // Every datagram the socket kept was sorted; then the engine still
    // answers a ping from a fresh socket.
    let probe = tokio::net::UdpSocket::bind("127.0.0.13:0").await.unwrap();
    let ping = query("ping", 0xbeef, [0x42; 20], b"");
    let mut buf = vec![0u8; 2048];
    let answered = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            probe.send_to(&ping, to).await.unwrap();
            if let Ok(Ok((n, _))) =
                tokio::time::timeout(Duration::from_millis(200), probe.recv_from(&mut buf)).await
            {
                return buf[..n].to_vec();
            }
        }
    })
    .await
    .expect("the node answers after the floods");
    assert!(weir_dht::is_krpc(&answered));
    assert!(answered.windows(6).any(|w| w == b"1:y1:r"), "{answered:?}");
    let s = h.dht_status().await.unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    println!("after the floods ({elapsed:.2} s): {s:?}");
    let u = s.udp;
    // Sorted: each kind counted, none lost track of.
    assert!(
        u.oversized >= 1 && u.utp + u.utp_dropped >= 1 && u.other_dropped >= 1,
        "{u:?}"
    );
    assert!(u.received <= 3_000 + queries + 100, "{u:?}");
    assert!(
        s.node.malformed >= 1 && s.node.malformed <= sent_krpc_like + 10,
        "{s:?}"
    );
    assert!(u.krpc >= s.node.malformed, "{s:?}");
    // Bounded: replies waiting, transactions (verification pings of
    // queriers: one per IP, at most 32 at once), the query queue, the
    // routing table (one node per IP: the flood is one IP).
    assert!(s.node.ready <= 256, "{s:?}");
    assert!(s.node.transactions <= 40, "{s:?}");
    assert!(s.node.queued <= 1024, "{s:?}");
    assert!(s.node.nodes <= 2, "{s:?}");
    // The rate limit holds: our own queries (pings of queriers) stay under
    // 100/s plus the burst over the run, whatever the flood.
    let limit = (100.0 * elapsed + 10.0).ceil() as u64;
    assert!(
        s.node.queries_sent <= limit,
        "{} > {limit}",
        s.node.queries_sent
    );
    // Answers never exceed queries received (one per query at most).
    assert!(
        u.sent <= s.node.queries_received + s.node.queries_sent + 1,
        "{s:?}"
    );
    assert_eq!(u.send_refused, 0);
    stop(e).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_torrents_are_never_announced() {
    let node = dht_node("127.0.0.14").await;
    let node_addr = node.dht_addr.unwrap();
    let src = tmp("dht-private");
    let data = payload(100_000, 1);
    std::fs::write(src.join("t.bin"), &data).unwrap();
    let mut b = weir_bt::create::TorrentBuilder::single_file("t.bin", 100_000, 64 * 1024);
    b.pieces(weir_bt::create::hash_pieces(&data, 64 * 1024));
    b.private(true);
    let meta = std::sync::Arc::new(b.build().unwrap().metainfo);
    assert!(meta.info.private);
    let (seed, id) = seeder(meta, &src, dht_config("127.0.0.15", vec![node_addr])).await;
    // The seeder's DHT bootstraps (it talks to the node) but tracks no torrent.
    let s = dht_until(
        &seed.handle(),
        Duration::from_secs(10),
        "bootstrapped",
        |s| s.node.good_nodes >= 1,
    )
    .await;
    assert_eq!(s.torrents, 0);
    assert_eq!(s.announces_acked, 0);
    let p = seed.progress().borrow().clone();
    assert_eq!(info(&p, id).unwrap().phase, Phase::Seeding);
    stop(seed).await;
    stop(node).await;
}
