//! Network namespaces that hold only `lo`, made and removed by the test.
//!
//! Every third-party program a test or bench runs is started inside a
//! [`Netns`] (`ip netns exec NAME ...`), so nothing it sends can leave the
//! machine even if one of its settings is missed. A namespace is created
//! with a unique name `weir-<tag>-<pid>-<n>`, its `lo` brought up and its
//! link list checked; dropping it ends every process still inside it (by
//! PID) and deletes it. Two namespaces can be joined by a veth pair with
//! private addresses ([`Netns::link_pair`]) for programs that refuse
//! 127.0.0.0/8 peers (aMule).

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// Where `ip netns` keeps its namespace handles.
pub const NETNS_DIR: &str = "/var/run/netns";

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A network namespace created by this process, holding `lo` (and veth
/// links the test added). Deleted on drop, after every process still
/// inside it has been ended by PID.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

/// Keeps `[a-z0-9_]` of `s` (others become `_`), at most 24 characters:
/// safe in namespace, file and interface names.
pub(crate) fn sanitize(s: &str) -> String {
    s.chars()
        .take(24)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// Runs `ip ARGS` and fails with its stderr when it exits non-zero.
fn ip(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running ip {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "ip {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Removes namespaces named `weir-*-<pid>-<n>` whose creating process is
/// gone and that hold no process (left by a test that was killed).
fn remove_stale() {
    let Ok(rd) = std::fs::read_dir(NETNS_DIR) else {
        return;
    };
    for e in rd.flatten() {
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if !name.starts_with("weir-") {
            continue;
        }
        let parts: Vec<&str> = name.rsplitn(3, '-').collect();
        let (Some(n), Some(pid)) = (parts.first(), parts.get(1)) else {
            continue;
        };
        let (Ok(_), Ok(pid)) = (n.parse::<u32>(), pid.parse::<i32>()) else {
            continue;
        };
        if pid as u32 == std::process::id() || crate::process::is_alive(pid) {
            continue;
        }
        let busy = ip(&["netns", "pids", &name])
            .map(|s| !s.trim().is_empty())
            .unwrap_or(true);
        if !busy {
            tracing::info!("removing stale namespace {name}");
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

impl Netns {
    /// Creates a namespace `weir-<tag>-<pid>-<n>`, brings `lo` up and checks
    /// that `lo` is its only link (refuses otherwise).
    pub fn new(tag: &str) -> anyhow::Result<Netns> {
        remove_stale();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("weir-{}-{}-{n}", sanitize(tag), std::process::id());
        ip(&["netns", "add", &name]).context("creating a network namespace (needs root)")?;
        let ns = Netns { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        let links = ns.links()?;
        if links != ["lo"] {
            bail!(
                "namespace {} has links other than lo: {links:?}; refusing",
                ns.name
            );
        }
        Ok(ns)
    }

    /// The namespace's name (for `ip netns exec NAME`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Names of the links in the namespace.
    pub fn links(&self) -> anyhow::Result<Vec<String>> {
        let out = ip(&["-n", &self.name, "-o", "link", "show"])?;
        Ok(out
            .lines()
            .filter_map(|l| {
                let name = l.split(':').nth(1)?.trim();
                Some(name.split('@').next().unwrap_or(name).to_string())
            })
            .collect())
    }

    /// A command that runs `program` inside the namespace
    /// (`ip netns exec NAME program`). `ip netns exec` execs the program, so
    /// the spawned child's PID is the program's own.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Runs `f` on a fresh thread that first enters the namespace
    /// (`setns(2)`); sockets `f` creates live in the namespace. Panics with
    /// a message if the namespace cannot be entered (see
    /// [`Netns::try_run_in`]).
    pub fn run_in<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        self.try_run_in(f)
            .unwrap_or_else(|e| panic!("entering namespace {}: {e:#}", self.name))
    }

    /// [`Netns::run_in`] returning an error if the namespace cannot be entered.
    pub fn try_run_in<T: Send>(&self, f: impl FnOnce() -> T + Send) -> anyhow::Result<T> {
        let path = format!("{NETNS_DIR}/{}", self.name);
        std::thread::scope(|s| {
            let h = s.spawn(move || -> anyhow::Result<T> {
                let fd = File::open(&path).with_context(|| format!("opening {path}"))?;
                nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET)
                    .with_context(|| format!("setns into {path}"))?;
                Ok(f())
            });
            match h.join() {
                Ok(r) => r,
                Err(p) => std::panic::resume_unwind(p),
            }
        })
    }

    /// A connected TCP pair on 127.0.0.1 inside the namespace (for giving a
    /// program such as `sz`/`rz` a TCP line on its stdin/stdout:
    /// `Stdio::from(fd)`). Both are blocking sockets.
    pub fn tcp_pair(&self) -> anyhow::Result<(OwnedFd, OwnedFd)> {
        self.try_run_in(|| -> anyhow::Result<(OwnedFd, OwnedFd)> {
            let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
            let a = TcpStream::connect(l.local_addr()?)?;
            let (b, _) = l.accept()?;
            Ok((OwnedFd::from(a), OwnedFd::from(b)))
        })?
        .context("making a TCP pair in the namespace")
    }

    /// Waits until something accepts TCP connections on `addr` inside the
    /// namespace: connection attempts with short bounded pauses, at most
    /// `timeout` in all.
    pub fn wait_port(&self, addr: SocketAddr, timeout: Duration) -> anyhow::Result<()> {
        self.try_run_in(|| wait_port_here(addr, timeout))?
            .with_context(|| format!("nothing listening on {addr} in {}", self.name))
    }

    /// Joins namespaces `a` and `b` with a veth pair and gives its ends the
    /// addresses `a_addr` and `b_addr` (CIDR, e.g. `10.77.0.1/24`). The
    /// addresses must be private (10/8, 172.16/12, 192.168/16) or from the
    /// benchmarking range 198.18/15; nothing routes beyond the pair.
    pub fn link_pair(a: &Netns, b: &Netns, a_addr: &str, b_addr: &str) -> anyhow::Result<()> {
        if a.name == b.name {
            bail!("link_pair needs two different namespaces");
        }
        for addr in [a_addr, b_addr] {
            check_private_cidr(addr)?;
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let ifname = format!("wv{n}");
        ip(&[
            "link", "add", "name", &ifname, "netns", &a.name, "type", "veth", "peer", "name",
            &ifname, "netns", &b.name,
        ])
        .context("creating a veth pair")?;
        for (ns, addr) in [(a, a_addr), (b, b_addr)] {
            ip(&["-n", &ns.name, "addr", "add", addr, "dev", &ifname])?;
            ip(&["-n", &ns.name, "link", "set", &ifname, "up"])?;
        }
        Ok(())
    }

    /// PIDs of the processes inside the namespace (`ip netns pids`), not
    /// counting this process.
    pub fn pids(&self) -> Vec<i32> {
        let me = std::process::id() as i32;
        ip(&["netns", "pids", &self.name])
            .map(|s| {
                s.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .filter(|&p| p != me)
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let pids = self.pids();
        if !pids.is_empty() {
            tracing::info!("namespace {}: ending pids {pids:?}", self.name);
            crate::process::terminate_pids(&pids, Duration::from_secs(3));
        }
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            tracing::warn!("deleting namespace {}: {e:#}", self.name);
        }
    }
}

/// [`Netns::wait_port`] in the calling thread's own namespace.
pub fn wait_port_here(addr: SocketAddr, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(
            &addr,
            left.clamp(Duration::from_millis(1), Duration::from_millis(500)),
        ) {
            Ok(_) => return Ok(()),
            Err(e) => last = e,
        }
        if Instant::now() >= deadline {
            bail!("port {addr} not accepting after {timeout:?}: {last}");
        }
        std::thread::sleep(
            Duration::from_millis(10).min(deadline.saturating_duration_since(Instant::now())),
        );
    }
}

fn check_private_cidr(cidr: &str) -> anyhow::Result<()> {
    let (ip, len) = cidr
        .split_once('/')
        .with_context(|| format!("{cidr:?}: expected ADDRESS/PREFIX"))?;
    let ip: Ipv4Addr = ip
        .parse()
        .with_context(|| format!("{cidr:?}: bad IPv4 address"))?;
    let len: u8 = len
        .parse()
        .with_context(|| format!("{cidr:?}: bad prefix"))?;
    if len == 0 || len > 30 {
        bail!("{cidr:?}: prefix must be 1..=30");
    }
    let o = ip.octets();
    let bench = o[0] == 198 && (o[1] & 0xfe) == 18;
    if !(ip.is_private() || bench) {
        bail!(
            "{cidr:?}: veth addresses must be private (10/8, 172.16/12, 192.168/16) or 198.18/15"
        );
    }
    Ok(())
}

/// Two fresh namespaces joined by a veth pair on `10.231.NET.0/24`: `a`
/// holds `.1`, `b` holds `.2`. For programs that refuse loopback peers
/// (aMule drops every source and server in 127.0.0.0/8).
pub struct VethPair {
    /// The first namespace (address `.1`).
    pub a: Netns,
    /// The second namespace (address `.2`).
    pub b: Netns,
    /// `a`'s address.
    pub a_ip: Ipv4Addr,
    /// `b`'s address.
    pub b_ip: Ipv4Addr,
}

impl VethPair {
    /// Creates both namespaces (tagged `tag_a`, `tag_b`) and the pair.
    pub fn new(tag_a: &str, tag_b: &str, net: u8) -> anyhow::Result<Self> {
        let a = Netns::new(tag_a)?;
        let b = Netns::new(tag_b)?;
        let (a_ip, b_ip) = (
            Ipv4Addr::new(10, 231, net, 1),
            Ipv4Addr::new(10, 231, net, 2),
        );
        Netns::link_pair(&a, &b, &format!("{a_ip}/24"), &format!("{b_ip}/24"))?;
        Ok(VethPair { a, b, a_ip, b_ip })
    }

    /// The pair's network as a CIDR (for weir's `--allow`).
    pub fn cidr(&self) -> String {
        let [x, y, z, _] = self.a_ip.octets();
        format!("{x}.{y}.{z}.0/24")
    }
}

/// A DNS resolver trap for one namespace: programs started with
/// [`Netns::command`] see `/etc/resolv.conf` pointing at 127.0.0.1 (`ip
/// netns exec` bind-mounts `/etc/netns/NAME/resolv.conf` over it), where a
/// UDP socket inside the namespace catches every query and answers none.
/// For proving that a program resolves no name: [`DnsTrap::queries`]
/// after it ran. The file is removed on drop.
#[derive(Debug)]
pub struct DnsTrap {
    dir: std::path::PathBuf,
    sock: std::net::UdpSocket,
}

impl DnsTrap {
    /// Sets up the trap in `ns` (root: writes under `/etc/netns/`).
    pub fn new(ns: &Netns) -> anyhow::Result<Self> {
        let dir = std::path::PathBuf::from("/etc/netns").join(ns.name());
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let trap = DnsTrap {
            sock: ns.try_run_in(|| std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 53)))??,
            dir,
        };
        // One try, one second: a resolver that is asked gives up soon.
        std::fs::write(
            trap.dir.join("resolv.conf"),
            "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
        )?;
        Ok(trap)
    }

    /// The queries that arrived so far (the names asked, as the raw
    /// question bytes), waiting at most `wait` for a first one.
    pub fn queries(&self, wait: Duration) -> anyhow::Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 1500];
        self.sock
            .set_read_timeout(Some(wait.max(Duration::from_millis(1))))?;
        loop {
            match self.sock.recv_from(&mut buf) {
                Ok((n, _)) => {
                    out.push(buf[..n].to_vec());
                    self.sock.set_read_timeout(Some(Duration::from_millis(1)))?;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(out);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Drop for DnsTrap {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_keeps_safe_chars() {
        assert_eq!(sanitize("Bt-Clients x/1"), "bt_clients_x_1");
        assert_eq!(sanitize(&"a".repeat(40)).len(), 24);
    }

    #[test]
    fn veth_addresses_must_be_private() {
        assert!(check_private_cidr("10.77.0.1/24").is_ok());
        assert!(check_private_cidr("198.19.0.1/24").is_ok());
        assert!(check_private_cidr("8.8.8.8/24").is_err());
        assert!(check_private_cidr("10.0.0.1").is_err());
        assert!(check_private_cidr("10.0.0.1/0").is_err());
        assert!(check_private_cidr("x/24").is_err());
    }
}
