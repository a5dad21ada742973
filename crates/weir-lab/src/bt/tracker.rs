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

    /// Stops and starts it again (forgets every peer).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        if let Some(mut p) = self.proc.take() {
            p.kill_tree().context("stopping opentracker")?;
        }
        self.spawn()
    }
}
