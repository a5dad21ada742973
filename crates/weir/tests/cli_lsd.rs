//! Local Service Discovery (`--lsd`, BEP 14) as the built binary, on
//! loopback only: no test here sends multicast.
//!
//! - A leecher finds a seeder through LSD alone (no tracker, no DHT, no
//!   `--peer`): both run with the hidden `--lsd-group` set to a relay on
//!   127.0.0.1 that stands in for the multicast group, passing each
//!   announce on to the others from the announcer's own 127.0.0.x (as a
//!   group would deliver it) and replaying what it heard earlier to a
//!   newcomer, so the test depends on no start order and no timing.
//! - Under a loopback `--allow`, `--lsd` without a test group sends
//!   nothing (no socket is made: the runtime's unit tests check that) and
//!   says once why LSD is off.

mod cli_support;

use std::collections::HashMap;
use std::fs;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use cli_support::*;

const T: Duration = Duration::from_secs(90);

/// A stand-in for the LSD multicast group on 127.0.0.1.
struct Relay {
    addr: SocketAddr,
    /// Sources heard, in order.
    heard: Arc<Mutex<Vec<SocketAddr>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Relay {
    fn start() -> Relay {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("relay socket");
        // Only so that the thread sees `stop`; nothing waits on it.
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let addr = sock.local_addr().unwrap();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, s) = (heard.clone(), stop.clone());
        let thread = std::thread::spawn(move || relay(sock, h, s));
        Relay {
            addr,
            heard,
            stop,
            thread: Some(thread),
        }
    }

    fn heard(&self) -> Vec<SocketAddr> {
        self.heard.lock().unwrap().clone()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Passes each datagram to every other source heard (sent from the
/// announcer's IP), and a newcomer every datagram heard before.
fn relay(sock: UdpSocket, heard: Arc<Mutex<Vec<SocketAddr>>>, stop: Arc<AtomicBool>) {
    let mut last: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
    let mut senders: HashMap<IpAddr, UdpSocket> = HashMap::new();
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(_) => continue,
        };
        assert!(from.ip().is_loopback(), "{from}");
        let data = buf[..n].to_vec();
        let new = !last.iter().any(|(a, _)| *a == from);
        if new {
            heard.lock().unwrap().push(from);
        }
        for (a, d) in &last {
            if *a == from {
                continue;
            }
            if new {
                let s = senders
                    .entry(a.ip())
                    .or_insert_with(|| UdpSocket::bind((a.ip(), 0)).unwrap());
                let _ = s.send_to(d, from);
            }
            let s = senders
                .entry(from.ip())
                .or_insert_with(|| UdpSocket::bind((from.ip(), 0)).unwrap());
            let _ = s.send_to(&data, a);
        }
        match last.iter_mut().find(|(a, _)| *a == from) {
            Some(e) => e.1 = data,
            None => last.push((from, data)),
        }
    }
}

#[test]
fn a_leecher_finds_a_seeder_through_lsd_alone() {
    let s = TempDir::new("cli-lsd").unwrap();
    let d = s.path();
    let logs = TempDir::new("cli-lsd-logs").unwrap();
    fs::create_dir_all(d.join("src")).unwrap();
    let data = payload(3_000_000, 14);
    fs::write(d.join("src/f.bin"), &data).unwrap();
    // No tracker in the torrent.
    create(d, "src/f.bin", "f.torrent", "64KiB");
    let relay = Relay::start();
    let group = relay.addr.to_string();
    let lsd = ["--lsd", "--lsd-group", &group, "--no-trackers", "--no-dht"];
    let mut seeder_args = vec!["seed", "f.torrent", "src", "--listen", "127.0.0.2:0", "-q"];
    seeder_args.extend_from_slice(&lsd);
    let mut seeder = spawn("seeder", d, &seeder_args, logs.path());
    let seed_addr = listening(&mut seeder);
    let line = wait_stderr(&mut seeder, "LSD: announcing to", T);
    assert!(line.contains(&group), "{line}");
    let mut args = vec![
        "get",
        "f.torrent",
        "-o",
        "out",
        "--listen",
        "127.0.0.3:0",
        "--peer-wait",
        "60",
        "-q",
    ];
    args.extend_from_slice(&lsd);
    let r = run(d, &args, T);
    assert_eq!(
        r.code,
        Some(0),
        "leecher: {}\nseeder: {}",
        r.stderr,
        seeder.log_tail(30)
    );
    assert!(!r.stderr.contains("no way to find peers"), "{}", r.stderr);
    assert_eq!(
        fs::read(d.join("out/f.bin")).unwrap(),
        data,
        "byte-identical"
    );
    // Both announced to the group, each from its own address.
    let heard: Vec<IpAddr> = relay.heard().iter().map(SocketAddr::ip).collect();
    assert!(heard.contains(&seed_addr.ip()), "{heard:?}");
    assert!(
        heard.contains(&"127.0.0.3".parse::<IpAddr>().unwrap()),
        "{heard:?}"
    );
}

#[test]
fn lsd_under_a_loopback_allow_list_sends_nothing_and_says_so_once() {
    let s = TempDir::new("cli-lsd-off").unwrap();
    let d = s.path();
    let logs = TempDir::new("cli-lsd-off-logs").unwrap();
    fs::create_dir_all(d.join("src")).unwrap();
    let data = payload(500_000, 15);
    fs::write(d.join("src/f.bin"), &data).unwrap();
    create(d, "src/f.bin", "f.torrent", "16KiB");
    let (_seeder, at) = seeder(d, "f.torrent", "src", logs.path(), &["--no-dht"]);
    let peer = at.to_string();
    let r = run(
        d,
        &[
            "get",
            "f.torrent",
            "-o",
            "out",
            "--listen",
            "127.0.0.1:0",
            "--no-trackers",
            "--no-dht",
            "--peer",
            &peer,
            "--lsd",
            "-q",
        ],
        T,
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(fs::read(d.join("out/f.bin")).unwrap(), data);
    let said: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("LSD is off"))
        .collect();
    assert_eq!(said.len(), 1, "said once: {}", r.stderr);
    assert!(
        said[0].contains("--allow 127.0.0.0/8,::1/128")
            && said[0].contains("multicast groups 239.192.152.143:6771 and [ff15::efc0:988f]:6771"),
        "{}",
        said[0]
    );
    assert!(!r.stderr.contains("LSD: announcing"), "{}", r.stderr);
    // The test group stays out of --help.
    let h = run(d, &["get", "--help"], T);
    assert_eq!(h.code, Some(0));
    assert!(h.stdout.contains("--lsd"), "{}", h.stdout);
    assert!(!h.stdout.contains("lsd-group"), "{}", h.stdout);
}
