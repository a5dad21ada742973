//! Fetching a magnet link's metadata (BEP 9, `ut_metadata`) from peers
//! over tokio: the sans-IO [`MetadataFetcher`] decides what to ask whom and
//! verifies the info dictionary against the info-hash; this module only
//! dials, shakes hands and moves its frames.
//!
//! Peers come from the link (`x.pe`), from `--peer`, from one announce
//! to each of the link's trackers (`tr`) and, with [`fetch_with`], from
//! a stream of later peers (the engine's DHT lookups,
//! `EngineHandle::dht_peers`), all under the network policy.
//! Several peers are asked at once; a peer whose pieces do not hash is
//! dropped (the fetcher says so) and counted. The result is a `.torrent`
//! (the verified dictionary plus the link's trackers) that the caller adds
//! to the engine like any other.

use std::collections::{HashMap, HashSet, VecDeque};

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;
use weir_bt::magnet::{Magnet, PeerAddr};
use weir_bt::metadata::{
    self, FetchEvent, FetchedMetadata, FetcherConfig, MetadataFetcher, MetadataLimits, MetadataMsg,
};
use weir_bt::tracker::AnnounceRequest;
use weir_bt::wire::{self, ExtHandshake, Handshake, Limits, Message, UT_METADATA};
use weir_core::policy::NetPolicy;
use weir_ed2k::link::FileLink;

/// How to fetch.
#[derive(Clone, Debug)]
pub struct FetchOptions {
    /// Where sockets may go.
    pub policy: NetPolicy,
    /// Peers to ask besides the link's own.
    pub peers: Vec<SocketAddr>,
    /// Our peer id.
    pub peer_id: [u8; 20],
    /// The port we listen on (announced to trackers).
    pub port: u16,
    /// Dial from this address (`None`: the system's choice).
    pub local_ip: Option<IpAddr>,
    /// Ask the link's trackers for peers.
    pub use_trackers: bool,
    /// Give up after this long.
    pub timeout: Duration,
    /// Most peers dialled at once.
    pub max_dials: usize,
    /// Our DHT node's UDP port, if we run one: the handshake advertises
    /// it (BEP 5) and peers that advertise one get a `port` message, so a
    /// peer we ask for metadata learns our node as a torrent's peer would.
    pub dht_port: Option<u16>,
}

/// Why no metadata came.
#[derive(Debug, thiserror::Error)]
pub enum FetchFailure {
    /// The link has no BitTorrent info-hash.
    #[error("the magnet link has no BitTorrent info-hash (xt=urn:btih:)")]
    NoInfoHash,
    /// Nobody to ask.
    #[error(
        "the magnet link names no peer (x.pe) and no usable tracker (tr), and no --peer was given"
    )]
    NoPeers,
    /// The time ran out.
    #[error("no peer sent the metadata within {secs} s (asked {asked} of {known} peers: {why})")]
    Timeout {
        /// The limit.
        secs: u64,
        /// Peers that completed the handshake.
        asked: usize,
        /// Peers known.
        known: usize,
        /// What the last failures were.
        why: String,
    },
    /// Every peer agrees with the info-hash, but the dictionary is no
    /// usable torrent.
    #[error(transparent)]
    Invalid(#[from] metadata::FetchError),
}

/// The ed2k link an eD2k magnet (`xt=urn:ed2k:` with `xl`, as eMule and
/// aMule write them, no BitTorrent info-hash) stands for: its name (`dn`,
/// or the hash when missing) and size checked as a link's are
/// ([`FileLink::new`]). The error names what is missing or wrong.
pub fn ed2k_link(m: &Magnet) -> Result<FileLink, String> {
    let hash = m
        .ed2k
        .ok_or("no info-hash: neither xt=urn:btih: nor xt=urn:ed2k:; weir cannot fetch it")?;
    let f = m
        .ed2k_file()
        .ok_or("an eD2k magnet (xt=urn:ed2k:) needs the file's size (xl=)")?;
    let hash = weir_ed2k::Md4Hash(hash);
    let name = f.name.unwrap_or_else(|| hash.to_hex());
    FileLink::new(name, f.size, hash).map_err(|e| format!("dn/xl: {e}"))
}

/// Peers remembered (and dialled at most once each) in one fetch.
pub const MAX_KNOWN: usize = 1000;

/// Times one peer is dialled in a fetch, at most (a peer reported again by
/// the DHT after it failed is tried again, as a seeder may not have been
/// ready).
pub const MAX_TRIES: u8 = 4;
/// A failed peer is dialled again no sooner than this.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Most time for a dial, for the handshake, and then for the extension
/// handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection holding one of the `max_dials` slots, from its dial until
/// it is released.
struct Dial {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
    /// The fetcher took it (its extension handshake offers the metadata).
    serving: bool,
    /// It has sent a piece we asked for.
    pieces: bool,
    /// Rejects since its last piece.
    rejects: u32,
}

/// What a connection task reports.
enum Report {
    Up { conn: u32, writer: OwnedWriteHalf },
    Msg { conn: u32, msg: Message },
    Down { conn: u32, why: String },
}

/// Fetches the info dictionary `m` names. See the module docs.
pub async fn fetch(m: &Magnet, opts: &FetchOptions) -> Result<FetchedMetadata, FetchFailure> {
    fetch_with(m, opts, None).await
}

/// As [`fetch`], also dialling the peers that arrive on `more` while it
/// runs (DHT results). With `more`, no peer at the start is not an error:
/// the fetch waits for some until its timeout.
pub async fn fetch_with(
    m: &Magnet,
    opts: &FetchOptions,
    mut more: Option<mpsc::Receiver<Vec<SocketAddr>>>,
) -> Result<FetchedMetadata, FetchFailure> {
    let info_hash = m.info_hash.ok_or(FetchFailure::NoInfoHash)?;
    let mut known: Vec<SocketAddr> = opts.peers.clone();
    for p in &m.peers {
        match p {
            PeerAddr::Ip(a) => known.push(*a),
            PeerAddr::Name { host, port } => {
                if let Ok(a) = crate::net::resolve(&opts.policy, host, *port).await {
                    known.extend(a);
                }
            }
        }
    }
    if opts.use_trackers {
        known.extend(tracker_peers(m, info_hash, opts).await);
    }
    // In the order given (`--peer`, `x.pe`, then as the trackers answered),
    // not sorted: a sort would dial the same lowest addresses first in
    // every fetch.
    let mut seen: HashSet<SocketAddr> = HashSet::new();
    let mut queue: VecDeque<SocketAddr> = VecDeque::new();
    for a in known {
        if opts.policy.allows(a.ip()) && seen.len() < MAX_KNOWN && seen.insert(a) {
            queue.push_back(a);
        }
    }
    if queue.is_empty() && more.is_none() {
        return Err(FetchFailure::NoPeers);
    }
    let cfg = FetcherConfig {
        trackers: m.trackers.clone(),
        ..FetcherConfig::default()
    };
    let max_failures = cfg.max_failures.max(1);
    let mut fetcher = MetadataFetcher::new(info_hash, cfg);
    let (tx, mut rx) = mpsc::channel::<Report>(64);
    let mut writers: HashMap<u32, OwnedWriteHalf> = HashMap::new();
    // The connections holding a slot: at most `max_dials`.
    let mut dials: HashMap<u32, Dial> = HashMap::new();
    let mut next_conn = 0u32;
    let mut asked = 0usize;
    let mut last_why = String::from("none answered");
    let deadline = tokio::time::Instant::now() + opts.timeout;
    let limits = MetadataLimits::default();
    // The failed addresses: tries and when.
    let mut failed: HashMap<SocketAddr, (u8, Instant)> = HashMap::new();
    let mut dial_more = |dials: &mut HashMap<u32, Dial>, queue: &mut VecDeque<SocketAddr>| {
        while dials.len() < opts.max_dials.max(1) {
            let Some(addr) = queue.pop_front() else {
                break;
            };
            next_conn += 1;
            let task = tokio::spawn(peer(next_conn, addr, info_hash, opts.clone(), tx.clone()));
            dials.insert(
                next_conn,
                Dial {
                    addr,
                    task,
                    serving: false,
                    pieces: false,
                    rejects: 0,
                },
            );
        }
    };
    // Ends a connection that still holds a slot (once: a later report
    // from it finds none): its task stops and drops the read half, its
    // write half closes, so the socket closes; the fetcher forgets it and
    // its address counts as failed.
    macro_rules! release {
        ($conn:expr, $why:expr) => {{
            let conn: u32 = $conn;
            if let Some(d) = dials.remove(&conn) {
                d.task.abort();
                // Cancelled at once (it never blocks in a cancel), so the
                // socket is closed before the next dial.
                let _ = d.task.await;
                writers.remove(&conn);
                let now = Instant::now();
                fetcher.remove_peer(conn, now);
                failed.entry(d.addr).or_insert((0, now)).1 = now;
                last_why = $why;
                tracing::debug!("metadata: peer {conn} ({}): {last_why}", d.addr);
            }
        }};
    }
    dial_more(&mut dials, &mut queue);
    let result = loop {
        let tick = fetcher
            .poll_timeout()
            .map(tokio::time::Instant::from_std)
            .unwrap_or(deadline)
            .min(deadline);
        tokio::select! {
            r = rx.recv() => {
                let now = Instant::now();
                match r {
                    // Sent before its connection was released.
                    Some(Report::Up { conn, .. } | Report::Msg { conn, .. })
                        if !dials.contains_key(&conn) => {}
                    Some(Report::Up { conn, writer }) => {
                        asked += 1;
                        writers.insert(conn, writer);
                    }
                    Some(Report::Msg { conn, msg: Message::Extended { id: 0, payload } }) => {
                        // A later handshake of a peer taking part changes
                        // nothing.
                        if let Some(d) = dials.get_mut(&conn)
                            && !d.serving
                        {
                            match ExtHandshake::decode(&payload) {
                                Ok(ext) if fetcher.add_peer(conn, &ext, now) => d.serving = true,
                                Ok(_) => release!(conn, "a peer offers no metadata".into()),
                                Err(e) => release!(conn, format!("bad extension handshake: {e}")),
                            }
                        }
                    }
                    Some(Report::Msg { conn, msg: Message::Extended { id, payload } })
                        if id == metadata::LOCAL_ID =>
                    {
                        match MetadataMsg::decode(&payload, &limits) {
                            Ok(msg) => {
                                let data = matches!(msg, MetadataMsg::Data { .. });
                                let before = fetcher.stats();
                                fetcher.handle_message(conn, msg, now);
                                let after = fetcher.stats();
                                if let Some(d) = dials.get_mut(&conn) {
                                    if after.rejects > before.rejects {
                                        d.rejects += 1;
                                    } else if data
                                        && d.serving
                                        && after.unsolicited == before.unsolicited
                                    {
                                        d.pieces = true;
                                        d.rejects = 0;
                                    }
                                    // It has none to send, or the fetcher
                                    // asks it nothing more.
                                    if d.rejects > 0 && (!d.pieces || d.rejects >= max_failures) {
                                        release!(conn, "a peer rejects requests for metadata".into());
                                    }
                                }
                            }
                            Err(e) => release!(conn, format!("bad ut_metadata message: {e}")),
                        }
                    }
                    Some(Report::Msg { .. }) => {}
                    Some(Report::Down { conn, why }) => release!(conn, why),
                    None => {}
                }
            }
            Some(found) = next_peers(&mut more) => {
                tracing::debug!("metadata: {} more peers: {found:?}", found.len());
                let now = Instant::now();
                for a in found {
                    if !opts.policy.allows(a.ip()) {
                        continue;
                    }
                    if seen.len() < MAX_KNOWN && seen.insert(a) {
                        queue.push_back(a);
                    } else if let Some((tries, at)) = failed.get_mut(&a)
                        && *tries + 1 < MAX_TRIES
                        && now.saturating_duration_since(*at) >= RETRY_AFTER
                    {
                        // Tried and failed: once more, later.
                        *tries += 1;
                        *at = now + opts.timeout;
                        queue.push_back(a);
                    }
                }
            }
            _ = tokio::time::sleep_until(tick) => {
                if tokio::time::Instant::now() >= deadline {
                    break Err(FetchFailure::Timeout {
                        secs: opts.timeout.as_secs(),
                        asked,
                        known: seen.len(),
                        why: last_why.clone(),
                    });
                }
                fetcher.handle_timeout(Instant::now());
            }
        }
        while let Some((conn, frame)) = fetcher.poll_send() {
            let Some(w) = writers.get_mut(&conn) else {
                continue;
            };
            if let Err(e) = w.write_all(&frame).await {
                release!(conn, format!("write: {e}"));
            }
        }
        while let Some(ev) = fetcher.poll_event() {
            if let FetchEvent::Drop { peer, reason } = ev {
                tracing::info!("metadata: dropping peer {peer}: {reason}");
                release!(peer, reason.to_string());
            }
        }
        if let Some(r) = fetcher.take_result() {
            break r.map_err(FetchFailure::from);
        }
        dial_more(&mut dials, &mut queue);
    };
    for d in dials.values() {
        d.task.abort();
    }
    if let Ok(f) = &result {
        let st = fetcher.stats();
        tracing::info!(
            "metadata: {} bytes from {asked} peer(s) ({} hash failures)",
            f.info_bytes.len(),
            st.hash_failures
        );
    }
    result
}

/// The next peers from `more` (never, without one or once it ended).
async fn next_peers(more: &mut Option<mpsc::Receiver<Vec<SocketAddr>>>) -> Option<Vec<SocketAddr>> {
    match more {
        Some(rx) => match rx.recv().await {
            Some(v) => Some(v),
            None => {
                *more = None;
                std::future::pending().await
            }
        },
        None => std::future::pending().await,
    }
}

/// One announce to each of the link's trackers, for peers.
async fn tracker_peers(m: &Magnet, info_hash: [u8; 20], opts: &FetchOptions) -> Vec<SocketAddr> {
    let req = AnnounceRequest {
        info_hash,
        peer_id: opts.peer_id,
        port: opts.port,
        uploaded: 0,
        downloaded: 0,
        left: m.length.unwrap_or(1),
        event: Some(weir_bt::tracker::Event::Started),
        numwant: Some(50),
        key: None,
        compact: true,
    };
    let topts = crate::tracker::Options {
        local_ip: opts.local_ip.filter(|ip| !ip.is_unspecified()),
        ..Default::default()
    };
    let mut out = Vec::new();
    for url in &m.trackers {
        match crate::tracker::announce_with(&opts.policy, url, &req, &topts).await {
            Ok(r) => out.extend(r.peers.into_iter().take(200)),
            Err(e) => tracing::info!("tracker {url}: {e}"),
        }
    }
    out
}

/// Dials `addr`, shakes hands (extension protocol on, `ut_metadata`
/// offered), and forwards its messages until it closes.
async fn peer(
    conn: u32,
    addr: SocketAddr,
    info_hash: [u8; 20],
    opts: FetchOptions,
    tx: mpsc::Sender<Report>,
) {
    let why = match talk(conn, addr, info_hash, &opts, &tx).await {
        Ok(()) => "closed".to_string(),
        Err(e) => format!("{addr}: {e}"),
    };
    let _ = tx.send(Report::Down { conn, why }).await;
}

async fn talk(
    conn: u32,
    addr: SocketAddr,
    info_hash: [u8; 20],
    opts: &FetchOptions,
    tx: &mpsc::Sender<Report>,
) -> std::io::Result<()> {
    let dial = crate::net::connect_tcp_from(&opts.policy, opts.local_ip, addr);
    let s = tokio::time::timeout(HANDSHAKE_TIMEOUT, dial)
        .await
        .map_err(|_| std::io::Error::other("connect timed out"))??;
    let _ = s.set_nodelay(true);
    let (mut rd, mut wr) = s.into_split();
    let mut out = BytesMut::new();
    let ours = Handshake::new(info_hash, opts.peer_id);
    match opts.dht_port {
        Some(_) => ours.with_dht(),
        None => ours,
    }
    .encode(&mut out);
    let mut ext = ExtHandshake {
        v: Some(concat!("weir ", env!("CARGO_PKG_VERSION")).into()),
        ..Default::default()
    };
    ext.m.insert(UT_METADATA.into(), metadata::LOCAL_ID);
    wire::encode(
        &Message::Extended {
            id: 0,
            payload: Bytes::from(ext.encode()),
        },
        &mut out,
    );
    wr.write_all(&out).await?;
    let mut buf = BytesMut::with_capacity(64 << 10);
    let bad = |m: &str| std::io::Error::other(m.to_string());
    let theirs = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        while buf.len() < Handshake::LEN {
            if rd.read_buf(&mut buf).await? == 0 {
                return Err(bad("closed during the handshake"));
            }
        }
        Handshake::decode(&buf.split_to(Handshake::LEN))
            .map_err(|e| bad(&e.to_string()))?
            .ok_or_else(|| bad("short handshake"))
    })
    .await
    .map_err(|_| bad("handshake timed out"))??;
    if theirs.info_hash != info_hash {
        return Err(bad("answered for another torrent"));
    }
    if !theirs.supports_extended() {
        return Err(bad("no extension protocol (BEP 10): cannot send metadata"));
    }
    if let Some(port) = opts.dht_port.filter(|_| theirs.supports_dht()) {
        out.clear();
        wire::encode(&Message::Port(port), &mut out);
        wr.write_all(&out).await?;
    }
    if tx.send(Report::Up { conn, writer: wr }).await.is_err() {
        return Ok(());
    }
    let limits = Limits::new(0);
    // A peer that never says whether it has the metadata (no extension
    // handshake) must not keep its slot.
    let ext_by = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
    let mut ext_seen = false;
    loop {
        loop {
            match wire::decode(&mut buf, &limits) {
                Ok(Some(msg)) => {
                    ext_seen |= matches!(msg, Message::Extended { id: 0, .. });
                    if tx.send(Report::Msg { conn, msg }).await.is_err() {
                        return Ok(());
                    }
                }
                Ok(None) => break,
                Err(e) => return Err(bad(&e.to_string())),
            }
        }
        let read = rd.read_buf(&mut buf);
        let n = if ext_seen {
            read.await?
        } else {
            tokio::time::timeout_at(ext_by, read)
                .await
                .map_err(|_| bad("no extension handshake"))??
        };
        if n == 0 {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::{TcpListener, TcpStream};

    const ED2K: &str = "D3B6B09D73D3FE0DD41DDE5ED244215A";

    fn link(uri: &str) -> Result<weir_ed2k::link::FileLink, String> {
        ed2k_link(&weir_bt::magnet::Magnet::parse(uri).expect("a valid magnet"))
    }

    #[test]
    fn an_ed2k_magnet_is_its_ed2k_link() {
        let l = link(&format!(
            "magnet:?xt=urn:ed2k:{ED2K}&xl=5&dn=my%20file%7C.bin"
        ))
        .unwrap();
        assert_eq!((l.name.as_str(), l.size), ("my file|.bin", 5));
        assert_eq!(l.hash.to_hex().to_ascii_uppercase(), ED2K);
        // No dn: the hash names it.
        let l = link(&format!("magnet:?xt=urn:ed2k:{ED2K}&xl=9")).unwrap();
        assert_eq!(l.name.to_ascii_uppercase(), ED2K);
    }

    #[test]
    fn an_ed2k_magnet_without_a_size_or_with_an_unsafe_name_is_refused_naming_it() {
        let e = link(&format!("magnet:?xt=urn:ed2k:{ED2K}")).unwrap_err();
        assert!(e.contains("xl="), "{e}");
        for dn in ["a%2Fb", "..", "a%5Cb"] {
            let e = link(&format!("magnet:?xt=urn:ed2k:{ED2K}&xl=5&dn={dn}")).unwrap_err();
            assert!(e.contains("unsafe file name"), "{dn}: {e}");
        }
    }

    const IH: [u8; 20] = [0x5a; 20];

    /// A peer's side of the hello: `h`, then an extension handshake with
    /// ut_metadata on id 3 and `metadata_size` `size`.
    fn hello(h: Handshake, size: Option<u64>) -> BytesMut {
        let mut out = BytesMut::new();
        h.encode(&mut out);
        let mut ext = ExtHandshake {
            metadata_size: size,
            ..Default::default()
        };
        ext.m.insert(UT_METADATA.into(), 3);
        wire::encode(
            &Message::Extended {
                id: 0,
                payload: Bytes::from(ext.encode()),
            },
            &mut out,
        );
        out
    }

    /// A peer that says it has a 1 MiB info dictionary and records what
    /// the fetcher sends until its first metadata request: whether our
    /// handshake had the DHT bit and the `port` messages before the request.
    async fn peer_that_records(l: TcpListener, their_dht: bool) -> (bool, Vec<u16>) {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = BytesMut::new();
        while buf.len() < Handshake::LEN {
            assert!(s.read_buf(&mut buf).await.unwrap() > 0, "closed early");
        }
        let ours = Handshake::decode(&buf.split_to(Handshake::LEN))
            .unwrap()
            .unwrap();
        let h = Handshake::new(IH, [0x33; 20]);
        let out = hello(if their_dht { h.with_dht() } else { h }, Some(1 << 20));
        s.write_all(&out).await.unwrap();
        let (limits, mut ports) = (Limits::new(0), Vec::new());
        loop {
            while let Some(m) = wire::decode(&mut buf, &limits).unwrap() {
                match m {
                    Message::Port(p) => ports.push(p),
                    // A metadata request (to our ut_metadata id).
                    Message::Extended { id: 3, .. } => return (ours.supports_dht(), ports),
                    _ => {}
                }
            }
            assert!(s.read_buf(&mut buf).await.unwrap() > 0, "closed early");
        }
    }

    async fn fetch_from(their_dht: bool, dht_port: Option<u16>) -> (bool, Vec<u16>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let peer = tokio::spawn(peer_that_records(l, their_dht));
        let m = Magnet::parse(&format!("magnet:?xt=urn:btih:{}", "5a".repeat(20))).unwrap();
        let opts = FetchOptions {
            policy: NetPolicy::loopback(),
            peers: vec![addr],
            peer_id: [0x44; 20],
            port: 0,
            local_ip: None,
            use_trackers: false,
            timeout: Duration::from_secs(20),
            max_dials: 1,
            dht_port,
        };
        let fetch = tokio::spawn(async move { fetch(&m, &opts).await });
        let seen = tokio::time::timeout(Duration::from_secs(20), peer)
            .await
            .expect("the fetcher asked for metadata in time")
            .unwrap();
        fetch.abort();
        seen
    }

    #[tokio::test]
    async fn a_fetch_with_a_dht_node_advertises_it_and_sends_its_port() {
        assert_eq!(fetch_from(true, Some(4321)).await, (true, vec![4321]));
    }

    #[tokio::test]
    async fn no_port_goes_to_a_peer_without_a_dht_or_from_a_fetch_without_one() {
        assert_eq!(fetch_from(false, Some(4321)).await, (true, vec![]));
        assert_eq!(fetch_from(true, None).await, (false, vec![]));
    }

    /// How a peer that cannot serve the metadata behaves; each keeps its
    /// socket open until the fetcher closes it, and then still.
    #[derive(Clone, Copy, Debug)]
    enum Useless {
        /// Its extension handshake has ut_metadata but no metadata_size
        /// (another client fetching the same magnet).
        NoSize,
        /// Sends a ut_metadata message that does not decode.
        Garbage,
        /// Sends a piece whose total_size is not its claimed size (the
        /// fetcher drops it).
        WrongSize,
        /// Rejects every request.
        Rejects,
    }

    /// A valid info dictionary and its hash.
    fn small_info() -> (Bytes, [u8; 20]) {
        let mut info = b"d6:lengthi5e4:name5:a.bin12:piece lengthi16384e6:pieces20:".to_vec();
        info.extend_from_slice(&[7; 20]);
        info.push(b'e');
        let ih: [u8; 20] = <sha1::Sha1 as sha1::Digest>::digest(&info).into();
        (Bytes::from(info), ih)
    }

    /// Accepts one connection and shakes hands as a peer of `ih` with
    /// ut_metadata on id 3 and `metadata_size` `size`; returns the socket
    /// and the bytes read past the fetcher's handshake.
    async fn accept_as(l: &TcpListener, ih: [u8; 20], size: Option<u64>) -> (TcpStream, BytesMut) {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = BytesMut::new();
        while buf.len() < Handshake::LEN {
            assert!(s.read_buf(&mut buf).await.unwrap() > 0, "closed early");
        }
        let _ = buf.split_to(Handshake::LEN);
        let out = hello(Handshake::new(ih, [0x33; 20]), size);
        s.write_all(&out).await.unwrap();
        (s, buf)
    }

    /// The ut_metadata requests in `buf` (more read from `s`); `None` once
    /// the fetcher closed the connection.
    async fn next_request(s: &mut TcpStream, buf: &mut BytesMut) -> Option<u32> {
        loop {
            while let Some(m) = wire::decode(buf, &Limits::new(0)).unwrap() {
                if let Message::Extended { id: 3, payload } = m
                    && let Ok(MetadataMsg::Request { piece }) =
                        MetadataMsg::decode(&payload, &MetadataLimits::default())
                {
                    return Some(piece);
                }
            }
            if s.read_buf(buf).await.unwrap_or(0) == 0 {
                return None;
            }
        }
    }

    /// Serves `info` to one connection, once `first` is done.
    async fn seeder(l: TcpListener, info: Bytes, first: tokio::sync::oneshot::Receiver<()>) {
        let _ = first.await;
        let ih: [u8; 20] = small_info().1;
        let (mut s, mut buf) = accept_as(&l, ih, Some(info.len() as u64)).await;
        while let Some(piece) = next_request(&mut s, &mut buf).await {
            let start = piece as usize * metadata::PIECE_LEN;
            let len = metadata::piece_len(info.len() as u64, piece);
            let data = MetadataMsg::Data {
                piece,
                total_size: info.len() as u64,
                data: info.slice(start..start + len),
            };
            s.write_all(&metadata::frame(metadata::LOCAL_ID, &data))
                .await
                .unwrap();
        }
    }

    /// A peer of `ih` that cannot serve it (see [`Useless`]). It never
    /// closes its socket: it is aborted when the test ends. It says on
    /// `closed` when the fetcher has closed the connection: not only its
    /// write half (its reading task ended too, what we write is refused).
    async fn useless_peer(
        l: TcpListener,
        ih: [u8; 20],
        how: Useless,
        closed: tokio::sync::oneshot::Sender<()>,
    ) {
        let size = match how {
            Useless::NoSize => None,
            // Four pieces at least, so the fetcher asks several at once.
            _ => Some(1 << 20),
        };
        let (mut s, mut buf) = accept_as(&l, ih, size).await;
        let reply = |m: &MetadataMsg| metadata::frame(metadata::LOCAL_ID, m);
        match how {
            Useless::NoSize | Useless::Rejects => {}
            Useless::Garbage => {
                let mut out = BytesMut::new();
                wire::encode(
                    &Message::Extended {
                        id: metadata::LOCAL_ID,
                        payload: Bytes::from_static(b"not bencode"),
                    },
                    &mut out,
                );
                s.write_all(&out).await.unwrap();
            }
            Useless::WrongSize => {
                let data = MetadataMsg::Data {
                    piece: 0,
                    total_size: 2 << 20,
                    data: Bytes::from(vec![0; metadata::PIECE_LEN]),
                };
                s.write_all(&reply(&data)).await.unwrap();
            }
        }
        while let Some(piece) = next_request(&mut s, &mut buf).await {
            if let Useless::Rejects = how {
                s.write_all(&reply(&MetadataMsg::Reject { piece }))
                    .await
                    .unwrap();
            }
        }
        // Keep-alives until refused (the fetcher's socket is gone).
        while s.write_all(&[0; 4]).await.is_ok() {
            tokio::task::yield_now().await;
        }
        let _ = closed.send(());
        std::future::pending::<()>().await;
    }

    /// Fetches [`small_info`] with one dial at a time from a useless peer,
    /// dialled first, and a seeder: the useless one must give its slot
    /// up and its connection must close.
    async fn fetch_past(how: Useless) -> Result<FetchedMetadata, FetchFailure> {
        let (info, ih) = small_info();
        let a = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let b = TcpListener::bind("127.0.0.1:0").await.unwrap();
        // The useless peer first, in the list and by port.
        let (useless, good) = if a.local_addr().unwrap() < b.local_addr().unwrap() {
            (a, b)
        } else {
            (b, a)
        };
        let peers = vec![useless.local_addr().unwrap(), good.local_addr().unwrap()];
        // The seeder answers only once the useless peer's connection is
        // closed.
        let (closed, first) = tokio::sync::oneshot::channel();
        let tasks = [
            tokio::spawn(useless_peer(useless, ih, how, closed)),
            tokio::spawn(seeder(good, info, first)),
        ];
        let hex: String = ih.iter().map(|b| format!("{b:02x}")).collect();
        let m = Magnet::parse(&format!("magnet:?xt=urn:btih:{hex}")).unwrap();
        let opts = FetchOptions {
            policy: NetPolicy::loopback(),
            peers,
            peer_id: [0x44; 20],
            port: 0,
            local_ip: None,
            use_trackers: false,
            timeout: Duration::from_secs(5),
            max_dials: 1,
            dht_port: None,
        };
        let r = fetch(&m, &opts).await;
        for t in tasks {
            t.abort();
        }
        r
    }

    #[tokio::test]
    async fn a_peer_without_metadata_size_gives_its_slot_to_the_next() {
        let got = fetch_past(Useless::NoSize).await.unwrap();
        assert_eq!(got.info_bytes, small_info().0);
    }

    #[tokio::test]
    async fn a_peer_the_fetcher_gives_up_gives_its_slot_to_the_next() {
        for how in [Useless::Garbage, Useless::WrongSize, Useless::Rejects] {
            match fetch_past(how).await {
                Ok(got) => assert_eq!(got.info_bytes, small_info().0, "{how:?}"),
                Err(e) => panic!("{how:?}: {e}"),
            }
        }
    }
}
