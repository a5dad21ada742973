//! The engine's one UDP socket, bound beside the BitTorrent listener (the
//! same port by default), shared by every UDP protocol of the session.
//!
//! ```text
//! socket --readable--> receive task: recvmmsg batches (crate::udp_batch)
//!     until BATCH KRPC datagrams or none is left, classify() each:  Krpc  --batch (bounded queue)--> driver --> DHT
//!                       Utp   --> the uTP endpoint (crate::utp), if the engine runs uTP,
//!                                 a read's worth under one lock
//!                       Other --> counted and dropped (UDP tracker answers later)
//! driver --send() (policy checked first, bounded queue)--> send task --> socket
//! ```
//!
//! Both directions are bounded: the driver hears at most [`RECV_QUEUE`]
//! batches of [`BATCH`] datagrams of at most [`MAX_DATAGRAM`] bytes (more
//! are dropped and counted, as the kernel would drop them), and at most
//! [`SEND_QUEUE`] datagrams wait to go out. A destination the network
//! policy refuses is counted and never sent; a source it refuses is
//! dropped by [`PolicedUdp`].

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use weir_core::policy::NetPolicy;

use crate::net::PolicedUdp;
use crate::udp_batch::RecvBatch;

/// Largest KRPC datagram kept (KRPC's bound); longer ones are counted as
/// oversized and dropped.
pub const MAX_DATAGRAM: usize = weir_dht::krpc::MAX_PACKET;
/// Largest uTP datagram (loopback paths probe up to 64 KiB).
pub const MAX_UTP_DATAGRAM: usize = weir_utp::MAX_DATAGRAM;
/// Datagrams read per wake-up of the receive task (one batch).
pub const BATCH: usize = 64;
/// Batches waiting for the driver, at most.
pub const RECV_QUEUE: usize = 8;
/// Datagrams waiting to be sent, at most.
pub const SEND_QUEUE: usize = 1024;

/// What a datagram on the shared socket is, by its first and last bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A bencoded dictionary: KRPC, for the DHT ([`weir_dht::is_krpc`]).
    Krpc,
    /// A uTP packet (BEP 29: version 1, type 0 to 4 in the first byte).
    Utp,
    /// Anything else (a UDP tracker answer starts with 0x00; garbage).
    Other,
}

/// Classifies one datagram (see [`Kind`]). KRPC is tested first: its
/// first byte `d` (0x64) is never a uTP header byte.
pub fn classify(data: &[u8]) -> Kind {
    if weir_dht::is_krpc(data) {
        Kind::Krpc
    } else if data.len() >= 20 && data[0] & 0x0f == 1 && data[0] >> 4 <= 4 {
        // A uTP header is 20 bytes.
        Kind::Utp
    } else {
        Kind::Other
    }
}

/// One received datagram for the driver.
#[derive(Debug)]
pub struct Datagram {
    /// Its source (allowed by the policy).
    pub from: SocketAddr,
    /// Its bytes (at most [`MAX_DATAGRAM`]).
    pub data: Vec<u8>,
}

/// Counters of the socket, updated by its tasks and the driver.
#[derive(Debug, Default)]
struct Counters {
    received: AtomicU64,
    krpc: AtomicU64,
    utp: AtomicU64,
    utp_fed: AtomicU64,
    other: AtomicU64,
    oversized: AtomicU64,
    recv_overflow: AtomicU64,
    sent: AtomicU64,
    send_refused: AtomicU64,
    send_overflow: AtomicU64,
    send_errors: AtomicU64,
}

/// The socket's figures (a snapshot of its counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// The address it is bound to.
    pub local: Option<SocketAddr>,
    /// Datagrams read from allowed sources.
    pub received: u64,
    /// Of which KRPC, handed to the DHT.
    pub krpc: u64,
    /// Of which uTP packets handed to the uTP endpoint.
    pub utp: u64,
    /// Of which uTP packets dropped (the engine runs no uTP).
    pub utp_dropped: u64,
    /// Of which neither (dropped).
    pub other_dropped: u64,
    /// Of which longer than [`MAX_DATAGRAM`] (dropped).
    pub oversized: u64,
    /// KRPC datagrams dropped because the driver's queue was full.
    pub recv_overflow: u64,
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams to a destination the policy refuses (never sent).
    pub send_refused: u64,
    /// Datagrams dropped because the send queue was full.
    pub send_overflow: u64,
    /// Sends the system refused.
    pub send_errors: u64,
}

/// The engine's UDP socket: its two tasks and the driver's ends.
#[derive(Debug)]
pub(crate) struct Udp {
    local: SocketAddr,
    policy: NetPolicy,
    rx: mpsc::Receiver<Vec<Datagram>>,
    tx: mpsc::Sender<(SocketAddr, Vec<u8>)>,
    counters: Arc<Counters>,
    tasks: Vec<JoinHandle<()>>,
    utp: Option<crate::utp::Utp>,
}

impl Udp {
    /// Binds `addr` under `policy` and starts the receive and send tasks.
    #[cfg(test)]
    pub(crate) async fn bind(policy: &NetPolicy, addr: SocketAddr) -> io::Result<Udp> {
        Self::bind_with(policy, addr, None).await
    }

    /// As [`Udp::bind`], with a uTP endpoint on the socket when `utp` is
    /// given (its packets go to it, its IO task sends on the socket).
    pub(crate) async fn bind_with(
        policy: &NetPolicy,
        addr: SocketAddr,
        utp: Option<crate::utp::UtpConfig>,
    ) -> io::Result<Udp> {
        let sock = Arc::new(bind_socket(policy, addr).await?);
        let local = sock.local_addr()?;
        let counters = Arc::new(Counters::default());
        let (in_tx, rx) = mpsc::channel(RECV_QUEUE);
        let (tx, out_rx) = mpsc::channel(SEND_QUEUE);
        let mut tasks = Vec::new();
        let utp = utp.map(|cfg| {
            let (u, io) = crate::utp::Utp::start(sock.clone(), policy, cfg);
            tasks.push(io);
            u
        });
        tasks.push(tokio::spawn(receive(
            sock.clone(),
            counters.clone(),
            in_tx,
            utp.clone(),
        )));
        tasks.push(tokio::spawn(send(sock, counters.clone(), out_rx)));
        Ok(Udp {
            local,
            policy: policy.clone(),
            rx,
            tx,
            counters,
            tasks,
            utp,
        })
    }

    /// Binds beside the BitTorrent listener: `listen` if given, else
    /// `bt`'s address and port (any port if that one is taken for UDP:
    /// uTP peers then cannot reach us at the advertised port, which is
    /// logged), else any address.
    pub(crate) async fn bind_beside(
        policy: &NetPolicy,
        listen: Option<SocketAddr>,
        bt: Option<SocketAddr>,
        utp: Option<crate::utp::UtpConfig>,
    ) -> io::Result<Udp> {
        match (listen, bt) {
            (Some(a), _) => Self::bind_with(policy, a, utp).await,
            (None, Some(bt)) => match Self::bind_with(policy, bt, utp.clone()).await {
                Ok(u) => Ok(u),
                Err(e) => {
                    tracing::warn!(
                        "UDP port {bt} is taken ({e}); using another (incoming uTP will not reach us)"
                    );
                    Self::bind_with(policy, SocketAddr::new(bt.ip(), 0), utp).await
                }
            },
            (None, None) => {
                Self::bind_with(policy, "0.0.0.0:0".parse().expect("literal"), utp).await
            }
        }
    }

    /// The uTP endpoint on this socket, if any.
    pub(crate) fn utp(&self) -> Option<crate::utp::Utp> {
        self.utp.clone()
    }

    /// The bound address.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Queues a datagram for `to`: counted and dropped if the policy
    /// refuses `to` or the queue is full (never waits: the driver decides
    /// everything and must not stall on UDP).
    pub(crate) fn send(&self, to: SocketAddr, data: Vec<u8>) {
        if !self.policy.allows(to.ip()) {
            self.counters.send_refused.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("datagram to {to} not sent: outside network policy");
            return;
        }
        if self.tx.try_send((to, data)).is_err() {
            self.counters.send_overflow.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The next batch of KRPC datagrams (`None` once the socket failed).
    pub(crate) async fn recv(&mut self) -> Option<Vec<Datagram>> {
        self.rx.recv().await
    }

    /// The figures now.
    pub(crate) fn stats(&self) -> UdpStats {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        UdpStats {
            local: Some(self.local),
            received: g(&c.received),
            krpc: g(&c.krpc),
            utp: g(&c.utp_fed),
            utp_dropped: g(&c.utp),
            other_dropped: g(&c.other),
            oversized: g(&c.oversized),
            recv_overflow: g(&c.recv_overflow),
            sent: g(&c.sent),
            send_refused: g(&c.send_refused),
            send_overflow: g(&c.send_overflow),
            send_errors: g(&c.send_errors),
        }
    }
}

impl Drop for Udp {
    fn drop(&mut self) {
        if let Some(u) = &self.utp {
            u.shutdown();
        }
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Binds `addr`; the unspecified IPv4 address binds `[::]` for IPv6 and
/// IPv4 alike where the host has IPv6, so uTP and the DHT reach IPv6
/// peers too (an IPv4 socket cannot send to them: a uTP dial to `[::1]`
/// failed unseen).
async fn bind_socket(policy: &NetPolicy, addr: SocketAddr) -> io::Result<PolicedUdp> {
    if addr.ip() == std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED) {
        match PolicedUdp::bind_dual(policy, addr.port()) {
            Ok(s) => return Ok(s),
            Err(e) => tracing::debug!("UDP on [::]:{}: {e}; IPv4 only", addr.port()),
        }
    }
    PolicedUdp::bind(policy, addr).await
}

/// Reads batches and sorts them (see the module docs).
async fn receive(
    sock: Arc<PolicedUdp>,
    counters: Arc<Counters>,
    tx: mpsc::Sender<Vec<Datagram>>,
    utp: Option<crate::utp::Utp>,
) {
    // Slots one byte longer than kept: a longer datagram is seen as such
    // (the kernel truncates to the slot and says so).
    let mut rb = RecvBatch::new(crate::utp::RX_BATCH, MAX_UTP_DATAGRAM);
    // The uTP datagrams of a read, fed to the endpoint under one lock.
    let mut to_utp: Vec<usize> = Vec::with_capacity(crate::utp::RX_BATCH);
    loop {
        if let Err(e) = sock.readable().await {
            tracing::warn!("UDP socket: {e}; no more datagrams");
            return;
        }
        let mut batch = Vec::new();
        // A full batch went to the driver: wake up again for the rest.
        let mut full = false;
        while !full {
            match rb.try_recv(&sock) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                // An ICMP error reported on the socket (a node gone): not
                // the socket's end.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => {
                    tracing::debug!("UDP receive: {e}");
                    break;
                }
            }
            to_utp.clear();
            for (i, d) in rb.iter().enumerate() {
                counters.received.fetch_add(1, Ordering::Relaxed);
                let n = d.data.len();
                let kind = classify(d.data);
                // uTP datagrams may be larger (loopback), the rest may not.
                if d.truncated || n > MAX_UTP_DATAGRAM || (n > MAX_DATAGRAM && kind != Kind::Utp) {
                    counters.oversized.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                match kind {
                    Kind::Krpc => {
                        counters.krpc.fetch_add(1, Ordering::Relaxed);
                        batch.push(Datagram {
                            from: d.from,
                            data: d.data.to_vec(),
                        });
                        if batch.len() >= BATCH {
                            if !deliver(&tx, &counters, std::mem::take(&mut batch)) {
                                return;
                            }
                            full = true;
                        }
                    }
                    Kind::Utp if utp.is_some() => {
                        counters.utp_fed.fetch_add(1, Ordering::Relaxed);
                        to_utp.push(i);
                    }
                    Kind::Utp => {
                        counters.utp.fetch_add(1, Ordering::Relaxed);
                    }
                    // UDP tracker answers may be routed here later.
                    Kind::Other => {
                        counters.other.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            if let Some(u) = utp.as_ref().filter(|_| !to_utp.is_empty()) {
                u.handle_datagrams(to_utp.iter().map(|&i| {
                    let d = rb.get(i);
                    (d.from, d.data)
                }));
            }
        }
        if !batch.is_empty() && !deliver(&tx, &counters, batch) {
            return;
        }
    }
}

/// Hands a batch to the driver (counted as overflow if its queue is
/// full); false once the driver is gone.
fn deliver(tx: &mpsc::Sender<Vec<Datagram>>, counters: &Counters, batch: Vec<Datagram>) -> bool {
    match tx.try_send(batch) {
        Ok(()) => true,
        Err(mpsc::error::TrySendError::Full(b)) => {
            counters
                .recv_overflow
                .fetch_add(b.len() as u64, Ordering::Relaxed);
            true
        }
        Err(mpsc::error::TrySendError::Closed(_)) => false,
    }
}

/// Sends what the driver queued (the policy is checked again by
/// [`PolicedUdp::send_to`]).
async fn send(
    sock: Arc<PolicedUdp>,
    counters: Arc<Counters>,
    mut rx: mpsc::Receiver<(SocketAddr, Vec<u8>)>,
) {
    while let Some((to, data)) = rx.recv().await {
        match sock.send_to(&data, to).await {
            Ok(_) => counters.sent.fetch_add(1, Ordering::Relaxed),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied && !sock.allows(to) => {
                counters.send_refused.fetch_add(1, Ordering::Relaxed)
            }
            Err(e) => {
                tracing::debug!("datagram to {to}: {e}");
                counters.send_errors.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn classify_sorts_krpc_utp_and_the_rest() {
        assert_eq!(
            classify(b"d1:ad2:id20:abcdefghij0123456789e1:q4:ping1:t2:aa1:y1:qe"),
            Kind::Krpc
        );
        for ty in 0u8..=4 {
            let mut p = vec![(ty << 4) | 1, 0];
            p.resize(20, 0);
            assert_eq!(classify(&p), Kind::Utp, "type {ty}");
            // A uTP packet whose payload ends in 'e' is still uTP.
            p.push(b'e');
            assert_eq!(classify(&p), Kind::Utp);
        }
        // Type 5 or version 2: not uTP; too short for a header: not uTP.
        assert_eq!(classify(&[0x51; 20]), Kind::Other);
        assert_eq!(classify(&[0x02; 20]), Kind::Other);
        assert_eq!(classify(&[0x01; 19]), Kind::Other);
        // UDP tracker answers (action 0..3 big-endian) and empty datagrams.
        assert_eq!(classify(&[0, 0, 0, 1, 0, 0, 0, 5]), Kind::Other);
        assert_eq!(classify(b""), Kind::Other);
        assert_eq!(classify(b"d"), Kind::Other);
    }

    async fn next_batch(u: &mut Udp) -> Vec<Datagram> {
        tokio::time::timeout(Duration::from_secs(10), u.recv())
            .await
            .expect("a batch within 10 s")
            .expect("socket alive")
    }

    #[tokio::test]
    async fn only_krpc_reaches_the_driver_and_the_rest_is_counted() {
        let policy = NetPolicy::loopback();
        let mut u = Udp::bind(&policy, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let peer = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let to = u.local_addr();
        let mut utp = vec![0x41, 0];
        utp.resize(20, 0);
        peer.send_to(&utp, to).await.unwrap();
        peer.send_to(&[0, 0, 0, 1], to).await.unwrap();
        peer.send_to(&vec![b'd'; MAX_DATAGRAM + 100], to)
            .await
            .unwrap();
        peer.send_to(b"d1:y1:qe", to).await.unwrap();
        let b = next_batch(&mut u).await;
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].data, b"d1:y1:qe");
        assert_eq!(b[0].from, peer.local_addr().unwrap());
        let s = u.stats();
        assert_eq!(
            (
                s.received,
                s.krpc,
                s.utp_dropped,
                s.other_dropped,
                s.oversized
            ),
            (4, 1, 1, 1, 1)
        );
    }

    /// The socket an unspecified IPv4 address binds carries IPv6 too:
    /// datagrams to and from `[::1]` and `127.0.0.1` both go, and an IPv4
    /// peer is seen and answered at its plain IPv4 address.
    #[tokio::test]
    async fn the_unspecified_address_reaches_ipv4_and_ipv6_peers() {
        let policy = NetPolicy::loopback();
        let mut u = Udp::bind(&policy, "0.0.0.0:0".parse().unwrap())
            .await
            .unwrap();
        let port = u.local_addr().port();
        for (peer_at, ours) in [("127.0.0.1:0", "127.0.0.1"), ("[::1]:0", "::1")] {
            let peer = tokio::net::UdpSocket::bind(peer_at).await.unwrap();
            let to = SocketAddr::new(ours.parse().unwrap(), port);
            peer.send_to(b"d1:y1:qe", to).await.unwrap();
            let b = next_batch(&mut u).await;
            assert_eq!(b[0].from, peer.local_addr().unwrap(), "seen as sent from");
            // Answered at that address, through the sending path.
            u.send(b[0].from, b"d1:y1:re".to_vec());
            let mut buf = [0u8; 64];
            let (n, from) = tokio::time::timeout(Duration::from_secs(10), peer.recv_from(&mut buf))
                .await
                .expect("an answer within 10 s")
                .unwrap();
            assert_eq!(&buf[..n], b"d1:y1:re");
            assert_eq!(from.port(), port);
        }
        let s = u.stats();
        assert_eq!((s.sent, s.send_errors), (2, 0));
    }

    #[tokio::test]
    async fn refused_destinations_are_counted_never_sent() {
        let policy = NetPolicy::loopback();
        let mut u = Udp::bind(&policy, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        u.send("192.0.2.1:6881".parse().unwrap(), b"d1:y1:qe".to_vec());
        assert_eq!(u.stats().send_refused, 1);
        // A datagram to ourselves does go out and comes back in.
        u.send(u.local_addr(), b"d1:y1:re".to_vec());
        let b = next_batch(&mut u).await;
        assert_eq!(b[0].data, b"d1:y1:re");
        let s = u.stats();
        assert_eq!((s.sent, s.send_refused, s.send_errors), (1, 1, 0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flood_is_bounded_by_the_queues() {
        let policy = NetPolicy::loopback();
        let mut u = Udp::bind(&policy, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let peer = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let to = u.local_addr();
        // Nobody reads the driver's end while datagrams keep coming, until
        // the receive task reports an overflow (at most 20,000 sent).
        let mut sent = 0u64;
        while u.stats().recv_overflow == 0 && sent < 20_000 {
            for _ in 0..100 {
                let _ = peer.send_to(b"d1:y1:qe", to).await;
            }
            sent += 100;
            tokio::task::yield_now().await;
        }
        let s = u.stats();
        assert!(
            s.recv_overflow >= 1,
            "no overflow after {sent} datagrams: {s:?}"
        );
        // The queue is full and holds no more than its bound.
        assert_eq!(u.rx.len(), RECV_QUEUE);
        let mut queued = 0;
        while let Ok(b) = u.rx.try_recv() {
            assert!(!b.is_empty() && b.len() <= BATCH);
            queued += b.len();
            if queued >= RECV_QUEUE * BATCH {
                break;
            }
        }
        assert!(
            (RECV_QUEUE..=RECV_QUEUE * BATCH).contains(&queued),
            "{queued}"
        );
        // The socket still works: a datagram sent after the flood arrives.
        while u.rx.try_recv().is_ok() {}
        peer.send_to(b"d4:last1:ye", to).await.unwrap();
        loop {
            let b = next_batch(&mut u).await;
            if b.iter().any(|d| d.data == b"d4:last1:ye") {
                break;
            }
        }
    }
}
