//! `--max-up` as the built binary: a seeder capped at 8 MB/s serves a
//! leecher at that rate (within bounds on both sides), for a torrent and
//! for eD2k.

use std::fs;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CAP: f64 = 8_000_000.0;
const SIZE: usize = 24 << 20;

fn weir(cwd: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    c.current_dir(cwd).env("WEIR_ALLOW", "loopback");
    c
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("weir-cli-caps-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Kills the child (by its own handle) when the test ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_listening(addr: SocketAddr, child: &mut Running) {
    let until = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "the seeder exited before listening"
        );
        assert!(
            Instant::now() < until,
            "the seeder never listened on {addr}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn noise(len: usize) -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

/// Runs a download command, bounded in time; returns its duration.
fn timed(mut c: Command) -> Duration {
    let start = Instant::now();
    let mut child = Running(
        c.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            let _ = child.0.stderr.take().unwrap().read_to_string(&mut err);
            assert!(st.success(), "download failed: {err}");
            return start.elapsed();
        }
        assert!(start.elapsed() < Duration::from_secs(60), "download hung");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn check_rate(what: &str, took: Duration) {
    let rate = SIZE as f64 / took.as_secs_f64();
    eprintln!("{what}: {:.2} MB/s under an 8 MB/s cap", rate / 1e6);
    // Process start-up and the first request round trips count against
    // it, the bucket's small initial carry for it.
    assert!(
        (0.75 * CAP..=1.05 * CAP).contains(&rate),
        "{what}: {:.2} MB/s under an 8 MB/s cap",
        rate / 1e6
    );
}

#[test]
fn max_up_caps_a_torrent_seeder() {
    let s = Scratch::new("bt");
    let d = &s.0;
    fs::create_dir_all(d.join("src")).unwrap();
    fs::write(d.join("src/f.bin"), noise(SIZE)).unwrap();
    let o = weir(d)
        .args(["create", "src/f.bin", "-o", "f.torrent"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut seed = Running(
        weir(d)
            .args(["seed", "f.torrent", "src", "--no-trackers", "-q"])
            .args(["--listen", &listen, "--max-up", "8MB/s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(listen.parse().unwrap(), &mut seed);
    let mut get = weir(d);
    get.args(["get", "f.torrent", "-o", "dst", "--no-trackers", "-q"])
        .args(["--listen", "127.0.0.1:0", "--peer", &listen]);
    check_rate("torrent", timed(get));
    assert_eq!(
        fs::read(d.join("dst/f.bin")).unwrap(),
        fs::read(d.join("src/f.bin")).unwrap()
    );
}

#[test]
fn max_up_caps_an_ed2k_seeder() {
    let s = Scratch::new("ed2k");
    let d = &s.0;
    fs::create_dir_all(d.join("src")).unwrap();
    fs::write(d.join("src/f.bin"), noise(SIZE)).unwrap();
    let o = weir(d)
        .args(["hash", "--ed2k", "src/f.bin"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let link = String::from_utf8(o.stdout).unwrap();
    let link = link
        .split_whitespace()
        .find(|w| w.starts_with("ed2k://"))
        .expect("a link")
        .to_string();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let home = d.join("home-seed");
    let mut seed = Running(
        weir(d)
            .env("WEIR_ED2K_HOME", &home)
            .args(["seed", "--ed2k", "src/f.bin", "-q"])
            .args(["--listen", &listen, "--max-up", "8MB/s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(listen.parse().unwrap(), &mut seed);
    let mut get = weir(d);
    get.env("WEIR_ED2K_HOME", d.join("home-get"))
        .args(["get", &link, "-o", "dst", "-q"])
        .args(["--listen", "127.0.0.1:0", "--peer", &listen]);
    check_rate("ed2k", timed(get));
    assert_eq!(
        fs::read(d.join("dst/f.bin")).unwrap(),
        fs::read(d.join("src/f.bin")).unwrap()
    );
}
