//! Turning the protocol cores' events into session events: sends and
//! closes pass through, storage operations are tagged with their transfer,
//! bans become session-wide, verdicts become transfer events.

use std::time::Instant;

use weir_bt::torrent::Event as BtEvent;
use weir_core::close::CloseReason;
use weir_ed2k::transfer::Event as Ed2kEvent;

use crate::session::Session;
use crate::types::{LogLevel, SessionEvent, TransferEvent, TransferId};

impl Session {
    /// Handles everything the transfer's torrent asked for, and re-arms its
    /// timer.
    pub(crate) fn pump_bt(&mut self, id: TransferId, now: Instant) {
        loop {
            let Some(ev) = self
                .transfers
                .get_mut(&id)
                .and_then(|t| t.bt.as_mut())
                .and_then(|b| b.awake_mut())
                .and_then(|t| t.poll_event())
            else {
                break;
            };
            match ev {
                BtEvent::Send {
                    conn,
                    data,
                    payload,
                } => self.events.push_back(SessionEvent::Send {
                    conn,
                    data,
                    payload,
                }),
                BtEvent::Storage(op) => self
                    .events
                    .push_back(SessionEvent::Storage { transfer: id, op }),
                // Closed already (a ban closes every connection of the
                // address, this one included): one Close is enough.
                BtEvent::Close { conn, reason } if self.conns.contains_key(&conn) => {
                    self.forget_conn(conn, now, None);
                    self.events.push_back(SessionEvent::Close { conn, reason });
                }
                BtEvent::Close { .. } => {}
                BtEvent::Ban { ip, reason } => self.ban(ip, reason),
                BtEvent::PieceVerified(p) => self.transfer_event(id, TransferEvent::Verified(p)),
                BtEvent::Complete => self.on_complete(id, now),
                BtEvent::CheckDone => self.on_checked(id, now),
                BtEvent::Fatal(e) => self.on_failed(id, e, now),
                BtEvent::Content(ev) => self.on_content_event(id, ev, now),
                BtEvent::DhtNode(addr) => {
                    if self.cfg.policy.allows(addr.ip()) && !self.bans.contains(addr.ip()) {
                        self.events.push_back(SessionEvent::DhtNode(addr));
                    }
                }
                BtEvent::PexPeers(addrs) => {
                    // Through the book: policy, bans, quotas, dial limits.
                    self.add_peers(
                        id,
                        crate::Proto::Bt,
                        &addrs,
                        weir_core::peers::Source::Pex,
                        now,
                    );
                }
            }
        }
        self.arm_bt_timer(id);
        self.sleep_if_idle(id);
    }

    /// Puts the transfer's torrent to sleep once nothing is under way (no
    /// peer, check, piece, read, timer or event; see
    /// [`weir_bt::torrent::Dormant`]): a daemon's idle torrents then cost
    /// a few hundred bytes each. Whatever needs it wakes it: a peer, a
    /// dial, storage, a user's change. A torrent attached to an eD2k file
    /// stays awake (the eD2k core borrows its content).
    fn sleep_if_idle(&mut self, id: TransferId) {
        // The pump above took it mutably already: no second touch.
        if let Some(t) = self.transfers.get_mut(&id)
            && t.ed2k.is_none()
            && let Some(b) = t.bt.as_mut()
        {
            b.try_sleep(&mut self.sleeping);
        }
    }

    fn arm_bt_timer(&mut self, id: TransferId) {
        let want = self
            .transfers
            .get(&id)
            .and_then(|t| t.bt.as_ref())
            .and_then(|b| b.view().awake())
            .and_then(|t| t.poll_timeout());
        let had = self.timer_of.get(&id).copied();
        if had == want {
            return;
        }
        if let Some(at) = had {
            self.timers.remove(&(at, id));
            self.timer_of.remove(&id);
        }
        if let Some(at) = want {
            self.timers.insert((at, id));
            self.timer_of.insert(id, at);
        }
    }

    /// Handles everything the eD2k core asked for.
    pub(crate) fn pump_ed2k(&mut self, now: Instant) {
        while let Some(ev) = self.ed2k.poll_event() {
            match ev {
                Ed2kEvent::Send {
                    conn,
                    data,
                    payload,
                } => self.events.push_back(SessionEvent::Send {
                    conn,
                    data,
                    payload,
                }),
                Ed2kEvent::Storage { file, op } => {
                    if let Some(&id) = self.by_file.get(&file) {
                        self.events
                            .push_back(SessionEvent::Storage { transfer: id, op });
                    }
                }
                Ed2kEvent::DigestsKnown { file } if self.mixed.iter().any(|m| m.1 == file) => {
                    self.attached_digests_known(file);
                }
                Ed2kEvent::DigestsKnown { file } => {
                    if let (Some(&id), Some(digests)) =
                        (self.by_file.get(&file), self.ed2k.digests(file))
                    {
                        let resumed = self
                            .transfers
                            .get_mut(&id)
                            .and_then(|t| t.ed2k.as_mut())
                            .map(|e| std::mem::take(&mut e.resumed))
                            .unwrap_or_default();
                        self.events.push_back(SessionEvent::OpenStorage {
                            transfer: id,
                            digests,
                            resumed,
                        });
                    }
                }
                // Closed already (a ban closes every connection of the
                // address, this one included): one Close is enough.
                Ed2kEvent::Close { conn, reason } if self.conns.contains_key(&conn) => {
                    self.forget_conn(conn, now, None);
                    self.events.push_back(SessionEvent::Close { conn, reason });
                }
                Ed2kEvent::Close { .. } => {}
                Ed2kEvent::Ban { ip, reason } => self.ban(ip, reason),
                Ed2kEvent::Connect { addr } => {
                    // A wedged downloader to reconnect to: through the same
                    // book and limits as every dial.
                    self.callbacks
                        .add(addr, weir_core::peers::Source::Callback, now);
                    self.next_dial = Some(now);
                }
                Ed2kEvent::PartVerified { file, part } => {
                    if let Some(&id) = self.by_file.get(&file) {
                        let first = self.ed2k.progress(file).parts_had == 1;
                        if !self.transfers[&id].checked {
                            // Found by the start-up check.
                        } else {
                            self.transfer_event(id, TransferEvent::Verified(part));
                        }
                        if first {
                            self.offer_files();
                        }
                    }
                }
                Ed2kEvent::Complete { file } => {
                    if let Some(&id) = self.by_file.get(&file) {
                        self.on_complete(id, now);
                        self.offer_files();
                    }
                }
                Ed2kEvent::Fatal { file, error } => {
                    if let Some(&id) = self.by_file.get(&file) {
                        self.on_failed(id, error, now);
                    }
                }
            }
        }
        // An eD2k file is checked once its storage check is over.
        let checked: Vec<TransferId> = self
            .transfers
            .iter()
            .filter(|(_, t)| !t.checked && t.bt.is_none())
            .filter(|(_, t)| {
                t.ed2k
                    .as_ref()
                    .is_some_and(|e| !self.ed2k.progress(e.file).checking)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in checked {
            self.on_checked(id, now);
        }
    }

    fn on_checked(&mut self, id: TransferId, now: Instant) {
        let Some(t) = self.transfers.get_mut(&id) else {
            return;
        };
        if t.checked {
            return;
        }
        t.checked = true;
        // Data found complete at start: the cores announce no completion
        // (nothing new happened), the transfer is complete all the same.
        let complete = match (&t.bt, &t.ed2k) {
            (Some(b), _) => b.view().is_complete(),
            (None, Some(e)) => self.ed2k.is_complete(e.file),
            (None, None) => false,
        };
        self.transfer_event(id, TransferEvent::Checked);
        if complete {
            self.on_complete(id, now);
        }
        self.ask_dial(id, now);
    }

    fn on_complete(&mut self, id: TransferId, now: Instant) {
        let Some(t) = self.transfers.get_mut(&id) else {
            return;
        };
        if t.complete_at.is_some() {
            return;
        }
        t.complete_at = Some(now);
        self.transfer_event(id, TransferEvent::Complete);
    }

    fn on_failed(&mut self, id: TransferId, error: String, now: Instant) {
        let Some(t) = self.transfers.get_mut(&id) else {
            return;
        };
        if t.failed.is_some() {
            return;
        }
        t.failed = Some(error.clone());
        let line = format!("{}: {error}", t.name);
        self.log(LogLevel::Warn, line);
        self.transfer_event(id, TransferEvent::Failed(error));
        self.close_transfer_conns(id, CloseReason::TransferFailed, now);
    }
}
