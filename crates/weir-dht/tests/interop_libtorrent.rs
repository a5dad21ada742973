//! weir's DHT node against libtorrent's (python3-libtorrent), in a network
//! namespace this test creates (only `lo`), each node on its own 127.0.0.x:
//! a libtorrent DHT node A on 127.0.0.2, a libtorrent seeder B on 127.0.0.3
//! that announces its torrent to A, and weir on 127.0.0.4, driven by a
//! test-only tokio loop over the runtime's policed UDP socket. weir pings
//! A, finds B through a `get_peers` lookup, and announces a torrent of its
//! own, which A then stores.
//!
//! Without `CI` the test is skipped when root, namespaces or
//! python3-libtorrent are missing; with `CI` set it fails instead.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weir_core::policy::NetPolicy;
use weir_dht::{Config, Dht, Event, Id, is_krpc};
use weir_lab::bt::dht::{self as lt_dht, Role};
use weir_lab::netns::Netns;
use weir_lab::tmpdir::TempDir;
use weir_runtime::net::PolicedUdp;

/// Drives `dht` over `sock` until `done` accepts an event (`Some`) or the
/// node's state after a step (`None`), or `timeout` passes.
async fn drive(
    dht: &mut Dht,
    sock: &PolicedUdp,
    timeout: Duration,
    mut done: impl FnMut(&Dht, Option<&Event>) -> bool,
) -> anyhow::Result<Option<Event>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut buf = vec![0u8; 65536];
    loop {
        while let Some((to, data)) = dht.poll_transmit() {
            sock.send_to(&data, to).await?;
        }
        while let Some(ev) = dht.poll_event() {
            if done(dht, Some(&ev)) {
                return Ok(Some(ev));
            }
        }
        if done(dht, None) {
            return Ok(None);
        }
        let wake = dht
            .poll_timeout()
            .map(tokio::time::Instant::from_std)
            .unwrap_or(deadline)
            .min(deadline);
        tokio::select! {
            r = sock.recv_from(&mut buf) => {
                let (n, from) = r?;
                if is_krpc(&buf[..n]) {
                    dht.handle_datagram(from, &buf[..n], Instant::now());
                }
            }
            _ = tokio::time::sleep_until(wake) => {
                if tokio::time::Instant::now() >= deadline {
                    bail!("timed out after {timeout:?}; stats {:?}", dht.stats());
                }
                dht.handle_timeout(Instant::now());
            }
        }
    }
}

#[test]
fn weir_finds_a_libtorrent_seeder_through_a_libtorrent_dht_node() -> anyhow::Result<()> {
    if !weir_lab::ci::require_root_and_netns()? || !lt_dht::available()? {
        return Ok(());
    }
    let dir = TempDir::new("dht-lt")?;
    // The seeder's torrent: a 256 KiB file in 16 KiB pieces.
    let seed_dir = dir.subdir("seed-data")?;
    weir_lab::payload::write(&seed_dir.join("payload.bin"), 256 << 10, 3)?;
    let torrent = dir.path().join("payload.torrent");
    let info = weir_lab::torrent::make(&seed_dir.join("payload.bin"), 16384, None, &torrent)?;
    let ih_hex = info.info_hash_hex();
    let ns = Netns::new("dht")?;
    let node: SocketAddr = "127.0.0.2:6881".parse()?;
    let seeder: SocketAddr = "127.0.0.3:6881".parse()?;
    let t = Instant::now();
    let (_node_proc, node_out) = lt_dht::start(
        &ns,
        dir.path(),
        "lt-dht-node",
        "127.0.0.2",
        6881,
        Role::Node,
    )?;
    let (_seed_proc, _seed_out) = lt_dht::start(
        &ns,
        dir.path(),
        "lt-seeder",
        "127.0.0.3",
        6881,
        Role::Seed {
            dir: &seed_dir,
            torrent: &torrent,
            boot: "127.0.0.2:6881",
        },
    )?;
    let mut ih = [0u8; 20];
    for (i, b) in ih.iter_mut().enumerate() {
        *b = u8::from_str_radix(&ih_hex[2 * i..2 * i + 2], 16).context("info-hash hex")?;
    }
    lt_dht::wait_announce(
        &node_out,
        &ih_hex,
        "127.0.0.3",
        6881,
        Duration::from_secs(30),
    )?;
    println!(
        "libtorrent seeder announced to the libtorrent node after {:.2} s",
        t.elapsed().as_secs_f64()
    );

    let mine = Id([0x5a; 20]);
    let result = ns.try_run_in(move || -> anyhow::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(async move {
            let sock = PolicedUdp::bind(&NetPolicy::loopback(), "127.0.0.4:6881".parse()?).await?;
            let cfg = Config { bootstrap: vec![node], ..Config::default() };
            let mut rng = fastrand::Rng::with_seed(5);
            let mut dht = Dht::new(cfg, Id::random(&mut rng), 9, Instant::now());
            // 1. Ping: libtorrent's node answers and enters the table.
            let t0 = Instant::now();
            dht.add_node(node, Instant::now());
            drive(&mut dht, &sock, Duration::from_secs(20), |d, _| d.stats().good_nodes >= 1).await?;
            println!("libtorrent's node answered weir's ping in {:.3} s", t0.elapsed().as_secs_f64());
            // The bootstrap lookup (started with the node) learns the seeder's node too.
            drive(&mut dht, &sock, Duration::from_secs(20), |_, e| matches!(e, Some(Event::Bootstrapped { .. }))).await?;
            println!("weir bootstrapped from libtorrent in {:.3} s: {:?}", t0.elapsed().as_secs_f64(), dht.stats());
            // 2. get_peers finds the seeder.
            let t1 = Instant::now();
            let l = dht.get_peers(Id(ih), Instant::now())?;
            let ev = drive(&mut dht, &sock, Duration::from_secs(20), |_, e| {
                matches!(e, Some(Event::Peers { lookup, peers, .. }) if *lookup == l && peers.contains(&seeder))
            })
            .await?;
            println!("weir found the libtorrent seeder in {:.3} s: {ev:?}", t1.elapsed().as_secs_f64());
            let done = drive(&mut dht, &sock, Duration::from_secs(20), |_, e| matches!(e, Some(Event::LookupDone { lookup, .. }) if *lookup == l)).await?;
            if let Some(Event::LookupDone { stats, .. }) = &done {
                println!("lookup done: {} queries, {} answers, {:.3} s", stats.queries, stats.responses, stats.elapsed.as_secs_f64());
            }
            // 3. weir announces a torrent of its own to libtorrent's node.
            let a = dht.announce(mine, Some(7000), Instant::now())?;
            let ev = drive(&mut dht, &sock, Duration::from_secs(20), |_, e| matches!(e, Some(Event::Announced { lookup, .. }) if *lookup == a)).await?;
            println!("weir announced: {ev:?}");
            match ev {
                Some(Event::Announced { acked, .. }) if acked >= 1 => Ok(()),
                other => bail!("announce not acknowledged: {other:?}"),
            }
        })
    })?;
    result?;
    lt_dht::wait_announce(
        &node_out,
        &mine.to_string(),
        "127.0.0.4",
        7000,
        Duration::from_secs(10),
    )?;
    println!("libtorrent's node stored weir's announce");
    Ok(())
}
