//! opentracker on a loopback address inside a namespace, serving only the
//! whitelisted info-hashes (Debian builds it in whitelist mode).

use std::net::{SocketAddr, SocketAddrV4};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::netns::Netns;
use crate::process::Proc;
use crate::tmpdir::TempDir;

/// A running opentracker. It keeps peers that died without a `stopped`
/// event, so [`Tracker::restart`] it between seeders.
#[derive(Debug)]
pub struct Tracker<'a> {
    ns: &'a Netns,
    addr: SocketAddrV4,
    // Field order matters: the process is ended before its chroot goes.
    proc: Option<Proc>,
    dir: TempDir,
}

impl<'a> Tracker<'a> {
    /// Starts opentracker on `addr` (TCP and UDP) in `ns`, whitelisting the
    /// info-hashes (40 hex digits each, e.g. from
    /// [`crate::torrent::TorrentInfo::info_hash_hex`]); returns once it
    /// accepts connections.
    pub fn start(
        ns: &'a Netns,
        addr: SocketAddrV4,
        info_hashes: &[String],
    ) -> anyhow::Result<Tracker<'a>> {
        if !addr.ip().is_loopback() {
            bail!("the tracker binds 127.0.0.0/8 only, not {addr}");
        }
        for h in info_hashes {
            if h.len() != 40 || !h.chars().all(|c| c.is_ascii_hexdigit()) {
                bail!("info-hash {h:?} is not 40 hex digits");
            }
        }
        let dir = TempDir::new("opentracker")?;
        let list: String = info_hashes
            .iter()
            .map(|h| format!("{}\n", h.to_ascii_lowercase()))
            .collect();
        std::fs::write(dir.path().join("whitelist.txt"), list)?;
        let mut t = Tracker {
            ns,
            addr,
            proc: None,
            dir,
        };
        t.spawn()?;
        Ok(t)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let port = self.addr.port().to_string();
        // -i before the port options binds them to that address only; -d
        // chroots into the dir holding the whitelist, -u drops root.
        let mut c = self.ns.command("opentracker");
        c.args([
            "-i",
            &self.addr.ip().to_string(),
            "-p",
            &port,
            "-P",
            &port,
            "-d",
        ])
        .arg(self.dir.path())
        .args(["-u", "nobody", "-w", "whitelist.txt"]);
        let logs = self.dir.subdir("logs")?;
        let mut p = Proc::spawn_logged("opentracker", &mut c, &logs)?;
        if let Err(e) = self
            .ns
            .wait_port(SocketAddr::V4(self.addr), Duration::from_secs(10))
        {
            return Err(p.failure(&format!("opentracker not up: {e:#}")));
        }
        self.proc = Some(p);
        Ok(())
    }

    /// The announce URL (`http://ADDR/announce`).
    pub fn announce_url(&self) -> String {
        format!("http://{}/announce", self.addr)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddrV4 {
        self.addr
    }

    /// Waits until the tracker lists at least one seeder of the torrent
    /// (`info_hash_hex`, 40 hex digits): an HTTP scrape from inside the
    /// namespace, retried until `timeout`. A leecher started next then finds
    /// the seeder on its first announce.
    pub fn wait_seeder(&self, info_hash_hex: &str, timeout: Duration) -> anyhow::Result<()> {
        self.wait_seeders(info_hash_hex, timeout, |n| n >= 1)
            .map(|_| ())
    }

    /// Waits until the number of seeders the tracker lists for the torrent
    /// satisfies `ok` (a scrape every 200 ms until `timeout`); the count.
    pub fn wait_seeders(
        &self,
        info_hash_hex: &str,
        timeout: Duration,
        ok: impl Fn(u64) -> bool,
    ) -> anyhow::Result<u64> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let seeders = self.seeders(info_hash_hex)?;
            if ok(seeders) {
                return Ok(seeders);
            }
            if std::time::Instant::now() > deadline {
                bail!(
                    "the tracker at {} lists {seeders} seeders of {info_hash_hex} after {timeout:?}",
                    self.addr
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The seeders (`complete`) an HTTP scrape from inside the namespace
    /// reports for the torrent (0 if it does not know it).
    pub fn seeders(&self, info_hash_hex: &str) -> anyhow::Result<u64> {
        self.scrape(info_hash_hex, "8:completei")
    }

    /// The leechers (`incomplete`) an HTTP scrape from inside the
    /// namespace reports for the torrent (0 if it does not know it).
    pub fn leechers(&self, info_hash_hex: &str) -> anyhow::Result<u64> {
        self.scrape(info_hash_hex, "10:incompletei")
    }

    /// The number after `key` (`8:completei`) in a scrape's answer.
    fn scrape(&self, info_hash_hex: &str, key: &str) -> anyhow::Result<u64> {
        use std::io::{Read, Write};
        let q: String = (0..info_hash_hex.len() / 2)
            .map(|i| format!("%{}", &info_hash_hex[2 * i..2 * i + 2]))
            .collect();
        let addr = self.addr;
        self.ns.run_in(|| -> anyhow::Result<u64> {
            let mut s = std::net::TcpStream::connect(addr)?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            write!(
                s,
                "GET /scrape?info_hash={q} HTTP/1.0\r\nHost: {addr}\r\n\r\n"
            )?;
            let mut body = Vec::new();
            s.read_to_end(&mut body)?;
            // "...8:completei<N>e..." in the bencoded answer.
            let text = String::from_utf8_lossy(&body);
            Ok(text
                .split(key)
                .nth(1)
                .and_then(|t| t.split('e').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0))
        })
    }

    /// Stops and starts it again (forgets every peer).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        if let Some(mut p) = self.proc.take() {
            p.kill_tree().context("stopping opentracker")?;
        }
        self.spawn()
    }
}
