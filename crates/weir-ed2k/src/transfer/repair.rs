//! Parts that fail their MD4 check.
//!
//! - With an AICH master hash and a source that can send recovery data
//!   (the eD2k way): the part's bytes are read back, the source sends the
//!   part's 53 block hashes (checked up the tree to the master hash), and
//!   blocks are compared one by one. Whoever sent a bad block is banned;
//!   the good blocks are kept (handed to storage again from the read-back
//!   buffer, no copy) and only the bad ones are fetched again.
//! - Without AICH, one sender: that sender is banned (the MD4 hash list is
//!   checked against the file hash, so the bad data can only be its) and
//!   the part is fetched again.
//! - Without AICH, several senders: the shared content investigates
//!   (`weir_core::content`): each block's SHA-1 is kept from the read-back
//!   bad part; when the part later passes, the good bytes are read back too
//!   and a sender whose block differs is banned. Honest peers that shared a
//!   part with a liar are never blamed.
//!
//! A failed part stays out of the picker until its bad bytes are read back,
//! so nothing new is written over them first.

use std::net::IpAddr;
use std::time::Instant;

use bytes::Bytes;
use sha1::{Digest as _, Sha1};
use weir_core::storage::StorageOp;

use super::file::{Recovery, Sender};
use super::{BanReason, Client, ConnId, Event, FileId, RECOVERY_TIMEOUT};
use crate::client::ClientMessage as M;
use crate::hash::RecoveryData;
use crate::{AichHash, EMBLOCKSIZE, Md4Hash};

/// Read ids with this bit set read a failed part back.
pub(super) const RECOVERY_READ: u64 = 1 << 63;
/// Read kinds (bits 32..40 of the id).
const READ_AICH: u64 = 0;

fn read_id(kind: u64, part: u32) -> u64 {
    RECOVERY_READ | kind << 32 | u64::from(part)
}

/// The distinct addresses that sent blocks of a part.
pub(super) fn senders(from: &[Sender]) -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = from
        .iter()
        .filter_map(|(_, _, s)| s.map(|s| s.ip))
        .collect();
    v.sort();
    v.dedup();
    v
}

impl Client {
    /// A downloaded part failed its MD4 check.
    pub(super) fn part_failed(
        &mut self,
        file: FileId,
        piece: u32,
        from: Vec<Sender>,
        now: Instant,
    ) {
        let f = &self.files[file as usize];
        let part_start = f.geo.piece_offset(piece);
        // aMule has no recovery data for a file of at most one block, or a
        // last part of at most one block.
        let defined = f.size > EMBLOCKSIZE && f.size - part_start > EMBLOCKSIZE;
        let who = senders(&from);
        let helper = f
            .aich_master
            .filter(|_| defined)
            .and_then(|master| self.aich_helper(file, master, &who).map(|c| (c, master)));
        let len = f.geo.piece_size(piece);
        let hash = f.hash;
        if let Some((peer, master)) = helper {
            let c = self.conns.get_mut(&peer).expect("listed");
            c.send(&M::AichRequest {
                file: hash,
                part: piece as u16,
                master,
            });
            self.mark_dirty(peer);
            self.files[file as usize].recovering.insert(
                piece,
                Recovery {
                    from,
                    data: None,
                    blocks: None,
                    asked: Some(peer),
                    deadline: now + RECOVERY_TIMEOUT,
                    abandoned: false,
                },
            );
            self.read_back(file, READ_AICH, piece, len);
            self.ensure_tick(now);
        } else {
            self.files[file as usize].content.investigate(piece, from);
        }
    }

    /// A connected source of `file` that can send AICH recovery data for
    /// `master`, preferably one that sent none of the part.
    fn aich_helper(&self, file: FileId, master: AichHash, senders: &[IpAddr]) -> Option<ConnId> {
        let candidates: Vec<(ConnId, bool)> = self
            .conns
            .iter()
            .filter(|(_, c)| !c.closing)
            .filter(|(_, c)| c.peer.as_ref().is_some_and(|p| p.info.misc1.aich > 0))
            .filter(|(_, c)| {
                c.down
                    .as_ref()
                    .is_some_and(|d| d.file == file && d.aich.is_none_or(|a| a == master))
            })
            .map(|(k, c)| (*k, senders.contains(&super::canonical(c.addr.ip()))))
            .collect();
        candidates
            .iter()
            .find(|(_, sent)| !sent)
            .or(candidates.first())
            .map(|(k, _)| *k)
    }

    fn read_back(&mut self, file: FileId, kind: u64, part: u32, len: u32) {
        self.events.push_back(Event::Storage {
            file,
            op: StorageOp::Read {
                id: read_id(kind, part),
                piece: part,
                begin: 0,
                len,
            },
        });
    }

    /// Fetches a failed part again; a lone sender is banned, several get a
    /// strike each.
    pub(super) fn refetch(&mut self, file: FileId, piece: u32, from: &[Sender]) {
        self.files[file as usize].content.refetch(piece);
        let s = senders(from);
        let n = if s.len() == 1 { super::BAN_STRIKES } else { 1 };
        for ip in s {
            self.strike(ip, n, false);
        }
    }

    pub(super) fn on_aich_answer(
        &mut self,
        conn: ConnId,
        hash: Md4Hash,
        data: Option<(u16, AichHash, RecoveryData)>,
        now: Instant,
    ) {
        let Some(file) = self.files.iter().position(|f| f.hash == hash) else {
            return;
        };
        let file = file as FileId;
        let f = &mut self.files[file as usize];
        let size = f.size;
        let found = f
            .recovering
            .iter_mut()
            .find(|(p, r)| {
                r.asked == Some(conn) && data.as_ref().is_none_or(|d| u32::from(d.0) == **p)
            })
            .map(|(p, r)| (*p, r));
        let Some((part, rec)) = found else {
            return;
        };
        let verified = match (&data, f.aich_master) {
            (Some((_, m, rd)), Some(master)) if *m == master => {
                rd.verify(size, master, u64::from(part)).ok()
            }
            _ => None,
        };
        match verified {
            Some(blocks) => {
                rec.blocks = Some(blocks);
                rec.asked = None;
                self.finish_recovery(file, part, now);
            }
            None => {
                // Refused, or hashes that do not lead to the master hash.
                let rec = f.recovering.remove(&part).expect("found");
                self.give_up_recovery(file, part, rec, now);
            }
        }
    }

    /// Recovery is not possible: handle the part as without AICH, once
    /// its bad bytes are in hand (a read-back still in flight finishes it).
    fn give_up_recovery(&mut self, file: FileId, part: u32, mut rec: Recovery, now: Instant) {
        let Some(data) = rec.data.take() else {
            rec.abandoned = true;
            rec.asked = None;
            self.files[file as usize].recovering.insert(part, rec);
            return;
        };
        if senders(&rec.from).len() > 1 {
            let f = &mut self.files[file as usize];
            f.content.investigate_copy(part, rec.from, &data);
        } else {
            self.refetch(file, part, &rec.from);
        }
        self.kick_file(file, now);
    }

    /// A read-back of a failed (or later passed) part.
    pub(super) fn on_recovery_read(
        &mut self,
        file: FileId,
        id: u64,
        data: Result<Bytes, String>,
        now: Instant,
    ) {
        let part = id as u32;
        let kind = (id >> 32) & 0xff;
        if kind != READ_AICH {
            return;
        }
        let f = &mut self.files[file as usize];
        let Some(rec) = f.recovering.get_mut(&part) else {
            return;
        };
        match data {
            Ok(d) => {
                rec.data = Some(d);
                if rec.abandoned {
                    let rec = f.recovering.remove(&part).expect("found");
                    self.give_up_recovery(file, part, rec, now);
                } else {
                    self.finish_recovery(file, part, now);
                }
            }
            Err(_) => {
                // Cannot compare anything: fetch again.
                let rec = f.recovering.remove(&part).expect("found");
                self.refetch(file, part, &rec.from);
                self.kick_file(file, now);
            }
        }
    }

    /// With the bad bytes and the trusted block hashes in hand: ban whoever
    /// sent a bad block, keep the good blocks, fetch only the bad ones.
    fn finish_recovery(&mut self, file: FileId, part: u32, now: Instant) {
        let f = &mut self.files[file as usize];
        let ready = f
            .recovering
            .get(&part)
            .is_some_and(|r| r.data.is_some() && r.blocks.is_some() && !r.abandoned);
        if !ready {
            return;
        }
        let rec = f.recovering.remove(&part).expect("checked");
        let (data, blocks) = (
            rec.data.clone().expect("checked"),
            rec.blocks.clone().expect("checked"),
        );
        let geo = f.geo;
        let n = geo.blocks_in_piece(part);
        if blocks.len() != n as usize || data.len() != geo.piece_size(part) as usize {
            return self.give_up_recovery(file, part, rec, now);
        }
        let bad: Vec<u32> = (0..n)
            .filter(|&i| {
                let s = geo.block(part, i);
                let at = s.begin as usize;
                let h: [u8; 20] = Sha1::digest(&data[at..at + s.len as usize]).into();
                h != blocks[i as usize]
            })
            .collect();
        if bad.is_empty() {
            // AICH says every block is fine and MD4 says not: MD4 decides.
            return self.give_up_recovery(file, part, rec, now);
        }
        self.stats.aich_repairs += 1;
        let mut liars: Vec<IpAddr> = Vec::new();
        for &(begin, len, sender) in &rec.from {
            let Some(weir_core::content::Sender { ip, .. }) = sender else {
                continue;
            };
            let hit = bad.iter().any(|&i| {
                let s = geo.block(part, i);
                begin < s.begin + s.len && s.begin < begin + len
            });
            if hit && !liars.contains(&ip) {
                liars.push(ip);
            }
        }
        for ip in liars {
            self.ban(ip, BanReason::BadAichBlock);
        }
        let content = &mut self.files[file as usize].content;
        content.refetch(part);
        for i in (0..n).filter(|i| !bad.contains(i)) {
            let s = geo.block(part, i);
            let at = s.begin as usize;
            content.restore(s, data.slice(at..at + s.len as usize));
        }
        self.kick_file(file, now);
    }

    /// Recoveries whose answer did not come in time, or whose helper left.
    pub(super) fn recovery_timeouts(&mut self, now: Instant) {
        for file in 0..self.files.len() {
            let late: Vec<u32> = self.files[file]
                .recovering
                .iter()
                .filter(|(_, r)| !r.abandoned)
                .filter(|(_, r)| {
                    r.deadline <= now
                        || r.asked
                            .is_some_and(|c| self.conns.get(&c).is_none_or(|c| c.closing))
                })
                .map(|(p, _)| *p)
                .collect();
            for part in late {
                let rec = self.files[file].recovering.remove(&part).expect("listed");
                self.give_up_recovery(file as FileId, part, rec, now);
            }
        }
    }
}
