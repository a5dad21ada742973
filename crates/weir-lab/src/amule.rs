//! aMule 2.3.3 (`amuled`, Debian's amule-daemon) inside a [`Netns`], set up
//! so that it cannot reach anything but the namespace, and driven with
//! `amulecmd` over its External Connections port.
//!
//! The configuration ports the lab's `write_amule_conf.sh`: Kad off, eD2k
//! off unless a lab server is given (then `server.met` lists only that
//! server), UPnP, version check, IP-filter and server-list updates off,
//! update URLs pointing at a dead loopback port, `Address` and the EC port
//! bound to the given address, obfuscation off (captures stay readable),
//! `FilterLanIPs=0` so that private veth addresses are accepted as sources.
//!
//! Quirks handled here (see the lab README):
//! - amuled empties `shareddir.dat` on the first start of a fresh config
//!   directory: the list is written again after start and `reload shared`
//!   is sent.
//! - a user hash that changes at the same address gets that address banned
//!   for two hours by aMule peers: the user hash (`preferences.dat`) is
//!   derived from the nick, so it is the same on every run.
//! - `MaxUpload=0` means "current rate + 5 kB/s" in 2.3.3: 65534 is used.
//! - with `ConnectToED2K=1` and an empty server list amuled fetches a
//!   server list from the internet: refused here unless a lab server is
//!   configured.
//! - amuled drops servers and sources in 127.0.0.0/8 (`IsGoodIP`,
//!   `ServerList.cpp:206`, `PartFile.cpp:1665`): a lab server in 127/8 is
//!   removed from `server.met` at start. Put the server (and any peer it
//!   should download from) in another namespace joined by
//!   [`Netns::link_pair`] and bind amuled to its private veth address.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::netns::Netns;
use crate::process::Proc;

/// How to configure one amuled.
#[derive(Clone, Debug)]
pub struct AmuleConfig {
    /// Nick (also seeds the stable user hash).
    pub nick: String,
    /// Address every socket binds to (127.x, or a private veth address).
    pub bind: Ipv4Addr,
    /// eD2k TCP port.
    pub tcp_port: u16,
    /// eD2k UDP port.
    pub udp_port: u16,
    /// External Connections (amulecmd) port.
    pub ec_port: u16,
    /// EC password (stored MD5-hashed in amule.conf).
    pub ec_pass: String,
    /// Directories to share.
    pub shared_dirs: Vec<PathBuf>,
    /// An eD2k server to log into (`ConnectToED2K=1`); `None` keeps eD2k
    /// off.
    pub lab_server: Option<SocketAddrV4>,
    /// Upload limit in kB/s (65534: the highest that is a real limit).
    pub max_up_kbps: u32,
    /// Download limit in kB/s (0: unlimited).
    pub max_down_kbps: u32,
    /// Verbose debug logging of client protocol, part files, zlib and
    /// sockets into `logfile` (default: env `WEIR_LAB_AMULE_DEBUG` set).
    pub verbose_debug: bool,
    /// Run amuled under this program: the command line becomes
    /// `wrapper... amuled args...` (e.g. `valgrind --tool=callgrind ...`).
    /// Empty: amuled itself. Under a wrapper the start-up waits are ten
    /// times longer (valgrind runs it some 50x slower).
    pub wrapper: Vec<String>,
}

impl AmuleConfig {
    /// Defaults: ports 4662/4672, EC 4712, password "weirlab", no shares,
    /// no server.
    pub fn new(nick: &str, bind: Ipv4Addr) -> Self {
        AmuleConfig {
            nick: nick.to_string(),
            bind,
            tcp_port: 4662,
            udp_port: 4672,
            ec_port: 4712,
            ec_pass: "weirlab".into(),
            shared_dirs: Vec::new(),
            lab_server: None,
            max_up_kbps: 65534,
            max_down_kbps: 0,
            verbose_debug: std::env::var_os("WEIR_LAB_AMULE_DEBUG").is_some(),
            wrapper: Vec::new(),
        }
    }

    /// The eD2k listen address.
    pub fn ed2k_addr(&self) -> SocketAddrV4 {
        SocketAddrV4::new(self.bind, self.tcp_port)
    }
}

/// How long amuled may stay in "Completing" (moving a finished download
/// into `Incoming`) before [`Amule::wait_complete`] takes its part file.
pub const COMPLETING_LIMIT: Duration = Duration::from_secs(20);

/// Loopback, or an address a test's own veth pair may carry.
fn lab_address(ip: Ipv4Addr) -> bool {
    ip.is_loopback() || ip.is_private() || (ip.octets()[0] == 198 && ip.octets()[1] & 0xfe == 18)
}

/// The user hash for `nick`: the same on every run, marked as an eMule-type
/// hash (bytes 5 and 14 are 14 and 111, as aMule does).
pub fn stable_user_hash(nick: &str) -> [u8; 16] {
    // Two FNV-1a style lanes over the nick: stable and well spread.
    let mut a: u64 = 0xcbf2_9ce4_8422_2325;
    let mut b: u64 = 0x8422_2325_cbf2_9ce4;
    for c in nick.bytes().chain(*b"weir-lab") {
        a = (a ^ c as u64).wrapping_mul(0x100_0000_01b3);
        b = (b ^ c as u64).wrapping_mul(0x100_0000_01b3).rotate_left(17);
    }
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(&a.to_le_bytes());
    h[8..].copy_from_slice(&b.to_le_bytes());
    h[5] = 14;
    h[14] = 111;
    h
}

/// A small MD5 for the EC password hash amule.conf wants (RFC 1321), so the
/// harness needs no hashing crate.
fn md5_hex(input: &[u8]) -> String {
    const S: [u32; 64] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5,
        9, 14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10,
        15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ];
    let k: Vec<u32> = (0..64)
        .map(|i| ((i as f64 + 1.0).sin().abs() * 4_294_967_296.0) as u32)
        .collect();
    let mut msg = input.to_vec();
    let bit_len = (input.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_le_bytes());
    let mut h: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
    for chunk in msg.chunks(64) {
        let m: Vec<u32> = chunk
            .chunks(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let [mut a, mut b, mut c, mut d] = h;
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let t = d;
            d = c;
            c = b;
            b = b.wrapping_add(
                a.wrapping_add(f)
                    .wrapping_add(k[i])
                    .wrapping_add(m[g])
                    .rotate_left(S[i]),
            );
            a = t;
        }
        h = [
            h[0].wrapping_add(a),
            h[1].wrapping_add(b),
            h[2].wrapping_add(c),
            h[3].wrapping_add(d),
        ];
    }
    let mut s = String::new();
    for w in h {
        for byte in w.to_le_bytes() {
            let _ = write!(s, "{byte:02x}");
        }
    }
    s
}

/// Writes `amule.conf`, `shareddir.dat`, `preferences.dat`, `server.met`
/// (only with a lab server) and an empty `addresses.dat` into `dir`.
pub fn write_config(dir: &Path, cfg: &AmuleConfig) -> anyhow::Result<()> {
    if !lab_address(cfg.bind) {
        bail!(
            "amuled must bind to loopback or a private lab address, not {}",
            cfg.bind
        );
    }
    if let Some(s) = cfg.lab_server {
        if !lab_address(*s.ip()) {
            bail!("lab server {s} is not a loopback or private lab address");
        }
    }
    std::fs::create_dir_all(dir.join("Incoming"))?;
    std::fs::create_dir_all(dir.join("Temp"))?;
    let dir = dir.canonicalize()?;
    let dead = "http://127.0.0.1:1/disabled";
    let ed2k = cfg.lab_server.is_some() as u8;
    let conf = format!(
        "[eMule]
AppVersion=2.3.3
Nick={nick}
Port={tcp}
UDPPort={udp}
UDPEnable=1
Address={bind}
Autoconnect={ed2k}
Reconnect={ed2k}
ConnectToKad=0
ConnectToED2K={ed2k}
Serverlist=0
AddServerListFromServer=0
AddServerListFromClient=0
SafeServerConnect=0
AutoConnectStaticOnly=0
UPnPEnabled=0
UPnPTCPPort=50000
NewVersionCheck=0
IPFilterAutoLoad=0
IPFilterURL=
IPFilterSystem=0
FilterLanIPs=0
ParanoidFiltering=0
FilterLevel=0
GeoIPEnabled=0
GeoLiteCountryUpdateUrl={dead}
KadNodesUrl={dead}
Ed2kServersUrl={dead}
OnlineSignature=0
SmartIdCheck=0
MaxUpload={up}
MaxDownload={down}
UploadCapacity=100000
DownloadCapacity=100000
SlotAllocation=2
MaxConnections=100
MaxSourcesPerFile=300
TempDir={temp}
IncomingDir={incoming}
ICH=1
FileBufferSizePref=16
AICHTrust=0
CheckDiskspace=0
AddNewFilesPaused=0
StartNextFile=0
ConfirmExit=0
CreateSparseFiles=1
AllocateFullFile=0
ShareHiddenFiles=0
VerboseDebug={verbose}
VerboseDebugLogfile={verbose}
ShowMessagesInLog=0
[ExternalConnect]
AcceptExternalConnections=1
ECAddress={bind}
ECPort={ec}
ECPassword={ecmd5}
UPnPECEnabled=0
UseSecIdent=1
IpFilterClients=0
IpFilterServers=0
UseSrcSeeds=0
[WebServer]
Enabled=0
UPnPWebServerEnabled=0
Port={web}
[Proxy]
ProxyEnableProxy=0
[Obfuscation]
IsClientCryptLayerSupported=0
IsCryptLayerRequested=0
IsClientCryptLayerRequired=0
[PowerManagement]
PreventSleepWhileDownloading=0
[Statistics]
MaxClientVersions=0
[Debug]
Cat_ED2k Client={verbose}
Cat_Local Client Protocol={verbose}
Cat_Remote Client Protocol={verbose}
Cat_Packet Parsing Errors={verbose}
Cat_ZLib={verbose}
Cat_PartFiles={verbose}
Cat_DownloadQueue={verbose}
Cat_Asio Sockets={verbose}
",
        nick = cfg.nick,
        tcp = cfg.tcp_port,
        udp = cfg.udp_port,
        bind = cfg.bind,
        up = cfg.max_up_kbps,
        down = cfg.max_down_kbps,
        temp = dir.join("Temp").display(),
        incoming = dir.join("Incoming").display(),
        ec = cfg.ec_port,
        ecmd5 = md5_hex(cfg.ec_pass.as_bytes()),
        web = cfg.ec_port.wrapping_add(1),
        verbose = u8::from(cfg.verbose_debug),
    );
    std::fs::write(dir.join("amule.conf"), conf)?;
    std::fs::write(dir.join("shareddir.dat"), shared_list(cfg)?)?;
    let mut pref = vec![0x14u8];
    pref.extend_from_slice(&stable_user_hash(&cfg.nick));
    std::fs::write(dir.join("preferences.dat"), pref)?;
    for f in [
        "server.met",
        "nodes.dat",
        "ipfilter.dat",
        "ipfilter_static.dat",
    ] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    if let Some(s) = cfg.lab_server {
        std::fs::write(dir.join("server.met"), server_met(s))?;
    }
    std::fs::write(dir.join("addresses.dat"), b"")?;
    Ok(())
}

fn shared_list(cfg: &AmuleConfig) -> anyhow::Result<String> {
    let mut s = String::new();
    for d in &cfg.shared_dirs {
        let d = d
            .canonicalize()
            .with_context(|| format!("shared dir {}", d.display()))?;
        let _ = writeln!(s, "{}", d.display());
    }
    Ok(s)
}

/// A `server.met` listing only `server`: `<0x0E><count u32>` then
/// `<ip 4><port u16><tag count u32><ST_SERVERNAME string tag>`.
pub fn server_met(server: SocketAddrV4) -> Vec<u8> {
    let name = b"weir lab server";
    let mut v = vec![0x0E];
    v.extend_from_slice(&1u32.to_le_bytes());
    v.extend_from_slice(&server.ip().octets());
    v.extend_from_slice(&server.port().to_le_bytes());
    v.extend_from_slice(&1u32.to_le_bytes());
    v.extend_from_slice(&[0x02, 1, 0, 0x01]);
    v.extend_from_slice(&(name.len() as u16).to_le_bytes());
    v.extend_from_slice(name);
    v
}

/// One entry of `show dl`.
#[derive(Clone, Debug, PartialEq)]
pub struct Download {
    /// ed2k hash (upper-case hex).
    pub hash: String,
    /// File name.
    pub name: String,
    /// Percent complete.
    pub percent: f64,
    /// The status line as amulecmd printed it.
    pub status: String,
}

/// A running amuled.
pub struct Amule {
    dir: PathBuf,
    cfg: AmuleConfig,
    ns_name: String,
    proc: Proc,
}

impl Amule {
    /// Writes the configuration into `dir` and starts amuled inside `ns`;
    /// returns once amulecmd can talk to it and the shared directories are
    /// loaded.
    pub fn start(ns: &Netns, dir: &Path, cfg: AmuleConfig) -> anyhow::Result<Amule> {
        write_config(dir, &cfg)?;
        let dir = dir.canonicalize()?;
        let mut cmd = match cfg.wrapper.split_first() {
            None => ns.command("amuled"),
            Some((first, rest)) => {
                let mut c = ns.command(first);
                c.args(rest).arg("amuled");
                c
            }
        };
        cmd.arg(format!("--config-dir={}", dir.display()))
            .arg("-o")
            .env("HOME", &dir);
        let mut proc = Proc::spawn_logged("amuled", &mut cmd, &dir)?;
        let wait = if cfg.wrapper.is_empty() {
            Duration::from_secs(60)
        } else {
            Duration::from_secs(600)
        };
        let ec = SocketAddr::from((cfg.bind, cfg.ec_port));
        if let Err(e) = ns.wait_port(ec, wait) {
            return Err(proc.failure(&format!("amuled EC port: {e:#}")));
        }
        let mut a = Amule {
            dir,
            cfg,
            ns_name: ns.name().to_string(),
            proc,
        };
        a.wait_ec(Instant::now() + wait)?;
        // amuled empties shareddir.dat on a fresh config dir's first start.
        // Reload only then: a reload while amuled hashes its shares drops
        // the file being hashed from the shared list.
        a.ensure_shared(false)?;
        Ok(a)
    }

    /// Waits until amulecmd gets an answer: amuled accepts on its EC port
    /// before it answers there (seen in CI: `EC connection failed. Empty
    /// reply` just after the port opened). amuled prints no readiness
    /// line, so this asks `status` again, backing off from 50 ms to 1 s,
    /// until `deadline` or amuled's exit.
    fn wait_ec(&mut self, deadline: Instant) -> anyhow::Result<()> {
        let mut pause = Duration::from_millis(50);
        loop {
            let err = match self.status() {
                Ok(_) => return Ok(()),
                Err(e) => e,
            };
            if self.proc.try_wait()?.is_some() {
                return Err(self.proc.failure(&format!("amuled exited: {err:#}")));
            }
            if Instant::now() + pause > deadline {
                return Err(self
                    .proc
                    .failure(&format!("amuled never answered EC: {err:#}")));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// Writes `shareddir.dat` again and reloads the shares if amuled
    /// emptied it (it does on a fresh config directory's first start,
    /// sometimes after [`Amule::start`] looked), or always with `force`
    /// (a reload that raced amuled's first hashing can leave a file
    /// hashed but unshared; the next reload shares it). Returns whether it
    /// reloaded.
    pub fn ensure_shared(&self, force: bool) -> anyhow::Result<bool> {
        let want = shared_list(&self.cfg)?;
        if want.is_empty() {
            return Ok(false);
        }
        let path = self.dir.join("shareddir.dat");
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if want != have {
            std::fs::write(&path, &want)?;
        } else if !force {
            return Ok(false);
        }
        self.cmd("reload shared")?;
        Ok(true)
    }

    /// The configuration directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The configuration.
    pub fn config(&self) -> &AmuleConfig {
        &self.cfg
    }

    /// The daemon process.
    pub fn proc(&mut self) -> &mut Proc {
        &mut self.proc
    }

    /// Runs one amulecmd command (at most 20 s) and returns its output
    /// without amulecmd's banner lines.
    pub fn cmd(&self, command: &str) -> anyhow::Result<String> {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns_name, "timeout", "20", "amulecmd"])
            .args(["-h", &self.cfg.bind.to_string()])
            .args(["-p", &self.cfg.ec_port.to_string()])
            .args(["-P", &self.cfg.ec_pass])
            .args(["-c", command])
            .env("HOME", &self.dir);
        let out = c
            .output()
            .with_context(|| format!("running amulecmd {command:?}"))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && !text.contains("Succeeded") {
            bail!("amulecmd {command:?} failed ({}): {text}", out.status);
        }
        Ok(text
            .lines()
            .filter(|l| {
                !(l.starts_with("This is amulecmd")
                    || l.starts_with("Creating client")
                    || l.starts_with("Succeeded!")
                    || l.starts_with("Connection established")
                    || l.trim().is_empty()
                    || l.trim_start().starts_with("-----"))
            })
            .collect::<Vec<_>>()
            .join("\n"))
    }

    /// Queues an ed2k link for download.
    pub fn add_link(&self, link: &str) -> anyhow::Result<String> {
        self.cmd(&format!("add {link}"))
    }

    /// Rescans the shared directories.
    pub fn reload_shared(&self) -> anyhow::Result<String> {
        self.cmd("reload shared")
    }

    /// `status` output (eD2k connection state, rates).
    pub fn status(&self) -> anyhow::Result<String> {
        self.cmd("status")
    }

    /// Downloads and their progress (`show dl`).
    pub fn downloads(&self) -> anyhow::Result<Vec<Download>> {
        Ok(parse_show_dl(&self.cmd("show dl")?))
    }

    /// The raw `known.met` (files amuled has hashed), if written yet
    /// (amuled may write it only when it exits: see [`Amule::stop`]).
    pub fn known_met(&self) -> Option<Vec<u8>> {
        std::fs::read(self.dir.join("known.met")).ok()
    }

    /// The ed2k hashes (upper-case hex) of the files amuled shares now
    /// (`show shared`): a file is listed once it is hashed. (`known.met` is
    /// not a reliable signal: amuled may write it only when it exits.)
    pub fn shared_hashes(&self) -> anyhow::Result<Vec<String>> {
        Ok(self
            .cmd("show shared")?
            .lines()
            .filter_map(|l| l.trim_start_matches(['>', ' ', '\t']).split(' ').next())
            .filter(|w| w.len() == 32 && w.bytes().all(|c| c.is_ascii_hexdigit()))
            .map(|w| w.to_ascii_uppercase())
            .collect())
    }

    /// Whether amuled shares the file with this ed2k hash.
    pub fn has_hashed(&self, hash: &[u8; 16]) -> bool {
        let hex: String = hash.iter().map(|b| format!("{b:02X}")).collect();
        self.shared_hashes().is_ok_and(|h| h.contains(&hex))
    }

    /// Waits (bounded, polling `show shared`) until amuled shares every
    /// file with these ed2k hashes, reloading the shares if amuled emptied
    /// its list or a reload raced its first hashing.
    pub fn wait_shared(&self, hashes: &[[u8; 16]], timeout: Duration) -> anyhow::Result<()> {
        let want: Vec<String> = hashes
            .iter()
            .map(|h| h.iter().map(|b| format!("{b:02X}")).collect())
            .collect();
        let deadline = std::time::Instant::now() + timeout;
        let mut polls = 0u32;
        loop {
            let have = self.shared_hashes().unwrap_or_default();
            if want.iter().all(|w| have.contains(w)) {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                bail!(
                    "amuled did not share {} of {} files in {timeout:?}:\n{}",
                    want.iter().filter(|w| !have.contains(w)).count(),
                    want.len(),
                    self.log_tail(20)
                );
            }
            polls += 1;
            if polls % 4 == 0 {
                self.ensure_shared(polls % 20 == 0)?;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// [`Amule::wait_shared`] for one file.
    pub fn wait_hashed(&self, hash: &[u8; 16], timeout: Duration) -> anyhow::Result<()> {
        self.wait_shared(std::slice::from_ref(hash), timeout)
    }

    /// Where amuled puts a completed download.
    pub fn incoming(&self, name: &str) -> PathBuf {
        self.dir.join("Incoming").join(name)
    }

    /// Waits (bounded, polling) until amuled has the whole download `name`
    /// (`size` bytes) and returns where the bytes are; `alive` is asked
    /// between polls and ends the wait early with its error (a seeder that
    /// died, say). See [`Amule::wait_complete`].
    pub fn wait_download(
        &self,
        name: &str,
        size: u64,
        timeout: Duration,
        alive: impl FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<PathBuf> {
        Ok(self.wait_complete(name, size, timeout, alive)?.0)
    }

    /// [`Amule::wait_download`], also returning when the file was complete:
    /// the first of amuled reporting 100% (its download list, polled every
    /// 250 ms) and the file appearing in `Incoming`. amuled 2.3.3 sometimes
    /// stays in "Completing" for good after the last byte (its completion
    /// task never moves the file); after [`COMPLETING_LIMIT`] of that its
    /// full-size part file in `Temp` is returned instead, and a line says so.
    pub fn wait_complete(
        &self,
        name: &str,
        size: u64,
        timeout: Duration,
        mut alive: impl FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<(PathBuf, std::time::Instant)> {
        let path = self.incoming(name);
        let started = std::time::Instant::now();
        let mut full_at: Option<std::time::Instant> = None;
        let mut polled = started;
        loop {
            if std::fs::metadata(&path).is_ok_and(|m| m.len() == size) {
                return Ok((path, full_at.unwrap_or_else(std::time::Instant::now)));
            }
            alive()?;
            if full_at.is_none() && polled.elapsed() >= Duration::from_millis(250) {
                polled = std::time::Instant::now();
                if self
                    .downloads()
                    .unwrap_or_default()
                    .iter()
                    .any(|d| d.name == name && d.percent >= 100.0)
                {
                    full_at = Some(polled);
                }
            }
            if let Some(at) = full_at
                && at.elapsed() > COMPLETING_LIMIT
            {
                let part = std::fs::read_dir(self.dir.join("Temp"))?
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .find(|p| {
                        p.extension().is_some_and(|x| x == "part")
                            && std::fs::metadata(p).is_ok_and(|m| m.len() == size)
                    })
                    .with_context(|| {
                        format!("amuled reported {name} at 100% but has no full-size part file")
                    })?;
                eprintln!(
                    "amuled stayed in \"Completing\" {COMPLETING_LIMIT:?} after {name} was whole: using {}",
                    part.display()
                );
                return Ok((part, at));
            }
            if started.elapsed() > timeout {
                bail!(
                    "amuled did not complete {name} in {timeout:?}: {:?}\n{}",
                    self.downloads().unwrap_or_default(),
                    self.log_tail(30)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops amuled (SIGTERM, then SIGKILL after a grace period). A clean
    /// exit writes `known.met`, which is returned (if there is one).
    pub fn stop(mut self) -> anyhow::Result<Option<Vec<u8>>> {
        self.proc.kill_tree_with_grace(Duration::from_secs(10))?;
        Ok(std::fs::read(self.dir.join("known.met")).ok())
    }

    /// The last lines of amuled's stderr and of its own `logfile`.
    pub fn log_tail(&self, lines: usize) -> String {
        format!(
            "{}\n--- amuled logfile:\n{}",
            self.proc.log_tail(lines),
            crate::process::tail_file(&self.dir.join("logfile"), lines)
        )
    }
}

/// Parses `show dl`: each download is a line ` > HASH NAME` followed by a
/// line with ` [PERCENT%] ... - STATUS`.
pub fn parse_show_dl(out: &str) -> Vec<Download> {
    let mut v: Vec<Download> = Vec::new();
    for line in out.lines() {
        let l = line.trim_start_matches([' ', '>', '\t']).trim_end();
        let mut words = l.splitn(2, ' ');
        let first = words.next().unwrap_or("");
        if first.len() == 32 && first.bytes().all(|c| c.is_ascii_hexdigit()) {
            v.push(Download {
                hash: first.to_ascii_uppercase(),
                name: words.next().unwrap_or("").to_string(),
                percent: 0.0,
                status: String::new(),
            });
        } else if let (Some(d), Some(rest)) = (v.last_mut(), l.strip_prefix('[')) {
            if let Some((pct, tail)) = rest.split_once("%]") {
                d.percent = pct.trim().parse().unwrap_or(0.0);
                d.status = tail.trim().to_string();
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_known_values() {
        assert_eq!(md5_hex(b""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(md5_hex(b"weirlab").len(), 32);
        assert_eq!(
            md5_hex(b"The quick brown fox jumps over the lazy dog"),
            "9e107d9d372bb6826bd81d3542a419d6"
        );
    }

    #[test]
    fn user_hash_is_stable_and_emule_typed() {
        let a = stable_user_hash("x");
        assert_eq!(a, stable_user_hash("x"));
        assert_ne!(a, stable_user_hash("y"));
        assert_eq!((a[5], a[14]), (14, 111));
    }

    #[test]
    fn refuses_public_addresses() {
        let d = crate::TempDir::new("amulecfg").unwrap();
        let cfg = AmuleConfig::new("n", "8.8.8.8".parse().unwrap());
        assert!(write_config(d.path(), &cfg).is_err());
        let mut cfg = AmuleConfig::new("n", Ipv4Addr::LOCALHOST);
        cfg.lab_server = Some("1.1.1.1:4661".parse().unwrap());
        assert!(write_config(d.path(), &cfg).is_err());
        cfg.lab_server = Some("127.0.0.1:4661".parse().unwrap());
        write_config(d.path(), &cfg).unwrap();
        let met = std::fs::read(d.path().join("server.met")).unwrap();
        assert_eq!(&met[..10], &[0x0E, 1, 0, 0, 0, 127, 0, 0, 1, 0x35]);
        let conf = std::fs::read_to_string(d.path().join("amule.conf")).unwrap();
        assert!(conf.contains("ConnectToKad=0") && conf.contains("ConnectToED2K=1"));
    }

    #[test]
    fn show_dl_parsing() {
        let out =
            " > 6E6DC9CAF5C2BAB98702E5C4E68769F0 test file.bin\n >\t[42.5%] 1/ 1 - Downloading\n";
        let d = parse_show_dl(out);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].name, "test file.bin");
        assert_eq!(d[0].percent, 42.5);
        assert!(d[0].status.contains("Downloading"));
    }

    /// Starts amuled in a namespace and queries it with amulecmd.
    #[test]
    fn amuled_starts_and_answers_amulecmd() -> anyhow::Result<()> {
        if !crate::ci::require_program("amuled")? || !crate::ci::require_program("amulecmd")? {
            return Ok(());
        }
        if !crate::ci::require_root_and_netns()? {
            return Ok(());
        }
        let ns = Netns::new("amule")?;
        let dir = crate::TempDir::new("amule")?;
        let share = dir.path().join("share");
        std::fs::create_dir_all(&share)?;
        std::fs::write(share.join("hello.bin"), vec![7u8; 300_000])?;
        let mut cfg = AmuleConfig::new("weirlab", Ipv4Addr::LOCALHOST);
        cfg.shared_dirs.push(share);
        let a = Amule::start(&ns, &dir.path().join("conf"), cfg)?;
        let status = a.status()?;
        eprintln!("amuled status:\n{status}");
        assert!(
            status.contains("eD2k") || status.contains("ED2K"),
            "{status}"
        );
        assert!(a.downloads()?.is_empty());
        let added = a.add_link("ed2k://|file|x.bin|5|D3B6B09D73D3FE0DD41DDE5ED244215A|/")?;
        let dl = a.downloads()?;
        eprintln!("add: {added}\ndownloads: {dl:?}");
        assert_eq!(dl.len(), 1, "{added}\n{dl:?}");
        assert_eq!(dl[0].hash, "D3B6B09D73D3FE0DD41DDE5ED244215A");
        a.stop()?;
        Ok(())
    }
}
