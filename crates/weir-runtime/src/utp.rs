//! uTP (BEP 29) over tokio: the sans-IO [`weir_utp::Endpoint`] on a UDP
//! socket, and [`UtpStream`], a connection as an `AsyncRead + AsyncWrite`
//! byte stream (so `peerconn`, MSE and the BitTorrent handshake run over it
//! unchanged).
//!
//! ```text
//! socket --recvmmsg batch--> Utp::handle_datagrams, one lock (the socket's
//!     receive task: the engine's shared one, or UtpSocket's own) --> Endpoint
//! UtpStream poll_read / poll_write --> Endpoint::read / write (under the lock)
//! Endpoint events --> wake the stream's reader / writer / connect / accept
//! IO task: Endpoint timers (tokio), poll_transmit --> socket, a batch per
//!     sendmmsg (crate::udp_batch)
//! ```
//!
//! The endpoint sits behind one mutex, held only for a call into it (no
//! `.await` under it). Every mutation wakes the IO task, which drains the
//! endpoint's datagrams into the socket (awaiting the socket: the kernel's
//! buffer is the back-pressure) and sleeps until the endpoint's next
//! deadline.
//!
//! Bounds: per connection at most [`UtpConfig`]'s send and receive buffers
//! (writes take only what fits, the peer's window is what our buffer has
//! free); at most `max_connections` connections, of which at most
//! `max_half_open` unconfirmed (a SYN flood evicts its own oldest); at most
//! [`UtpConfig::accept_backlog`] confirmed connections waiting for
//! [`Utp::accept`] (more are reset and counted). A stream dropped with
//! unread data is reset (as TCP does), otherwise closed with a FIN.

use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use weir_core::policy::NetPolicy;
use weir_utp::{CloseReason, ConnHandle, Endpoint, Event, StreamError};

use crate::net::PolicedUdp;
use crate::udp_batch::{BatchSender, RecvBatch};

/// Largest datagram toward a loopback peer known to take it (probed up
/// to, see [`weir_utp::Config::max_packet_size`] and
/// [`UtpStream::set_max_packet_size`]).
pub const LOOPBACK_PACKET: usize = 65_000;
/// Datagrams taken from the endpoint per lock by the IO task.
const TX_BATCH: usize = 64;
/// Socket buffers asked for (the kernel may give less).
const SOCKET_BUFFER: usize = 4 << 20;

/// How a [`Utp`] runs.
#[derive(Clone, Debug)]
pub struct UtpConfig {
    /// The endpoint's settings (buffers, connection bounds, timers).
    pub endpoint: weir_utp::Config,
    /// Confirmed incoming connections waiting for [`Utp::accept`], at most.
    pub accept_backlog: usize,
    /// Seed of connection ids and sequence numbers.
    pub seed: u64,
}

impl Default for UtpConfig {
    /// The runtime's defaults: send and receive buffers of 4 MiB per
    /// connection to begin with, growing with what the peer proves up to
    /// 16 MiB (a window for 50 MB/s at 150 ms plus LEDBAT's queuing target;
    /// a fixed 4 MiB held such a path to 28 MB/s), 512 connections, 64
    /// half-open, a backlog of 64.
    fn default() -> Self {
        let endpoint = weir_utp::Config {
            send_buffer: 16 << 20,
            recv_buffer: 16 << 20,
            min_buffer: 4 << 20,
            max_connections: 512,
            max_half_open: 64,
            ..weir_utp::Config::default()
        };
        UtpConfig {
            endpoint,
            accept_backlog: 64,
            seed: fastrand::u64(..),
        }
    }
}

/// Counters of a [`Utp`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UtpStats {
    /// The endpoint's own (malformed, unknown connection, accepted, SYNs
    /// refused, half-open evicted).
    pub endpoint: weir_utp::EndpointStats,
    /// Connections held now (all states).
    pub connections: usize,
    /// Confirmed connections waiting to be accepted.
    pub backlog: usize,
    /// Confirmed connections reset because the backlog was full.
    pub backlog_refused: u64,
    /// Datagrams sent.
    pub sent: u64,
    /// Sends that failed (refused by the policy or the system).
    pub send_errors: u64,
}

/// What wakes whom on one connection.
#[derive(Debug, Default)]
struct Slot {
    read: Option<Waker>,
    write: Option<Waker>,
    connect: Option<Waker>,
    connected: bool,
    closed: Option<CloseReason>,
    /// A [`UtpStream`] holds it (or it waits in the backlog for one).
    owned: bool,
}

struct Inner {
    ep: Endpoint,
    conns: HashMap<ConnHandle, Slot>,
    backlog: VecDeque<ConnHandle>,
    accept: Option<Waker>,
    backlog_refused: u64,
    shut: bool,
}

struct Shared {
    inner: Mutex<Inner>,
    /// Wakes the IO task: something may have output or a new deadline.
    io: Notify,
    sock: Arc<PolicedUdp>,
    policy: NetPolicy,
    accept_backlog: usize,
    sent: AtomicU64,
    send_errors: AtomicU64,
}

/// The endpoint on a socket: cloned into whoever dials, accepts or feeds
/// datagrams. Made by [`Utp::start`] (its IO task runs until
/// [`Utp::shutdown`] or the task handle is aborted).
#[derive(Clone)]
pub struct Utp {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Utp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Utp").finish_non_exhaustive()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    /// Hands the endpoint's events to the slots; the wakers to call once
    /// the lock is let go go into `wake`.
    fn drain(&mut self, accept_backlog: usize, wake: &mut Vec<Waker>, now: Instant) {
        while let Some(ev) = self.ep.poll_event() {
            match ev {
                Event::Connected(h) => {
                    if let Some(s) = self.conns.get_mut(&h) {
                        s.connected = true;
                        wake.extend(s.connect.take());
                        wake.extend(s.write.take());
                    }
                }
                Event::Incoming(h) => {
                    if self.shut || self.backlog.len() >= accept_backlog {
                        self.backlog_refused += 1;
                        let _ = self.ep.abort(h, now);
                        continue;
                    }
                    self.conns.insert(
                        h,
                        Slot {
                            connected: true,
                            owned: true,
                            ..Slot::default()
                        },
                    );
                    self.backlog.push_back(h);
                    wake.extend(self.accept.take());
                }
                Event::Readable(h) => {
                    if let Some(s) = self.conns.get_mut(&h) {
                        wake.extend(s.read.take());
                    }
                }
                Event::Writable(h) => {
                    if let Some(s) = self.conns.get_mut(&h) {
                        wake.extend(s.write.take());
                    }
                }
                Event::Closed { conn, reason } => {
                    let gone = match self.conns.get_mut(&conn) {
                        Some(s) => {
                            s.closed = Some(reason);
                            wake.extend(s.read.take());
                            wake.extend(s.write.take());
                            wake.extend(s.connect.take());
                            !s.owned
                        }
                        None => false,
                    };
                    if gone {
                        self.conns.remove(&conn);
                    }
                }
            }
        }
    }
}

impl Utp {
    /// Runs an endpoint on `sock` (whose datagrams the caller feeds to
    /// [`Utp::handle_datagram`]); the IO task sends and runs the timers.
    pub fn start(
        sock: Arc<PolicedUdp>,
        policy: &NetPolicy,
        cfg: UtpConfig,
    ) -> (Utp, JoinHandle<()>) {
        set_buffers(&sock);
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                ep: Endpoint::new(cfg.endpoint, cfg.seed),
                conns: HashMap::new(),
                backlog: VecDeque::new(),
                accept: None,
                backlog_refused: 0,
                shut: false,
            }),
            io: Notify::new(),
            sock,
            policy: policy.clone(),
            accept_backlog: cfg.accept_backlog.max(1),
            sent: AtomicU64::new(0),
            send_errors: AtomicU64::new(0),
        });
        let task = tokio::spawn(io_task(shared.clone()));
        (Utp { shared }, task)
    }

    /// Runs `f` on the endpoint, hands out its events and wakes the IO task.
    fn with<T>(&self, f: impl FnOnce(&mut Inner, Instant) -> T) -> T {
        let mut wake = Vec::new();
        let now = Instant::now();
        let r = {
            let mut g = self.shared.lock();
            let r = f(&mut g, now);
            g.drain(self.shared.accept_backlog, &mut wake, now);
            r
        };
        for w in wake {
            w.wake();
        }
        self.shared.io.notify_one();
        r
    }

    /// Feeds one received datagram (a uTP packet, see [`weir_utp::is_utp`]).
    /// Bad packets are counted by the endpoint and dropped.
    pub fn handle_datagram(&self, from: SocketAddr, data: &[u8]) {
        self.with(|g, now| {
            let _ = g.ep.handle_datagram(from, data, now);
        });
    }

    /// Feeds a batch of received datagrams under one lock of the endpoint
    /// (one wake-up of the IO task for all), as [`Utp::handle_datagram`]
    /// each.
    pub fn handle_datagrams<'a>(&self, batch: impl IntoIterator<Item = (SocketAddr, &'a [u8])>) {
        self.with(|g, now| {
            for (from, data) in batch {
                let _ = g.ep.handle_datagram(from, data, now);
            }
        });
    }

    /// Opens a connection to `addr` and waits until the peer answers
    /// (`ConnectionRefused` when it never does or resets, `PermissionDenied`
    /// outside the network policy, nothing sent then).
    pub async fn connect(&self, addr: SocketAddr) -> io::Result<UtpStream> {
        if !self.shared.policy.allows(addr.ip()) {
            tracing::debug!("uTP connection to {addr} refused: outside network policy");
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{addr} is outside the network policy"),
            ));
        }
        let h = self.with(|g, now| {
            if g.shut {
                return Err(io::Error::from(io::ErrorKind::NotConnected));
            }
            let h =
                g.ep.connect(addr, now)
                    .map_err(|e| io::Error::new(io::ErrorKind::OutOfMemory, e))?;
            g.conns.insert(
                h,
                Slot {
                    owned: true,
                    ..Slot::default()
                },
            );
            Ok(h)
        })?;
        let stream = UtpStream {
            utp: self.clone(),
            h,
            peer: addr,
        };
        poll_fn(|cx| {
            let mut g = self.shared.lock();
            let Some(s) = g.conns.get_mut(&h) else {
                return Poll::Ready(Err(io::ErrorKind::ConnectionRefused.into()));
            };
            if s.connected {
                return Poll::Ready(Ok(()));
            }
            if let Some(r) = s.closed {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("uTP connect: {r:?}"),
                )));
            }
            s.connect = Some(cx.waker().clone());
            Poll::Pending
        })
        .await?;
        Ok(stream)
    }

    /// The next confirmed incoming connection (`None` once shut down).
    pub async fn accept(&self) -> Option<UtpStream> {
        poll_fn(|cx| {
            let mut g = self.shared.lock();
            if let Some(h) = g.backlog.pop_front() {
                let peer = g.ep.peer_addr(h);
                if let Some(peer) = peer {
                    return Poll::Ready(Some(UtpStream {
                        utp: self.clone(),
                        h,
                        peer,
                    }));
                }
                // Closed while waiting: forget it.
                g.conns.remove(&h);
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if g.shut {
                return Poll::Ready(None);
            }
            g.accept = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// The counters now.
    pub fn stats(&self) -> UtpStats {
        let g = self.shared.lock();
        UtpStats {
            endpoint: g.ep.stats().clone(),
            connections: g.ep.len(),
            backlog: g.backlog.len(),
            backlog_refused: g.backlog_refused,
            sent: self.shared.sent.load(Ordering::Relaxed),
            send_errors: self.shared.send_errors.load(Ordering::Relaxed),
        }
    }

    /// Stops accepting: waiting [`Utp::accept`] calls get `None`, new
    /// incoming connections are reset. Open streams keep working.
    pub fn shutdown(&self) {
        let w = {
            let mut g = self.shared.lock();
            g.shut = true;
            g.accept.take()
        };
        if let Some(w) = w {
            w.wake();
        }
    }

    /// The socket's local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.shared.sock.local_addr()
    }
}

fn set_buffers(sock: &PolicedUdp) {
    let s = socket2::SockRef::from(sock.as_socket());
    let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = s.set_send_buffer_size(SOCKET_BUFFER);
}

/// Sends the endpoint's datagrams and runs its timers.
async fn io_task(shared: Arc<Shared>) {
    let mut out = Vec::with_capacity(TX_BATCH);
    let mut tx = BatchSender::new();
    loop {
        let mut wake = Vec::new();
        let deadline = {
            let mut g = shared.lock();
            let now = Instant::now();
            if g.ep.poll_timeout().is_some_and(|t| t <= now) {
                g.ep.handle_timeout(now);
            }
            while out.len() < TX_BATCH {
                match g.ep.poll_transmit(now) {
                    Some(t) => out.push(t),
                    None => break,
                }
            }
            g.drain(shared.accept_backlog, &mut wake, now);
            g.ep.poll_timeout()
        };
        for w in wake {
            w.wake();
        }
        if !out.is_empty() {
            // One sendmmsg for the batch (policy checked per datagram).
            let c = tx
                .send(&shared.sock, &out, |t: &weir_utp::Transmit| {
                    (t.dst, &t.data[..])
                })
                .await;
            out.clear();
            shared.sent.fetch_add(c.sent, Ordering::Relaxed);
            shared
                .send_errors
                .fetch_add(c.refused + c.errors, Ordering::Relaxed);
            // More may be waiting: take them before sleeping.
            continue;
        }
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shared.io.notified() => {}
            _ = sleep => {}
        }
    }
}

/// One uTP connection as a byte stream. Reads end (`Ok(0)`) at the peer's
/// FIN; a reset or timed-out connection fails reads and writes.
/// `shutdown` sends our FIN once what was written is out (a half-close).
pub struct UtpStream {
    utp: Utp,
    h: ConnHandle,
    peer: SocketAddr,
}

impl std::fmt::Debug for UtpStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UtpStream")
            .field("conn", &self.h)
            .field("peer", &self.peer)
            .finish()
    }
}

fn closed_error(r: CloseReason) -> io::Error {
    let kind = match r {
        CloseReason::TimedOut => io::ErrorKind::TimedOut,
        CloseReason::Finished => io::ErrorKind::BrokenPipe,
        _ => io::ErrorKind::ConnectionReset,
    };
    io::Error::new(kind, format!("uTP connection closed: {r:?}"))
}

impl UtpStream {
    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Lets the connection probe for datagrams up to `n` bytes (see
    /// [`weir_utp::Config::max_packet_size`]). Only toward a peer known to
    /// read datagrams that large: libtorrent reads into 1,500-byte
    /// buffers, and a probe cut short there broke its connections.
    pub fn set_max_packet_size(&self, n: usize) {
        let h = self.h;
        self.utp.with(|g, _| {
            let _ = g.ep.set_max_packet_size(h, n);
        });
    }

    /// The connection's counters and estimates (`None` once it is gone).
    pub fn conn_stats(&self) -> Option<weir_utp::ConnStats> {
        self.utp.shared.lock().ep.conn_stats(self.h)
    }
}

impl AsyncRead for UtpStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let h = self.h;
        let r = self.utp.with(|g, now| {
            let dst = buf.initialize_unfilled();
            match g.ep.read(h, dst, now) {
                Ok(n) => Poll::Ready(Ok(n)),
                Err(StreamError::WouldBlock) => {
                    if let Some(s) = g.conns.get_mut(&h) {
                        s.read = Some(cx.waker().clone());
                    }
                    Poll::Pending
                }
                Err(StreamError::Closed(CloseReason::Finished)) => Poll::Ready(Ok(0)),
                Err(StreamError::Closed(r)) => Poll::Ready(Err(closed_error(r))),
                Err(e) => Poll::Ready(Err(io::Error::new(io::ErrorKind::NotConnected, e))),
            }
        });
        match r {
            Poll::Ready(Ok(n)) => {
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl UtpStream {
    fn write_slices(
        &self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let h = self.h;
        self.utp.with(|g, now| {
            let mut total = 0;
            for b in bufs.iter().filter(|b| !b.is_empty()) {
                match g.ep.write(h, b, now) {
                    Ok(n) => {
                        total += n;
                        if n < b.len() {
                            break;
                        }
                    }
                    Err(e) if total > 0 => {
                        tracing::trace!("uTP write: {e}");
                        break;
                    }
                    Err(StreamError::Closed(r)) => return Poll::Ready(Err(closed_error(r))),
                    Err(e) => {
                        return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, e)));
                    }
                }
            }
            if total == 0 && bufs.iter().any(|b| !b.is_empty()) {
                if let Some(s) = g.conns.get_mut(&h) {
                    s.write = Some(cx.waker().clone());
                }
                return Poll::Pending;
            }
            Poll::Ready(Ok(total))
        })
    }
}

impl AsyncWrite for UtpStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.write_slices(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.write_slices(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Written bytes are the endpoint's to send: nothing to wait for.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let h = self.h;
        self.utp.with(|g, now| match g.ep.close(h, now) {
            Ok(()) | Err(StreamError::Closed(_)) | Err(StreamError::UnknownConnection) => {}
            Err(e) => tracing::trace!("uTP shutdown: {e}"),
        });
        Poll::Ready(Ok(()))
    }
}

impl Drop for UtpStream {
    fn drop(&mut self) {
        let h = self.h;
        let peer = self.peer;
        self.utp.with(|g, now| {
            if let Some(st) = g.ep.conn_stats(h) {
                tracing::debug!("uTP connection with {peer} ends: {st:?}");
            }
            let closed = match g.conns.get_mut(&h) {
                Some(s) => {
                    s.owned = false;
                    s.closed.is_some()
                }
                None => true,
            };
            if closed {
                g.conns.remove(&h);
                return;
            }
            // Unread data (or a connect still pending): reset, as TCP
            // does; otherwise our FIN after what is buffered.
            let connected = g.conns.get(&h).is_some_and(|s| s.connected);
            if !connected || g.ep.readable(h) > 0 {
                let _ = g.ep.abort(h, now);
            } else {
                let _ = g.ep.close(h, now);
            }
        });
    }
}

/// A [`Utp`] on a socket of its own (tests, benches, tools): binds
/// `addr` under `policy`, reads every datagram into the endpoint. Dropping
/// it stops both tasks.
#[derive(Debug)]
pub struct UtpSocket {
    utp: Utp,
    tasks: Vec<JoinHandle<()>>,
}

impl UtpSocket {
    /// Binds and starts.
    pub async fn bind(
        policy: &NetPolicy,
        addr: SocketAddr,
        cfg: UtpConfig,
    ) -> io::Result<UtpSocket> {
        let sock = Arc::new(PolicedUdp::bind(policy, addr).await?);
        let (utp, io) = Utp::start(sock.clone(), policy, cfg);
        let rx = tokio::spawn(receive(sock, utp.clone()));
        Ok(UtpSocket {
            utp,
            tasks: vec![io, rx],
        })
    }

    /// The endpoint (to dial, accept, read figures).
    pub fn utp(&self) -> &Utp {
        &self.utp
    }
}

impl Drop for UtpSocket {
    fn drop(&mut self) {
        self.utp.shutdown();
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Datagrams read per `recvmmsg` by a receive task (slots of
/// [`weir_utp::MAX_DATAGRAM`] + 1 bytes, allocated once per task).
pub(crate) const RX_BATCH: usize = 32;

async fn receive(sock: Arc<PolicedUdp>, utp: Utp) {
    let mut rb = RecvBatch::new(RX_BATCH, weir_utp::MAX_DATAGRAM);
    loop {
        if sock.readable().await.is_err() {
            return;
        }
        loop {
            match rb.try_recv(&sock) {
                Ok(0) => {}
                Ok(_) => utp.handle_datagrams(
                    rb.iter()
                        .filter(|d| !d.truncated && weir_utp::is_utp(d.data))
                        .map(|d| (d.from, d.data)),
                ),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests;
