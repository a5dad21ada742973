//! The driver's connections: accepting, a handshaked connection's
//! reader and writer tasks, and what they report.

use std::time::Instant;

use bytes::BytesMut;
use tokio::task::JoinHandle;
use weir_bt::wire::Limits as BtLimits;
use weir_session::{ConnId, Established, Proto};

use crate::engine::transport::{PeerStream, Transport};
use crate::engine::wire::{BtDecoder, Ed2kDecoder, Wire, WireError};
use crate::peerconn::{self, ConnEvent, WriteQueue};

use super::{Driver, Msg};

/// Bytes of control messages one connection may have queued besides the
/// block data its core bounds (`Session::upload_bound`) before it is
/// dropped for not reading.
pub(super) const CONTROL_ROOM: u64 = 1 << 20;

/// Bytes an eD2k server connection may have queued.
pub(super) const SERVER_WRITE_LIMIT: u64 = 4 << 20;

/// What a connection's tasks are started with (see `Driver::spawn_io`).
pub(super) struct Io {
    conn: ConnId,
    proto: Proto,
    leftover: BytesMut,
    pieces: Option<u32>,
    down: crate::bandwidth::Limiter,
    up: crate::bandwidth::Limiter,
    wrx: peerconn::WriteRx,
}

pub(super) struct ConnState {
    pub(super) proto: Proto,
    pub(super) writer: WriteQueue,
    pub(super) reader: JoinHandle<()>,
    pub(super) writer_task: JoinHandle<()>,
}

impl Driver {
    /// Starts the accept loops of the bound listeners (once).
    pub(super) fn start_accepting(&mut self) {
        if let (true, Some(utp)) = (self.accept_tasks.is_empty(), &self.transports.utp)
            && self.transports.allowed.utp
            && self.cfg.bt_listen.is_some()
        {
            let (utp, tx) = (utp.clone(), self.tx.clone());
            self.accept_tasks.push(tokio::spawn(async move {
                while let Some(stream) = utp.accept().await {
                    let addr = stream.peer_addr();
                    if tx.send(Msg::AcceptedUtp { stream, addr }).await.is_err() {
                        return;
                    }
                }
            }));
        }
        for (proto, l) in std::mem::take(&mut self.listeners) {
            let tx = self.tx.clone();
            let policy = self.cfg.session.policy.clone();
            self.accept_tasks.push(tokio::spawn(async move {
                crate::net::accept_loop(&policy, &l, |stream, addr| {
                    let tx = tx.clone();
                    async move {
                        tx.send(Msg::Accepted {
                            proto,
                            stream,
                            addr,
                        })
                        .await
                        .is_ok()
                    }
                })
                .await;
            }));
        }
    }

    pub(super) fn on_handshaked(
        &mut self,
        conn: ConnId,
        stream: PeerStream,
        established: Established,
        leftover: BytesMut,
        now: Instant,
    ) {
        let proto = match &established {
            Established::Bt { .. } => Proto::Bt,
            Established::Ed2k { .. } => Proto::Ed2k,
            Established::Ed2kServer => Proto::Ed2kServer,
        };
        let their_id = match &established {
            Established::Bt { theirs, .. } => Some(theirs.peer_id),
            _ => None,
        };
        let pieces = match &established {
            Established::Bt { theirs, .. } => self
                .session
                .find_torrent(&theirs.info_hash)
                .and_then(|id| self.session.torrent(id))
                .map(|t| t.geometry().piece_count()),
            _ => None,
        };
        if let Err(e) = self.session.established(conn, established, now) {
            tracing::debug!("connection {conn} refused: {e}");
            return;
        }
        if proto == Proto::Bt {
            let (transport, crypto) = stream.describe();
            let link = weir_session::Link {
                utp: transport == Transport::Utp,
                encrypted: crypto == weir_bt::mse::Crypto::Rc4,
            };
            self.session.set_link(conn, link);
            let crypto = if link.encrypted { "RC4" } else { "plaintext" };
            tracing::debug!("connection {conn}: BitTorrent over {transport}, {crypto}");
        }
        let limit = if proto == Proto::Ed2kServer {
            SERVER_WRITE_LIMIT
        } else {
            self.session.upload_bound(proto) + CONTROL_ROOM
        };
        let (writer, wrx) = peerconn::write_queue(limit);
        let (down, up) = if proto == Proto::Ed2kServer {
            (
                crate::bandwidth::Limiter::unlimited(),
                crate::bandwidth::Limiter::unlimited(),
            )
        } else if let Some(t) = self.session.conn_transfer(conn) {
            let (d, u) = self.caps_of(t);
            (self.cfg.down.with(d), self.cfg.up.with(u))
        } else {
            (self.cfg.down.clone(), self.cfg.up.clone())
        };
        let io = Io {
            conn,
            proto,
            leftover,
            pieces,
            down,
            up,
            wrx,
        };
        if let PeerStream::Utp(s) = &stream {
            self.over_utp.insert(conn);
            // Large datagrams on loopback, toward weir only (see
            // `UtpStream::set_max_packet_size`).
            if their_id.is_some_and(|id| id.starts_with(b"-WR"))
                && s.get_ref().peer_addr().ip().is_loopback()
            {
                s.get_ref().set_max_packet_size(crate::utp::LOOPBACK_PACKET);
            }
        }
        let (reader, writer_task) = match stream {
            PeerStream::Tcp(s) => {
                let (rd, wr) = s.into_split();
                self.spawn_io(io, rd, wr)
            }
            PeerStream::Utp(s) => {
                let (rd, wr) = tokio::io::split(s);
                self.spawn_io(io, rd, wr)
            }
        };
        self.conns.insert(
            conn,
            ConnState {
                proto,
                writer,
                reader,
                writer_task,
            },
        );
    }

    /// A connection's reader and writer tasks over its two halves.
    pub(super) fn spawn_io<R, W>(&self, io: Io, rd: R, wr: W) -> (JoinHandle<()>, JoinHandle<()>)
    where
        R: peerconn::PeerRead,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let Io {
            conn,
            proto,
            leftover,
            pieces,
            down,
            up,
            wrx,
        } = io;
        let reader = match proto {
            Proto::Bt => tokio::spawn(peerconn::reader(
                conn,
                rd,
                leftover,
                BtDecoder(BtLimits::new(pieces.unwrap_or(0))),
                down,
                self.data_tx.clone(),
            )),
            Proto::Ed2k => tokio::spawn(peerconn::reader(
                conn,
                rd,
                leftover,
                Ed2kDecoder::peer(),
                down,
                self.data_tx.clone(),
            )),
            Proto::Ed2kServer => tokio::spawn(peerconn::reader(
                conn,
                rd,
                BytesMut::with_capacity(64 << 10),
                Ed2kDecoder::server(),
                down,
                self.data_tx.clone(),
            )),
        };
        let writer_task = tokio::spawn(peerconn::writer::<Wire, WireError, Msg>(
            conn,
            wr,
            wrx,
            up,
            self.tx.clone(),
        ));
        (reader, writer_task)
    }

    pub(super) fn on_conn_event(&mut self, ev: ConnEvent<Wire, WireError>, now: Instant) {
        match ev {
            ConnEvent::Messages { conn, msgs, .. } => {
                let Some(c) = self.conns.get(&conn) else {
                    return;
                };
                match c.proto {
                    Proto::Bt => {
                        let m = msgs
                            .into_iter()
                            .filter_map(|w| match w {
                                Wire::Bt(m) => Some(m),
                                Wire::Ed2k(_) => None,
                            })
                            .collect();
                        self.session.bt_messages(conn, m, now);
                    }
                    _ => {
                        let p = msgs
                            .into_iter()
                            .filter_map(|w| match w {
                                Wire::Ed2k(p) => Some(p),
                                Wire::Bt(_) => None,
                            })
                            .collect();
                        self.session.ed2k_packets(conn, p, now);
                    }
                }
            }
            ConnEvent::ReadError { conn, error } => {
                tracing::debug!("connection {conn}: {error}; closed");
                self.drop_conn(conn, false);
                self.session.closed(conn, Some(error.to_string()), now);
            }
            ConnEvent::Closed { conn } => {
                self.drop_conn(conn, false);
                self.session.closed(conn, None, now);
            }
            ConnEvent::Sent { conn, bytes } => self.session.sent(conn, bytes, now),
        }
    }

    /// Forgets a connection's tasks: the writer flushes for a bounded time
    /// (not at all when `now`), the reader stops.
    pub(super) fn drop_conn(&mut self, conn: ConnId, now: bool) {
        if let Some(a) = self.pending.remove(&conn) {
            a.abort();
        }
        self.over_utp.remove(&conn);
        if let Some(c) = self.conns.remove(&conn) {
            c.reader.abort();
            drop(c.writer);
            if now {
                c.writer_task.abort();
            } else {
                peerconn::linger(c.writer_task);
            }
        }
    }
}
