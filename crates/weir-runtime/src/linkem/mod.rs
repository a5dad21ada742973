//! The link emulator: a TCP proxy that makes a loopback connection behave
//! like a link with a one-way delay, a rate cap, a bounded queue and
//! injected faults, for real processes (`weir linkem`) or in-process tests.
//! [`udp`] is its UDP mode (delay, rate, bottleneck queue, random loss per
//! datagram), for uTP.
//!
//! For every accepted connection linkem dials the target and pumps each
//! direction separately:
//!
//! - bytes read at time `t` leave at `t + delay` (one-way, each direction);
//! - no faster than `rate` per direction (paced in slices of about 1 ms of
//!   traffic; after an idle spell at most 10 ms worth leaves at once);
//! - at most `queue` bytes are held per direction; beyond that linkem stops
//!   reading, so TCP backpressure reaches the sender. For a delayed link to
//!   carry `rate` the queue must hold at least `rate x delay` bytes;
//! - a half-close propagates (EOF one way shuts down the write side of the
//!   other socket, after the delay); a reset or write error ends the whole
//!   connection;
//! - [`Faults`] (bit flips at offsets, removed ranges) apply to the
//!   directions [`LinkConfig::fault_direction`] names, at absolute offsets
//!   of the stream as its sender wrote it; every connection gets the same.
//!
//! Data moves in chunks of up to [`CHUNK`] bytes handed over as
//! reference-counted buffers; only bytes at fault offsets are touched.

mod faults;
pub mod parse;
mod pump;
pub mod udp;

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use weir_core::policy::NetPolicy;

pub use faults::{Faults, corrupt_mask, random_offsets};
pub use udp::{UdpLinkConfig, UdpStats, serve_udp, serve_udp_with};

/// Largest read (and write) linkem makes.
pub const CHUNK: usize = 256 * 1024;

/// Default per-direction queue bound.
pub const DEFAULT_QUEUE: usize = 4 << 20;

/// Which stream(s) the faults apply to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Direction {
    /// Both directions (the same offsets in each).
    Both,
    /// Client to server (the connecting side to the target).
    #[default]
    Fwd,
    /// Server to client.
    Rev,
}

impl std::str::FromStr for Direction {
    type Err = parse::ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "both" => Ok(Direction::Both),
            "fwd" => Ok(Direction::Fwd),
            "rev" => Ok(Direction::Rev),
            _ => Err(parse::ParseError::new(
                "direction",
                s,
                "expected both, fwd or rev",
            )),
        }
    }
}

/// How the emulated link behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkConfig {
    /// One-way delay, applied to each direction.
    pub delay: Duration,
    /// Rate cap in bytes per second, per direction (`None`: unshaped).
    pub rate: Option<u64>,
    /// Most bytes held per direction (at least 1).
    pub queue: usize,
    /// Faults to inject.
    pub faults: Faults,
    /// The directions the faults apply to.
    pub fault_direction: Direction,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            delay: Duration::ZERO,
            rate: None,
            queue: DEFAULT_QUEUE,
            faults: Faults::default(),
            fault_direction: Direction::Fwd,
        }
    }
}

impl LinkConfig {
    /// A warning when the queue cannot hold `rate x delay`, so the link
    /// would carry less than `rate` (and what it would carry instead).
    pub fn bdp_warning(&self) -> Option<String> {
        let rate = self.rate?;
        let bdp = rate as f64 * self.delay.as_secs_f64();
        (bdp > self.queue as f64).then(|| {
            format!(
                "queue {} B is below rate x delay = {:.0} B: at most {:.1} MB/s per direction will pass",
                self.queue,
                bdp,
                self.queue as f64 / self.delay.as_secs_f64() / 1e6
            )
        })
    }
}

/// What one direction of a connection carried.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirSummary {
    /// Bytes read from the sender.
    pub bytes_in: u64,
    /// Bytes written to the receiver.
    pub bytes_out: u64,
    /// Bytes removed by drop ranges.
    pub dropped: u64,
    /// Corruptions applied: stream offset and XOR mask.
    pub corrupted: Vec<(u64, u8)>,
}

/// What one proxied connection did, reported when it closes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnSummary {
    /// Connection number (1, 2, ... per `serve`).
    pub id: u64,
    /// The client's address.
    pub client: SocketAddr,
    /// Client to server.
    pub fwd: DirSummary,
    /// Server to client.
    pub rev: DirSummary,
    /// How long the connection lasted.
    pub duration: Duration,
    /// The first error (connect failure, reset, write error), if any.
    pub error: Option<String>,
}

impl fmt::Display for DirSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in {} B out {} B", self.bytes_in, self.bytes_out)?;
        if self.dropped > 0 {
            write!(f, " dropped {} B", self.dropped)?;
        }
        if !self.corrupted.is_empty() {
            f.write_str(" corrupted [")?;
            for (i, (o, m)) in self.corrupted.iter().enumerate() {
                if i > 0 {
                    f.write_str(",")?;
                }
                write!(f, "{o}^{m:#04x}")?;
            }
            f.write_str("]")?;
        }
        Ok(())
    }
}

impl fmt::Display for ConnSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "linkem conn #{} from {} ({:.3} s): fwd {}; rev {}",
            self.id,
            self.client,
            self.duration.as_secs_f64(),
            self.fwd,
            self.rev
        )?;
        match &self.error {
            Some(e) => write!(f, "; error: {e}"),
            None => f.write_str("; closed cleanly"),
        }
    }
}

/// Accepts connections on `listener` forever and proxies each to `target`
/// through the emulated link; logs a [`ConnSummary`] per closed connection.
pub async fn serve(
    listener: TcpListener,
    target: SocketAddr,
    cfg: LinkConfig,
    policy: NetPolicy,
) -> io::Result<()> {
    serve_with(listener, target, cfg, policy, |s| tracing::info!("{s}")).await
}

/// [`serve`] that hands each connection's summary to `on_close`.
pub async fn serve_with<F>(
    listener: TcpListener,
    target: SocketAddr,
    cfg: LinkConfig,
    policy: NetPolicy,
    on_close: F,
) -> io::Result<()>
where
    F: Fn(ConnSummary) + Send + Sync + 'static,
{
    let cfg = Arc::new(cfg);
    let on_close = Arc::new(on_close);
    let mut id = 0;
    loop {
        let (client, addr) = match crate::net::accept_tcp(&policy, &listener).await {
            Ok(c) => c,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionAborted
                        | io::ErrorKind::ConnectionReset
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(e) => return Err(e),
        };
        id += 1;
        let (cfg, policy, on_close) = (cfg.clone(), policy.clone(), on_close.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let summary = match crate::net::connect_tcp(&policy, target).await {
                Ok(server) => proxy(id, client, server, &cfg).await,
                Err(e) => ConnSummary {
                    id,
                    client: addr,
                    fwd: DirSummary::default(),
                    rev: DirSummary::default(),
                    duration: started.elapsed(),
                    error: Some(format!("connecting to {target}: {e}")),
                },
            };
            on_close(summary);
        });
    }
}

/// Proxies one connection (`client` <-> `server`) through the emulated link
/// until both directions have closed; returns what it carried.
pub async fn proxy(id: u64, client: TcpStream, server: TcpStream, cfg: &LinkConfig) -> ConnSummary {
    let started = Instant::now();
    let client_addr = client
        .peer_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let (fwd, rev, error) = pump::run(client, server, cfg).await;
    ConnSummary {
        id,
        client: client_addr,
        fwd,
        rev,
        duration: started.elapsed(),
        error,
    }
}
