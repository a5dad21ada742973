//! One uTP connection: the state machine and reliability (this file: what
//! arrives, acknowledgements, loss, timers) and the packets it sends
//! ([`tx`]). Driven by [`crate::Endpoint`], which owns the connections,
//! routes datagrams to them, collects their events and runs their timers.

mod tx;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::cc::{Ledbat, Pacer, Rtt};
use crate::config::Config;
use crate::packet::{HEADER_LEN, Header, Packet, PacketType};
use crate::recv::{Arrival, RecvBuf};
use crate::send::{Kind, SendBuf, Sent};
use crate::seq::{self, MAX_WINDOW_PACKETS};
use crate::{CloseReason, ConnHandle, ConnStats, Event};

/// Where a connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// We sent a SYN and wait for its acknowledgement.
    SynSent,
    /// We acknowledged a SYN; the peer has not sent anything else yet.
    SynRecv,
    /// Open (either side may have sent or received a FIN).
    Connected,
    /// Over; kept a moment to acknowledge a repeated FIN.
    Closed,
}

/// Selectively acknowledged packets above a lost one that make it lost.
const DUP_THRESHOLD: usize = 3;

/// What a timeout asks of the endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TimeoutOutcome {
    /// Keep the connection.
    Keep,
    /// Remove it (its Closed event, if the application knew it, is queued).
    Remove,
}

/// MTU search state: `floor` is known to pass, `ceiling` is the most the
/// caller allows or the least that failed minus one.
#[derive(Clone, Copy, Debug)]
struct Mtu {
    floor: usize,
    ceiling: usize,
    probe: Option<(u16, usize)>,
    /// The first probe tries the ceiling itself (the caller's own limit,
    /// which usually passes: loopback); the search halves only after it.
    tried_ceiling: bool,
}

impl Mtu {
    fn searching(&self) -> bool {
        self.probe.is_none() && self.ceiling > self.floor + self.floor / 64 + 16
    }

    /// The size of the next probe: the ceiling first, then halfway.
    fn next_probe(&mut self) -> usize {
        if self.tried_ceiling {
            (self.floor + self.ceiling).div_ceil(2)
        } else {
            self.tried_ceiling = true;
            self.ceiling
        }
    }
}

pub(crate) struct Conn {
    pub(crate) handle: ConnHandle,
    pub(crate) peer: SocketAddr,
    pub(crate) recv_id: u16,
    pub(crate) send_id: u16,
    pub(crate) state: State,
    initiator: bool,
    cfg: Config,
    /// The application knows this connection (Connected or Incoming sent).
    pub(crate) known: bool,
    // --- sending ---
    send: SendBuf,
    seq_nr: u16,
    una: u16,
    bytes_in_flight: usize,
    peer_wnd: usize,
    cc: Ledbat,
    rtt: Rtt,
    pacer: Pacer,
    mtu: Mtu,
    resend: VecDeque<u16>,
    rto_at: Option<Instant>,
    timeouts: u32,
    loss_seq: u16,
    dup_acks: u32,
    lost_scan: u16,
    cwnd_limited: bool,
    partial_inflight: Option<u16>,
    pace_at: Option<Instant>,
    force_one: bool,
    // --- receiving ---
    recv: RecvBuf,
    /// Since when, and how many bytes, the peer delivered in order in the
    /// current second (see [`Conn::grow_recv`]).
    rx_epoch: Option<(Instant, usize)>,
    ack_nr: u16,
    syn_seq: u16,
    reply_micro: u32,
    ack_now: bool,
    ack_at: Option<Instant>,
    unacked: u32,
    largest_payload: usize,
    last_wnd: usize,
    // --- closing ---
    close_requested: bool,
    fin_seq: Option<u16>,
    fin_acked: bool,
    fin_wait_until: Option<Instant>,
    peer_fin: Option<u16>,
    eof: bool,
    pub(crate) reason: Option<CloseReason>,
    linger_until: Option<Instant>,
    half_open_until: Option<Instant>,
    // --- application notifications ---
    readable_sent: bool,
    want_writable: bool,
    pub(crate) stats: ConnStats,
}

impl Conn {
    fn new(
        handle: ConnHandle,
        peer: SocketAddr,
        ids: (u16, u16),
        initiator: bool,
        isn: u16,
        cfg: &Config,
    ) -> Conn {
        let packet = cfg.packet_size;
        let max_span = (cfg.recv_buffer / 256).clamp(64, MAX_WINDOW_PACKETS);
        Conn {
            handle,
            peer,
            recv_id: ids.0,
            send_id: ids.1,
            state: if initiator {
                State::SynSent
            } else {
                State::SynRecv
            },
            initiator,
            cfg: cfg.clone(),
            known: false,
            send: SendBuf::new(cfg.send_buffer.min(cfg.min_buffer)),
            seq_nr: isn,
            una: isn,
            bytes_in_flight: 0,
            peer_wnd: packet * 4,
            cc: Ledbat::new(
                cfg.initial_window * packet,
                2 * packet,
                cfg.send_buffer.max(4 * packet),
                cfg.target_delay,
            ),
            rtt: Rtt::new(cfg.min_rto),
            pacer: Pacer::default(),
            mtu: Mtu {
                floor: packet,
                ceiling: cfg.max_packet_size,
                probe: None,
                tried_ceiling: false,
            },
            resend: VecDeque::new(),
            rto_at: None,
            timeouts: 0,
            loss_seq: isn.wrapping_sub(1),
            dup_acks: 0,
            lost_scan: isn,
            cwnd_limited: false,
            partial_inflight: None,
            pace_at: None,
            force_one: false,
            recv: {
                let mut r = RecvBuf::new(cfg.recv_buffer.min(cfg.min_buffer), max_span);
                r.set_floor(cfg.recv_floor);
                r
            },
            rx_epoch: None,
            ack_nr: 0,
            syn_seq: 0,
            reply_micro: 0,
            ack_now: false,
            ack_at: None,
            unacked: 0,
            largest_payload: 0,
            last_wnd: cfg.recv_buffer.min(cfg.min_buffer),
            close_requested: false,
            fin_seq: None,
            fin_acked: false,
            fin_wait_until: None,
            peer_fin: None,
            eof: false,
            reason: None,
            linger_until: None,
            half_open_until: None,
            readable_sent: false,
            want_writable: false,
            stats: ConnStats::default(),
        }
    }

    /// A connection we open: its SYN is queued.
    pub(crate) fn outgoing(
        handle: ConnHandle,
        peer: SocketAddr,
        recv_id: u16,
        isn: u16,
        cfg: &Config,
        now: Instant,
    ) -> Conn {
        let mut c = Conn::new(
            handle,
            peer,
            (recv_id, recv_id.wrapping_add(1)),
            true,
            isn,
            cfg,
        );
        c.send.push_inflight(Sent {
            kind: Kind::Syn,
            payload: Bytes::new(),
            len: 0,
            sent_at: now,
            transmissions: 0,
            sacked: false,
            lost: true,
            probe: false,
        });
        c.resend.push_back(isn);
        c.seq_nr = isn.wrapping_add(1);
        c.known = true;
        c
    }

    /// A connection a peer's SYN opens: its acknowledgement is queued.
    pub(crate) fn incoming(
        handle: ConnHandle,
        peer: SocketAddr,
        syn: &Header,
        isn: u16,
        cfg: &Config,
        now: Instant,
    ) -> Conn {
        let mut c = Conn::new(
            handle,
            peer,
            (syn.conn_id.wrapping_add(1), syn.conn_id),
            false,
            isn,
            cfg,
        );
        c.ack_nr = syn.seq_nr;
        c.syn_seq = syn.seq_nr;
        c.peer_wnd = (syn.wnd_size as usize).max(cfg.packet_size);
        c.ack_now = true;
        c.half_open_until = Some(now + cfg.half_open_timeout);
        c
    }

    fn payload_max(&self) -> usize {
        self.mtu.floor - HEADER_LEN
    }

    fn send_window(&self) -> usize {
        self.cc.window().min(self.peer_wnd)
    }

    fn window_allows(&self, len: usize) -> bool {
        self.bytes_in_flight + len <= self.send_window()
            && self.send.inflight.len() < MAX_WINDOW_PACKETS - 1
    }

    /// The send buffer the connection offers now: twice the congestion
    /// window (what is in flight and as much again to send next), between
    /// the floor and [`Config::send_buffer`]. A peer that acknowledges
    /// nothing never grows the window, so it pins at most the floor.
    fn send_cap(&self) -> usize {
        let most = self.cfg.send_buffer;
        (2 * self.cc.window()).clamp(self.cfg.min_buffer.min(most), most)
    }

    /// Doubles the receive buffer (the window advertised) when the peer
    /// delivered half of it in order within a second: a sender the window
    /// holds back on a path of up to a 2 s round trip does, one that is
    /// slower does not need more, and a peer gets more memory only for
    /// data it actually delivered.
    fn grow_recv(&mut self, delivered: usize, now: Instant) {
        let cap = self.recv.cap();
        if cap >= self.cfg.recv_buffer {
            return;
        }
        let (since, bytes) = match self.rx_epoch {
            Some((t, b)) if now.saturating_duration_since(t) < Duration::from_secs(1) => (t, b),
            _ => (now, 0),
        };
        let bytes = bytes + delivered;
        if bytes >= cap / 2 {
            self.recv.grow((2 * cap).min(self.cfg.recv_buffer));
            self.rx_epoch = Some((now, 0));
            // Tell the peer at once: it may be waiting on the window.
            self.ack_now = true;
        } else {
            self.rx_epoch = Some((since, bytes));
        }
    }

    /// Whether the application may write (and how much fits).
    pub(crate) fn write(&mut self, data: &[u8]) -> usize {
        self.send.set_cap(self.send_cap());
        let n = self.send.write(data, self.payload_max());
        if n < data.len() {
            self.want_writable = true;
        }
        n
    }

    pub(crate) fn write_closed(&self) -> bool {
        self.close_requested || self.state == State::Closed
    }

    /// Copies received data out; `None` when nothing is ready (and no EOF).
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.readable_sent = false;
        if self.recv.ready_bytes() == 0 {
            return self.eof.then_some(0);
        }
        let n = self.recv.read(buf);
        self.after_read();
        Some(n)
    }

    /// Takes received data without copying; `Some(empty)` at EOF.
    pub(crate) fn read_bytes(&mut self, max: usize) -> Option<Bytes> {
        self.readable_sent = false;
        match self.recv.read_bytes(max.max(1)) {
            Some(b) => {
                self.after_read();
                Some(b)
            }
            None => self.eof.then(Bytes::new),
        }
    }

    /// Bytes ready to read.
    pub(crate) fn readable(&self) -> usize {
        self.recv.ready_bytes()
    }

    /// Received bytes held (unread plus out of order): what the endpoint's
    /// budget counts.
    pub(crate) fn recv_held(&self) -> usize {
        self.recv.held_bytes()
    }

    /// Packets dropped for the endpoint's receive budget.
    pub(crate) fn over_budget(&self) -> u64 {
        self.stats.over_budget
    }

    /// What the endpoint's receive budget has left now.
    pub(crate) fn set_recv_room(&mut self, room: usize) {
        self.recv.set_room(room);
    }

    /// A read freed space: tell the peer if its view of our window was small.
    fn after_read(&mut self) {
        let free = self.recv.free();
        let cap = self.recv.cap();
        let step = (cap / 4).max(self.cfg.packet_size);
        // A window too small for a packet (the budget held it there) is
        // opened at once: the peer waits on it.
        let stalled = self.last_wnd < self.payload_max() && free >= self.payload_max();
        if stalled || (free >= self.last_wnd + step && self.last_wnd < cap / 2) {
            self.ack_now = true;
        }
    }

    /// Stop sending after what is buffered (a FIN follows it).
    pub(crate) fn close(&mut self) {
        self.close_requested = true;
    }

    /// Changes the most the path allows.
    pub(crate) fn set_max_packet_size(&mut self, n: usize) {
        let n = n.clamp(crate::config::MIN_PACKET_SIZE, crate::config::MAX_DATAGRAM);
        self.mtu.ceiling = n;
        if self.mtu.floor > n {
            self.mtu.floor = n;
            self.cc.set_min(2 * n);
            self.send.recut(n - HEADER_LEN);
        }
    }

    /// Ends the connection with `reason`; queues a Closed event if the
    /// application knows it.
    pub(crate) fn finish(
        &mut self,
        reason: CloseReason,
        now: Instant,
        events: &mut VecDeque<Event>,
    ) {
        if self.reason.is_some() {
            return;
        }
        self.reason = Some(reason);
        if self.known {
            events.push_back(Event::Closed {
                conn: self.handle,
                reason,
            });
        }
        self.state = State::Closed;
        self.rto_at = None;
        self.ack_at = None;
        self.pace_at = None;
        self.half_open_until = None;
        self.fin_wait_until = None;
        self.resend.clear();
        self.linger_until = Some(
            now + if reason == CloseReason::Finished {
                (2 * self.rtt.rto()).min(Duration::from_secs(5))
            } else {
                Duration::ZERO
            },
        );
    }

    /// Handles a packet addressed to this connection. `ts` is our clock now.
    pub(crate) fn on_packet(
        &mut self,
        p: &Packet<'_>,
        now: Instant,
        ts: u32,
        events: &mut VecDeque<Event>,
    ) {
        let h = &p.header;
        self.stats.packets_received += 1;
        if self.state == State::Closed {
            // Lingering after a clean close: answer a repeated FIN.
            if h.ptype == PacketType::Fin {
                self.ack_now = true;
            }
            return;
        }
        match h.ptype {
            PacketType::Syn => {
                if !self.initiator && h.seq_nr == self.syn_seq {
                    self.ack_now = true;
                }
                return;
            }
            PacketType::Reset => {
                self.finish(CloseReason::Reset, now, events);
                return;
            }
            _ => {}
        }
        // An ack of something never sent is forged or broken: drop it all.
        let last_sent = self.seq_nr.wrapping_sub(1);
        if seq::lt(last_sent, h.ack_nr) {
            self.stats.invalid_packets += 1;
            return;
        }
        let newly = seq::diff(self.una.wrapping_sub(1), h.ack_nr);
        if h.timestamp_us != 0 {
            self.reply_micro = ts.wrapping_sub(h.timestamp_us).max(1);
        }
        match self.state {
            State::SynSent => {
                if newly != 1 {
                    return; // waits for the ack of the SYN
                }
                self.state = State::Connected;
                self.ack_nr = h.seq_nr.wrapping_sub(1);
                events.push_back(Event::Connected(self.handle));
            }
            State::SynRecv => {
                self.state = State::Connected;
                self.half_open_until = None;
                self.known = true;
                events.push_back(Event::Incoming(self.handle));
            }
            _ => {}
        }
        self.peer_wnd = h.wnd_size as usize;
        if h.timestamp_diff_us != 0 && h.timestamp_diff_us != i32::MAX as u32 {
            self.cc.delay_sample(h.timestamp_diff_us, now);
        }
        self.process_acks(p, newly, now);
        if matches!(h.ptype, PacketType::Data | PacketType::Fin) {
            self.on_data(h, p.payload, now, events);
        }
        self.send.set_cap(self.send_cap());
        if self.want_writable && self.send.space() >= (self.send.cap() / 4).max(1) {
            self.want_writable = false;
            events.push_back(Event::Writable(self.handle));
        }
        self.check_done(now, events);
    }

    fn process_acks(&mut self, p: &Packet<'_>, newly: i32, now: Instant) {
        let h = &p.header;
        // Limited by the window (so it may grow) unless the application
        // left us short of data or the peer's window is the smaller one.
        // Data waiting counts: what holds it back is the window or pacing.
        let cwnd_limited = self.cc.window() <= self.peer_wnd
            && (self.cwnd_limited
                || self.send.unsent_bytes() > 0
                || self.bytes_in_flight + self.mtu.floor >= self.send_window());
        let mut acked = 0usize;
        let mut rtt_at: Option<Instant> = None;
        if newly > 0 {
            for _ in 0..newly {
                let seq = self.una;
                let Some(s) = self.send.pop_front() else {
                    break;
                };
                self.una = self.una.wrapping_add(1);
                if !s.sacked {
                    if !s.lost {
                        self.bytes_in_flight -= s.len;
                    }
                    acked += s.len;
                    if s.transmissions == 1 {
                        rtt_at = Some(s.sent_at);
                    }
                }
                self.on_acked(seq, s.kind, s.lost, s.transmissions);
            }
            self.dup_acks = 0;
            self.timeouts = 0;
            self.rto_at = None;
            self.force_one = false;
        } else if newly == 0
            && h.ptype == PacketType::State
            && p.sack.is_none()
            && !self.send.inflight.is_empty()
        {
            self.dup_acks += 1;
        }
        if let Some(mask) = p.sack
            && newly >= 0
        {
            let (a, r) = self.process_sack(h.ack_nr, mask);
            acked += a;
            if r.is_some() {
                rtt_at = r;
            }
        }
        if self.dup_acks >= DUP_THRESHOLD as u32 {
            self.dup_acks = 0;
            if let Some(s) = self.send.inflight.front()
                && !s.lost
                && !s.sacked
                && s.transmissions > 0
            {
                self.mark_lost(0);
            }
        }
        if let Some(at) = rtt_at {
            self.rtt.sample(now.saturating_duration_since(at));
        }
        if acked > 0 {
            self.stats.bytes_acked += acked as u64;
            let rtt_us = if rtt_at.is_some() {
                self.rtt.latest_us()
            } else {
                0.0
            };
            self.cc.on_ack(acked, cwnd_limited, rtt_us);
            self.cwnd_limited = false;
        }
        if self.cfg.pacing {
            self.pacer.set(
                self.cc.window(),
                self.rtt.srtt(),
                self.cc.in_slow_start(),
                self.mtu.floor,
            );
        }
        if !self.send.inflight.is_empty() {
            self.arm_rto(now);
        }
    }

    fn on_acked(&mut self, seq: u16, kind: Kind, lost: bool, transmissions: u32) {
        if kind == Kind::Fin {
            self.fin_acked = true;
        }
        if self.partial_inflight == Some(seq) {
            self.partial_inflight = None;
        }
        if let Some((pseq, size)) = self.mtu.probe
            && pseq == seq
        {
            self.mtu.probe = None;
            if !lost && transmissions == 1 && size > self.mtu.floor {
                // In slow start the window counts packets (ten to begin
                // with, as TCP's), and larger ones now pass.
                if self.cc.in_slow_start() {
                    self.cc.scale(size as f64 / self.mtu.floor as f64);
                }
                self.mtu.floor = size;
                self.cc.set_min(2 * self.mtu.floor);
                self.stats.packet_size = self.mtu.floor;
                // What is written but unsent goes out in the larger packets.
                self.send.recut(self.mtu.floor - HEADER_LEN);
            }
        }
    }

    /// Applies a selective ACK relative to `ack_nr`; marks packets with
    /// enough acknowledged after them lost. Returns bytes newly acked and
    /// the send time of the newest packet it acked (for a round-trip sample).
    fn process_sack(&mut self, ack_nr: u16, mask: &[u8]) -> (usize, Option<Instant>) {
        let mut acked = 0;
        let mut rtt_at = None;
        let mut top = None;
        let base = ack_nr.wrapping_add(2);
        for (byte_i, &byte) in mask.iter().enumerate() {
            if byte == 0 {
                continue;
            }
            for bit in 0..8 {
                if byte & (1 << bit) == 0 {
                    continue;
                }
                let seq = base.wrapping_add((byte_i * 8 + bit) as u16);
                let i = usize::from(seq::dist(self.una, seq));
                if i >= self.send.inflight.len() {
                    break;
                }
                top = Some(i);
                let (len, lost, tx, at) = {
                    let s = &self.send.inflight[i];
                    (s.len, s.lost, s.transmissions, s.sent_at)
                };
                if self.send.sack(i) {
                    if !lost {
                        self.bytes_in_flight -= len;
                    }
                    acked += len;
                    if tx == 1 {
                        rtt_at = Some(at);
                    }
                    let kind = self.send.inflight[i].kind;
                    self.on_acked(seq, kind, lost, tx);
                }
            }
        }
        if let Some(top) = top {
            // The third selectively acked packet from the top: every unacked
            // packet below it has DUP_THRESHOLD or more acked after it.
            let mut count = 0;
            let mut limit = None;
            for i in (0..=top).rev() {
                if self.send.inflight[i].sacked {
                    count += 1;
                    if count == DUP_THRESHOLD {
                        limit = Some(i);
                        break;
                    }
                }
            }
            if let Some(limit) = limit {
                let from = usize::from(seq::dist(self.una, self.lost_scan));
                let from = if from > self.send.inflight.len() {
                    0
                } else {
                    from
                };
                for i in from..limit {
                    let s = &self.send.inflight[i];
                    if !s.sacked && !s.lost && s.transmissions > 0 {
                        self.mark_lost(i);
                    }
                }
                if limit > from {
                    self.lost_scan = self.una.wrapping_add(limit as u16);
                }
            }
        }
        (acked, rtt_at)
    }

    /// Marks in-flight packet `i` lost: it leaves the flight, is queued for
    /// retransmission, and (once per round trip, never for an MTU probe)
    /// halves the window.
    fn mark_lost(&mut self, i: usize) {
        let seq = self.una.wrapping_add(i as u16);
        let s = &mut self.send.inflight[i];
        s.lost = true;
        self.bytes_in_flight -= s.len;
        let was_probe = s.probe && s.transmissions == 1;
        self.resend.push_back(seq);
        self.stats.fast_retransmits += 1;
        if was_probe
            && let Some((pseq, size)) = self.mtu.probe
            && pseq == seq
        {
            self.mtu.ceiling = size - 1;
            self.mtu.probe = None;
            return;
        }
        if seq::lt(self.loss_seq, seq) {
            self.cc.on_loss();
            self.loss_seq = self.seq_nr.wrapping_sub(1);
            self.stats.loss_events += 1;
        }
    }

    fn on_data(&mut self, h: &Header, payload: &[u8], now: Instant, events: &mut VecDeque<Event>) {
        if self.eof {
            self.ack_now = true;
            return;
        }
        let expected = self.ack_nr.wrapping_add(1);
        let offset = seq::dist(expected, h.seq_nr);
        if let Some(f) = self.peer_fin
            && seq::lt(f, h.seq_nr)
        {
            self.stats.out_of_window += 1;
            return;
        }
        let had_gap = self.recv.held() > 0;
        let ready = self.recv.ready_bytes();
        match self.recv.on_packet(offset, payload) {
            Arrival::InOrder(n) => {
                self.grow_recv(self.recv.ready_bytes() - ready, now);
                if h.ptype == PacketType::Fin && offset == 0 {
                    self.peer_fin = Some(h.seq_nr);
                }
                self.ack_nr = self.ack_nr.wrapping_add(n);
                self.stats.bytes_received += payload.len() as u64;
                self.unacked += u32::from(n);
                if payload.len() > self.largest_payload {
                    self.largest_payload = payload.len();
                }
                if had_gap
                    || n > 1
                    || self.unacked >= self.cfg.delayed_ack_packets
                    || payload.len() < self.largest_payload
                {
                    self.ack_now = true;
                } else if self.ack_at.is_none() {
                    self.ack_at = Some(now + self.cfg.delayed_ack);
                }
                if self.peer_fin == Some(self.ack_nr) {
                    self.eof = true;
                    self.ack_now = true;
                }
                if !self.readable_sent && (self.recv.ready_bytes() > 0 || self.eof) {
                    self.readable_sent = true;
                    events.push_back(Event::Readable(self.handle));
                }
            }
            Arrival::Buffered => {
                if h.ptype == PacketType::Fin && self.peer_fin.is_none() {
                    self.peer_fin = Some(h.seq_nr);
                }
                self.stats.bytes_received += payload.len() as u64;
                self.ack_now = true;
            }
            Arrival::Duplicate => {
                self.stats.duplicates += 1;
                self.ack_now = true;
            }
            Arrival::OutOfWindow | Arrival::NoRoom => {
                self.stats.out_of_window += 1;
                self.ack_now = true;
            }
            Arrival::OverBudget => {
                self.stats.over_budget += 1;
                self.ack_now = true;
            }
        }
    }

    fn check_done(&mut self, now: Instant, events: &mut VecDeque<Event>) {
        if self.state != State::Connected || !self.fin_acked {
            return;
        }
        if self.eof {
            self.finish(CloseReason::Finished, now, events);
            // The peer's FIN still needs our acknowledgement.
            self.ack_now = true;
        } else if self.fin_wait_until.is_none() {
            self.fin_wait_until = Some(now + self.cfg.fin_wait);
        }
    }

    /// The earliest instant this connection needs [`Conn::on_timeout`].
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        [
            self.rto_at,
            self.ack_at,
            self.pace_at,
            self.linger_until,
            self.half_open_until,
            self.fin_wait_until,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs the timers that are due.
    pub(crate) fn on_timeout(
        &mut self,
        now: Instant,
        events: &mut VecDeque<Event>,
    ) -> TimeoutOutcome {
        if self.linger_until.is_some_and(|t| t <= now) {
            return TimeoutOutcome::Remove;
        }
        if self.state == State::Closed {
            return TimeoutOutcome::Keep;
        }
        if self.half_open_until.is_some_and(|t| t <= now) {
            self.finish(CloseReason::TimedOut, now, events);
            return TimeoutOutcome::Remove;
        }
        if self.fin_wait_until.is_some_and(|t| t <= now) {
            self.finish(CloseReason::TimedOut, now, events);
            return TimeoutOutcome::Keep;
        }
        if self.pace_at.is_some_and(|t| t <= now) {
            self.pace_at = None;
        }
        if self.ack_at.is_some_and(|t| t <= now) {
            self.ack_at = None;
            self.ack_now = true;
        }
        if self.rto_at.is_some_and(|t| t <= now) {
            self.rto_at = None;
            self.on_rto(now, events);
        }
        TimeoutOutcome::Keep
    }

    fn on_rto(&mut self, now: Instant, events: &mut VecDeque<Event>) {
        if self.state == State::SynSent {
            if self.timeouts >= self.cfg.syn_retries {
                self.finish(CloseReason::ConnectFailed, now, events);
                return;
            }
            self.timeouts += 1;
            self.rtt.back_off();
            if let Some(s) = self.send.inflight.front_mut()
                && !s.lost
            {
                s.lost = true;
                self.resend.push_back(self.una);
            }
            self.arm_rto(now);
            return;
        }
        let outstanding = self.send.inflight.iter().any(|s| !s.sacked);
        if !outstanding {
            if self.send.next_len().is_some() && self.bytes_in_flight == 0 {
                // Zero-window probe: one packet despite the peer's window.
                self.force_one = true;
                self.rtt.back_off();
                self.arm_rto(now);
            }
            return;
        }
        self.timeouts += 1;
        self.stats.timeouts += 1;
        if self.timeouts > self.cfg.max_timeouts {
            self.finish(CloseReason::TimedOut, now, events);
            return;
        }
        // A lone outstanding MTU probe is taken for too big, not congestion.
        let head_probe = self
            .send
            .inflight
            .front()
            .is_some_and(|s| s.probe && s.transmissions == 1)
            && self.send.inflight.len() == 1;
        if let Some((_, size)) = self.mtu.probe {
            self.mtu.ceiling = size - 1;
            self.mtu.probe = None;
        }
        self.resend.clear();
        for i in 0..self.send.inflight.len() {
            let s = &mut self.send.inflight[i];
            if s.sacked {
                continue;
            }
            if !s.lost {
                s.lost = true;
            }
            self.resend.push_back(self.una.wrapping_add(i as u16));
        }
        self.bytes_in_flight = 0;
        self.dup_acks = 0;
        if !head_probe {
            self.cc.on_timeout(self.mtu.floor);
            self.loss_seq = self.seq_nr.wrapping_sub(1);
            self.rtt.back_off();
        }
        self.pacer = Pacer::default();
        self.arm_rto(now);
    }

    /// A snapshot of the counters and estimates.
    pub(crate) fn snapshot(&self) -> ConnStats {
        let mut s = self.stats.clone();
        s.cwnd = self.cc.window();
        s.srtt = self.rtt.srtt();
        s.rto = self.rtt.rto();
        s.queuing_delay = self.cc.queuing_delay();
        s.packet_size = self.mtu.floor;
        s.peer_window = self.peer_wnd;
        s.bytes_in_flight = self.bytes_in_flight;
        s.send_buffered = self.send.buffered();
        s.recv_buffered = self.recv.held_bytes();
        s.reorder_held = self.recv.held();
        s.slow_start = self.cc.in_slow_start();
        s
    }
}
