//! An eD2k index server node: `weir_ed2k::server::IndexServer` (what
//! `weir ed2k-server` runs over sockets) behind a listener, so sessions
//! find eD2k sources the way they do in the field: log in, offer their
//! files, ask for sources. Its connections are read and written by the
//! same reader and writer as every other (server framing), without caps.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use bytes::BytesMut;
use weir_ed2k::packet::Packet;
use weir_ed2k::server::{ClientToServer, IndexServer, ServerConfig, ServerEvent};
use weir_session::Proto;

use crate::conn::Stage;
use crate::node::NodeConfig;
use crate::world::{LinkId, NodeId, SideId, World};

/// The port eD2k servers listen on unless told otherwise.
pub const ED2K_SERVER_PORT: u16 = 4661;

/// The index server of a server node.
#[derive(Debug)]
pub(crate) struct ServerState {
    index: IndexServer,
    pub(crate) port: u16,
    conns: BTreeMap<u64, SideId>,
    next: u64,
    pub(crate) events: Vec<ServerEvent>,
}

impl World {
    /// Adds an eD2k index server node (listening on
    /// [`ED2K_SERVER_PORT`]; no BitTorrent or eD2k peer listener).
    pub fn add_ed2k_server(&mut self, name: &str) -> NodeId {
        let n = self.add_node(
            NodeConfig::new()
                .name(name)
                .listen_bt(None)
                .listen_ed2k(None),
        );
        let ip = self.nodes[n].ip;
        self.nodes[n].server = Some(ServerState {
            index: IndexServer::new(ServerConfig {
                ip,
                port: ED2K_SERVER_PORT,
                ..ServerConfig::default()
            }),
            port: ED2K_SERVER_PORT,
            conns: BTreeMap::new(),
            next: 1,
            events: Vec::new(),
        });
        n
    }

    /// The address of server node `server`.
    pub fn server_addr(&self, server: NodeId) -> SocketAddr {
        let s = self.nodes[server]
            .server
            .as_ref()
            .expect("an eD2k server node");
        SocketAddr::new(IpAddr::V4(self.nodes[server].ip), s.port)
    }

    /// Tells node `n`'s session to use the eD2k server at `addr` (it
    /// logs in, offers its files and asks for sources).
    pub fn use_ed2k_server(&mut self, n: NodeId, addr: SocketAddr) {
        let now = self.instant();
        self.nodes[n].session.add_ed2k_server(addr, now);
        self.drain(n);
        self.settle();
    }

    /// What happened on server node `server` (logins, offers, source
    /// requests, departures), in order.
    pub fn server_events(&self, server: NodeId) -> &[ServerEvent] {
        self.nodes[server]
            .server
            .as_ref()
            .map_or(&[], |s| &s.events[..])
    }

    pub(crate) fn server_accept(
        &mut self,
        b: NodeId,
        from: SocketAddr,
        tx: LinkId,
        rx: LinkId,
    ) -> SideId {
        let at = self.now();
        let IpAddr::V4(ip) = from.ip() else {
            unreachable!("simulated nodes are IPv4")
        };
        let st = self.nodes[b].server.as_mut().expect("a server node");
        let id = st.next;
        st.next += 1;
        st.index
            .connected(id, ip)
            .expect("scenarios stay within the index server's connection limits");
        let conn = u32::try_from(id).expect("fewer than 2^32 server connections");
        let s = self.new_side(b, conn, Proto::Ed2kServer, tx, rx, Stage::Connecting);
        self.set_open(s, None);
        let node = &mut self.nodes[b];
        node.server.as_mut().expect("checked").conns.insert(id, s);
        node.arrivals.push(crate::Arrival {
            at,
            proto: Proto::Ed2kServer,
            from,
            result: Ok(conn),
        });
        self.start_reader(s);
        s
    }

    /// Packets a client sent the server.
    pub(crate) fn server_packets(&mut self, s: SideId, pkts: Vec<Packet>) {
        let n = self.sides[s].node;
        let conn = u64::from(self.sides[s].conn);
        for p in pkts {
            let st = self.nodes[n].server.as_mut().expect("a server node");
            let r = match ClientToServer::decode(&p) {
                Ok(msg) => st.index.handle(conn, msg).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let events = st.index.take_events();
            st.events.extend(events);
            match r {
                Ok(replies) => {
                    for (to, m) in replies {
                        let mut b = BytesMut::new();
                        m.encode(&mut b);
                        let to = self.nodes[n]
                            .server
                            .as_ref()
                            .and_then(|st| st.conns.get(&to).copied());
                        if let Some(ts) = to {
                            self.queue_send(ts, vec![b.freeze()], 0, false);
                        }
                    }
                }
                Err(_) => return self.server_conn_gone(s),
            }
        }
    }

    /// A client's connection ended (or could not be read): it leaves the
    /// index and the server closes its end.
    pub(crate) fn server_conn_gone(&mut self, s: SideId) {
        self.server_side_lost(s);
        self.close_side(s);
    }

    /// A client's connection was reset.
    pub(crate) fn server_conn_reset(&mut self, s: SideId) {
        self.server_side_lost(s);
    }

    pub(crate) fn server_side_lost(&mut self, s: SideId) {
        let n = self.sides[s].node;
        let conn = u64::from(self.sides[s].conn);
        if let Some(st) = self.nodes[n].server.as_mut()
            && st.conns.remove(&conn).is_some()
        {
            st.index.disconnected(conn);
            let events = st.index.take_events();
            st.events.extend(events);
        }
    }
}
