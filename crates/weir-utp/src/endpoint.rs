//! The endpoint: many connections on one UDP socket.
//!
//! Connections are keyed by (peer address, receive connection id). The
//! endpoint routes each datagram to its connection (or opens one for a
//! SYN), keeps one timer per connection in an ordered set, round-robins
//! connections that have something to send, and queues their events.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;

use crate::config::Config;
use crate::conn::{Conn, State, TimeoutOutcome};
use crate::packet::{self, DecodeError, PacketType};
use crate::{CloseReason, ConnHandle, ConnStats, ConnectError, Event, StreamError};

/// A datagram to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Where to.
    pub dst: SocketAddr,
    /// The whole UDP payload.
    pub data: Bytes,
}

/// Endpoint-wide counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Datagrams that did not decode as uTP.
    pub malformed: u64,
    /// Datagrams for no known connection (other than SYNs).
    pub unknown_conn: u64,
    /// Connections accepted (SYNs that opened one).
    pub accepted: u64,
    /// SYNs ignored because the endpoint held `max_connections`.
    pub syn_refused: u64,
    /// Unconfirmed accepted connections dropped for newer ones.
    pub half_open_evicted: u64,
    /// Data packets dropped because their connection was past its floor
    /// and the receive budget had no room ([`Config::recv_budget`]).
    pub over_budget: u64,
}

/// Many uTP connections sharing one UDP socket. See the crate docs for the
/// driving loop.
pub struct Endpoint {
    cfg: Config,
    conns: BTreeMap<ConnHandle, Conn>,
    by_key: BTreeMap<(SocketAddr, u16), ConnHandle>,
    last_key: Option<((SocketAddr, u16), ConnHandle)>,
    timers: BTreeSet<(Instant, ConnHandle)>,
    armed: BTreeMap<ConnHandle, Instant>,
    tx_queue: VecDeque<ConnHandle>,
    in_tx: BTreeSet<ConnHandle>,
    out: VecDeque<Transmit>,
    events: VecDeque<Event>,
    half_open: VecDeque<ConnHandle>,
    half_open_count: usize,
    next_handle: u64,
    rng: fastrand::Rng,
    epoch: Option<Instant>,
    ts_offset: u32,
    stats: EndpointStats,
    /// Received bytes every connection holds (unread plus out of order).
    recv_held: usize,
}

impl Endpoint {
    /// An endpoint with `config`; `seed` drives connection ids and initial
    /// sequence numbers (use a fresh random seed in production, a fixed one
    /// in tests).
    pub fn new(config: Config, seed: u64) -> Endpoint {
        let mut rng = fastrand::Rng::with_seed(seed);
        let ts_offset = rng.u32(..);
        Endpoint {
            cfg: config.sanitized(),
            conns: BTreeMap::new(),
            by_key: BTreeMap::new(),
            last_key: None,
            timers: BTreeSet::new(),
            armed: BTreeMap::new(),
            tx_queue: VecDeque::new(),
            in_tx: BTreeSet::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            half_open: VecDeque::new(),
            half_open_count: 0,
            next_handle: 1,
            rng,
            epoch: None,
            ts_offset,
            stats: EndpointStats::default(),
            recv_held: 0,
        }
    }

    /// The settings in force (sizes clamped to what works).
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &EndpointStats {
        &self.stats
    }

    /// Received bytes all connections hold now (unread plus out of order),
    /// what [`Config::recv_budget`] bounds.
    pub fn recv_held(&self) -> usize {
        self.recv_held
    }

    /// What the receive budget has left now.
    fn recv_room(&self) -> usize {
        self.cfg.recv_budget.saturating_sub(self.recv_held)
    }

    /// Connections held (all states).
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Whether no connection is held.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Our clock in microseconds as sent in headers (never 0).
    fn ts(&mut self, now: Instant) -> u32 {
        let epoch = *self.epoch.get_or_insert(now);
        let us = now.saturating_duration_since(epoch).as_micros() as u32;
        match us.wrapping_add(self.ts_offset) {
            0 => 1,
            t => t,
        }
    }

    fn alloc_handle(&mut self) -> ConnHandle {
        let h = ConnHandle(self.next_handle);
        self.next_handle += 1;
        h
    }

    /// Opens a connection to `peer`; its SYN goes out with the next
    /// [`Endpoint::poll_transmit`]. [`Event::Connected`] follows when the peer
    /// answers, [`Event::Closed`] with [`CloseReason::ConnectFailed`] if it
    /// never does. Data may be written at once; it is sent once connected.
    pub fn connect(&mut self, peer: SocketAddr, now: Instant) -> Result<ConnHandle, ConnectError> {
        if self.conns.len() >= self.cfg.max_connections {
            return Err(ConnectError::TooManyConnections);
        }
        let mut recv_id = None;
        for _ in 0..64 {
            let id = self.rng.u16(..);
            if !self.by_key.contains_key(&(peer, id)) {
                recv_id = Some(id);
                break;
            }
        }
        let recv_id = recv_id.ok_or(ConnectError::NoFreeId)?;
        let h = self.alloc_handle();
        let isn = self.rng.u16(..);
        let conn = Conn::outgoing(h, peer, recv_id, isn, &self.cfg, now);
        self.by_key.insert((peer, recv_id), h);
        self.conns.insert(h, conn);
        self.after(h, now);
        Ok(h)
    }

    /// Handles one received datagram (the caller checked [`crate::is_utp`]
    /// if the socket is shared). Errors only say the datagram was not valid
    /// uTP; it has been dropped.
    pub fn handle_datagram(
        &mut self,
        from: SocketAddr,
        data: &[u8],
        now: Instant,
    ) -> Result<(), DecodeError> {
        let p = match packet::decode(data) {
            Ok(p) => p,
            Err(e) => {
                self.stats.malformed += 1;
                return Err(e);
            }
        };
        let id = p.header.conn_id;
        // A SYN names the id the initiator receives on; our side of it is
        // that id + 1.
        let key = if p.header.ptype == PacketType::Syn {
            (from, id.wrapping_add(1))
        } else {
            (from, id)
        };
        let h = match self.last_key {
            Some((k, h)) if k == key => Some(h),
            _ => self.by_key.get(&key).copied(),
        };
        let ts = self.ts(now);
        match h {
            Some(h) => {
                self.last_key = Some((key, h));
                let room = self.recv_room();
                if let Some(c) = self.conns.get_mut(&h) {
                    let was_half_open = c.state == State::SynRecv;
                    let (held, over) = (c.recv_held(), c.over_budget());
                    c.set_recv_room(room);
                    c.on_packet(&p, now, ts, &mut self.events);
                    self.recv_held = self.recv_held - held + c.recv_held();
                    self.stats.over_budget += c.over_budget() - over;
                    if was_half_open && c.state != State::SynRecv {
                        self.half_open_count -= 1;
                    }
                }
                self.after(h, now);
            }
            None if p.header.ptype == PacketType::Syn => self.accept(from, &p.header, now),
            None => self.stats.unknown_conn += 1,
        }
        Ok(())
    }

    fn accept(&mut self, from: SocketAddr, syn: &packet::Header, now: Instant) {
        if self.conns.len() >= self.cfg.max_connections {
            self.stats.syn_refused += 1;
            return;
        }
        while self.half_open_count >= self.cfg.max_half_open {
            let Some(old) = self.half_open.pop_front() else {
                break;
            };
            if self
                .conns
                .get(&old)
                .is_some_and(|c| c.state == State::SynRecv)
            {
                self.remove(old);
                self.stats.half_open_evicted += 1;
            }
        }
        let h = self.alloc_handle();
        let isn = self.rng.u16(..);
        let c = Conn::incoming(h, from, syn, isn, &self.cfg, now);
        self.by_key.insert((from, c.recv_id), h);
        self.conns.insert(h, c);
        self.half_open.push_back(h);
        self.half_open_count += 1;
        if self.half_open.len() > 2 * self.cfg.max_half_open + 16 {
            let conns = &self.conns;
            self.half_open
                .retain(|h| conns.get(h).is_some_and(|c| c.state == State::SynRecv));
        }
        self.stats.accepted += 1;
        self.after(h, now);
    }

    fn remove(&mut self, h: ConnHandle) {
        if let Some(c) = self.conns.remove(&h) {
            self.recv_held -= c.recv_held();
            if c.state == State::SynRecv {
                self.half_open_count -= 1;
            }
            self.by_key.remove(&(c.peer, c.recv_id));
            if self.last_key.is_some_and(|(_, lh)| lh == h) {
                self.last_key = None;
            }
        }
        if let Some(t) = self.armed.remove(&h) {
            self.timers.remove(&(t, h));
        }
        self.in_tx.remove(&h);
    }

    /// Bookkeeping after anything touched connection `h`: its timer, the
    /// send queue, removal once over.
    fn after(&mut self, h: ConnHandle, now: Instant) {
        let Some(c) = self.conns.get(&h) else {
            return;
        };
        let deadline = c.next_deadline();
        let wants = c.wants_tx(now);
        let old = self.armed.get(&h).copied();
        if old != deadline {
            if let Some(t) = old {
                self.timers.remove(&(t, h));
                self.armed.remove(&h);
            }
            if let Some(t) = deadline {
                self.timers.insert((t, h));
                self.armed.insert(h, t);
            }
        }
        if wants && self.in_tx.insert(h) {
            self.tx_queue.push_back(h);
        }
    }

    /// The next datagram to send, if any. Call until `None` after every
    /// other call (packets are timestamped here, so send them at once).
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        if let Some(t) = self.out.pop_front() {
            return Some(t);
        }
        let ts = self.ts(now);
        let room = self.recv_room();
        let mut tries = self.tx_queue.len();
        while tries > 0 {
            tries -= 1;
            let h = self.tx_queue.pop_front()?;
            let Some(c) = self.conns.get_mut(&h) else {
                self.in_tx.remove(&h);
                continue;
            };
            // The window it advertises answers to the budget too.
            c.set_recv_room(room);
            match c.poll_transmit(now, ts) {
                Some(data) => {
                    let dst = c.peer;
                    // Round robin: it goes to the back if it may have more.
                    self.tx_queue.push_back(h);
                    self.after(h, now);
                    return Some(Transmit { dst, data });
                }
                None => {
                    self.in_tx.remove(&h);
                    self.after(h, now);
                }
            }
        }
        None
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Endpoint::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|&(t, _)| t)
    }

    /// Runs every timer due at `now` (retransmissions, delayed ACKs,
    /// pacing, connect and close timeouts).
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(t, h)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            self.armed.remove(&h);
            let Some(c) = self.conns.get_mut(&h) else {
                continue;
            };
            let was_half_open = c.state == State::SynRecv;
            let outcome = c.on_timeout(now, &mut self.events);
            if was_half_open && c.state != State::SynRecv {
                self.half_open_count -= 1;
            }
            match outcome {
                TimeoutOutcome::Remove => self.remove(h),
                TimeoutOutcome::Keep => self.after(h, now),
            }
        }
    }

    fn conn_mut(&mut self, h: ConnHandle) -> Result<&mut Conn, StreamError> {
        match self.conns.get_mut(&h) {
            None => Err(StreamError::UnknownConnection),
            Some(c) => match c.reason {
                Some(r) => Err(StreamError::Closed(r)),
                None => Ok(c),
            },
        }
    }

    /// Queues as much of `data` as the send buffer takes; returns how much
    /// (0 when full: wait for [`Event::Writable`]).
    pub fn write(
        &mut self,
        h: ConnHandle,
        data: &[u8],
        now: Instant,
    ) -> Result<usize, StreamError> {
        let c = self.conn_mut(h)?;
        if c.write_closed() {
            return Err(StreamError::WriteAfterClose);
        }
        let n = c.write(data);
        self.after(h, now);
        Ok(n)
    }

    /// Copies received data into `buf`: `Ok(n > 0)`, `Ok(0)` at the end of
    /// the peer's stream (for a non-empty `buf`), [`StreamError::WouldBlock`]
    /// when nothing is ready (wait for [`Event::Readable`]).
    pub fn read(
        &mut self,
        h: ConnHandle,
        buf: &mut [u8],
        now: Instant,
    ) -> Result<usize, StreamError> {
        let room = self.recv_room();
        let c = self
            .conns
            .get_mut(&h)
            .ok_or(StreamError::UnknownConnection)?;
        let held = c.recv_held();
        c.set_recv_room(room);
        let r = c.read(buf);
        self.recv_held -= held - c.recv_held();
        let reason = c.reason;
        self.after(h, now);
        match (r, reason) {
            (Some(n), _) => Ok(n),
            (None, Some(r)) => Err(StreamError::Closed(r)),
            (None, None) => Err(StreamError::WouldBlock),
        }
    }

    /// Takes received data without copying (at most `max` bytes): an empty
    /// buffer at the end of the stream, [`StreamError::WouldBlock`] when
    /// nothing is ready.
    pub fn read_bytes(
        &mut self,
        h: ConnHandle,
        max: usize,
        now: Instant,
    ) -> Result<Bytes, StreamError> {
        let room = self.recv_room();
        let c = self
            .conns
            .get_mut(&h)
            .ok_or(StreamError::UnknownConnection)?;
        let held = c.recv_held();
        c.set_recv_room(room);
        let r = c.read_bytes(max);
        self.recv_held -= held - c.recv_held();
        let reason = c.reason;
        self.after(h, now);
        match (r, reason) {
            (Some(b), _) => Ok(b),
            (None, Some(r)) => Err(StreamError::Closed(r)),
            (None, None) => Err(StreamError::WouldBlock),
        }
    }

    /// Bytes ready to read on `h`.
    pub fn readable(&self, h: ConnHandle) -> usize {
        self.conns.get(&h).map_or(0, Conn::readable)
    }

    /// Ends our side: what is buffered is sent, then a FIN. Reading goes on
    /// until the peer's FIN; [`Event::Closed`] with
    /// [`CloseReason::Finished`] follows when both ends are done.
    pub fn close(&mut self, h: ConnHandle, now: Instant) -> Result<(), StreamError> {
        self.conn_mut(h)?.close();
        self.after(h, now);
        Ok(())
    }

    /// Drops the connection at once, telling the peer with a RESET.
    /// [`Event::Closed`] with [`CloseReason::Aborted`] follows.
    pub fn abort(&mut self, h: ConnHandle, now: Instant) -> Result<(), StreamError> {
        let ts = self.ts(now);
        self.conn_mut(h)?;
        if let Some(c) = self.conns.get_mut(&h) {
            if c.state != State::SynSent {
                let data = c.reset_packet(ts);
                let dst = c.peer;
                self.out.push_back(Transmit { dst, data });
            }
            c.finish(CloseReason::Aborted, now, &mut self.events);
        }
        self.remove(h);
        Ok(())
    }

    /// The peer of `h`.
    pub fn peer_addr(&self, h: ConnHandle) -> Option<SocketAddr> {
        self.conns.get(&h).map(|c| c.peer)
    }

    /// Counters and estimates of `h`.
    pub fn conn_stats(&self, h: ConnHandle) -> Option<ConnStats> {
        self.conns.get(&h).map(Conn::snapshot)
    }

    /// Sets the largest datagram the path to `h`'s peer allows (see
    /// [`Config::max_packet_size`]); best set before writing.
    pub fn set_max_packet_size(&mut self, h: ConnHandle, n: usize) -> Result<(), StreamError> {
        self.conn_mut(h)?.set_max_packet_size(n);
        Ok(())
    }
}
