//! Carrying out the session's events.

use std::time::Instant;

use weir_session::{LogLevel, Proto, SessionEvent, TransferEvent, TransferId};

use crate::engine::EngineError;
use crate::engine::trackers::Standing;
use crate::engine::wire;
use crate::peerconn::{Outgoing, QueueError};

use super::Driver;

/// Log target of a transfer's milestones (its first piece verified, every
/// piece verified): hidden under the default filter, shown by
/// `RUST_LOG=info`; `weir bench magnet` times them.
pub(super) const MILESTONE: &str = "milestone";

impl Driver {
    /// Carries out everything the session asked for.
    pub(super) fn carry_out(&mut self) {
        while let Some(ev) = self.session.poll_event() {
            let now = Instant::now();
            match ev {
                SessionEvent::OpenStorage {
                    transfer,
                    digests,
                    resumed,
                } => self.start_storage(transfer, digests, &resumed),
                SessionEvent::Storage { transfer, op } => match self.running(transfer) {
                    Some(d) => d.submit(op),
                    None => tracing::debug!("storage op for {transfer} before its storage opened"),
                },
                SessionEvent::Dial {
                    conn,
                    proto,
                    addr,
                    hello,
                } => {
                    let local = match proto {
                        Proto::Bt => self.cfg.bt_listen.map(|a| a.ip()),
                        _ => self.cfg.ed2k_listen.map(|a| a.ip()),
                    };
                    let t = tokio::spawn(wire::dial(
                        conn,
                        self.cfg.session.policy.clone(),
                        local,
                        addr,
                        hello,
                        self.cfg.handshake_timeout,
                        self.mse.clone(),
                        self.transports.clone(),
                        self.tx.clone(),
                    ));
                    self.pending.insert(conn, t.abort_handle());
                }
                SessionEvent::Send {
                    conn,
                    data,
                    payload,
                } => {
                    let Some(c) = self.conns.get(&conn) else {
                        continue;
                    };
                    match c.writer.send(Outgoing { data, payload }) {
                        Ok(()) => {}
                        Err(e @ QueueError::Full { .. }) => {
                            tracing::info!("connection {conn}: {e}; dropped");
                            self.drop_conn(conn, true);
                            self.session.closed(conn, Some(e.to_string()), now);
                        }
                        Err(QueueError::Closed) => {}
                    }
                }
                SessionEvent::Close { conn, reason } => {
                    if reason == weir_session::CloseReason::SelfConnection {
                        // Never silent: a source that is us, or another
                        // client with our hash, would stall a download.
                        tracing::warn!(
                            "eD2k connection {conn}: the peer presents our own user hash: it is \
                             this client, or another one given the same WEIR_ED2K_USER_HASH \
                             (unset it so each listen port gets its own); not using it"
                        );
                    }
                    if reason.peer_at_fault() {
                        tracing::info!("connection {conn}: {reason}; disconnected");
                    } else {
                        tracing::debug!("connection {conn}: {reason}; disconnected");
                    }
                    self.drop_conn(conn, false);
                }
                SessionEvent::CheckRange {
                    transfer,
                    scheme,
                    unit,
                    offset,
                    len,
                    digest,
                } => {
                    let tx = self.checked_tx.clone();
                    match self.running(transfer) {
                        Some(d) => {
                            d.check_range(offset, len, digest, move |ok| {
                                let _ = tx.send(super::Checked {
                                    transfer,
                                    scheme,
                                    unit,
                                    ok,
                                });
                            });
                        }
                        None => {
                            tracing::debug!("range check for {transfer} before its storage opened")
                        }
                    }
                }
                SessionEvent::Banned { ip, reason } => tracing::warn!("banning {ip}: {reason}"),
                SessionEvent::DhtNode(node) => {
                    if let Some(d) = &mut self.dht {
                        d.add_nodes(&[node], &mut self.session);
                    }
                }
                SessionEvent::Transfer { transfer, event } => {
                    self.on_transfer_event(transfer, event, now)
                }
                SessionEvent::Log { level, message } => match level {
                    LogLevel::Debug => tracing::debug!("{message}"),
                    LogLevel::Info => tracing::info!("{message}"),
                    LogLevel::Warn => tracing::warn!("{message}"),
                },
            }
        }
    }

    pub(super) fn on_transfer_event(&mut self, id: TransferId, event: TransferEvent, now: Instant) {
        match event {
            TransferEvent::Complete => {
                self.last_complete = Some(now);
                // Milestones (here and the first piece below) are timed by
                // `weir bench magnet`; off by default (RUST_LOG=info shows them).
                tracing::info!(target: MILESTONE, "{}: every piece verified", self.transfer_name(id, now));
                self.publish_soon(now);
            }
            TransferEvent::Failed(error) => {
                let name = self
                    .session
                    .info(id, now)
                    .map_or_else(|| id.to_string(), |i| i.name.to_string());
                tracing::error!("{name}: {error}");
                if !self.cfg.keep_running {
                    self.fatal = Some(EngineError::Transfer { name, error });
                }
            }
            TransferEvent::Checked => {
                self.start_trackers(id);
                if let Some(d) = &mut self.dht {
                    d.add_torrent(id, &mut self.session);
                }
                if let Some(l) = &mut self.lsd {
                    l.add_torrent(id, &mut self.session);
                }
                self.publish_soon(now);
            }
            TransferEvent::Verified(_) => {
                // The first this run (a piece verified at the start-up
                // check counts too: it is data there).
                if self.first_piece_said.insert(id) {
                    tracing::info!(target: MILESTONE, "{}: first piece verified", self.transfer_name(id, now));
                }
            }
        }
    }

    /// A transfer's name for the log (its id once it is gone).
    pub(super) fn transfer_name(&self, id: TransferId, now: Instant) -> String {
        self.session
            .info(id, now)
            .map_or_else(|| id.to_string(), |i| i.name.to_string())
    }

    pub(super) fn start_trackers(&mut self, id: TransferId) {
        if !self.cfg.use_trackers || self.announces.contains(id) {
            return;
        }
        let Some(t) = self.session.torrent(id) else {
            return;
        };
        let Some(meta) = self.session.metainfo(id) else {
            return;
        };
        let now = Instant::now();
        let stats = t.stats(now);
        let standing = Standing {
            left: stats.bytes_left,
            complete: t.is_complete(),
            seed: t.had().is_full(),
            ..Standing::default()
        };
        self.announces.add(id, meta, standing, now);
    }

    /// Starts the announces that are due (as many as the start rate allows).
    pub(super) fn start_announces(&mut self) {
        for job in self.announces.take_due(Instant::now()) {
            let id = job.transfer;
            let task = tokio::spawn(crate::engine::trackers::run_job(
                job,
                self.announce_ctx.clone(),
            ));
            self.announcing.insert(id, task.abort_handle());
        }
    }
}
