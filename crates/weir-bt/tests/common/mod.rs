//! Shared by the libtorrent interop tests of weir-bt: a libtorrent script
//! (seed, leech or magnet, optionally with forced RC4 encryption and the
//! ut_metadata extension), the namespace set-up, and a small tokio
//! BitTorrent connection through an optional MSE cipher.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::bail;
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_bt::mse::MseCipher;
use weir_bt::wire::{self, Handshake, Limits, Message};
use weir_lab::{Netns, Proc, TempDir, ci, payload, torrent};

pub const PYTHON: &str = "/usr/bin/python3";
pub const PIECE: u64 = 16 * 1024;
pub const SEED: u64 = 0x3ee;

/// libtorrent seeding, leeching, or fetching a magnet's metadata, with DHT,
/// LSD, UPnP, NAT-PMP and uTP off. `--forced-enc`: RC4 only, both ways.
/// `--ut-metadata`: the BEP 9 extension (no other extension is loaded).
/// Touches `--flag` when seeding, finished, or (magnet) holding the
/// metadata; leech and magnet modes then exit 0.
pub const LT_SCRIPT: &str = r#"
import argparse, sys, time
import libtorrent as lt
ap = argparse.ArgumentParser()
ap.add_argument('mode', choices=['seed', 'leech', 'magnet'])
ap.add_argument('--torrent')
ap.add_argument('--magnet')
ap.add_argument('--dir', required=True)
ap.add_argument('--ip', required=True)
ap.add_argument('--port', type=int, required=True)
ap.add_argument('--peer')
ap.add_argument('--flag', required=True)
ap.add_argument('--forced-enc', action='store_true')
ap.add_argument('--ut-metadata', action='store_true')
ap.add_argument('--timeout', type=float, default=60.0)
a = ap.parse_args()
s = lt.default_settings()
s.update({
    'listen_interfaces': f'{a.ip}:{a.port}',
    'outgoing_interfaces': a.ip,
    'enable_dht': False, 'dht_bootstrap_nodes': '', 'enable_lsd': False,
    'enable_upnp': False, 'enable_natpmp': False, 'enable_ip_notifier': False,
    'enable_incoming_utp': False, 'enable_outgoing_utp': False,
    'allow_multiple_connections_per_ip': True,
    'alert_mask': lt.alert.category_t.status_notification | lt.alert.category_t.error_notification | lt.alert.category_t.peer_log_notification | lt.alert.category_t.peer_notification,
})
if a.forced_enc:
    s.update({
        'out_enc_policy': int(lt.enc_policy.forced),
        'in_enc_policy': int(lt.enc_policy.forced),
        'allowed_enc_level': int(lt.enc_level.rc4),
    })
ses = lt.session(s, 0)
if a.ut_metadata:
    ses.add_extension('ut_metadata')
if a.mode == 'magnet':
    p = lt.parse_magnet_uri(a.magnet)
else:
    p = lt.add_torrent_params()
    p.ti = lt.torrent_info(a.torrent)
p.save_path = a.dir
p.flags |= lt.torrent_flags.disable_dht | lt.torrent_flags.disable_lsd | lt.torrent_flags.disable_pex
h = ses.add_torrent(p)
deadline = time.time() + a.timeout
last = 0.0
while time.time() < deadline:
    ses.wait_for_alert(100)
    for al in ses.pop_alerts():
        print(al.message(), file=sys.stderr, flush=True)
    st = h.status()
    if a.mode == 'seed' and st.is_seeding:
        open(a.flag, 'w').close()
    if a.mode == 'magnet' and st.has_metadata:
        ti = h.torrent_file()
        print('metadata', str(ti.info_hashes().v1), ti.num_pieces(), flush=True)
        open(a.flag, 'w').close()
        sys.exit(0)
    if a.mode == 'leech':
        if st.is_seeding:
            open(a.flag, 'w').close()
            print('finished', flush=True)
            sys.exit(0)
        if st.num_peers == 0 and time.time() - last > 1.0:
            last = time.time()
            host, port = a.peer.rsplit(':', 1)
            h.connect_peer((host, int(port)))
print('timeout', file=sys.stderr, flush=True)
sys.exit(3)
"#;

pub fn ready() -> anyhow::Result<bool> {
    if !ci::require_root_and_netns()? || !ci::require_program(PYTHON)? {
        return Ok(false);
    }
    let ok = Command::new(PYTHON)
        .args(["-c", "import libtorrent"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        ci::unavailable("python3-libtorrent is not importable")?;
        return Ok(false);
    }
    Ok(true)
}

pub struct Setup {
    pub dir: TempDir,
    pub data: PathBuf,
    pub torrent: PathBuf,
    pub info_hash: [u8; 20],
    pub script: PathBuf,
}

/// A payload of `size` bytes (seed [`SEED`]) in 16 KiB pieces, its
/// torrent and the libtorrent script, in a fresh temp dir.
pub fn setup(tag: &str, size: u64) -> anyhow::Result<Setup> {
    let dir = TempDir::new(tag)?;
    let data = dir.subdir("seed")?;
    let file = data.join("payload.bin");
    payload::write(&file, size, SEED)?;
    let t = dir.path().join("payload.torrent");
    let info = torrent::make(&file, PIECE, None, &t)?;
    let script = dir.path().join("lt.py");
    std::fs::write(&script, LT_SCRIPT)?;
    Ok(Setup {
        data,
        torrent: t,
        info_hash: info.info_hash,
        script,
        dir,
    })
}

pub fn start_lt(
    ns: &Netns,
    s: &Setup,
    mode: &str,
    dir: &Path,
    addr: std::net::SocketAddr,
    peer: Option<&str>,
    extra: &[&str],
) -> anyhow::Result<(Proc, PathBuf)> {
    let flag = s.dir.path().join(format!("{mode}.flag"));
    let mut cmd = ns.command(PYTHON);
    cmd.arg(&s.script)
        .arg(mode)
        .arg("--torrent")
        .arg(&s.torrent)
        .arg("--dir")
        .arg(dir)
        .args([
            "--ip",
            &addr.ip().to_string(),
            "--port",
            &addr.port().to_string(),
        ])
        .arg("--flag")
        .arg(&flag);
    if let Some(p) = peer {
        cmd.args(["--peer", p]);
    }
    cmd.args(extra);
    let p = Proc::spawn_logged(&format!("lt-{mode}"), &mut cmd, s.dir.path())?;
    Ok((p, flag))
}

pub fn wait_flag(p: &mut Proc, flag: &Path, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while !flag.exists() {
        if p.try_wait()?.is_some() {
            return Err(p.failure("exited before its flag appeared"));
        }
        if Instant::now() >= deadline {
            return Err(p.failure("flag did not appear in time"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// A BitTorrent connection through an optional RC4 cipher.
pub struct Conn {
    pub sock: TcpStream,
    pub cipher: Option<MseCipher>,
    pub buf: BytesMut,
}

impl Conn {
    pub async fn write(&mut self, mut bytes: Vec<u8>) -> anyhow::Result<()> {
        if let Some(c) = self.cipher.as_mut() {
            c.encrypt.apply_keystream(&mut bytes);
        }
        self.sock.write_all(&bytes).await?;
        Ok(())
    }

    pub async fn send(&mut self, m: &Message) -> anyhow::Result<()> {
        let mut out = BytesMut::new();
        wire::encode(m, &mut out);
        self.write(out.to_vec()).await
    }

    /// Reads more bytes, decrypted; `false` at end of stream.
    pub async fn fill(&mut self) -> anyhow::Result<bool> {
        let mut tmp = vec![0u8; 64 * 1024];
        let n = self.sock.read(&mut tmp).await?;
        if n == 0 {
            return Ok(false);
        }
        tmp.truncate(n);
        if let Some(c) = self.cipher.as_mut() {
            c.decrypt.apply_keystream(&mut tmp);
        }
        self.buf.extend_from_slice(&tmp);
        Ok(true)
    }

    pub async fn handshake(&mut self) -> anyhow::Result<Handshake> {
        loop {
            if let Some(h) = Handshake::decode(&self.buf)? {
                let _ = self.buf.split_to(Handshake::LEN);
                return Ok(h);
            }
            if !self.fill().await? {
                bail!("closed before the BitTorrent handshake");
            }
        }
    }

    pub async fn recv(&mut self, limits: &Limits) -> anyhow::Result<Option<Message>> {
        loop {
            if let Some(m) = wire::decode(&mut self.buf, limits)? {
                return Ok(Some(m));
            }
            if !self.fill().await? {
                return Ok(None);
            }
        }
    }
}

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

pub fn expected_block(offset: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    payload::fill(&mut b, offset, SEED);
    b
}
