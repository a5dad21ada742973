//! eD2k servers: one logged-in server at a time finds sources for the
//! session's eD2k downloads, publishes what it shares and relays callbacks.

use std::net::SocketAddr;
use std::time::Instant;

use weir_ed2k::Md4Hash;
use weir_ed2k::packet::Packet;
use weir_ed2k::server::{ServerSession, SessionEvent as ServerEvent, SharedInfo};

use crate::session::Session;
use crate::types::{ConnId, Hello, Link, LogLevel, Proto, SessionEvent};

/// One configured server.
#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    /// Its connection, while dialling or connected.
    pub(crate) conn: Option<ConnId>,
    pub(crate) session: Option<ServerSession>,
    /// When it may be dialled again.
    pub(crate) retry_at: Instant,
    /// When sources are asked again.
    pub(crate) next_ask: Option<Instant>,
}

impl Server {
    pub(crate) fn new(addr: SocketAddr, now: Instant) -> Self {
        Self {
            addr,
            conn: None,
            session: None,
            retry_at: now,
            next_ask: None,
        }
    }
}

impl Session {
    fn server_of(&self, conn: ConnId) -> Option<usize> {
        self.servers.iter().position(|s| s.conn == Some(conn))
    }

    /// Dials a server when none is connected or being dialled.
    pub(crate) fn servers_due(&mut self, now: Instant) {
        if self.servers.iter().any(|s| s.conn.is_some()) {
            if let Some(i) = self.servers.iter().position(|s| s.session.is_some())
                && self.servers[i].next_ask.is_some_and(|t| t <= now)
            {
                self.ask_sources(now);
            }
            return;
        }
        let Some(i) = self.servers.iter().position(|s| s.retry_at <= now) else {
            return;
        };
        let conn = self.next_conn;
        self.next_conn += 1;
        let addr = self.servers[i].addr;
        self.servers[i].conn = Some(conn);
        self.servers[i].retry_at = now + self.cfg.server_retry;
        self.conns.insert(
            conn,
            crate::session::Conn {
                proto: Proto::Ed2kServer,
                addr,
                transfer: None,
                stage: crate::session::Stage::Dialing,
                outgoing: true,
                since: now,
                link: Link::default(),
            },
        );
        self.events.push_back(SessionEvent::Dial {
            conn,
            proto: Proto::Ed2kServer,
            addr,
            hello: Hello::Ed2kServer,
        });
    }

    /// Earliest time a server needs attention.
    pub(crate) fn servers_timeout(&self) -> Option<Instant> {
        if self.servers.iter().any(|s| s.conn.is_some()) {
            return self.servers.iter().filter_map(|s| s.next_ask).min();
        }
        self.servers.iter().map(|s| s.retry_at).min()
    }

    pub(crate) fn server_up(&mut self, conn: ConnId) {
        let Some(i) = self.server_of(conn) else {
            return;
        };
        let port = self.cfg.ed2k_port;
        self.servers[i].session =
            Some(ServerSession::new(self.cfg.user_hash, port, &self.cfg.nick));
        self.flush_server(i);
    }

    pub(crate) fn server_lost(&mut self, conn: ConnId, why: &str, now: Instant) {
        let Some(i) = self.server_of(conn) else {
            return;
        };
        let s = &mut self.servers[i];
        let addr = s.addr;
        let was_up = s.session.take().is_some();
        s.conn = None;
        s.next_ask = None;
        s.retry_at = now + self.cfg.server_retry;
        if was_up {
            self.ed2k.set_server(None, 0);
        }
        self.log(LogLevel::Warn, format!("eD2k server {addr}: {why}"));
    }

    pub(crate) fn server_packets(&mut self, conn: ConnId, pkts: Vec<Packet>, now: Instant) {
        let Some(i) = self.server_of(conn) else {
            return;
        };
        for p in pkts {
            let Some(session) = self.servers[i].session.as_mut() else {
                return;
            };
            match session.handle(&p) {
                Ok(evs) => {
                    for e in evs {
                        self.on_server_event(i, e, now);
                    }
                }
                Err(e) => {
                    let addr = self.servers[i].addr;
                    self.log(LogLevel::Debug, format!("eD2k server {addr}: {e}"));
                }
            }
        }
        self.flush_server(i);
        self.pump_ed2k_lent(now);
        // Sources found and callbacks asked for are dialled now.
        self.dial_due(now);
    }

    fn on_server_event(&mut self, i: usize, e: ServerEvent, now: Instant) {
        match e {
            ServerEvent::Connected { id, .. } => {
                let (addr, low) = {
                    let s = &self.servers[i];
                    (
                        s.addr,
                        s.session.as_ref().is_some_and(ServerSession::is_low_id),
                    )
                };
                self.log(
                    LogLevel::Info,
                    format!(
                        "logged into eD2k server {addr} with a {} id",
                        if low { "low" } else { "high" }
                    ),
                );
                let ip = match addr {
                    SocketAddr::V4(a) => *a.ip(),
                    SocketAddr::V6(a) => a
                        .ip()
                        .to_ipv4_mapped()
                        .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
                };
                self.ed2k.set_server(Some((ip, addr.port())), id);
                self.offer_files();
                self.ask_sources(now);
            }
            ServerEvent::Sources {
                file,
                reachable,
                low_ids,
            } => {
                self.log(
                    LogLevel::Debug,
                    format!(
                        "server: {} sources for {file} ({} low id)",
                        reachable.len(),
                        low_ids.len()
                    ),
                );
                if let Some(id) = self.find_ed2k_transfer(&file) {
                    let addrs: Vec<SocketAddr> =
                        reachable.into_iter().map(SocketAddr::V4).collect();
                    self.add_peers(
                        id,
                        Proto::Ed2k,
                        &addrs,
                        weir_core::peers::Source::Server,
                        now,
                    );
                }
                if let Some(s) = self.servers[i].session.as_mut() {
                    for id in low_ids.into_iter().take(self.cfg.book.max_callbacks) {
                        s.callback(id);
                    }
                }
            }
            ServerEvent::CallbackRequested { addr } => {
                // Through the same book and limits as every dial.
                self.callbacks.add(
                    SocketAddr::V4(addr),
                    weir_core::peers::Source::Callback,
                    now,
                );
                self.next_dial = Some(now);
            }
            ServerEvent::CallbackFailed | ServerEvent::Rejected => {}
            ServerEvent::Message(m) => {
                self.log(LogLevel::Debug, format!("eD2k server says: {}", m.trim()));
            }
        }
    }

    fn find_ed2k_transfer(&self, hash: &Md4Hash) -> Option<crate::TransferId> {
        self.transfers
            .iter()
            .find(|(_, t)| t.ed2k.as_ref().is_some_and(|e| e.hash == *hash))
            .map(|(id, _)| *id)
    }

    /// Offers every file we have something of to the logged-in server.
    pub(crate) fn offer_files(&mut self) {
        // An attached file's parts are read from its content: lend it.
        if !self.lending
            && !self.mixed.is_empty()
            && let Some(now) = self.now
        {
            self.lend();
            self.offer_files_lent();
            self.unlend(now);
        } else {
            self.offer_files_lent();
        }
    }

    fn offer_files_lent(&mut self) {
        let Some(i) = self.servers.iter().position(|s| s.session.is_some()) else {
            return;
        };
        let files: Vec<SharedInfo> = self
            .transfers
            .values()
            .filter(|t| t.running())
            .filter_map(|t| {
                let e = t.ed2k.as_ref()?;
                let (name, size) = self.ed2k.file_info(e.file)?;
                let p = self.ed2k.progress(e.file);
                (p.parts_had > 0 || p.complete).then(|| SharedInfo {
                    hash: e.hash,
                    name: name.to_string(),
                    size,
                    complete: p.complete,
                })
            })
            .collect();
        if let Some(s) = self.servers[i].session.as_mut() {
            s.offer(&files);
        }
        self.flush_server(i);
    }

    /// Asks the logged-in server for sources of every incomplete download.
    pub(crate) fn ask_sources(&mut self, now: Instant) {
        let Some(i) = self.servers.iter().position(|s| s.session.is_some()) else {
            return;
        };
        let wanted: Vec<(Md4Hash, u64)> = self
            .transfers
            .values()
            .filter(|t| t.running() && t.complete_at.is_none())
            .filter_map(|t| t.ed2k.as_ref().map(|e| (e.hash, t.size)))
            .collect();
        if let Some(s) = self.servers[i].session.as_mut() {
            for (h, size) in &wanted {
                s.get_sources(*h, *size);
            }
        }
        self.servers[i].next_ask = (!wanted.is_empty()).then_some(now + self.cfg.source_reask);
        self.flush_server(i);
    }

    fn flush_server(&mut self, i: usize) {
        let s = &mut self.servers[i];
        if let (Some(conn), Some(session)) = (s.conn, s.session.as_mut())
            && let Some(b) = session.take_output()
        {
            self.events.push_back(SessionEvent::Send {
                conn,
                data: vec![b],
                payload: 0,
            });
        }
    }
}
