//! The server half: answering `ping`, `find_node`, `get_peers` and
//! `announce_peer`.

use std::net::SocketAddr;
use std::time::Instant;

use super::{Dht, MAX_VERIFY_PINGS};
use crate::compact::{NodeInfo, is_usable};
use crate::id::Id;
use crate::krpc::{self, Body, ErrorBody, Message, Query, Response, Want};

impl Dht {
    pub(super) fn on_query(&mut self, from: SocketAddr, msg: &Message, q: &Query, now: Instant) {
        // Read-only nodes answer nothing (BEP 43).
        if self.cfg.read_only {
            return;
        }
        self.stats.queries_received += 1;
        let t = msg.transaction.clone();
        let Some(id) = q.id() else {
            self.reply_error(from, t, krpc::ERROR_METHOD_UNKNOWN, "method unknown");
            return;
        };
        // A read-only querier stays out of our table (BEP 43).
        if !msg.read_only && id != self.id {
            self.note_querier(NodeInfo { id, addr: from }, now);
        }
        match q {
            Query::Ping { .. } => self.respond(from, t, self.response()),
            Query::FindNode { target, want, .. } => {
                let mut r = self.response();
                (r.nodes, r.nodes6) = self.nodes_for(target, *want, from, now);
                self.respond(from, t, r);
            }
            Query::GetPeers {
                info_hash, want, ..
            } => {
                let mut r = self.response();
                (r.nodes, r.nodes6) = self.nodes_for(info_hash, *want, from, now);
                r.token = Some(self.tokens.token_for(from.ip()).to_vec());
                r.values =
                    self.store
                        .peers(info_hash, self.cfg.max_values_per_reply, &mut self.rng);
                self.respond(from, t, r);
            }
            Query::AnnouncePeer {
                info_hash,
                port,
                implied_port,
                token,
                ..
            } => {
                if !self.tokens.check(token, from.ip()) {
                    self.stats.bad_tokens += 1;
                    self.reply_error(from, t, krpc::ERROR_PROTOCOL, "bad token");
                    return;
                }
                let port = if *implied_port { from.port() } else { *port };
                let peer = SocketAddr::new(from.ip(), port);
                if !is_usable(&peer) {
                    self.reply_error(from, t, krpc::ERROR_PROTOCOL, "bad port");
                    return;
                }
                self.store.announce(*info_hash, peer, now);
                self.respond(from, t, self.response());
            }
            Query::Other { .. } => {
                self.reply_error(from, t, krpc::ERROR_METHOD_UNKNOWN, "method unknown");
            }
        }
    }

    /// A node queried us: refresh it if we know it; if it would get a
    /// place in the table, ping it (its address may be forged, an answer
    /// proves it) and insert it when it answers.
    fn note_querier(&mut self, node: NodeInfo, now: Instant) {
        if self.table.heard_query(&node, now) || !is_usable(&node.addr) {
            return;
        }
        if self.cfg.enforce_node_id && !node.id.is_valid_for(node.addr.ip()) {
            return;
        }
        if self.verify_pings >= MAX_VERIFY_PINGS || !self.table.has_room_for(&node.id, now) {
            return;
        }
        if self.txs.values().any(|t| t.addr == node.addr) {
            return;
        }
        self.send_ping(node.addr, Some(node.id), true);
    }

    fn response(&self) -> Response {
        Response {
            id: self.id,
            ..Response::default()
        }
    }

    /// The `k` closest verified nodes for each address family wanted (by
    /// default the family of the querier).
    fn nodes_for(
        &self,
        target: &Id,
        want: Want,
        from: SocketAddr,
        now: Instant,
    ) -> (Vec<NodeInfo>, Vec<NodeInfo>) {
        let k = self.cfg.table.k;
        let (v4, v6) = if want.v4 || want.v6 {
            (want.v4, want.v6)
        } else {
            (from.is_ipv4(), from.is_ipv6())
        };
        let pick = |is_v4: bool| -> Vec<NodeInfo> {
            self.table
                .closest_where(target, k, true, now, |n| n.addr.is_ipv4() == is_v4)
        };
        (
            if v4 { pick(true) } else { Vec::new() },
            if v6 { pick(false) } else { Vec::new() },
        )
    }

    fn respond(&mut self, to: SocketAddr, t: Vec<u8>, r: Response) {
        let mut msg = self.base_message(t, Body::Response(r));
        msg.ip = Some(to);
        self.stats.queries_answered += 1;
        self.push_reply(to, msg.to_vec());
    }

    pub(super) fn reply_error(&mut self, to: SocketAddr, t: Vec<u8>, code: i64, text: &str) {
        if self.cfg.read_only {
            return;
        }
        let msg = self.base_message(
            t,
            Body::Error(ErrorBody {
                code,
                message: text.to_string(),
            }),
        );
        self.push_reply(to, msg.to_vec());
    }
}
