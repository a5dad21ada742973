//! The network between nodes: dialling, listening, the BitTorrent
//! handshake, refusals and timeouts, hosts going down and up.
//!
//! A dial the session asks for (`SessionEvent::Dial`) goes to the node
//! whose address is the dial's IP:
//!
//! - its SYN takes the link's one-way latency to arrive. If the node is
//!   down or does not listen for that protocol on that port, the dial is
//!   refused one latency later (a reset); otherwise the connection exists
//!   from then on (two [`Link`](crate::Link)s shaped by
//!   [`World::set_link`] or the world's default [`NetConfig::link`]), the
//!   listener's session is asked (`Session::incoming`), and the dialler
//!   learns it is connected one more latency later (the SYN-ACK);
//! - an eD2k connection is a peer at once on both sides (the eD2k core
//!   writes its own hello); a BitTorrent one exchanges 68-byte handshakes
//!   over the links (the dialler's carries the session's preamble; the
//!   listener answers after `Session::bt_route`), so a handshake costs a
//!   round trip as it does over TCP;
//! - a dial to an address where no node is follows
//!   [`World::set_unreachable`] or [`NetConfig::absent`]: refused after a
//!   delay, or silent until [`NetConfig::connect_timeout`] (which also
//!   bounds a BitTorrent handshake, as the runtime's does).
//!
//! [`World::take_down`] resets a node's connections (each other end
//! learns it one latency later), refuses dials to it and suspends its
//! session's timers until [`World::bring_up`].

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::BytesMut;
use weir_session::{ConnId, Established, Hello, Proto, TransferId};

use crate::conn::Stage;
use crate::link::LinkConfig;
use crate::world::{DialFailure, LinkId, NodeId, SideId, WakeUp, World};

pub(crate) type DialKey = (NodeId, ConnId);

/// A dial in progress.
#[derive(Debug)]
pub(crate) struct Dialing {
    pub(crate) proto: Proto,
    pub(crate) addr: SocketAddr,
    pub(crate) hello: Hello,
    pub(crate) transfer: Option<TransferId>,
    pub(crate) target: Option<NodeId>,
    /// The dialler's end once the connection exists.
    pub(crate) side: Option<SideId>,
    /// Index of its record in the node's dials.
    pub(crate) record: usize,
}

/// What a dial to an address where no node is meets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreachable {
    /// A host there refuses (or a router answers unreachable) after this
    /// long.
    Refuse {
        /// When the refusal arrives.
        after: Duration,
    },
    /// Nothing answers: the dial times out.
    Silent,
}

/// How the network behaves where a scenario did not say otherwise.
#[derive(Clone, Debug)]
pub struct NetConfig {
    /// The shape of both directions between two nodes
    /// ([`World::set_link`] overrides it per pair).
    pub link: LinkConfig,
    /// How long a dial may take to connect and (BitTorrent) finish its
    /// handshake: the runtime's `CONNECT_TIMEOUT` / `HANDSHAKE_TIMEOUT`.
    pub connect_timeout: Duration,
    /// Dials to addresses where no node is ([`World::set_unreachable`]
    /// overrides it per IP).
    pub absent: Unreachable,
}

impl Default for NetConfig {
    /// 10 ms one way at 100 MB/s; 15 s to connect; absent hosts silent.
    fn default() -> Self {
        Self {
            link: LinkConfig::new(Duration::from_millis(10), 100_000_000),
            connect_timeout: Duration::from_secs(15),
            absent: Unreachable::Silent,
        }
    }
}

/// The two ends of a connection, as each node numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conn {
    /// The connection id on the first node.
    pub a: ConnId,
    /// The connection id on the second node.
    pub b: ConnId,
    /// The link from the first node to the second.
    pub ab: LinkId,
    /// The link from the second node to the first.
    pub ba: LinkId,
}

impl World {
    /// Shapes the links between nodes `a` and `b`: `ab` from `a` to `b`,
    /// `ba` back (for connections made from now on).
    pub fn set_link(&mut self, a: NodeId, b: NodeId, ab: LinkConfig, ba: LinkConfig) {
        self.pair_links.insert((a, b), ab);
        self.pair_links.insert((b, a), ba);
    }

    /// The same link shape both ways between `a` and `b`.
    pub fn set_link_sym(&mut self, a: NodeId, b: NodeId, link: LinkConfig) {
        self.set_link(a, b, link.clone(), link);
    }

    /// What dials to `ip`, where no node is, meet.
    pub fn set_unreachable(&mut self, ip: IpAddr, what: Unreachable) {
        self.unreachable.insert(ip, what);
    }

    pub(crate) fn link_cfg(&self, from: NodeId, to: NodeId) -> LinkConfig {
        self.pair_links
            .get(&(from, to))
            .cloned()
            .unwrap_or_else(|| self.net.link.clone())
    }

    /// Dials in progress of node `n` (asked by its session, not yet
    /// reported as established or failed).
    pub fn dials_in_progress(&self, n: NodeId) -> usize {
        self.dialing.range((n, 0)..=(n, ConnId::MAX)).count()
    }

    /// The same, of one transfer.
    pub fn dials_in_progress_of(&self, n: NodeId, t: TransferId) -> usize {
        self.dialing
            .range((n, 0)..=(n, ConnId::MAX))
            .filter(|(_, d)| d.transfer == Some(t))
            .count()
    }

    /// Peer connections of node `n` (handshake done, not closed; server
    /// connections not counted).
    pub fn peers(&self, n: NodeId) -> usize {
        self.nodes[n]
            .conns
            .values()
            .filter(|&&s| {
                let side = &self.sides[s];
                side.stage == Stage::Open && side.proto != Proto::Ed2kServer
            })
            .count()
    }

    /// The same, of one transfer.
    pub fn peers_of(&self, n: NodeId, t: TransferId) -> usize {
        self.nodes[n]
            .conns
            .values()
            .filter(|&&s| {
                let side = &self.sides[s];
                side.stage == Stage::Open && side.transfer == Some(t)
            })
            .count()
    }

    /// What connection `conn` of node `n` saw (open or closed).
    pub fn conn_stats(&self, n: NodeId, conn: ConnId) -> &crate::ConnStats {
        &self.sides[self.nodes[n].all_conns[&conn]].stats
    }

    /// The session asked node `n` to dial.
    pub(crate) fn start_dial(
        &mut self,
        n: NodeId,
        conn: ConnId,
        proto: Proto,
        addr: SocketAddr,
        hello: Hello,
    ) {
        let now = self.now();
        let transfer = self.nodes[n].session.conn_transfer(conn);
        let record = self.nodes[n].dials.len();
        self.nodes[n].dials.push(crate::DialRecord {
            at: now,
            conn,
            proto,
            addr,
            transfer,
            result: None,
        });
        let target = self.hosts.get(&addr.ip()).copied();
        let k = (n, conn);
        self.dialing.insert(
            k,
            Dialing {
                proto,
                addr,
                hello,
                transfer,
                target,
                side: None,
                record,
            },
        );
        let timeout = now + self.net.connect_timeout;
        self.schedule(timeout, WakeUp::DialFail(k, DialFailure::Timeout));
        if self.nodes[n].is_down {
            // No network: the dial hangs until its timeout.
            return;
        }
        match target {
            Some(b) => {
                let at = now + self.link_cfg(n, b).latency;
                self.schedule(at, WakeUp::Syn(k));
            }
            None => {
                let what = self
                    .unreachable
                    .get(&addr.ip())
                    .copied()
                    .unwrap_or(self.net.absent);
                if let Unreachable::Refuse { after } = what {
                    self.schedule(now + after, WakeUp::DialFail(k, DialFailure::Refused));
                }
            }
        }
    }

    /// Whether node `b` takes connections of `proto` on `port` now.
    fn listening(&self, b: NodeId, proto: Proto, port: u16) -> bool {
        let node = &self.nodes[b];
        if node.is_down {
            return false;
        }
        match proto {
            Proto::Bt => node.bt_port == Some(port),
            Proto::Ed2k => node.ed2k_port == Some(port),
            Proto::Ed2kServer => node.server.as_ref().is_some_and(|s| s.port == port),
        }
    }

    /// A dial's SYN reached its target.
    pub(crate) fn on_syn(&mut self, k: DialKey) {
        let Some(d) = self.dialing.get(&k) else {
            return;
        };
        let (a, conn) = k;
        let (proto, port) = (d.proto, d.addr.port());
        let b = d.target.expect("a SYN goes to a node");
        let back = self.link_cfg(b, a);
        if !self.listening(b, proto, port) {
            let at = self.now() + back.latency;
            self.schedule(at, WakeUp::DialFail(k, DialFailure::Refused));
            return;
        }
        // The connection exists from now on.
        let l_ab = self.add_link(self.link_cfg(a, b));
        let l_ba = self.add_link(back.clone());
        let from = SocketAddr::new(self.nodes[a].ip(), self.nodes[a].ephemeral());
        let sa = self.new_side(a, conn, proto, l_ab, l_ba, Stage::Connecting);
        let sb = self.accept(b, proto, from, l_ba, l_ab);
        self.pair(sa, sb, l_ab, l_ba);
        if let Some(d) = self.dialing.get_mut(&k) {
            d.side = Some(sa);
        }
        let at = self.now() + back.latency;
        self.schedule(at, WakeUp::SynAck(k));
        self.drain(b);
    }

    /// Node `b` accepts a connection from `from`: asks its session (or its
    /// index server) and returns its end.
    fn accept(
        &mut self,
        b: NodeId,
        proto: Proto,
        from: SocketAddr,
        tx: LinkId,
        rx: LinkId,
    ) -> SideId {
        let now = self.instant();
        let at = self.now();
        if self.nodes[b].frozen {
            // A hung program: the kernel completes the connection, nobody
            // accepts it, nothing is read or answered.
            return self.new_side(b, 0, proto, tx, rx, Stage::Dead);
        }
        if proto == Proto::Ed2kServer && self.nodes[b].server.is_some() {
            return self.server_accept(b, from, tx, rx);
        }
        let r = self.nodes[b].session.incoming(proto, from, now);
        let arrival = self.nodes[b].arrivals.len();
        self.nodes[b].arrivals.push(crate::Arrival {
            at,
            proto,
            from,
            result: r.clone(),
        });
        let Ok(cb) = r else {
            // Refused: accepted and closed at once.
            let s = self.new_side(b, 0, proto, tx, rx, Stage::Dead);
            self.close_side(s);
            return s;
        };
        let stage = match proto {
            Proto::Bt => Stage::Handshake { dialer: false },
            _ => Stage::Connecting,
        };
        let s = self.new_side(b, cb, proto, tx, rx, stage);
        self.sides[s].arrival = Some(arrival);
        if proto == Proto::Ed2k {
            let info = Established::Ed2k {
                local_ip: Some(self.nodes[b].ip),
            };
            let r = self.nodes[b].session.established(cb, info, now);
            self.arrival_result(s, r.clone().map(|()| cb));
            if !self.after_established(s, r, None) {
                return s;
            }
        }
        self.start_reader(s);
        s
    }

    fn pair(&mut self, sa: SideId, sb: SideId, l_ab: LinkId, l_ba: LinkId) {
        self.links[l_ab].writer = sa;
        self.links[l_ab].reader = sb;
        self.links[l_ba].writer = sb;
        self.links[l_ba].reader = sa;
        self.sides[sa].peer = sb;
        self.sides[sb].peer = sa;
    }

    /// The SYN-ACK reached the dialler: it is connected.
    pub(crate) fn on_syn_ack(&mut self, k: DialKey) {
        let Some(d) = self.dialing.get(&k) else {
            return;
        };
        let (a, conn) = k;
        let s = d.side.expect("connected dials have a side");
        if !self.sides[s].open {
            return;
        }
        let now = self.instant();
        match (d.proto, &d.hello) {
            (Proto::Bt, Hello::Bt { ours, preamble }) => {
                let mut hs = BytesMut::with_capacity(68 + preamble.len());
                ours.encode(&mut hs);
                hs.extend_from_slice(preamble);
                self.sides[s].stage = Stage::Handshake { dialer: true };
                self.queue_send(s, vec![hs.freeze()], 0, false);
                self.start_reader(s);
            }
            (proto, _) => {
                let d = self.dialing.remove(&k).expect("checked");
                let info = match proto {
                    Proto::Ed2kServer => Established::Ed2kServer,
                    _ => Established::Ed2k {
                        local_ip: Some(self.nodes[a].ip),
                    },
                };
                let r = self.nodes[a].session.established(conn, info, now);
                self.dial_result(a, d.record, r.clone().map_err(|e| e.to_string()));
                if self.after_established(s, r, d.transfer) {
                    self.start_reader(s);
                }
            }
        }
        self.drain(a);
    }

    /// A dial was refused or timed out.
    pub(crate) fn on_dial_fail(&mut self, k: DialKey, why: DialFailure) {
        let Some(d) = self.dialing.remove(&k) else {
            return;
        };
        let (a, conn) = k;
        let reason = match (why, d.side) {
            (DialFailure::Refused, _) => "connection refused",
            (DialFailure::Timeout, Some(_)) => "handshake timed out",
            (DialFailure::Timeout, None) => "connect timed out",
        };
        if let Some(s) = d.side {
            self.close_side(s);
        }
        let now = self.instant();
        self.nodes[a].session.dial_failed(conn, reason, now);
        self.dial_result(a, d.record, Err(reason.to_string()));
        self.drain(a);
    }

    /// The session closed a connection that may still be a dial.
    pub(crate) fn cancel_dial(&mut self, n: NodeId, conn: ConnId, reason: &str) {
        if let Some(d) = self.dialing.remove(&(n, conn)) {
            if let Some(s) = d.side {
                self.close_side(s);
            }
            self.dial_result(n, d.record, Err(format!("closed by the session: {reason}")));
        }
    }

    pub(crate) fn dial_result(&mut self, n: NodeId, record: usize, r: Result<(), String>) {
        let now = self.now();
        if let Some(rec) = self.nodes[n].dials.get_mut(record) {
            rec.result = Some((now, r));
        }
    }

    /// A reset reached this end.
    pub(crate) fn on_reset(&mut self, s: SideId) {
        if !self.sides[s].open {
            return;
        }
        let (n, conn) = (self.sides[s].node, self.sides[s].conn);
        self.reset_side(s);
        if self.nodes[n].server.is_some() && self.sides[s].proto == Proto::Ed2kServer {
            self.server_conn_reset(s);
            return;
        }
        let now = self.instant();
        if let Some(d) = self.dialing.remove(&(n, conn)) {
            self.nodes[n]
                .session
                .dial_failed(conn, "connection reset", now);
            self.dial_result(n, d.record, Err("connection reset".into()));
        } else {
            self.nodes[n]
                .session
                .closed(conn, Some("connection reset by peer".into()), now);
        }
        self.drain(n);
    }

    /// Takes node `n` down: every connection it has is reset (the other
    /// ends learn it one latency later), dials to it are refused, its
    /// session is told its connections and dials failed and its timers
    /// stop until [`World::bring_up`]; dials it makes meanwhile hang until
    /// their timeout.
    pub fn take_down(&mut self, n: NodeId) {
        if self.nodes[n].is_down {
            return;
        }
        self.nodes[n].is_down = true;
        let now = self.instant();
        let sides: Vec<(ConnId, SideId)> =
            self.nodes[n].conns.iter().map(|(c, s)| (*c, *s)).collect();
        for (conn, s) in sides {
            let peer = self.sides[s].peer;
            let latency = self.links[self.sides[s].tx].link.config().latency;
            self.reset_side(s);
            if peer != usize::MAX {
                let at = self.now() + latency;
                self.schedule(at, WakeUp::Reset(peer));
            }
            if let Some(d) = self.dialing.remove(&(n, conn)) {
                self.nodes[n].session.dial_failed(conn, "network down", now);
                self.dial_result(n, d.record, Err("network down".into()));
            } else if self.nodes[n].server.is_some() {
                self.server_side_lost(s);
            } else {
                self.nodes[n]
                    .session
                    .closed(conn, Some("network down".into()), now);
            }
        }
        let pending: Vec<DialKey> = self
            .dialing
            .range((n, 0)..=(n, ConnId::MAX))
            .map(|(k, _)| *k)
            .collect();
        for k in pending {
            let d = self.dialing.remove(&k).expect("listed");
            self.nodes[n].session.dial_failed(k.1, "network down", now);
            self.dial_result(n, d.record, Err("network down".into()));
        }
        self.drain(n);
        self.settle();
    }

    /// Brings a node that was down back: it listens again and its session
    /// runs from now.
    pub fn bring_up(&mut self, n: NodeId) {
        if !self.nodes[n].is_down {
            return;
        }
        self.nodes[n].is_down = false;
        self.nodes[n].timer = None;
        self.drain(n);
        self.settle();
    }

    /// Connects `a` and `b` directly over a link `ab` one way and `ba` the
    /// other, for the first torrent both have (handshakes assumed done:
    /// both sessions take the connection as accepted and established now).
    /// The dial path (the sessions' own dials) is the other way to connect.
    pub fn connect(&mut self, a: NodeId, b: NodeId, ab: LinkConfig, ba: LinkConfig) -> Conn {
        let (ta, tb) = self.common_torrent(a, b);
        let l_ab = self.add_link(ab);
        let l_ba = self.add_link(ba);
        let now = self.instant();
        let (addr_a, addr_b) = (self.nodes[a].addr(), self.nodes[b].addr());
        let ca = self.nodes[a]
            .session
            .incoming(Proto::Bt, addr_b, now)
            .expect("the session takes the connection");
        let cb = self.nodes[b]
            .session
            .incoming(Proto::Bt, addr_a, now)
            .expect("the session takes the connection");
        let sa = self.new_side(a, ca, Proto::Bt, l_ab, l_ba, Stage::Connecting);
        let sb = self.new_side(b, cb, Proto::Bt, l_ba, l_ab, Stage::Connecting);
        self.pair(sa, sb, l_ab, l_ba);
        let ha = self.nodes[a]
            .session
            .torrent(ta)
            .expect("found")
            .handshake();
        let hb = self.nodes[b]
            .session
            .torrent(tb)
            .expect("found")
            .handshake();
        for (n, c, s, t, theirs) in [(a, ca, sa, ta, hb), (b, cb, sb, tb, ha)] {
            let info = Established::Bt {
                theirs,
                preamble_sent: false,
            };
            let r = self.nodes[n].session.established(c, info, now);
            assert!(
                r.is_ok(),
                "{}: connection refused: {r:?}",
                self.nodes[n].name()
            );
            self.after_established(s, r, Some(t));
        }
        for s in [sa, sb] {
            self.start_reader(s);
        }
        self.settle();
        Conn {
            a: ca,
            b: cb,
            ab: l_ab,
            ba: l_ba,
        }
    }

    /// [`World::connect`] with the same link shape both ways.
    pub fn connect_sym(&mut self, a: NodeId, b: NodeId, link: LinkConfig) -> Conn {
        self.connect(a, b, link.clone(), link)
    }

    fn common_torrent(&self, a: NodeId, b: NodeId) -> (TransferId, TransferId) {
        let (na, nb) = (&self.nodes[a], &self.nodes[b]);
        na.transfers()
            .into_iter()
            .find_map(|ta| {
                let h = na.session.torrent(ta)?.info_hash();
                Some((ta, nb.session.find_torrent(&h)?))
            })
            .unwrap_or_else(|| panic!("{} and {} share no torrent", na.name(), nb.name()))
    }

    /// Stops node `n` answering: it no longer reads, writes, accepts or
    /// runs its timers, but keeps its connections open and its listeners
    /// bound (a hung peer: dials to it connect and then time out).
    pub fn freeze(&mut self, n: NodeId) {
        self.nodes[n].frozen = true;
    }

    /// Lets a frozen node run again.
    pub fn unfreeze(&mut self, n: NodeId) {
        self.nodes[n].frozen = false;
        let sides: Vec<SideId> = self.nodes[n].conns.values().copied().collect();
        for s in sides {
            use crate::conn::{ReadState, WriteState};
            if self.sides[s].reader.state == ReadState::WaitTokens {
                self.sides[s].reader.state = ReadState::Ready;
            }
            if self.sides[s].writer.state == WriteState::WaitTokens {
                self.sides[s].writer.state = WriteState::Ready;
            }
            self.work.push_back(crate::world::Work::Reader(s));
            self.work.push_back(crate::world::Work::Writer(s));
        }
        self.drain(n);
        self.settle();
    }
}
