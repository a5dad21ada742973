//! The driver's server connection: login, offers, source requests and
//! callbacks (the sans-IO [`ServerSession`] over the shared reader and
//! writer).

use std::net::SocketAddr;
use std::time::Instant;

use tokio::net::TcpStream;
use weir_core::peers::Source;
use weir_ed2k::Md4Hash;
use weir_ed2k::packet::{Decoder, Limits};
use weir_ed2k::server::{ServerSession, SessionEvent, SharedInfo};

use super::{Driver, Msg, SERVER_RETRY, SOURCE_REASK, ServerConn};
use crate::bandwidth::Limiter;
use crate::ed2k::conn::{ServerDecoder, ServerPacket};
use crate::peerconn::{self, ConnEvent, Outgoing};

/// Most bytes queued for the server and not yet written (offers of every
/// shared file fit many times over); past it the server is taken as lost.
const SERVER_QUEUE_LIMIT: u64 = 4 << 20;

impl Driver {
    pub(super) fn server_up(&mut self, stream: TcpStream, addr: SocketAddr) {
        let _ = stream.set_nodelay(true);
        let (rd, wr) = stream.into_split();
        let (wtx, wrx) = peerconn::write_queue(SERVER_QUEUE_LIMIT);
        let reader = tokio::spawn(peerconn::reader(
            0,
            rd,
            bytes::BytesMut::with_capacity(64 << 10),
            ServerDecoder(Decoder::new(Limits::SERVER)),
            Limiter::unlimited(),
            self.tx.clone(),
        ));
        let writer_task = tokio::spawn(peerconn::writer::<ServerPacket, Msg>(
            0,
            wr,
            wrx,
            Limiter::unlimited(),
            self.tx.clone(),
        ));
        let session = ServerSession::new(
            self.cfg.user_hash.for_port(self.listen_port),
            self.listen_port,
            &self.cfg.nick,
        );
        self.server = Some(ServerConn {
            addr,
            session,
            writer: wtx,
            reader,
            writer_task,
        });
        self.flush_server();
    }

    pub(super) fn flush_server(&mut self) {
        if let Some(s) = &mut self.server
            && let Some(b) = s.session.take_output()
            && let Err(e) = s.writer.send(Outgoing {
                data: vec![b],
                payload: 0,
            })
        {
            self.server_lost(e.to_string(), Instant::now());
        }
    }

    pub(super) fn server_event(&mut self, ev: ConnEvent<ServerPacket>, now: Instant) {
        match ev {
            ConnEvent::Messages { msgs, .. } => {
                for ServerPacket(p) in msgs {
                    let Some(s) = &mut self.server else {
                        return;
                    };
                    match s.session.handle(&p) {
                        Ok(evs) => {
                            for e in evs {
                                self.on_session_event(e, now);
                            }
                        }
                        Err(e) => tracing::debug!("eD2k server {}: {e}", s.addr),
                    }
                }
                self.flush_server();
            }
            ConnEvent::ReadError { reason, .. } => self.server_lost(reason, now),
            ConnEvent::Closed { .. } => self.server_lost("closed".into(), now),
            ConnEvent::Sent { .. } => {}
        }
    }

    pub(super) fn server_lost(&mut self, why: String, now: Instant) {
        if let Some(s) = self.server.take() {
            tracing::warn!("eD2k server {}: {why}", s.addr);
            s.reader.abort();
            peerconn::linger(s.writer_task);
            self.server_retry.insert(s.addr, now + SERVER_RETRY);
            self.client.set_server(None, 0);
            self.next_source_ask = None;
        }
    }

    pub(super) fn on_session_event(&mut self, e: SessionEvent, now: Instant) {
        match e {
            SessionEvent::Connected { id, .. } => {
                let (addr, low) = match &self.server {
                    Some(s) => (s.addr, s.session.is_low_id()),
                    None => return,
                };
                tracing::info!(
                    "logged into eD2k server {addr} with a {} id",
                    if low { "low" } else { "high" }
                );
                let ip = match addr {
                    SocketAddr::V4(a) => *a.ip(),
                    SocketAddr::V6(a) => a
                        .ip()
                        .to_ipv4_mapped()
                        .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
                };
                self.client.set_server(Some((ip, addr.port())), id);
                self.offer_files();
                self.ask_sources(now);
            }
            SessionEvent::Sources {
                file,
                reachable,
                low_ids,
            } => {
                tracing::debug!(
                    "server: {} sources for {file} ({} low id)",
                    reachable.len(),
                    low_ids.len()
                );
                let me: Vec<SocketAddr> = reachable
                    .into_iter()
                    .map(SocketAddr::V4)
                    .filter(|a| !self.is_me(*a))
                    .collect();
                self.book.add_answer(me, Source::Server, now);
                if let Some(s) = &mut self.server {
                    // As many as we would take callbacks for at once.
                    for id in low_ids.into_iter().take(self.cfg.book.max_callbacks) {
                        s.session.callback(id);
                    }
                }
                self.dial_more(now);
            }
            SessionEvent::CallbackRequested { addr } => self.callback(SocketAddr::V4(addr)),
            SessionEvent::CallbackFailed | SessionEvent::Rejected => {}
            SessionEvent::Message(m) => tracing::debug!("eD2k server says: {}", m.trim()),
        }
    }

    pub(super) fn offer_files(&mut self) {
        let files: Vec<SharedInfo> = self
            .client
            .file_ids()
            .filter_map(|f| {
                let (name, size) = self.client.file_info(f)?;
                let hash = self.client.file_hash(f)?;
                let p = self.client.progress(f);
                (p.parts_had > 0 || p.complete).then(|| SharedInfo {
                    hash,
                    name: name.to_string(),
                    size,
                    complete: p.complete,
                })
            })
            .collect();
        if let Some(s) = &mut self.server {
            s.session.offer(&files);
        }
        self.flush_server();
    }

    pub(super) fn ask_sources(&mut self, now: Instant) {
        let wanted: Vec<(Md4Hash, u64)> = self
            .client
            .downloading()
            .filter_map(|f| Some((self.client.file_hash(f)?, self.client.file_info(f)?.1)))
            .collect();
        if let Some(s) = &mut self.server {
            for (h, size) in &wanted {
                s.session.get_sources(*h, *size);
            }
        }
        self.next_source_ask = (!wanted.is_empty()).then_some(now + SOURCE_REASK);
        self.flush_server();
    }
}
