//! The hostile peers of `weir bench hostile`: small tokio programs on
//! 127.0.0.1 (every socket through `weir_runtime::net`) crafting their
//! messages with weir-bt's wire encoder and weir-ed2k's codec, in the
//! shapes of the engine's flood tests (`crates/weir-runtime/tests`). Each
//! runs until told to stop, reconnecting when weir drops it, and counts
//! what it sent, the connections it opened and those weir closed.

use std::net::{SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use weir_bt::wire::{self, BlockRef, Handshake, Message};
use weir_core::policy::NetPolicy;
use weir_ed2k::Md4Hash;
use weir_ed2k::client::ClientMessage;
use weir_ed2k::server::{ClientToServer, ServerToClient};

/// A BitTorrent block.
const BLOCK: u32 = 16 * 1024;
/// The receive buffer of a hostile peer that does not read: small, so
/// weir's writes back up at once.
const SMALL_RCVBUF: usize = 64 * 1024;
/// Longest a write may block before the flood counts the peer as stalled
/// (weir stopped reading it) and reconnects.
const WRITE_STALL: Duration = Duration::from_secs(3);

/// What a flood did.
#[derive(Debug, Default)]
pub struct FloodStats {
    /// Bytes written to weir.
    pub sent: AtomicU64,
    /// Connections opened (or accepted, for floods weir dials).
    pub conns: AtomicU64,
    /// Connections weir closed (reset, EOF or stopped reading).
    pub dropped: AtomicU64,
    /// Other events the flood counts (callbacks asked, announces).
    pub events: AtomicU64,
}

impl FloodStats {
    fn add_sent(&self, n: usize) {
        self.sent.fetch_add(n as u64, Ordering::Relaxed);
    }
    fn opened(&self) {
        self.conns.fetch_add(1, Ordering::Relaxed);
    }
    fn closed(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }
    /// `(sent, conns, dropped, events)` now.
    pub fn snapshot(&self) -> (u64, u64, u64, u64) {
        (
            self.sent.load(Ordering::Relaxed),
            self.conns.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
            self.events.load(Ordering::Relaxed),
        )
    }
}

/// What a BitTorrent flood needs to know of the torrent.
#[derive(Clone, Copy, Debug)]
pub struct TorrentShape {
    /// Its info hash.
    pub info_hash: [u8; 20],
    /// Pieces.
    pub pieces: u32,
    /// Bytes per piece.
    pub piece_len: u32,
}

/// The stop signal every flood task watches.
pub type Stop = watch::Receiver<bool>;

async fn stopped(stop: &mut Stop) {
    let _ = stop.wait_for(|s| *s).await;
}

fn policy() -> NetPolicy {
    NetPolicy::loopback()
}

async fn connect(addr: SocketAddr, small_rcvbuf: bool) -> std::io::Result<TcpStream> {
    let s = weir_runtime::net::connect_tcp(&policy(), addr).await?;
    if small_rcvbuf {
        socket2::SockRef::from(&s).set_recv_buffer_size(SMALL_RCVBUF)?;
    }
    Ok(s)
}

/// Writes `buf`; false when weir closed the connection or stopped reading.
async fn write(s: &mut (impl AsyncWriteExt + Unpin), buf: &[u8], stats: &FloodStats) -> bool {
    match tokio::time::timeout(WRITE_STALL, s.write_all(buf)).await {
        Ok(Ok(())) => {
            stats.add_sent(buf.len());
            true
        }
        Ok(Err(_)) | Err(_) => false,
    }
}

/// Reads and discards until EOF or an error.
async fn drain(mut r: impl AsyncRead + Unpin) {
    let mut buf = vec![0u8; 64 << 10];
    while let Ok(n) = r.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
}

/// Connects and exchanges handshakes for `t`; the stream after weir's.
async fn bt_handshake(
    addr: SocketAddr,
    t: &TorrentShape,
    id: u64,
    small_rcvbuf: bool,
) -> Option<TcpStream> {
    let mut s = connect(addr, small_rcvbuf).await.ok()?;
    let mut peer_id = *b"-XX0000-hostile00000";
    peer_id[12..].copy_from_slice(&id.to_be_bytes());
    let mut out = BytesMut::new();
    Handshake::new(t.info_hash, peer_id).encode(&mut out);
    s.write_all(&out).await.ok()?;
    let mut theirs = [0u8; Handshake::LEN];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut theirs))
        .await
        .ok()?
        .ok()?;
    Some(s)
}

fn request(t: &TorrentShape, n: u64) -> Message {
    let blocks = u64::from(t.piece_len.div_ceil(BLOCK)).max(1);
    let index = ((n / blocks) % u64::from(t.pieces.max(1))) as u32;
    let begin = ((n % blocks) as u32) * BLOCK;
    Message::Request(BlockRef {
        index,
        begin,
        length: BLOCK.min(t.piece_len - begin),
    })
}

/// Flood 1 (BitTorrent): requests while choked, from a peer with the fast
/// extension: each earns a Reject. The answers are read.
pub async fn bt_choked_requests(
    addr: SocketAddr,
    t: TorrentShape,
    stats: Arc<FloodStats>,
    mut stop: Stop,
) {
    let mut n = 0u64;
    loop {
        let Some(s) = bt_handshake(addr, &t, stats.conns.load(Ordering::Relaxed), false).await
        else {
            stats.closed();
            if *stop.borrow() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        stats.opened();
        let (rd, mut wr) = s.into_split();
        let reader = tokio::spawn(drain(rd));
        let mut burst = BytesMut::new();
        loop {
            burst.clear();
            for _ in 0..4096 {
                wire::encode(&request(&t, n), &mut burst);
                n += 1;
            }
            tokio::select! {
                ok = write(&mut wr, &burst, &stats) => if !ok { stats.closed(); break },
                _ = stopped(&mut stop) => { reader.abort(); return }
            }
        }
        reader.abort();
        if *stop.borrow() {
            return;
        }
    }
}

/// Flood 2 (BitTorrent, against a downloader): a "seeder" the downloader
/// dials that never unchokes and pushes Piece messages nobody asked for
/// (piece 1, never its block 0). Listens on 127.0.0.1; its address is
/// returned, the pushing runs until `stop`.
pub async fn bt_unrequested_pieces(
    t: TorrentShape,
    stats: Arc<FloodStats>,
    stop: Stop,
) -> anyhow::Result<SocketAddr> {
    let l = weir_runtime::net::listen_tcp("127.0.0.1:0".parse()?).await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        let mut halt = stop.clone();
        let policy = policy();
        loop {
            let accepted = tokio::select! {
                a = weir_runtime::net::accept_tcp(&policy, &l) => a,
                _ = stopped(&mut halt) => return,
            };
            let Ok((mut s, _)) = accepted else { continue };
            stats.opened();
            let (stats, mut stop) = (stats.clone(), stop.clone());
            tokio::spawn(async move {
                let mut theirs = [0u8; Handshake::LEN];
                if s.read_exact(&mut theirs).await.is_err() {
                    stats.closed();
                    return;
                }
                let mut out = BytesMut::new();
                Handshake::new(t.info_hash, *b"-XX0000-pusher000000").encode(&mut out);
                let block = Bytes::from(vec![0x55u8; BLOCK as usize]);
                let blocks = t.piece_len.div_ceil(BLOCK).max(2);
                let mut k = 1;
                loop {
                    for _ in 0..16 {
                        wire::encode(
                            &Message::Piece {
                                index: 1 % t.pieces.max(1),
                                begin: k * BLOCK,
                                data: block.clone(),
                            },
                            &mut out,
                        );
                        k = if k + 1 >= blocks { 1 } else { k + 1 };
                    }
                    tokio::select! {
                        ok = write(&mut s, &out, &stats) => if !ok { stats.closed(); return },
                        _ = stopped(&mut stop) => return,
                    }
                    out.clear();
                }
            });
        }
    });
    Ok(addr)
}

fn ed2k_packet(m: &ClientMessage) -> BytesMut {
    let mut b = BytesMut::new();
    m.encode(&mut b);
    b
}

/// Flood 3 (eD2k): PUBLICIP_REQ before any hello, as fast as weir takes
/// them; a new connection each time weir closes one.
pub async fn ed2k_before_hello(addr: SocketAddr, stats: Arc<FloodStats>, mut stop: Stop) {
    let one = ed2k_packet(&ClientMessage::PublicIpReq);
    let mut burst = BytesMut::new();
    for _ in 0..10_000 {
        burst.extend_from_slice(&one);
    }
    while !*stop.borrow() {
        let Ok(s) = connect(addr, false).await else {
            stats.closed();
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        stats.opened();
        let (rd, mut wr) = s.into_split();
        let reader = tokio::spawn(drain(rd));
        loop {
            tokio::select! {
                ok = write(&mut wr, &burst, &stats) => if !ok { stats.closed(); break },
                _ = stopped(&mut stop) => break,
            }
        }
        reader.abort();
    }
}

/// Flood 4 (eD2k server): a client that logs in, then asks for the
/// sources of `file` over and over and never reads an answer.
pub async fn ed2k_server_sources(
    server: SocketAddr,
    file: Md4Hash,
    size: u64,
    stats: Arc<FloodStats>,
    mut stop: Stop,
) {
    let mut one = BytesMut::new();
    ClientToServer::GetSources {
        file,
        size: Some(size),
        obfu: false,
    }
    .encode(&mut one);
    let mut burst = BytesMut::new();
    for _ in 0..4096 {
        burst.extend_from_slice(&one);
    }
    let mut n = 0u8;
    while !*stop.borrow() {
        let Ok(mut s) = connect(server, true).await else {
            stats.closed();
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        stats.opened();
        n = n.wrapping_add(1);
        let mut login = BytesMut::new();
        ClientToServer::Login {
            user_hash: Md4Hash([0xa0 ^ n; 16]),
            client_id: 0,
            port: 4662,
            tags: Vec::new(),
        }
        .encode(&mut login);
        if !write(&mut s, &login, &stats).await {
            stats.closed();
            continue;
        }
        loop {
            tokio::select! {
                ok = write(&mut s, &burst, &stats) => if !ok { stats.closed(); break },
                _ = stopped(&mut stop) => return,
            }
        }
    }
}

/// Reads BitTorrent messages until an Unchoke (`true`) or the end.
async fn until_unchoke(s: &mut TcpStream, t: &TorrentShape) -> bool {
    let limits = wire::Limits::new(t.pieces);
    let mut buf = BytesMut::with_capacity(64 << 10);
    loop {
        loop {
            match wire::decode(&mut buf, &limits) {
                Ok(Some(Message::Unchoke)) => return true,
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return false,
            }
        }
        match tokio::time::timeout(Duration::from_secs(10), s.read_buf(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return false,
        }
    }
}

/// Flood 5 (BitTorrent): a peer that asks for everything once unchoked and
/// never reads the answers (a 64 KiB receive buffer).
pub async fn bt_never_reads(
    addr: SocketAddr,
    t: TorrentShape,
    stats: Arc<FloodStats>,
    mut stop: Stop,
) {
    let mut n = 0u64;
    while !*stop.borrow() {
        let id = stats.conns.load(Ordering::Relaxed) + 1000;
        let Some(mut s) = bt_handshake(addr, &t, id, true).await else {
            stats.closed();
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        stats.opened();
        let mut out = BytesMut::new();
        wire::encode(&Message::Interested, &mut out);
        if !write(&mut s, &out, &stats).await {
            stats.closed();
            continue;
        }
        let unchoked = tokio::select! {
            u = until_unchoke(&mut s, &t) => u,
            _ = stopped(&mut stop) => return,
        };
        if !unchoked {
            stats.closed();
            continue;
        }
        loop {
            out.clear();
            for _ in 0..256 {
                wire::encode(&request(&t, n), &mut out);
                n += 1;
            }
            tokio::select! {
                ok = write(&mut s, &out, &stats) => if !ok { stats.closed(); break },
                _ = stopped(&mut stop) => return,
            }
        }
    }
}

/// Flood 6: `n` connections at once that never finish a handshake (half
/// of them say nothing, half send 20 bytes of one and stop), each opened
/// again when weir closes it.
pub async fn half_open(addr: SocketAddr, n: usize, stats: Arc<FloodStats>, stop: Stop) {
    let mut tasks = Vec::new();
    for i in 0..n {
        let (stats, mut stop) = (stats.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !*stop.borrow() {
                let Ok(mut s) = connect(addr, false).await else {
                    stats.closed();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                stats.opened();
                if i % 2 == 1 && !write(&mut s, &[19u8; 20], &stats).await {
                    stats.closed();
                    continue;
                }
                let mut buf = [0u8; 512];
                loop {
                    tokio::select! {
                        r = s.read(&mut buf) => match r {
                            Ok(0) | Err(_) => { stats.closed(); break }
                            Ok(_) => {}
                        },
                        _ = stopped(&mut stop) => return,
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// A uTP header (BEP 29): type, connection id, sequence and ack numbers;
/// timestamps zero, a 1 MiB window.
fn utp_header(kind: u8, conn_id: u16, seq: u16, ack: u16) -> [u8; 20] {
    let mut h = [0u8; 20];
    h[0] = (kind << 4) | 1;
    h[2..4].copy_from_slice(&conn_id.to_be_bytes());
    h[12..16].copy_from_slice(&(1u32 << 20).to_be_bytes());
    h[16..18].copy_from_slice(&seq.to_be_bytes());
    h[18..20].copy_from_slice(&ack.to_be_bytes());
    h
}

/// Flood 10: `n` uTP connections, each from its own UDP port, sending
/// data after a gap that never fills (sequence 2 never comes): every
/// packet waits in weir's reorder buffer, up to the connection's window
/// (4 MiB) each unless something bounds them together. Each sends
/// `per_conn` bytes in 1,380-byte packets, then holds, acknowledging
/// nothing, until stopped.
pub async fn utp_reorder(
    addr: SocketAddr,
    n: usize,
    per_conn: usize,
    stats: Arc<FloodStats>,
    stop: Stop,
) {
    const PAYLOAD: usize = 1380;
    let body = vec![0xA5u8; PAYLOAD];
    let mut tasks = Vec::new();
    for i in 0..n {
        let (stats, mut stop, body) = (stats.clone(), stop.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let local = SocketAddr::from(([127, 0, 0, 1], 0));
            let Ok(sock) = weir_runtime::net::PolicedUdp::bind(&policy(), local).await else {
                stats.closed();
                return;
            };
            let id = (i as u16).wrapping_mul(2);
            let syn = utp_header(4, id, 1, 0);
            let mut buf = [0u8; 2048];
            // The SYN, again each second until answered with a STATE.
            let their = loop {
                if sock.send_to(&syn, addr).await.is_err() {
                    stats.closed();
                    return;
                }
                tokio::select! {
                    r = tokio::time::timeout(Duration::from_secs(1), sock.recv_from(&mut buf)) => {
                        if let Ok(Ok((k, _))) = r && k >= 20 && buf[0] >> 4 == 2 {
                            break u16::from_be_bytes([buf[16], buf[17]]);
                        }
                    }
                    _ = stopped(&mut stop) => return,
                }
            };
            stats.opened();
            let mut packet = Vec::with_capacity(20 + PAYLOAD);
            for k in 0..per_conn.div_ceil(PAYLOAD) {
                packet.clear();
                let seq = 3u16.wrapping_add(k as u16);
                packet.extend_from_slice(&utp_header(
                    0,
                    id.wrapping_add(1),
                    seq,
                    their.wrapping_sub(1),
                ));
                packet.extend_from_slice(&body);
                if sock.send_to(&packet, addr).await.is_err() {
                    break;
                }
                stats.add_sent(packet.len());
                // Now and then a pause, so the kernel's buffers do not drop
                // what weir has not read yet.
                if k % 64 == 63 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            stopped(&mut stop).await;
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Flood 9: `n` BitTorrent peers at once, each shaking hands, asking for
/// 256 blocks while choked and then holding the connection without
/// reading (64 KiB receive buffers). Held until `stop`; not reopened.
pub async fn many_peers(
    addr: SocketAddr,
    t: TorrentShape,
    n: usize,
    stats: Arc<FloodStats>,
    stop: Stop,
) {
    let mut tasks = Vec::new();
    for i in 0..n {
        let (stats, mut stop) = (stats.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let Some(mut s) = bt_handshake(addr, &t, 10_000 + i as u64, true).await else {
                stats.closed();
                return;
            };
            stats.opened();
            let mut out = BytesMut::new();
            wire::encode(&Message::Interested, &mut out);
            for k in 0..256 {
                wire::encode(&request(&t, (i * 256 + k) as u64), &mut out);
            }
            if !write(&mut s, &out, &stats).await {
                stats.closed();
                return;
            }
            // Hold it, reading nothing, until told to stop.
            stopped(&mut stop).await;
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Flood 8 (against an eD2k client): a fake eD2k server that gives the
/// client a high id and, once `go` is set, asks it in bursts of 500 for up
/// to `callbacks` callbacks to `holders` (listeners that accept and hold).
/// Its address is returned; it serves until `stop`.
pub async fn ed2k_callback_server(
    holders: Vec<SocketAddrV4>,
    callbacks: u64,
    stats: Arc<FloodStats>,
    stop: Stop,
    go: Stop,
) -> anyhow::Result<SocketAddr> {
    let l = weir_runtime::net::listen_tcp("127.0.0.1:0".parse()?).await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        let mut halt = stop.clone();
        let policy = policy();
        loop {
            let accepted = tokio::select! {
                a = weir_runtime::net::accept_tcp(&policy, &l) => a,
                _ = stopped(&mut halt) => return,
            };
            let Ok((mut s, _)) = accepted else { continue };
            let (stats, holders, mut stop, mut go) =
                (stats.clone(), holders.clone(), stop.clone(), go.clone());
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                if !matches!(s.read(&mut buf).await, Ok(n) if n > 0) {
                    return;
                }
                let (rd, mut wr) = s.into_split();
                let reader = tokio::spawn(drain(rd));
                let mut out = BytesMut::new();
                ServerToClient::IdChange {
                    id: 0x0100_007f,
                    flags: 0,
                }
                .encode(&mut out);
                if !write(&mut wr, &out, &stats).await {
                    return;
                }
                out.clear();
                tokio::select! {
                    _ = stopped(&mut go) => {}
                    _ = stopped(&mut stop) => return,
                }
                let mut i = 0usize;
                while stats.events.load(Ordering::Relaxed) < callbacks {
                    for _ in 0..500 {
                        let a = holders[i % holders.len()];
                        i += 1;
                        ServerToClient::CallbackRequested {
                            ip: *a.ip(),
                            port: a.port(),
                        }
                        .encode(&mut out);
                    }
                    stats.events.fetch_add(500, Ordering::Relaxed);
                    tokio::select! {
                        ok = write(&mut wr, &out, &stats) => if !ok { break },
                        _ = stopped(&mut stop) => break,
                    }
                    out.clear();
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                        _ = stopped(&mut stop) => break,
                    }
                }
                stopped(&mut stop).await;
                reader.abort();
            });
        }
    });
    Ok(addr)
}

/// Listeners on 127.0.0.1 that accept every connection and hold it
/// without a word until `stop` (what callback dials reach); each accepted
/// connection counts in `stats.conns`.
pub async fn holders(
    n: usize,
    stats: Arc<FloodStats>,
    stop: Stop,
) -> anyhow::Result<Vec<SocketAddrV4>> {
    let mut addrs = Vec::new();
    for _ in 0..n {
        let l = weir_runtime::net::listen_tcp("127.0.0.1:0".parse()?).await?;
        let SocketAddr::V4(a) = l.local_addr()? else {
            anyhow::bail!("not IPv4");
        };
        addrs.push(a);
        let (stats, mut stop) = (stats.clone(), stop.clone());
        tokio::spawn(async move {
            let mut held = Vec::new();
            let policy = policy();
            loop {
                tokio::select! {
                    a = weir_runtime::net::accept_tcp(&policy, &l) => if let Ok((s, _)) = a {
                        stats.opened();
                        held.push(s);
                    },
                    _ = stopped(&mut stop) => return,
                }
            }
        });
    }
    Ok(addrs)
}
