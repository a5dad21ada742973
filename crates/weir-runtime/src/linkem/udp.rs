//! The link emulator's UDP mode: datagrams from clients of a local port
//! are forwarded to a target, and the target's answers back to each
//! client, through an emulated link in each direction:
//!
//! - a datagram is lost with probability `loss` (seeded, reproducible);
//! - it then enters a bottleneck that sends at `rate` bytes/s, one datagram
//!   after the other, holding at most `queue` bytes waiting to be sent
//!   (tail drop beyond: what a router does, and what LEDBAT and TCP react
//!   to);
//! - it arrives `delay` after leaving the bottleneck (one-way, each
//!   direction).
//!
//! Each client address gets its own upstream socket (so the target sees
//! one peer per client and its answers can be routed back); at most
//! [`MAX_SESSIONS`] clients, the least recently heard from being dropped
//! for a new one. Only datagrams from the target are relayed back. Every
//! socket is under the network policy ([`crate::net::PolicedUdp`]).

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::mpsc;
use weir_core::policy::NetPolicy;

use crate::net::PolicedUdp;

/// Most client addresses served at once.
pub const MAX_SESSIONS: usize = 256;

/// Largest datagram relayed.
const MAX_DATAGRAM: usize = 65_536;

/// How the emulated UDP link behaves (each direction the same).
#[derive(Clone, Debug, PartialEq)]
pub struct UdpLinkConfig {
    /// One-way delay.
    pub delay: Duration,
    /// Bottleneck rate in bytes per second (`None`: unshaped).
    pub rate: Option<u64>,
    /// Bytes the bottleneck queue holds before dropping (at least 1). Without
    /// a rate it bounds the bytes held for the delay instead.
    pub queue: usize,
    /// Probability that a datagram is lost, in `[0, 1]`.
    pub loss: f64,
    /// Seed of the loss draws.
    pub seed: u64,
}

impl Default for UdpLinkConfig {
    fn default() -> Self {
        Self {
            delay: Duration::ZERO,
            rate: None,
            queue: super::DEFAULT_QUEUE,
            loss: 0.0,
            seed: 0,
        }
    }
}

/// Counters of one direction (all connections).
#[derive(Debug, Default)]
pub struct UdpDirStats {
    /// Datagrams received from the sender.
    pub received: AtomicU64,
    /// Datagrams sent on.
    pub forwarded: AtomicU64,
    /// Bytes sent on.
    pub bytes: AtomicU64,
    /// Datagrams lost at random.
    pub lost: AtomicU64,
    /// Datagrams dropped by the full queue.
    pub dropped: AtomicU64,
}

/// Counters of both directions.
#[derive(Debug, Default)]
pub struct UdpStats {
    /// Client to target.
    pub fwd: UdpDirStats,
    /// Target to client.
    pub rev: UdpDirStats,
}

impl UdpDirStats {
    fn get(&self) -> [u64; 5] {
        [
            self.received.load(Ordering::Relaxed),
            self.forwarded.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
            self.lost.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
        ]
    }
}

impl std::fmt::Display for UdpStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (name, d) in [("fwd", &self.fwd), ("rev", &self.rev)] {
            let [r, fw, b, l, dr] = d.get();
            write!(f, "{name}: in {r} out {fw} ({b} B) lost {l} dropped {dr}; ")?;
        }
        Ok(())
    }
}

/// The sending side of one direction: loss, the bottleneck's clock and the
/// bytes it holds. Decides at arrival when each datagram is due.
struct Shaper {
    cfg: UdpLinkConfig,
    rng: fastrand::Rng,
    busy_until: Instant,
    /// Bytes handed to the sender task and not yet sent.
    held: Arc<AtomicU64>,
}

impl Shaper {
    fn new(cfg: &UdpLinkConfig, seed: u64) -> Self {
        Self {
            cfg: cfg.clone(),
            rng: fastrand::Rng::with_seed(seed),
            busy_until: Instant::now(),
            held: Arc::new(AtomicU64::new(0)),
        }
    }

    /// When a datagram of `len` bytes arriving now is due at the far end,
    /// or `None` if it is lost or dropped.
    fn admit(&mut self, len: usize, now: Instant, stats: &UdpDirStats) -> Option<Instant> {
        stats.received.fetch_add(1, Ordering::Relaxed);
        if self.cfg.loss > 0.0 && self.rng.f64() < self.cfg.loss {
            stats.lost.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let queue = self.cfg.queue.max(1) as f64;
        let due = match self.cfg.rate {
            Some(rate) => {
                let rate = rate.max(1) as f64;
                let backlog = self.busy_until.saturating_duration_since(now).as_secs_f64() * rate;
                if backlog + len as f64 > queue {
                    stats.dropped.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
                let start = self.busy_until.max(now);
                self.busy_until = start + Duration::from_secs_f64(len as f64 / rate);
                self.busy_until + self.cfg.delay
            }
            None => {
                if self.held.load(Ordering::Relaxed) as f64 + len as f64 > queue {
                    stats.dropped.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
                now + self.cfg.delay
            }
        };
        self.held.fetch_add(len as u64, Ordering::Relaxed);
        Some(due)
    }
}

/// Sends each datagram from `rx` to `dst` on `sock` when it is due.
async fn sender(
    sock: Arc<PolicedUdp>,
    dst: SocketAddr,
    mut rx: mpsc::UnboundedReceiver<(Instant, Bytes)>,
    held: Arc<AtomicU64>,
    stats: Arc<UdpStats>,
    fwd: bool,
) {
    let d = if fwd { &stats.fwd } else { &stats.rev };
    while let Some((due, data)) = rx.recv().await {
        if due > Instant::now() {
            tokio::time::sleep_until(due.into()).await;
        }
        held.fetch_sub(data.len() as u64, Ordering::Relaxed);
        match sock.send_to(&data, dst).await {
            Ok(_) => {
                d.forwarded.fetch_add(1, Ordering::Relaxed);
                d.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
            }
            Err(e) => tracing::debug!("linkem udp: send to {dst}: {e}"),
        }
    }
}

/// One client: its upstream socket and the two directions' tasks.
struct Session {
    shaper: Shaper,
    tx: mpsc::UnboundedSender<(Instant, Bytes)>,
    last_seen: Instant,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Session {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Socket buffers the emulator asks for (the kernel gives at most
/// `net.core.rmem_max`/`wmem_max`).
const SOCKET_BUFFER: usize = 8 << 20;

/// Asks for large socket buffers: the emulated link drops only by its own
/// queue and loss draw. With the system's default (208 KiB) a sender's
/// burst of a few 64 KiB datagrams (uTP between weir peers on loopback)
/// overflowed the emulator's socket before its queue saw them: 172 of 586
/// datagrams of a 10 s run were lost that way while the queue dropped none.
fn big_buffers(sock: &PolicedUdp) {
    let s = socket2::SockRef::from(sock.as_socket());
    let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = s.set_send_buffer_size(SOCKET_BUFFER);
}

/// Where an upstream socket toward `target` binds: loopback for a loopback
/// target, else the unspecified address of its family.
fn upstream_bind(target: SocketAddr) -> SocketAddr {
    let ip: IpAddr = match target.ip() {
        IpAddr::V4(v) if v.is_loopback() => Ipv4Addr::LOCALHOST.into(),
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(v) if v.is_loopback() => Ipv6Addr::LOCALHOST.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    SocketAddr::new(ip, 0)
}

async fn open_session(
    listen: &Arc<PolicedUdp>,
    client: SocketAddr,
    target: SocketAddr,
    cfg: &UdpLinkConfig,
    policy: &NetPolicy,
    stats: &Arc<UdpStats>,
    n: u64,
) -> io::Result<Session> {
    let up = Arc::new(PolicedUdp::bind(policy, upstream_bind(target)).await?);
    big_buffers(&up);
    let fwd = Shaper::new(cfg, cfg.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let (tx, rx) = mpsc::unbounded_channel();
    let mut tasks = vec![tokio::spawn(sender(
        up.clone(),
        target,
        rx,
        fwd.held.clone(),
        stats.clone(),
        true,
    ))];
    // Reverse: the target's answers, shaped, back to the client.
    let mut rev = Shaper::new(cfg, !cfg.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let (rtx, rrx) = mpsc::unbounded_channel();
    tasks.push(tokio::spawn(sender(
        listen.clone(),
        client,
        rrx,
        rev.held.clone(),
        stats.clone(),
        false,
    )));
    let stats2 = stats.clone();
    tasks.push(tokio::spawn(async move {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        loop {
            let (len, from) = match up.recv_from(&mut buf).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!("linkem udp: upstream receive: {e}");
                    continue;
                }
            };
            if from != target {
                continue;
            }
            if let Some(due) = rev.admit(len, Instant::now(), &stats2.rev)
                && rtx
                    .send((due, Bytes::copy_from_slice(&buf[..len])))
                    .is_err()
            {
                return;
            }
        }
    }));
    tracing::info!("linkem udp: client {client} -> {target}");
    Ok(Session {
        shaper: fwd,
        tx,
        last_seen: Instant::now(),
        tasks,
    })
}

/// Serves the UDP link emulator on `listen` toward `target` forever.
pub async fn serve_udp(
    listen: PolicedUdp,
    target: SocketAddr,
    cfg: UdpLinkConfig,
    policy: NetPolicy,
) -> io::Result<()> {
    serve_udp_with(listen, target, cfg, policy, Arc::new(UdpStats::default())).await
}

/// [`serve_udp`] counting into `stats`.
pub async fn serve_udp_with(
    listen: PolicedUdp,
    target: SocketAddr,
    cfg: UdpLinkConfig,
    policy: NetPolicy,
    stats: Arc<UdpStats>,
) -> io::Result<()> {
    if let Err(e) = policy.check(target) {
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, e));
    }
    big_buffers(&listen);
    let listen = Arc::new(listen);
    let mut sessions: BTreeMap<SocketAddr, Session> = BTreeMap::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut n = 0u64;
    loop {
        let (len, client) = listen.recv_from(&mut buf).await?;
        let now = Instant::now();
        if !sessions.contains_key(&client) {
            if sessions.len() >= MAX_SESSIONS
                && let Some(oldest) = sessions
                    .iter()
                    .min_by_key(|(_, s)| s.last_seen)
                    .map(|(a, _)| *a)
            {
                sessions.remove(&oldest);
            }
            n += 1;
            match open_session(&listen, client, target, &cfg, &policy, &stats, n).await {
                Ok(s) => {
                    sessions.insert(client, s);
                }
                Err(e) => {
                    tracing::warn!("linkem udp: session for {client}: {e}");
                    continue;
                }
            }
        }
        let Some(s) = sessions.get_mut(&client) else {
            continue;
        };
        s.last_seen = now;
        if let Some(due) = s.shaper.admit(len, now, &stats.fwd) {
            let _ = s.tx.send((due, Bytes::copy_from_slice(&buf[..len])));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::UdpSocket;

    fn lo() -> SocketAddr {
        "127.0.0.1:0".parse().unwrap()
    }

    /// Starts linkem in front of `target`; returns its address and counters.
    async fn start(target: SocketAddr, cfg: UdpLinkConfig) -> (SocketAddr, Arc<UdpStats>) {
        let policy = NetPolicy::loopback();
        let l = PolicedUdp::bind(&policy, lo()).await.unwrap();
        let addr = l.local_addr().unwrap();
        let stats = Arc::new(UdpStats::default());
        tokio::spawn(serve_udp_with(l, target, cfg, policy, stats.clone()));
        (addr, stats)
    }

    async fn echo() -> SocketAddr {
        let s = UdpSocket::bind(lo()).await.unwrap();
        let a = s.local_addr().unwrap();
        tokio::spawn(async move {
            let mut b = vec![0u8; MAX_DATAGRAM];
            while let Ok((n, from)) = s.recv_from(&mut b).await {
                let _ = s.send_to(&b[..n], from).await;
            }
        });
        a
    }

    async fn recv_timeout(s: &UdpSocket, buf: &mut [u8], t: Duration) -> Option<usize> {
        tokio::time::timeout(t, s.recv(buf)).await.ok()?.ok()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn delay_is_added_each_way() {
        let target = echo().await;
        let cfg = UdpLinkConfig {
            delay: Duration::from_millis(40),
            ..UdpLinkConfig::default()
        };
        let (addr, stats) = start(target, cfg).await;
        let c = UdpSocket::bind(lo()).await.unwrap();
        c.connect(addr).await.unwrap();
        let mut buf = [0u8; 64];
        for i in 0..5u8 {
            let t = Instant::now();
            c.send(&[i; 10]).await.unwrap();
            let n = recv_timeout(&c, &mut buf, Duration::from_secs(2))
                .await
                .unwrap();
            let rtt = t.elapsed();
            assert_eq!(&buf[..n], &[i; 10]);
            assert!(
                rtt >= Duration::from_millis(80) && rtt < Duration::from_millis(200),
                "rtt {rtt:?}"
            );
        }
        assert_eq!(stats.fwd.forwarded.load(Ordering::Relaxed), 5);
        assert_eq!(stats.rev.forwarded.load(Ordering::Relaxed), 5);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_burst_of_large_datagrams_reaches_the_queue() {
        // One thread: the client sends the whole burst before the relay
        // reads anything, as a sender's paced burst outruns a relay on a
        // busy machine. 40 datagrams of 64,000 bytes (2.56 MB) against a
        // queue that holds them all: only the queue may drop.
        let sink = UdpSocket::bind(lo()).await.unwrap();
        // The receiving end takes the burst too (a weir endpoint asks for
        // 4 MiB).
        socket2::SockRef::from(&sink)
            .set_recv_buffer_size(8 << 20)
            .unwrap();
        let target = sink.local_addr().unwrap();
        let cfg = UdpLinkConfig {
            queue: 8 << 20,
            ..UdpLinkConfig::default()
        };
        let (addr, stats) = start(target, cfg).await;
        // Let the relay bind and make its first session with one datagram.
        let c = UdpSocket::bind(lo()).await.unwrap();
        c.connect(addr).await.unwrap();
        c.send(&[0u8; 8]).await.unwrap();
        let mut b = vec![0u8; MAX_DATAGRAM];
        recv_timeout(&sink, &mut b, Duration::from_secs(2))
            .await
            .expect("the first datagram is relayed");
        let d = vec![7u8; 64_000];
        for _ in 0..40 {
            c.send(&d).await.unwrap();
        }
        let mut got = 0;
        while got < 40
            && recv_timeout(&sink, &mut b, Duration::from_millis(500))
                .await
                .is_some()
        {
            got += 1;
        }
        // With the system's default 208 KiB socket buffer the relay saw 3 of
        // the 40 (4 of the 41 datagrams).
        assert_eq!(stats.fwd.received.load(Ordering::Relaxed), 41, "{stats}");
        assert_eq!(got, 40, "{stats}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rate_is_enforced_and_the_queue_drops_the_excess() {
        let sink = UdpSocket::bind(lo()).await.unwrap();
        let target = sink.local_addr().unwrap();
        // 2 MB/s with a 200 KB queue: a 1 MB burst keeps ~200 KB.
        let cfg = UdpLinkConfig {
            rate: Some(2_000_000),
            queue: 200_000,
            ..UdpLinkConfig::default()
        };
        let (addr, stats) = start(target, cfg).await;
        let c = UdpSocket::bind(lo()).await.unwrap();
        c.connect(addr).await.unwrap();
        let t0 = Instant::now();
        // The sink reads as the datagrams come (its socket buffer is small).
        let reader = tokio::spawn(async move {
            let mut got = 0u64;
            let mut buf = [0u8; 2000];
            let mut last = t0;
            while recv_timeout(&sink, &mut buf, Duration::from_millis(500))
                .await
                .is_some()
            {
                got += 1;
                last = Instant::now();
            }
            (got, last)
        });
        for i in 0..1000u32 {
            let mut d = [0u8; 1000];
            d[..4].copy_from_slice(&i.to_be_bytes());
            c.send(&d).await.unwrap();
            if i % 20 == 19 {
                // ~20 MB/s offered: ten times the link, but slow enough for
                // the relay's socket buffer.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        let (got, last) = reader.await.unwrap();
        let secs = (last - t0).as_secs_f64();
        let rate = got as f64 * 1000.0 / secs;
        let dropped = stats.fwd.dropped.load(Ordering::Relaxed);
        let seen = stats.fwd.received.load(Ordering::Relaxed);
        assert!(seen >= 900, "the relay saw only {seen} of 1000: {stats}");
        assert_eq!(
            got + dropped,
            seen,
            "every datagram delivered or dropped: {stats}"
        );
        assert!(
            (200..=700).contains(&got),
            "{got} delivered from a 200 KB queue: {stats}"
        );
        assert!(
            rate > 1.6e6 && rate < 2.4e6,
            "{rate:.0} B/s through a 2 MB/s link"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn loss_is_random_and_reproducible() {
        let sink = UdpSocket::bind(lo()).await.unwrap();
        let target = sink.local_addr().unwrap();
        let cfg = UdpLinkConfig {
            loss: 0.3,
            seed: 9,
            ..UdpLinkConfig::default()
        };
        let (addr, stats) = start(target, cfg).await;
        let c = UdpSocket::bind(lo()).await.unwrap();
        c.connect(addr).await.unwrap();
        let mut buf = [0u8; 100];
        let mut got = 0u64;
        for i in 0..2000u32 {
            c.send(&i.to_be_bytes()).await.unwrap();
            if i % 50 == 49 {
                // Let the relay keep up (nothing must be lost but by the draw).
                while recv_timeout(&sink, &mut buf, Duration::from_millis(30))
                    .await
                    .is_some()
                {
                    got += 1;
                }
            }
        }
        while recv_timeout(&sink, &mut buf, Duration::from_millis(200))
            .await
            .is_some()
        {
            got += 1;
        }
        let lost = stats.fwd.lost.load(Ordering::Relaxed);
        assert_eq!(stats.fwd.received.load(Ordering::Relaxed), 2000);
        assert_eq!(got + lost, 2000, "{stats}");
        assert!(
            (500..=700).contains(&lost),
            "{lost} of 2000 lost at p = 0.3"
        );
        // Same seed, same draws.
        let mut a = Shaper::new(
            &UdpLinkConfig {
                loss: 0.3,
                seed: 9,
                ..UdpLinkConfig::default()
            },
            5,
        );
        let mut b = Shaper::new(
            &UdpLinkConfig {
                loss: 0.3,
                seed: 9,
                ..UdpLinkConfig::default()
            },
            5,
        );
        let st = UdpDirStats::default();
        let now = Instant::now();
        let da: Vec<bool> = (0..100).map(|_| a.admit(10, now, &st).is_some()).collect();
        let db: Vec<bool> = (0..100).map(|_| b.admit(10, now, &st).is_some()).collect();
        assert_eq!(da, db);
        assert!(da.iter().any(|x| !x) && da.iter().any(|x| *x));
    }

    #[tokio::test]
    async fn target_outside_the_policy_is_refused() {
        let policy = NetPolicy::loopback();
        let l = PolicedUdp::bind(&policy, lo()).await.unwrap();
        let e = serve_udp(
            l,
            "192.0.2.1:9".parse().unwrap(),
            UdpLinkConfig::default(),
            policy,
        )
        .await
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    }
}
