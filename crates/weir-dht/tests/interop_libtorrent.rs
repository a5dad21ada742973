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
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weir_core::policy::NetPolicy;
use weir_dht::{Config, Dht, Event, Id, is_krpc};
use weir_lab::netns::Netns;
use weir_lab::process::{Proc, stdout_lines, wait_line};
use weir_lab::tmpdir::TempDir;
use weir_runtime::net::PolicedUdp;

const PYTHON: &str = "/usr/bin/python3";

/// libtorrent as a DHT node (`node IP PORT [PEER...]`) or as a seeder of a
/// generated 256 KiB torrent that announces itself every 2 s (`seed IP
/// PORT PEER...`). LSD, UPnP, NAT-PMP and uTP are off, no bootstrap
/// routers; it prints READY, INFOHASH and every announce it stores.
const SCRIPT: &str = r#"
import os, sys, time
import libtorrent as lt
mode, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
settings = {
    'listen_interfaces': f'{ip}:{port}', 'outgoing_interfaces': ip,
    'enable_dht': True, 'dht_bootstrap_nodes': '',
    'dht_restrict_routing_ips': False, 'dht_restrict_search_ips': False,
    'enable_lsd': False, 'enable_upnp': False, 'enable_natpmp': False,
    'enable_ip_notifier': False, 'enable_incoming_utp': False, 'enable_outgoing_utp': False,
    'alert_mask': lt.alert.category_t.dht_notification | lt.alert.category_t.status_notification
        | lt.alert.category_t.error_notification,
}
ses = lt.session(settings)
for p in sys.argv[4:]:
    h, pt = p.rsplit(':', 1)
    ses.add_dht_node((h, int(pt)))
handle = None
if mode == 'seed':
    d = os.path.join(os.path.dirname(sys.argv[0]), 'seed-data')
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, 'payload.bin')
    with open(path, 'wb') as f:
        f.write(bytes(range(256)) * 1024)
    fs = lt.file_storage()
    lt.add_files(fs, path)
    ct = lt.create_torrent(fs, 16384)
    lt.set_piece_hashes(ct, d)
    ti = lt.torrent_info(ct.generate())
    atp = lt.add_torrent_params()
    atp.ti = ti
    atp.save_path = d
    atp.flags |= lt.torrent_flags.seed_mode
    handle = ses.add_torrent(atp)
    print('INFOHASH', str(ti.info_hash()), flush=True)
print('READY', flush=True)
last = 0.0
while True:
    for a in ses.pop_alerts():
        if isinstance(a, lt.dht_announce_alert):
            print('ANNOUNCE', str(a.info_hash), a.ip, a.port, flush=True)
    if handle is not None and time.time() - last > 2:
        handle.force_dht_announce()
        last = time.time()
    time.sleep(0.05)
"#;

fn start(
    ns: &Netns,
    dir: &TempDir,
    name: &str,
    args: &[&str],
) -> anyhow::Result<(Proc, std::sync::mpsc::Receiver<String>)> {
    let script = dir.path().join("lt_dht.py");
    let mut cmd = ns.command(PYTHON);
    cmd.arg(&script)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(
            dir.path().join(format!("{name}.stderr")),
        )?);
    let mut p = Proc::spawn(name, &mut cmd)?;
    let rx = stdout_lines(&mut p)?;
    Ok((p, rx))
}

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

fn libtorrent_available() -> anyhow::Result<bool> {
    if !weir_lab::ci::require_program(PYTHON)? {
        return Ok(false);
    }
    let ok = Command::new(PYTHON)
        .args(["-c", "import libtorrent"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        weir_lab::ci::unavailable("python3-libtorrent is not installed")?;
    }
    Ok(ok)
}

#[test]
fn weir_finds_a_libtorrent_seeder_through_a_libtorrent_dht_node() -> anyhow::Result<()> {
    if !weir_lab::ci::require_root_and_netns()? || !libtorrent_available()? {
        return Ok(());
    }
    let dir = TempDir::new("dht-lt")?;
    std::fs::write(dir.path().join("lt_dht.py"), SCRIPT)?;
    let ns = Netns::new("dht")?;
    let node: SocketAddr = "127.0.0.2:6881".parse()?;
    let seeder: SocketAddr = "127.0.0.3:6881".parse()?;
    let t = Instant::now();
    let (node_proc, node_out) = start(&ns, &dir, "lt-dht-node", &["node", "127.0.0.2", "6881"])?;
    wait_line(
        &node_out,
        t + Duration::from_secs(30),
        "libtorrent node READY",
        |l| l == "READY",
    )
    .map_err(|e| anyhow::anyhow!("{e:#}; {}", node_proc.log_tail(20)))?;
    let (_seed_proc, seed_out) = start(
        &ns,
        &dir,
        "lt-seeder",
        &["seed", "127.0.0.3", "6881", "127.0.0.2:6881"],
    )?;
    let ih_line = wait_line(
        &seed_out,
        t + Duration::from_secs(30),
        "seeder INFOHASH",
        |l| l.starts_with("INFOHASH "),
    )?;
    let ih_hex = ih_line.trim_start_matches("INFOHASH ").trim().to_string();
    let mut ih = [0u8; 20];
    for (i, b) in ih.iter_mut().enumerate() {
        *b = u8::from_str_radix(&ih_hex[2 * i..2 * i + 2], 16).context("info-hash hex")?;
    }
    let want = format!("ANNOUNCE {ih_hex} 127.0.0.3 6881");
    wait_line(
        &node_out,
        Instant::now() + Duration::from_secs(30),
        "the seeder's announce at the node",
        |l| l == want,
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
    let want = format!("ANNOUNCE {} 127.0.0.4 7000", mine);
    wait_line(
        &node_out,
        Instant::now() + Duration::from_secs(10),
        "weir's announce stored by libtorrent",
        |l| l == want,
    )?;
    println!("libtorrent's node stored weir's announce");
    Ok(())
}
