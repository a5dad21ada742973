//! Connections: admitting incoming ones, choosing dials under the limits,
//! handing established ones to their protocol core, and what they carry.

use std::net::SocketAddr;
use std::time::Instant;

use weir_bt::wire::Message;
use weir_core::close::CloseReason;
use weir_core::peers::{Admit, ConnCounts};
use weir_core::storage::StorageEvent;
use weir_ed2k::packet::Packet;

use crate::session::{Conn, Session, Stage};

/// A BitTorrent peer that exchanged no block for this long since it
/// connected gives its slot to a newcomer when the slots are full (long
/// enough for an honest peer's bitfield, interest and first unchoke).
pub(crate) const EVICT_IDLE_AFTER: std::time::Duration = std::time::Duration::from_secs(20);
use crate::types::{ConnId, Established, Hello, Link, Proto, Refused, SessionEvent, TransferId};

impl Session {
    fn alloc_conn(&mut self) -> ConnId {
        let c = self.next_conn;
        self.next_conn += 1;
        c
    }

    fn count(&mut self, transfer: Option<TransferId>, stage: Stage, up: bool) {
        fn bump(c: &mut ConnCounts, stage: Stage, up: bool) {
            let n = match stage {
                Stage::Dialing => &mut c.dialing,
                Stage::Handshaking => &mut c.handshaking,
                Stage::Peer => &mut c.peers,
            };
            if up {
                *n += 1;
            } else {
                *n = n.saturating_sub(1);
            }
        }
        bump(&mut self.counts, stage, up);
        if let Some(t) = transfer.and_then(|id| self.transfers.get_mut(&id)) {
            bump(&mut t.counts, stage, up);
        }
    }

    /// A connection was accepted from `addr` on `proto`'s listener. `Ok`:
    /// run its handshake under this id (and close the ids in the
    /// [`SessionEvent::Close`] events that may follow: the oldest
    /// handshakes give way when too many are in progress).
    pub fn incoming(
        &mut self,
        proto: Proto,
        addr: SocketAddr,
        now: Instant,
    ) -> Result<ConnId, Refused> {
        self.now = Some(now);
        let ip = weir_core::peers::canonical(addr.ip());
        if !self.cfg.policy.allows(ip) {
            return Err(Refused::Outside);
        }
        if self.bans.contains(ip) {
            return Err(Refused::Banned);
        }
        let mut admit = self.cfg.global.admit_incoming(&self.counts);
        if admit == Admit::Refuse && proto == Proto::Bt {
            // Full: its handshake starts all the same (within the
            // handshake limit), and once it is done a peer of no use may
            // give way to it (`admit`): by then a flood of newcomers has
            // often been sorted out (violators dropped, slot wasters
            // marked). Refused here, an honest peer would wait for its
            // redial (2 s and more).
            admit = self.cfg.global.admit_handshake(&self.counts);
        }
        match admit {
            Admit::Refuse => return Err(Refused::Full),
            Admit::ReplaceOldest => {
                let oldest = self
                    .conns
                    .iter()
                    .filter(|(_, c)| c.stage == Stage::Handshaking)
                    .min_by_key(|(id, c)| (c.since, **id))
                    .map(|(id, _)| *id);
                if let Some(old) = oldest {
                    self.forget_conn(old, now, None);
                    self.events.push_back(SessionEvent::Close {
                        conn: old,
                        reason: CloseReason::TooManyHandshakes,
                    });
                }
            }
            Admit::Accept => {}
        }
        let conn = self.alloc_conn();
        self.conns.insert(
            conn,
            Conn {
                proto,
                addr,
                transfer: None,
                stage: Stage::Handshaking,
                outgoing: false,
                since: now,
                link: Link::default(),
            },
        );
        self.count(None, Stage::Handshaking, true);
        Ok(conn)
    }

    /// A connection's handshake finished: it becomes a peer of its
    /// protocol core, or is refused (the runtime then closes it; the
    /// session has forgotten it).
    pub fn established(
        &mut self,
        conn: ConnId,
        info: Established,
        now: Instant,
    ) -> Result<(), Refused> {
        self.now = Some(now);
        let c = self.conns.get(&conn).cloned().ok_or(Refused::UnknownConn)?;
        let r = self.admit(conn, &c, info, now);
        if let Err(e) = &r {
            self.forget_conn(conn, now, Some(e.to_string()));
        }
        // A dial's half-open slot is free: a pass for its transfer (or
        // every transfer, when one waits on the session's limits). An
        // accepted connection held none.
        if c.outgoing {
            self.arm_dial_after(c.transfer, now);
        }
        self.dial_due(now);
        r
    }

    fn admit(
        &mut self,
        conn: ConnId,
        c: &Conn,
        info: Established,
        now: Instant,
    ) -> Result<(), Refused> {
        match info {
            Established::Ed2kServer => {
                self.move_stage(conn, c, Stage::Peer);
                self.server_up(conn);
                Ok(())
            }
            Established::Ed2k { local_ip } => {
                if !self.cfg.global.admit_peer(&self.counts) {
                    return Err(Refused::Full);
                }
                // An accepted connection stays in its handshake (counted
                // against the handshake limit, giving way to newer ones,
                // closed by the core's hello timeout) until the peer's
                // hello arrives; one we dialled is a peer at once.
                if c.outgoing {
                    self.move_stage(conn, c, Stage::Peer);
                }
                if c.outgoing
                    && let Some(b) = self.book_of(c)
                {
                    b.connected(c.addr, now);
                }
                let (addr, outgoing) = (c.addr, c.outgoing);
                self.with_ed2k(now, |e| e.add_conn(conn, addr, local_ip, outgoing, now));
                Ok(())
            }
            Established::Bt {
                theirs,
                preamble_sent,
            } => {
                let id = match c.transfer {
                    Some(id) => id,
                    None => *self
                        .by_info_hash
                        .get(&theirs.info_hash)
                        .ok_or(Refused::UnknownTorrent)?,
                };
                let t = self.transfers.get(&id).ok_or(Refused::UnknownTorrent)?;
                let b = t.bt.as_ref().ok_or(Refused::UnknownTorrent)?;
                if b.meta.info_hash != theirs.info_hash {
                    return Err(Refused::UnknownTorrent);
                }
                if theirs.peer_id == self.cfg.peer_id {
                    return Err(Refused::Ourselves);
                }
                if !t.running() || !t.checked {
                    return Err(Refused::NotNow);
                }
                let transfer_full = t.counts.peers >= self.cfg.per_transfer.max_peers;
                let full = transfer_full || !self.cfg.global.admit_peer(&self.counts);
                if self.bans.contains(weir_core::peers::canonical(c.addr.ip())) {
                    return Err(Refused::Banned);
                }
                if b.view()
                    .awake()
                    .is_some_and(|t| t.has_peer_id(&theirs.peer_id))
                {
                    return Err(Refused::Duplicate);
                }
                // Full: a peer that has been of no use for a while gives
                // way (this transfer's first; another's when only the
                // session's limit is reached). Its close is under way, so
                // for that short while one more is counted.
                if full
                    && !self.evict_idle_bt(Some(id), now)
                    && (transfer_full || !self.evict_idle_bt(None, now))
                {
                    return Err(Refused::Full);
                }
                // Counted against the transfer from now on.
                self.count(c.transfer, c.stage, false);
                self.count(Some(id), Stage::Peer, true);
                if let Some(cc) = self.conns.get_mut(&conn) {
                    cc.transfer = Some(id);
                    cc.stage = Stage::Peer;
                }
                let t = self.transfers.get_mut(&id).expect("checked");
                let b = t.bt.as_mut().expect("checked");
                if c.outgoing {
                    b.book.connected(c.addr, now);
                }
                b.torrent()
                    .add_peer_after(conn, c.addr, &theirs, preamble_sent, now);
                self.pump_bt(id, now);
                Ok(())
            }
        }
    }

    /// Closes one BitTorrent peer that exchanged no block in
    /// [`EVICT_IDLE_AFTER`] (of transfer `only`, or of any), to make room
    /// for a newcomer; whether one was found.
    fn evict_idle_bt(&mut self, only: Option<TransferId>, now: Instant) -> bool {
        let ids: Vec<TransferId> = match only {
            Some(id) => vec![id],
            None => self.transfers.keys().copied().collect(),
        };
        for id in ids {
            let evicted = self
                .transfers
                .get_mut(&id)
                .and_then(|t| t.bt.as_mut())
                .and_then(|b| b.awake_mut())
                .is_some_and(|t| t.evict_idle(EVICT_IDLE_AFTER, now));
            if evicted {
                self.pump_bt(id, now);
                return true;
            }
        }
        false
    }

    fn move_stage(&mut self, conn: ConnId, c: &Conn, to: Stage) {
        self.count(c.transfer, c.stage, false);
        self.count(c.transfer, to, true);
        if let Some(cc) = self.conns.get_mut(&conn) {
            cc.stage = to;
        }
    }

    fn book_of(&mut self, c: &Conn) -> Option<&mut weir_core::peers::PeerBook> {
        match (c.proto, c.transfer) {
            (Proto::Bt, Some(id)) => self
                .transfers
                .get_mut(&id)?
                .bt
                .as_mut()
                .map(|b| &mut b.book),
            (Proto::Ed2k, Some(id)) => self
                .transfers
                .get_mut(&id)?
                .ed2k
                .as_mut()
                .map(|e| &mut e.book),
            (Proto::Ed2k, None) => Some(&mut self.callbacks),
            _ => None,
        }
    }

    /// A dial failed (refused, timed out, bad handshake).
    pub fn dial_failed(&mut self, conn: ConnId, reason: &str, now: Instant) {
        self.now = Some(now);
        self.forget_conn(conn, now, Some(reason.to_string()));
        self.dial_due(now);
    }

    /// A connection ended (`error`: why, when it was not an orderly close).
    pub fn closed(&mut self, conn: ConnId, error: Option<String>, now: Instant) {
        self.now = Some(now);
        self.forget_conn(conn, now, error);
        self.dial_due(now);
    }

    /// Forgets a connection wherever it is (idempotent).
    pub(crate) fn forget_conn(&mut self, conn: ConnId, now: Instant, error: Option<String>) {
        if self.lending
            && self
                .conns
                .get(&conn)
                .is_some_and(|c| c.proto == Proto::Bt && c.stage == Stage::Peer)
        {
            // Its torrent's content is lent out: after it comes back.
            self.deferred.push((conn, error));
            return;
        }
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        self.count(c.transfer, c.stage, false);
        match c.proto {
            Proto::Ed2kServer => {
                self.server_lost(conn, error.as_deref().unwrap_or("closed"), now);
                return;
            }
            Proto::Bt if c.stage == Stage::Peer => {
                if let Some(id) = c.transfer
                    && let Some(b) = self.transfers.get_mut(&id).and_then(|t| t.bt.as_mut())
                {
                    match (error, b.awake_mut()) {
                        (Some(e), Some(t)) => t.peer_error(conn, e, now),
                        (None, Some(t)) => t.remove_peer(conn, now),
                        (_, None) => {}
                    }
                    self.pump_bt(id, now);
                }
            }
            // An accepted one waiting for its hello is in the core too.
            Proto::Ed2k if c.stage == Stage::Handshaking => {
                self.with_ed2k(now, |e| e.remove_conn(conn, now));
            }
            Proto::Ed2k if c.stage == Stage::Peer => {
                self.with_ed2k(now, |e| match error {
                    Some(err) => e.conn_error(conn, err, now),
                    None => e.remove_conn(conn, now),
                });
            }
            _ => {}
        }
        if c.outgoing
            && let Some(b) = self.book_of(&c)
        {
            if c.stage == Stage::Dialing {
                b.dial_failed(c.addr, now);
            } else {
                b.disconnected(c.addr, now);
            }
        }
        // A slot is free and the peer waits out its reconnect delay: a
        // pass at the next timeout dials in the slot and arms the redial.
        // The runtime's `closed` passes at once anyway; a connection the
        // session closed itself (idle, evicted, a protocol error) gets no
        // `closed` back, and without this the peer was never dialled again
        // once the pass timer had nothing else to wait for: a download
        // whose only peer went idle for 3 minutes stopped for good.
        // An accepted connection that never became a transfer's peer held
        // no dial room: nothing to pass over (a flood of junk connections
        // must not buy a walk over every transfer each).
        if c.outgoing || c.transfer.is_some() {
            self.arm_dial_after(c.transfer, now);
        }
    }

    /// Arms the dial pass a freed slot of `transfer` calls for: that
    /// transfer alone (its peer's redial, a slot under its own limits),
    /// unless another transfer was left waiting on the session-wide
    /// limits or the connection was for no transfer (an eD2k callback):
    /// then every transfer. In a session of thousands with peers coming
    /// and going, a close costs one visit, not one per transfer.
    pub(crate) fn arm_dial_after(&mut self, transfer: Option<TransferId>, now: Instant) {
        match transfer {
            Some(id) if !self.global_starved => self.ask_dial(id, now),
            _ => self.next_dial = Some(self.next_dial.map_or(now, |t| t.min(now))),
        }
    }

    /// Runs the dial pass that is due by now, if any: the full one, else
    /// the one over the transfers that asked.
    pub(crate) fn dial_due(&mut self, now: Instant) {
        if self.next_dial.is_some_and(|t| t <= now) {
            self.next_dial = None;
            self.dial_more(now);
        } else if self.dial_asked_at.is_some_and(|t| t <= now) {
            self.dial_those_asking(now);
        }
    }

    /// Closes every connection of a transfer (paused, failed, removed).
    pub(crate) fn close_transfer_conns(
        &mut self,
        id: TransferId,
        reason: CloseReason,
        now: Instant,
    ) {
        let conns: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.transfer == Some(id))
            .map(|(k, _)| *k)
            .collect();
        for conn in conns {
            self.forget_conn(conn, now, None);
            self.events.push_back(SessionEvent::Close {
                conn,
                reason: reason.clone(),
            });
        }
    }

    /// BitTorrent messages decoded from one read.
    pub fn bt_messages(&mut self, conn: ConnId, msgs: Vec<Message>, now: Instant) {
        self.now = Some(now);
        let Some(id) = self.peer_transfer(conn, Proto::Bt) else {
            return;
        };
        if let Some(b) = self.transfers.get_mut(&id).and_then(|t| t.bt.as_mut()) {
            let t = b.torrent();
            for m in msgs {
                t.handle_message(conn, m, now);
            }
        }
        self.pump_bt(id, now);
    }

    /// eD2k packets decoded from one read (of a peer or a server).
    pub fn ed2k_packets(&mut self, conn: ConnId, pkts: Vec<Packet>, now: Instant) {
        self.now = Some(now);
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        match c.proto {
            Proto::Ed2kServer => self.server_packets(conn, pkts, now),
            Proto::Ed2k => {
                let hello_pending = c.stage == Stage::Handshaking;
                self.with_ed2k(now, |e| e.handle_packets(conn, pkts, now));
                if hello_pending {
                    self.ed2k_hello_done(conn, now);
                }
            }
            Proto::Bt => {}
        }
    }

    /// An accepted eD2k connection becomes a peer once its hello came (and
    /// a peer slot is free; else it is closed).
    fn ed2k_hello_done(&mut self, conn: ConnId, now: Instant) {
        let Some(c) = self.conns.get(&conn).cloned() else {
            return;
        };
        if c.stage != Stage::Handshaking || self.ed2k.peer(conn).is_none() {
            return;
        }
        if !self.cfg.global.admit_peer(&self.counts) {
            self.forget_conn(conn, now, None);
            self.events.push_back(SessionEvent::Close {
                conn,
                reason: CloseReason::PeerLimit,
            });
            return;
        }
        self.move_stage(conn, &c, Stage::Peer);
    }

    /// The runtime wrote this many bytes of a connection's queue.
    pub fn sent(&mut self, conn: ConnId, bytes: u64, now: Instant) {
        self.now = Some(now);
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        match (c.proto, c.transfer) {
            (Proto::Bt, Some(id)) => {
                if let Some(t) = self
                    .transfers
                    .get_mut(&id)
                    .and_then(|t| t.bt.as_mut())
                    .and_then(|b| b.awake_mut())
                {
                    t.on_sent(conn, bytes, now);
                }
                self.pump_bt(id, now);
            }
            (Proto::Ed2k, _) => self.with_ed2k(now, |e| e.on_sent(conn, bytes, now)),
            _ => {}
        }
    }

    fn peer_transfer(&self, conn: ConnId, proto: Proto) -> Option<TransferId> {
        let c = self.conns.get(&conn)?;
        (c.proto == proto && c.stage == Stage::Peer)
            .then_some(c.transfer)
            .flatten()
    }

    /// A storage operation of a transfer finished.
    pub fn storage(&mut self, id: TransferId, ev: StorageEvent, now: Instant) {
        self.now = Some(now);
        let Some(t) = self.transfers.get_mut(&id) else {
            return;
        };
        // An attached eD2k file's upload reads come back to the eD2k core;
        // everything else of a torrent's storage is the torrent's.
        let ed2k_read = matches!(&ev, StorageEvent::ReadDone { id, .. } if id & weir_ed2k::transfer::UPLOAD_READ != 0);
        match (t.bt.as_mut(), t.ed2k.as_ref()) {
            (Some(b), e) if !(ed2k_read && e.is_some()) => {
                b.torrent().handle_storage(ev, now);
                self.pump_bt(id, now);
            }
            (_, Some(e)) => {
                let file = e.file;
                self.with_ed2k(now, |c| c.handle_storage(file, ev, now));
            }
            _ => {}
        }
    }

    /// Time-driven work due at `now`: protocol timers, dials, servers.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = Some(now);
        while let Some(&(at, id)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            self.timer_of.remove(&id);
            if let Some(t) = self
                .transfers
                .get_mut(&id)
                .and_then(|t| t.bt.as_mut())
                .and_then(|b| b.awake_mut())
            {
                t.handle_timeout(now);
            }
            self.pump_bt(id, now);
        }
        if self.ed2k.poll_timeout().is_some_and(|t| t <= now) {
            self.with_ed2k(now, |e| e.handle_timeout(now));
        }
        self.dial_due(now);
        self.servers_due(now);
    }

    /// When [`Session::handle_timeout`] wants to run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.timers.first().map(|(t, _)| *t),
            self.ed2k.poll_timeout(),
            self.next_dial,
            self.dial_asked_at,
            self.servers_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Starts the dials the limits have room for, spread over the
    /// transfers in turn, and arms the next look.
    pub(crate) fn dial_more(&mut self, now: Instant) {
        // This pass visits every transfer, and finds again whether one
        // waits on the session's limits.
        self.dial_asked.clear();
        self.dial_asked_at = None;
        self.global_starved = false;
        let mut next_due: Option<Instant> = None;
        let ids: Vec<TransferId> = self.transfers.keys().copied().collect();
        let n = ids.len();
        let start = if n == 0 {
            0
        } else {
            self.dial_cursor as usize % n
        };
        self.dial_cursor = self.dial_cursor.wrapping_add(1);
        for k in 0..n {
            let id = ids[(start + k) % n];
            if let Some(d) = self.dial_transfer(id, now) {
                next_due = Some(next_due.map_or(d, |x: Instant| x.min(d)));
            }
        }
        // Callbacks: dialled once each, for no transfer in particular.
        let room = self.cfg.global.dial_room(&self.counts);
        if let Some(d) = self.callbacks.next_due(false) {
            next_due = Some(next_due.map_or(d, |x: Instant| x.min(d)));
            self.global_starved |= room == 0 && d <= now;
        }
        for addr in self.callbacks.next_dials(now, room, false) {
            let conn = self.alloc_conn();
            self.conns.insert(
                conn,
                Conn {
                    proto: Proto::Ed2k,
                    addr,
                    transfer: None,
                    stage: Stage::Dialing,
                    outgoing: true,
                    since: now,
                    link: Link::default(),
                },
            );
            self.count(None, Stage::Dialing, true);
            self.events.push_back(SessionEvent::Dial {
                conn,
                proto: Proto::Ed2k,
                addr,
                hello: Hello::Ed2k,
            });
        }
        // Look again when a backoff ends, or soon if room was what stopped us.
        let soon = now + self.cfg.dial_interval;
        self.next_dial = next_due.map(|d| d.max(soon));
    }

    /// A pass over only the transfers that asked for one (added, resumed,
    /// checked, new peers): a burst of adds to a session of thousands
    /// costs one visit each, not a walk over all of them per add. The
    /// next full pass stays as armed, or comes sooner for a backoff these
    /// transfers wait on.
    pub(crate) fn dial_those_asking(&mut self, now: Instant) {
        self.dial_asked_at = None;
        let ids = std::mem::take(&mut self.dial_asked);
        let mut next_due: Option<Instant> = None;
        for id in ids {
            if let Some(d) = self.dial_transfer(id, now) {
                next_due = Some(next_due.map_or(d, |x: Instant| x.min(d)));
            }
        }
        if let Some(d) = next_due {
            let d = d.max(now + self.cfg.dial_interval);
            self.next_dial = Some(self.next_dial.map_or(d, |x| x.min(d)));
        }
    }

    /// Starts the dials the limits have room for on transfer `id`; when
    /// its next peer is due (backoffs).
    fn dial_transfer(&mut self, id: TransferId, now: Instant) -> Option<Instant> {
        let mut next_due: Option<Instant> = None;
        if !self.transfers.contains_key(&id) {
            return None;
        }
        #[cfg(test)]
        {
            self.dial_visits += 1;
        }
        for proto in [Proto::Bt, Proto::Ed2k] {
            let global = self.cfg.global.dial_room(&self.counts);
            let own = self.cfg.per_transfer.dial_room(&self.transfers[&id].counts);
            let room = global.min(own);
            let t = self.transfers.get_mut(&id).expect("listed");
            if !t.running() {
                continue;
            }
            let seeking = t.complete_at.is_none();
            let book = match proto {
                Proto::Bt => match t.bt.as_mut() {
                    // Seeds wait for leechers; nothing is dialled while
                    // the data is being checked.
                    Some(b) if t.checked => &mut b.book,
                    _ => continue,
                },
                _ => match t.ed2k.as_mut() {
                    Some(e) if !t.ed2k_mismatch => &mut e.book,
                    _ => continue,
                },
            };
            if let Some(d) = book.next_due(seeking) {
                next_due = Some(next_due.map_or(d, |x: Instant| x.min(d)));
                // A peer to dial now, room of its own, none in the session.
                self.global_starved |= global == 0 && own > 0 && d <= now;
            }
            if room == 0 {
                continue;
            }
            let addrs = book.next_dials(now, room, seeking);
            if addrs.is_empty() {
                // Most transfers of a big session: nothing to dial, so
                // no handshake is built (the preamble counts pieces).
                continue;
            }
            // It took the last of the session's room with room of its own
            // left: the next slot freed anywhere is for a pass over all.
            self.global_starved |= addrs.len() == global && global < own;
            let hello = match (proto, t.bt.as_mut()) {
                (Proto::Bt, Some(b)) => {
                    // Dialling wakes a sleeping torrent: its peers come.
                    let tor = b.torrent();
                    Hello::Bt {
                        ours: tor.handshake(),
                        preamble: tor.preamble(),
                    }
                }
                _ => Hello::Ed2k,
            };
            for addr in addrs {
                let conn = self.alloc_conn();
                self.conns.insert(
                    conn,
                    Conn {
                        proto,
                        addr,
                        transfer: Some(id),
                        stage: Stage::Dialing,
                        outgoing: true,
                        since: now,
                        link: Link::default(),
                    },
                );
                self.count(Some(id), Stage::Dialing, true);
                self.events.push_back(SessionEvent::Dial {
                    conn,
                    proto,
                    addr,
                    hello: hello.clone(),
                });
            }
        }
        next_due
    }
}
