//! Endpoint and connection settings.

use std::time::Duration;

use crate::packet::HEADER_LEN;

/// Settings of an [`crate::Endpoint`] and its connections. The defaults
/// suit BitTorrent over the internet and loopback alike.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Datagram size every connection starts with and never goes below,
    /// uTP header included (1400: safe on the internet, inside IPv6's and
    /// most tunnels' MTUs, and within libtorrent's 1500-byte receive
    /// buffers).
    pub packet_size: usize,
    /// Largest datagram the path allows, as the caller knows it (e.g.
    /// 65,000 on loopback toward a weir peer). Above `packet_size` the
    /// connection probes for it (see the crate docs) and never sends
    /// anything larger. Change one connection's with
    /// [`crate::Endpoint::set_max_packet_size`].
    pub max_packet_size: usize,
    /// Most payload bytes buffered for sending (unsent plus unacknowledged);
    /// writes take only what fits. Also bounds the congestion window. The
    /// buffer a connection actually offers is twice its congestion window,
    /// between [`Config::min_buffer`] and this.
    pub send_buffer: usize,
    /// Most bytes of the receive buffer: in-order data not yet read plus
    /// out-of-order packets; what is free of it is the window advertised
    /// to the peer. A connection starts at [`Config::min_buffer`] and
    /// doubles its buffer, up to this, each time the peer delivers half of
    /// it in order within a second.
    pub recv_buffer: usize,
    /// What both buffers start at and never go below (capped by each one's
    /// most): memory a peer gets without proving a rate, the most a peer
    /// that never acknowledges or sends out of order can pin.
    pub min_buffer: usize,
    /// Most received bytes (unread plus out of order) the endpoint's
    /// connections hold together beyond [`Config::recv_floor`] each: past
    /// its floor a connection takes a packet only while the budget has
    /// room, and its advertised window says so. Without it each of
    /// [`Config::max_connections`] peers could pin [`Config::min_buffer`]
    /// by sending out of order (or to a connection nobody reads): 2 GiB at
    /// the runtime's settings. Memory held is at most this plus a floor
    /// per connection.
    pub recv_budget: usize,
    /// Received bytes a connection may always hold, whatever the budget:
    /// it keeps every connection moving while others hold the budget (at
    /// least one largest packet's payload).
    pub recv_floor: usize,
    /// LEDBAT's queuing-delay target (BEP 29: 100 ms).
    pub target_delay: Duration,
    /// Initial congestion window in packets.
    pub initial_window: usize,
    /// Floor of the retransmission timeout (BEP 29: 500 ms).
    pub min_rto: Duration,
    /// SYN retransmissions before a connect fails (timeouts 1 s, 2 s, 4 s...).
    pub syn_retries: u32,
    /// Consecutive retransmission timeouts before a connection is dropped.
    pub max_timeouts: u32,
    /// In-order data packets received before an acknowledgement is sent.
    pub delayed_ack_packets: u32,
    /// Longest an acknowledgement of in-order data waits.
    pub delayed_ack: Duration,
    /// Spread packets over the round trip instead of sending windows in bursts.
    pub pacing: bool,
    /// Most connections (all states) an endpoint holds; SYNs beyond are ignored.
    pub max_connections: usize,
    /// Most accepted connections not yet confirmed by a second packet from
    /// the peer (what a SYN flood creates); the oldest is dropped for a new one.
    pub max_half_open: usize,
    /// How long an unconfirmed accepted connection is kept.
    pub half_open_timeout: Duration,
    /// How long, after our FIN is acknowledged, the peer has to send its own.
    pub fin_wait: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            packet_size: 1400,
            max_packet_size: 1400,
            send_buffer: 16 << 20,
            recv_buffer: 16 << 20,
            min_buffer: 4 << 20,
            recv_budget: 64 << 20,
            recv_floor: 64 << 10,
            target_delay: Duration::from_millis(100),
            initial_window: 10,
            min_rto: Duration::from_millis(500),
            syn_retries: 2,
            max_timeouts: 6,
            delayed_ack_packets: 4,
            delayed_ack: Duration::from_millis(2),
            pacing: true,
            max_connections: 1024,
            max_half_open: 64,
            half_open_timeout: Duration::from_secs(10),
            fin_wait: Duration::from_secs(30),
        }
    }
}

/// Smallest datagram size accepted in [`Config::packet_size`].
pub const MIN_PACKET_SIZE: usize = 150;

/// Largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65_507;

impl Config {
    /// The settings with sizes clamped to what works: packets within
    /// [`MIN_PACKET_SIZE`]..=[`MAX_DATAGRAM`], buffers of at least a few
    /// packets.
    pub(crate) fn sanitized(mut self) -> Self {
        self.packet_size = self.packet_size.clamp(MIN_PACKET_SIZE, MAX_DATAGRAM);
        self.max_packet_size = self.max_packet_size.clamp(self.packet_size, MAX_DATAGRAM);
        let min_buf = 4 * (self.max_packet_size - HEADER_LEN);
        self.send_buffer = self.send_buffer.max(min_buf);
        self.recv_buffer = self.recv_buffer.max(min_buf);
        self.min_buffer = self.min_buffer.max(min_buf);
        self.recv_floor = self.recv_floor.max(self.max_packet_size - HEADER_LEN);
        self.initial_window = self.initial_window.max(1);
        self.delayed_ack_packets = self.delayed_ack_packets.max(1);
        self.max_connections = self.max_connections.max(1);
        self.max_half_open = self.max_half_open.max(1);
        self
    }
}
