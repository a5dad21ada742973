//! Sans-IO uTP (BEP 29, the Micro Transport Protocol) for weir.
//!
//! Datagrams, time and commands in; datagrams, timers and events out.
//! Nothing here opens a socket or reads a clock: the runtime owns the UDP
//! socket (shared with the DHT and UDP trackers, see [`is_utp`]) and passes
//! `now` into every call. Randomness (connection ids, initial sequence
//! numbers) comes from the seed given to [`Endpoint::new`].
//!
//! - [`packet`]: the header and extension codec (selective ACK).
//! - [`Endpoint`]: many connections on one socket, keyed by (peer address,
//!   connection id): connect, accept (a bounded backlog of unconfirmed
//!   connections), read, write, close, abort; events and timers.
//! - Each connection: SYN / STATE / DATA / FIN / RESET state machine,
//!   selective ACKs sent and used, fast retransmit (3 duplicate ACKs or 3
//!   packets selectively acknowledged after a hole), RTT and timeout
//!   estimation (BEP 29, floor 500 ms, doubling per timeout), a bounded
//!   reorder buffer, a receive window advertised from free buffer space, a
//!   bounded send buffer (writes take only what fits), LEDBAT congestion
//!   control with slow start and pacing (see [`cc`]), delayed ACKs, MTU
//!   probing up to what the caller says the path allows.
//! - [`sim`]: a deterministic virtual-time network (links with rate, delay,
//!   loss and a bottleneck queue, plus a Reno-like TCP model flow) that
//!   drives endpoints, for tests and benchmarks.
//!
//! # Driving an endpoint (what the runtime does)
//!
//! ```text
//! loop {
//!     select! {
//!         datagram (from, bytes) on the shared socket =>
//!             if weir_utp::is_utp(&bytes) { ep.handle_datagram(from, &bytes, now) }
//!             else { hand it to the DHT / tracker client }
//!         timer at ep.poll_timeout() fired => ep.handle_timeout(now),
//!         a peer task wrote or read     => ep.write(h, ..) / ep.read(h, ..)
//!     }
//!     while let Some(t) = ep.poll_transmit(now) { socket.send_to(&t.data, t.dst) }
//!     while let Some(ev) = ep.poll_event() { wake the task owning ev's handle }
//! }
//! ```
//!
//! - Batch: feed every datagram of a `recvmmsg` batch, then drain
//!   `poll_transmit` once (into one `sendmmsg`): ACKs for the whole batch
//!   are then coalesced into one.
//! - Every call that takes `now` may make packets or change the next
//!   deadline; drain `poll_transmit` and re-read `poll_timeout` after each.
//! - Events: [`Event::Connected`] (our connect succeeded),
//!   [`Event::Incoming`] (a peer opened a connection and sent its first
//!   packet after the SYN: for BitTorrent, its handshake), [`Event::Readable`]
//!   (new data or the end of the stream: read until
//!   [`StreamError::WouldBlock`]), [`Event::Writable`] (a write came up
//!   short and a quarter of the send buffer is free again),
//!   [`Event::Closed`] (exactly once per connection the application
//!   knows; the handle is dead after it).
//! - A byte stream for `peerconn`: a small adapter that implements
//!   `AsyncRead`/`AsyncWrite` over a channel to the socket task, writing
//!   with [`Endpoint::write`] (backpressure: it returns what fits) and
//!   reading with [`Endpoint::read`] or [`Endpoint::read_bytes`] (no copy).
//!   `shutdown` is [`Endpoint::close`] (a half-close: reading continues).
//! - Fallback to TCP: a connect that gets no answer ends with
//!   [`CloseReason::ConnectFailed`] after [`Config::syn_retries`]
//!   retransmissions (1 + 2 + 4 s by default); a RESET with
//!   [`CloseReason::Reset`].
//! - Packet size: [`Config::packet_size`] (1400 bytes, header included) is
//!   always safe. Where the caller knows the path takes more (loopback:
//!   64 KiB), it says so with [`Config::max_packet_size`] or
//!   [`Endpoint::set_max_packet_size`]; the connection then probes with
//!   one padded packet at a time (the limit itself first, which passes
//!   where the caller knows the path, then a binary search below a limit
//!   that failed; a probe's padding is an
//!   extension every receiver skips, so a lost probe is resent unpadded and
//!   costs no data and no window cut); when a probe passes, data written
//!   but not yet sent is cut again into the larger packets, and in slow
//!   start the window grows with the packets (it counts packets there:
//!   ten to begin with, as TCP's). Lowering the
//!   limit re-cuts unsent data too, but packets already in flight keep
//!   their size: set the limit before writing. The receive buffer for datagrams must
//!   be at least `max_packet_size`. Setting `IP_MTU_DISCOVER` to
//!   `IP_PMTUDISC_PROBE` keeps oversized probes from being fragmented.
//! - Memory: per connection at most [`Config::send_buffer`] +
//!   [`Config::recv_buffer`] of payload (16 + 16 MiB by default: a window
//!   for 50 MB/s at 150 ms plus LEDBAT's queuing target), and only what
//!   the peer proved: both start at [`Config::min_buffer`] (4 MiB); the
//!   send buffer offered is twice the congestion window (which grows only
//!   with acknowledgements), and the receive buffer doubles when the peer
//!   delivered half of it in order within a second. A peer that never
//!   acknowledges, or sends only out of order, pins at most the floor.
//!   Per endpoint at most [`Config::max_connections`] connections, of
//!   which at most [`Config::max_half_open`] unconfirmed, and received
//!   data (unread or out of order) of all of them together within
//!   [`Config::recv_budget`] (64 MiB) plus [`Config::recv_floor`] (64 KiB)
//!   each: past its floor a connection takes a packet only while the
//!   budget has room, so peers that each fill their window out of order,
//!   or a backlog nobody reads, cannot add up.
//!
//! # Connection ids (BEP 29)
//!
//! The initiator picks `recv_id`, sends its SYN with `connection_id =
//! recv_id` and everything else with `send_id = recv_id + 1`. The acceptor
//! takes `recv_id = syn.connection_id + 1`, `send_id = syn.connection_id`.
//! A packet is routed by (source address, `connection_id`), except a SYN,
//! which is looked up as (source, `connection_id + 1`) so that a repeated
//! SYN reaches the connection it opened (and is answered again).
//!
//! # Sequence numbers
//!
//! The SYN and a FIN take a sequence number, STATE does not (it carries the
//! next one). The acceptor answers a SYN with a STATE whose `seq_nr` is its
//! first data packet's. All comparisons wrap ([`seq`]).
//!
//! # Deviations and choices
//!
//! - [`Event::Incoming`] is raised on the first packet after the SYN, not
//!   on the SYN: an unconfirmed connection costs a few hundred bytes and no
//!   application work, which is what bounds a SYN flood. A protocol whose
//!   acceptor speaks first would never be confirmed; BitTorrent's initiator
//!   always speaks first.
//! - LEDBAT's window growth per round trip is `max(3000 B, cwnd / 8)` at
//!   zero queuing delay (BEP 29 has 3000 B), scaled by the off-target
//!   fraction and negative above target: fast to fill long, fast paths,
//!   and as quick to yield when a TCP flow builds a queue.
//! - Data packets carry no selective ACK; when packets are held out of
//!   order, the ACK is a STATE packet with the bitmask, so every data packet
//!   fits [`Config::packet_size`] with its header.
//! - A FIN carrying payload (libtorrent sends one when closing with data
//!   queued) is delivered; weir's FINs carry none.
//! - No RESET is sent for packets of unknown connections (as libtorrent);
//!   they are counted and dropped.

pub mod cc;
mod config;
mod conn;
mod endpoint;
pub mod packet;
mod recv;
mod send;
pub mod seq;
pub mod sim;

use std::time::Duration;

pub use config::{Config, MAX_DATAGRAM, MIN_PACKET_SIZE};
pub use endpoint::{Endpoint, EndpointStats, Transmit};
pub use packet::{DecodeError, is_utp};

/// A connection of an [`Endpoint`] (never reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnHandle(pub u64);

/// Why a connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// Both sides sent a FIN and had it acknowledged.
    Finished,
    /// The peer sent a RESET.
    Reset,
    /// Retransmissions went unanswered ([`Config::max_timeouts`]), or the
    /// peer never sent its FIN after ours ([`Config::fin_wait`]).
    TimedOut,
    /// Our SYN was never answered.
    ConnectFailed,
    /// [`Endpoint::abort`] was called.
    Aborted,
}

/// What an [`Endpoint`] tells the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// An outgoing connection was accepted by the peer.
    Connected(ConnHandle),
    /// A peer opened a connection (and sent a packet after its SYN).
    Incoming(ConnHandle),
    /// Data (or the end of the peer's stream) is ready to read.
    Readable(ConnHandle),
    /// A write came up short earlier and there is room again.
    Writable(ConnHandle),
    /// The connection is over; its handle is dead.
    Closed {
        /// Which one.
        conn: ConnHandle,
        /// Why.
        reason: CloseReason,
    },
}

/// Why a stream operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// No such connection (never existed, or removed after closing).
    #[error("no such uTP connection")]
    UnknownConnection,
    /// Nothing to read now.
    #[error("no data ready")]
    WouldBlock,
    /// Writing after [`Endpoint::close`].
    #[error("write after close")]
    WriteAfterClose,
    /// The connection ended.
    #[error("uTP connection closed: {0:?}")]
    Closed(CloseReason),
}

/// Why [`Endpoint::connect`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    /// The endpoint holds [`Config::max_connections`].
    #[error("too many uTP connections")]
    TooManyConnections,
    /// No unused connection id toward that peer was found.
    #[error("no free uTP connection id toward that peer")]
    NoFreeId,
}

/// Counters and estimates of one connection.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConnStats {
    /// Datagrams sent (all kinds but RESET).
    pub packets_sent: u64,
    /// Of which retransmissions.
    pub packets_retransmitted: u64,
    /// Payload bytes sent the first time.
    pub bytes_sent: u64,
    /// Payload bytes sent again.
    pub bytes_retransmitted: u64,
    /// Payload bytes the peer acknowledged.
    pub bytes_acked: u64,
    /// Payload bytes received (in order or held), duplicates excluded.
    pub bytes_received: u64,
    /// Datagrams received.
    pub packets_received: u64,
    /// Pure ACKs (STATE) sent.
    pub acks_sent: u64,
    /// Packets deemed lost from ACKs (duplicate or selective).
    pub fast_retransmits: u64,
    /// Window halvings for loss.
    pub loss_events: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Data packets received twice.
    pub duplicates: u64,
    /// Data packets dropped: beyond the reorder window, the FIN, or the buffer.
    pub out_of_window: u64,
    /// Data packets dropped past the floor while the endpoint's receive
    /// budget had no room ([`Config::recv_budget`]).
    pub over_budget: u64,
    /// Packets dropped for acknowledging what was never sent.
    pub invalid_packets: u64,
    /// MTU probes sent.
    pub mtu_probes: u64,
    /// Congestion window (bytes).
    pub cwnd: usize,
    /// Whether in slow start.
    pub slow_start: bool,
    /// Smoothed round trip.
    pub srtt: Option<Duration>,
    /// Retransmission timeout.
    pub rto: Duration,
    /// Latest LEDBAT queuing-delay estimate.
    pub queuing_delay: Option<Duration>,
    /// Datagram size in use (header included).
    pub packet_size: usize,
    /// The peer's advertised window.
    pub peer_window: usize,
    /// Payload bytes in flight.
    pub bytes_in_flight: usize,
    /// Payload bytes in the send buffer (unsent plus unacknowledged).
    pub send_buffered: usize,
    /// Bytes held in the receive buffer (unread plus out of order).
    pub recv_buffered: usize,
    /// Packets held out of order.
    pub reorder_held: usize,
}
