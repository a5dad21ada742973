//! Interop: the tracker client against the real `opentracker`, run inside a
//! network namespace this test creates (only `lo`, up). The announces run
//! on a dedicated thread that joins the namespace with setns(2), so every
//! packet stays inside it.
//!
//! Debian's opentracker is built in whitelist mode: the test writes the
//! info-hashes it uses to a whitelist file. `-i` must come before the port
//! options for the bind address to apply.
//!
//! Without the `CI` environment variable, a missing `opentracker` or `ip`,
//! or a failure to create the namespace, skips the test with a printed
//! reason; with `CI` set it fails.

use std::fs::{self, File};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use weir_bt::tracker::{AnnounceRequest, Event};
use weir_core::policy::NetPolicy;
use weir_runtime::tracker::{Options, announce_with};

const PORT: u16 = 6969;

fn on_path(prog: &str) -> bool {
    weir_lab::ci::find_program(prog).is_some()
}

/// Skips (said and recorded, see weir_lab::ci) without CI; fails with CI.
fn unavailable(why: &str) {
    weir_lab::ci::unavailable(&format!("opentracker interop: {why}"))
        .unwrap_or_else(|e| panic!("{e:#}"));
}

/// The namespace, the tracker process and the scratch directory; torn down
/// on drop, also when the test fails.
struct Lab {
    ns: String,
    dir: PathBuf,
    tracker: Option<Child>,
}

impl Lab {
    fn create() -> Result<Lab, String> {
        let ns = format!("weir-ot-{}", std::process::id());
        let dir = std::env::temp_dir().join(&ns);
        let lab = Lab {
            ns,
            dir,
            tracker: None,
        };
        let out = Command::new("ip")
            .args(["netns", "add", &lab.ns])
            .output()
            .map_err(|e| format!("cannot run ip: {e}"))?;
        if !out.status.success() {
            // Nothing was created: do not let Drop delete a namespace that
            // may belong to someone else.
            std::mem::forget(lab);
            return Err(format!(
                "ip netns add failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        lab.exec(&["ip", "link", "set", "lo", "up"])?;
        Ok(lab)
    }

    fn exec(&self, args: &[&str]) -> Result<(), String> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .args(args)
            .output()
            .map_err(|e| format!("cannot run ip netns exec: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{args:?} in {} failed: {}",
                self.ns,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Starts opentracker on 127.0.0.1:PORT (TCP and UDP) inside the
    /// namespace, serving the whitelisted `hashes`.
    fn start_tracker(&mut self, hashes: &[[u8; 20]]) -> Result<(), String> {
        use std::os::unix::fs::PermissionsExt;
        fs::create_dir_all(&self.dir).map_err(|e| e.to_string())?;
        let list: String = hashes.iter().map(|h| format!("{}\n", hex(h))).collect();
        let wl = self.dir.join("whitelist.txt");
        fs::write(&wl, list).map_err(|e| e.to_string())?;
        // opentracker chroots into the directory and drops to `nobody`.
        fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        fs::set_permissions(&wl, fs::Permissions::from_mode(0o644)).map_err(|e| e.to_string())?;
        let log = File::create(self.dir.join("opentracker.log")).map_err(|e| e.to_string())?;
        let port = PORT.to_string();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns, "opentracker", "-i", "127.0.0.1"])
            .args([
                "-p",
                &port,
                "-P",
                &port,
                "-u",
                "nobody",
                "-w",
                "whitelist.txt",
            ])
            .arg("-d")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start opentracker: {e}"))?;
        // `ip netns exec` execs the program: this PID is opentracker's.
        self.tracker = Some(child);
        Ok(())
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.join("opentracker.log")).unwrap_or_default()
    }

    fn netns_path(&self) -> PathBuf {
        Path::new("/var/run/netns").join(&self.ns)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut c) = self.tracker.take() {
            // Ends the process we started, by its PID.
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.ns])
            .stderr(Stdio::null())
            .status();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn request(info_hash: [u8; 20], peer: u8, port: u16) -> AnnounceRequest {
    let mut peer_id = *b"-WE0001-000000000000";
    peer_id[19] = b'0' + peer;
    AnnounceRequest {
        info_hash,
        peer_id,
        port,
        uploaded: 0,
        downloaded: 0,
        left: 1000,
        event: Some(Event::Started),
        numwant: Some(50),
        key: Some(u32::from(peer) + 1),
        compact: true,
    }
}

/// Runs inside the namespace: waits for the tracker's port, then announces
/// twice over HTTP and twice over UDP.
async fn announces(http_hash: [u8; 20], udp_hash: [u8; 20]) -> Result<(), String> {
    let policy = NetPolicy::loopback();
    let tracker: SocketAddr = ([127, 0, 0, 1], PORT).into();
    // Wait for the port (bounded: 250 tries, 20 ms apart).
    let mut up = false;
    for _ in 0..250 {
        if tokio::net::TcpStream::connect(tracker).await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if !up {
        return Err("opentracker did not open its port within 5 s".into());
    }
    let opts = Options {
        http_timeout: Duration::from_secs(10),
        udp_base_timeout: Duration::from_millis(500),
        udp_tries: 4,
        ..Options::default()
    };

    let http = format!("http://127.0.0.1:{PORT}/announce");
    let first = announce_with(&policy, &http, &request(http_hash, 1, 40001), &opts)
        .await
        .map_err(|e| format!("HTTP announce 1: {e}"))?;
    assert!(first.interval > 0, "{first:?}");
    let second = announce_with(&policy, &http, &request(http_hash, 2, 40002), &opts)
        .await
        .map_err(|e| format!("HTTP announce 2: {e}"))?;
    let want: SocketAddr = ([127, 0, 0, 1], 40001).into();
    assert!(
        second.peers.contains(&want),
        "HTTP: second peer did not get the first: {second:?}"
    );
    assert_eq!(second.incomplete, Some(2), "{second:?}");

    let udp = format!("udp://127.0.0.1:{PORT}");
    let first = announce_with(&policy, &udp, &request(udp_hash, 3, 40003), &opts)
        .await
        .map_err(|e| format!("UDP announce 1: {e}"))?;
    assert!(first.interval > 0, "{first:?}");
    let second = announce_with(&policy, &udp, &request(udp_hash, 4, 40004), &opts)
        .await
        .map_err(|e| format!("UDP announce 2: {e}"))?;
    let want: SocketAddr = ([127, 0, 0, 1], 40003).into();
    assert!(
        second.peers.contains(&want),
        "UDP: second peer did not get the first: {second:?}"
    );
    assert_eq!(second.incomplete, Some(2), "{second:?}");
    Ok(())
}

#[test]
fn announce_to_real_opentracker() {
    for prog in ["ip", "opentracker"] {
        if !on_path(prog) {
            return unavailable(&format!("`{prog}` is not installed"));
        }
    }
    let mut lab = match Lab::create() {
        Ok(l) => l,
        Err(why) => return unavailable(&why),
    };
    let http_hash = [0x11; 20];
    let udp_hash = [0x22; 20];
    lab.start_tracker(&[http_hash, udp_hash])
        .unwrap_or_else(|e| panic!("{e}"));

    let ns_path = lab.netns_path();
    let result = std::thread::spawn(move || -> Result<(), String> {
        let ns = File::open(&ns_path).map_err(|e| format!("open {}: {e}", ns_path.display()))?;
        nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(|e| format!("setns into {}: {e}", ns_path.display()))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(announces(http_hash, udp_hash))
    })
    .join();
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("{e}\nopentracker log:\n{}", lab.log()),
        Err(p) => std::panic::resume_unwind(p),
    }
}
