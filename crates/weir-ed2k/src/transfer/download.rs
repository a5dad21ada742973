//! The downloader side: asking a source for the file, its hashset and an
//! upload slot; keeping its pending list full (three ranges per
//! `OP_REQUESTPARTS`, as many packets as the list needs); receiving part
//! data (plain or zlib-packed, bounded) into blocks; handing blocks to
//! storage in order; and dealing with parts that fail their MD4 check.

use std::time::Instant;

use bytes::Bytes;
use weir_core::bitfield::Bitfield;
use weir_core::content::{Accepted, ContentEvent, Sender};
use weir_core::geometry::BlockSpan;
use weir_core::picker::PeerHas;

use super::conn::{DownState, Pending};
use super::{BanReason, Client, CloseReason, ConnId, Event, FileId};
use crate::client::{ClientMessage as M, ExtInfo, MultiAnswer, MultiRequest, PartStatus};
use crate::hash::file_hash_from_hashset;
use crate::inflate::BlockInflater;
use crate::{AichHash, Md4Hash};

/// In endgame a source gets duplicate blocks only while it has fewer than
/// this pending.
const ENDGAME_DEPTH: usize = 6;

impl Client {
    /// After the hello: ask the peer for the first file we still download
    /// (every peer may be a source; one that is not says so).
    pub(super) fn start_downloads(&mut self, conn: ConnId, now: Instant) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        if c.down.is_some() || c.closing {
            return;
        }
        let Some(info) = c.peer.as_ref().map(|p| p.info.clone()) else {
            return;
        };
        let pick = self.files.iter().enumerate().find(|(i, f)| {
            !f.is_complete()
                && !c.asked.contains(&(*i as FileId))
                && (f.size <= crate::OLD_MAX_FILE_SIZE || info.misc2.large_files)
        });
        let Some((file, f)) = pick else {
            return;
        };
        let file = file as FileId;
        let (hash, size) = (f.hash, f.size);
        let multi_parts = crate::part_count(size) > 1;
        let ext = (info.misc1.ext_requests > 0).then(|| ExtInfo {
            part_status: PartStatus::from_fn(crate::ed2k_part_count(size) as u16, |i| {
                f.content.had().get(i as u32)
            }),
            // We announce extended requests 2, and the peer reads by
            // what we announce.
            complete_sources: Some(0),
        });
        let c = self.conns.get_mut(&conn).expect("checked");
        c.asked.push(file);
        c.down = Some(super::conn::Down::new(file, self.cfg.max_requests, now));
        if info.misc1.multipacket {
            let mut entries = vec![MultiRequest::RequestFileName(ext)];
            if multi_parts {
                entries.push(MultiRequest::SetReqFileId);
            }
            if info.misc1.aich > 0 {
                entries.push(MultiRequest::AichFileHashReq);
            }
            c.send(&M::MultiPacket {
                file: hash,
                size: info.misc2.ext_multipacket.then_some(size),
                entries,
            });
        } else {
            c.send(&M::RequestFileName { file: hash, ext });
            if multi_parts {
                c.send(&M::SetReqFileId { file: hash });
            }
        }
        self.mark_dirty(conn);
    }

    /// The download role of `conn`, if it is for the file `hash`.
    fn down_for(&self, conn: ConnId, hash: &Md4Hash) -> Option<FileId> {
        let d = self.conns.get(&conn)?.down.as_ref()?;
        (self.files.get(d.file as usize)?.hash == *hash).then_some(d.file)
    }

    pub(super) fn on_no_file(&mut self, conn: ConnId, hash: Md4Hash, now: Instant) {
        if self.down_for(conn, &hash).is_none() {
            return;
        }
        let c = self.conns.get_mut(&conn).expect("checked");
        let d = c.down.take().expect("checked");
        self.drop_down(conn, d, now);
        // Another file, or nothing more to ask of this peer.
        self.start_downloads(conn, now);
        self.close_if_unused(conn);
    }

    pub(super) fn on_name_answer(&mut self, conn: ConnId, hash: Md4Hash, now: Instant) {
        let Some(file) = self.down_for(conn, &hash) else {
            return;
        };
        let multi_parts = crate::part_count(self.files[file as usize].size) > 1;
        let d = self.down_mut(conn);
        // Files of one part get no status request: the peer has it all.
        if !multi_parts || d.has.is_some() {
            d.answered = true;
        }
        self.down_advance(conn, now);
    }

    pub(super) fn on_file_status(
        &mut self,
        conn: ConnId,
        hash: Md4Hash,
        status: &PartStatus,
        now: Instant,
    ) {
        let Some(file) = self.down_for(conn, &hash) else {
            return;
        };
        if let Err(e) = self.set_has(conn, file, status) {
            return self.fail(conn, e);
        }
        self.down_mut(conn).answered = true;
        self.down_advance(conn, now);
    }

    pub(super) fn on_multipacket_answer(
        &mut self,
        conn: ConnId,
        hash: Md4Hash,
        entries: Vec<MultiAnswer>,
        now: Instant,
    ) {
        let Some(file) = self.down_for(conn, &hash) else {
            return;
        };
        for e in entries {
            match e {
                MultiAnswer::FileName(_) => {}
                MultiAnswer::FileStatus(s) => {
                    if let Err(e) = self.set_has(conn, file, &s) {
                        return self.fail(conn, e);
                    }
                }
                MultiAnswer::AichFileHash(h) => self.on_aich_hash(conn, hash, h),
            }
        }
        self.down_mut(conn).answered = true;
        self.down_advance(conn, now);
    }

    fn set_has(&mut self, conn: ConnId, file: FileId, s: &PartStatus) -> Result<(), String> {
        let f = &mut self.files[file as usize];
        let bits = f.status_bits(s).map(|b| f.to_primary(b)).ok_or_else(|| {
            format!(
                "part status of {} parts for a file of {}",
                s.count,
                crate::ed2k_part_count(f.size)
            )
        })?;
        let c = self.conns.get_mut(&conn).expect("caller checked");
        let d = c.down.as_mut().expect("caller checked");
        if let Some(old) = &d.has {
            f.content.peer_left(has_of(old));
        }
        f.content.peer_joined(has_of(&bits));
        d.has = Some(bits);
        Ok(())
    }

    pub(super) fn on_aich_hash(&mut self, conn: ConnId, hash: Md4Hash, master: AichHash) {
        let Some(file) = self.down_for(conn, &hash) else {
            return;
        };
        self.down_mut(conn).aich = Some(master);
        let f = &mut self.files[file as usize];
        // Without a trusted master, the first announced one serves to
        // locate bad blocks; the MD4 part hashes stay the authority.
        if f.aich_master.is_none() {
            f.aich_master = Some(master);
        }
    }

    pub(super) fn on_hashset(
        &mut self,
        conn: ConnId,
        hash: Md4Hash,
        hashes: Vec<crate::Md4Hash>,
        now: Instant,
    ) {
        let Some(file) = self.files.iter().position(|f| f.hash == hash) else {
            return;
        };
        let f = &mut self.files[file];
        if f.hashset_from == Some(conn) {
            f.hashset_from = None;
        }
        if f.hashset.is_some() {
            return;
        }
        let want = crate::hashset_len(f.size) as usize;
        if hashes.len() != want || file_hash_from_hashset(&hashes) != f.hash {
            let ip = self.conns[&conn].addr.ip();
            self.ban(ip, BanReason::BadHashset);
            return;
        }
        f.hashset = Some(hashes);
        self.digests_known(file as FileId);
        let conns: Vec<ConnId> = self.conns.keys().copied().collect();
        for c in conns {
            self.down_advance(c, now);
        }
    }

    /// The part hashes of `file` became known: its storage opens, and the
    /// data found on disk is checked.
    pub(super) fn digests_known(&mut self, file: FileId) {
        self.events.push_back(Event::DigestsKnown { file });
        let f = &mut self.files[file as usize];
        if f.shared.is_some() {
            // The content's owner checks the data, and the parts once
            // told the hashes (see `Client::digests`).
            return;
        }
        let check = std::mem::replace(&mut f.to_check, Bitfield::new(f.geo.piece_count()));
        f.content.start_check(&check);
    }

    /// Handles what a file's content asked for or reported.
    pub(super) fn pump(&mut self, file: FileId) {
        if self.files[file as usize].shared.is_some() {
            // A lent content's events are its owner's to handle.
            return;
        }
        let mut touched = false;
        while let Some(ev) = self.files[file as usize].content.poll_event() {
            touched = true;
            match ev {
                ContentEvent::Storage(op) => self.events.push_back(Event::Storage { file, op }),
                ContentEvent::PieceVerified(part) | ContentEvent::PieceFound(part) => {
                    self.events.push_back(Event::PartVerified { file, part });
                    if self.files[file as usize].is_complete() {
                        self.announce_complete(file);
                    }
                }
                ContentEvent::PieceFailed { piece, from } => {
                    self.stats.hash_failures += 1;
                    match self.now {
                        Some(now) => self.part_failed(file, piece, from, now),
                        None => self.refetch(file, piece, &from),
                    }
                }
                ContentEvent::BadData { sender, proven } => {
                    // The MD4 hash list is checked against the file hash,
                    // so a lone sender of a bad part is as proven as a
                    // liar found by comparing blocks.
                    self.strike(sender.ip, super::BAN_STRIKES, proven);
                }
                ContentEvent::CheckDone | ContentEvent::Complete => {
                    if self.files[file as usize].is_complete() {
                        self.announce_complete(file);
                    }
                }
                ContentEvent::CheckUnit { .. }
                | ContentEvent::UnitVerified { .. }
                | ContentEvent::UnitFailed { .. } => {}
            }
        }
        if touched && let Some(now) = self.now {
            self.kick_file(file, now);
        }
    }

    /// Moves a source's download along: hashset, slot request, blocks.
    pub(super) fn down_advance(&mut self, conn: ConnId, now: Instant) {
        let Some(c) = self.conns.get(&conn).filter(|c| !c.closing) else {
            return;
        };
        let Some(d) = c.down.as_ref() else {
            return;
        };
        let file = d.file;
        let f = &self.files[file as usize];
        let (hash, state, answered) = (f.hash, d.state, d.answered);
        if state == DownState::Asked && !answered {
            return;
        }
        if f.is_complete() {
            return;
        }
        if f.hashset.is_none() {
            if f.hashset_from.is_none() {
                self.files[file as usize].hashset_from = Some(conn);
                let c = self.conns.get_mut(&conn).expect("checked");
                c.send(&M::HashSetRequest { file: hash });
                self.mark_dirty(conn);
            }
            self.down_mut(conn).state = DownState::NeedHashset;
            return;
        }
        let wanted = {
            let d = self.conns[&conn].down.as_ref().expect("checked");
            let has = d.has.as_ref().map_or(PeerHas::All, has_of);
            f.content.is_interesting(has) || f.content.in_endgame()
        };
        let c = self.conns.get_mut(&conn).expect("checked");
        let d = c.down.as_mut().expect("checked");
        if d.has.is_none() {
            d.has = Some(f.all_primary());
            self.files[file as usize].content.peer_joined(PeerHas::All);
        }
        match state {
            DownState::Asked | DownState::NeedHashset | DownState::Idle => {
                if wanted {
                    d.state = if d.accepted {
                        DownState::Active
                    } else {
                        DownState::WaitSlot
                    };
                    c.send(&M::StartUploadReq { file: hash });
                    self.mark_dirty(conn);
                } else {
                    d.state = DownState::Idle;
                }
            }
            _ => {}
        }
        self.send_block_requests(conn, now);
    }

    pub(super) fn on_accept(&mut self, conn: ConnId, now: Instant) {
        let Some(d) = self.conns.get_mut(&conn).and_then(|c| c.down.as_mut()) else {
            // A slot for a file we no longer need.
            if let Some(c) = self.conns.get_mut(&conn) {
                c.send(&M::CancelTransfer);
                self.mark_dirty(conn);
            }
            return;
        };
        d.accepted = true;
        if matches!(d.state, DownState::WaitSlot | DownState::Queued) {
            // A new upload session.
            d.state = DownState::Active;
            d.session.clear();
        }
        d.last_data_at = now;
        self.send_block_requests(conn, now);
    }

    pub(super) fn on_queued(&mut self, conn: ConnId, rank: u32) {
        if let Some(d) = self.conns.get_mut(&conn).and_then(|c| c.down.as_mut())
            && matches!(d.state, DownState::WaitSlot | DownState::Queued)
        {
            d.state = DownState::Queued;
            d.rank = rank;
        }
    }

    pub(super) fn on_out_of_parts(&mut self, conn: ConnId, now: Instant) {
        let Some(d) = self.conns.get_mut(&conn).and_then(|c| c.down.as_mut()) else {
            return;
        };
        let file = d.file;
        let pending: Vec<Pending> = d.pending.drain(..).collect();
        d.accepted = false;
        if d.state == DownState::Active {
            // The uploader put us back on its queue.
            d.state = DownState::Queued;
        }
        let f = &mut self.files[file as usize];
        for p in pending {
            for sp in &p.spans {
                f.content.release(conn, sp.piece, sp.begin);
            }
        }
        self.kick_file(file, now);
    }

    /// Forgets a download role: its blocks go back to the picker.
    pub(super) fn drop_down(&mut self, conn: ConnId, d: super::conn::Down, now: Instant) {
        let f = &mut self.files[d.file as usize];
        for p in &d.pending {
            for sp in &p.spans {
                f.content.release(conn, sp.piece, sp.begin);
            }
        }
        if let Some(h) = &d.has {
            f.content.peer_left(has_of(h));
        }
        if f.hashset_from == Some(conn) {
            f.hashset_from = None;
        }
        let file = d.file;
        if !d.pending.is_empty() {
            self.kick_file(file, now);
        }
    }

    /// Lets every active source of `file` top up its pending list.
    pub(super) fn kick_file(&mut self, file: FileId, now: Instant) {
        let conns: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.down.as_ref().is_some_and(|d| d.file == file))
            .map(|(k, _)| *k)
            .collect();
        for c in conns {
            self.send_block_requests(c, now);
        }
    }

    fn down_mut(&mut self, conn: ConnId) -> &mut super::conn::Down {
        self.conns
            .get_mut(&conn)
            .and_then(|c| c.down.as_mut())
            .expect("caller checked the download role")
    }

    /// Tops up the source's pending list to its pipeline depth and asks
    /// for every entry not asked yet, three ranges per packet.
    pub(super) fn send_block_requests(&mut self, conn: ConnId, now: Instant) {
        let Some(c) = self.conns.get_mut(&conn).filter(|c| !c.closing) else {
            return;
        };
        let Some(d) = c.down.as_mut().filter(|d| d.state == DownState::Active) else {
            return;
        };
        let f = &mut self.files[d.file as usize];
        if f.hashset.is_none() || f.is_checking() || f.is_complete() {
            return;
        }
        let hash = f.hash;
        if d.restart {
            if d.pending.iter().any(|p| p.asked) {
                return; // let the session's blocks arrive first
            }
            // A new session: the uploader forgets what it served.
            for p in d.pending.drain(..) {
                for sp in &p.spans {
                    f.content.release(conn, sp.piece, sp.begin);
                }
            }
            d.restart = false;
            d.session.clear();
            d.accepted = false;
            d.state = DownState::WaitSlot;
            c.send(&M::CancelTransfer);
            c.send(&M::StartUploadReq { file: hash });
            self.mark_dirty(conn);
            return;
        }
        if f.content.can_pick() {
            let mut n = d.pipeline.top_up(d.pending.len() as u32) as usize;
            if f.content.in_endgame() {
                n = n.min(ENDGAME_DEPTH.saturating_sub(d.pending.len()));
            }
            if n > 0 {
                let has = d.has.as_ref().map_or(PeerHas::All, has_of);
                let mut spans: Vec<BlockSpan> = Vec::with_capacity(n);
                f.content.pick(conn, has, n, &mut spans);
                for s in spans {
                    let start = f.file_offset(&s);
                    if d.session.contains(&start) {
                        // Served once in this session already.
                        f.content.release(conn, s.piece, s.begin);
                        d.restart = true;
                        continue;
                    }
                    // Small blocks (an attached file's) that follow each
                    // other go in one range, up to an eD2k block.
                    if let Some(last) = d.pending.back_mut()
                        && !last.asked
                        && last.end == start
                        && last.end - last.start + u64::from(s.len) <= crate::EMBLOCKSIZE
                    {
                        last.spans.push(s);
                        last.end += u64::from(s.len);
                        continue;
                    }
                    d.pending.push_back(Pending {
                        spans: vec![s],
                        start,
                        end: start + u64::from(s.len),
                        asked: false,
                        sent_at: now,
                        got: 0,
                        data: Vec::new(),
                        inflater: None,
                        packed_got: 0,
                    });
                }
            }
        }
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for p in d.pending.iter_mut().filter(|p| !p.asked) {
            p.asked = true;
            p.sent_at = now;
            d.session.insert(p.start);
            ranges.push((p.start, p.end));
        }
        let has = d.has.as_ref().map_or(PeerHas::All, has_of);
        if d.pending.is_empty() && !d.restart && !f.content.is_interesting(has) {
            // Nothing left that this source has: free its slot.
            d.state = DownState::Idle;
            d.accepted = false;
            c.send(&M::CancelTransfer);
            self.mark_dirty(conn);
            return;
        }
        if ranges.is_empty() {
            return;
        }
        // One packet per three pending blocks: the wire carries exactly
        // three ranges, however deep the pending list is.
        for m in crate::client::request_parts(hash, &ranges) {
            c.send(&m);
        }
        self.mark_dirty(conn);
    }

    /// `OP_SENDINGPART`: the one place downloaded payload is decoded.
    pub(super) fn on_part_data(
        &mut self,
        conn: ConnId,
        hash: Md4Hash,
        start: u64,
        end: u64,
        data: Bytes,
        now: Instant,
    ) {
        let len = end - start;
        self.stats.downloaded += len;
        let Some(_) = self.down_for(conn, &hash) else {
            self.stats.wasted += len;
            return;
        };
        let d = self.down_mut(conn);
        d.meter.record(now, len);
        d.last_data_at = now;
        self.accept_data(conn, start, data, now);
    }

    /// Puts received bytes into the pending blocks they belong to.
    fn accept_data(&mut self, conn: ConnId, mut start: u64, mut data: Bytes, now: Instant) {
        while !data.is_empty() {
            let d = self.down_mut(conn);
            let Some(i) = d
                .pending
                .iter()
                .position(|p| p.start <= start && start < p.end && p.inflater.is_none())
            else {
                // Not asked (or no longer): a late answer after we gave
                // the block to someone else.
                self.stats.wasted += data.len() as u64;
                return;
            };
            let p = &mut d.pending[i];
            let at = p.start + p.got;
            if start != at {
                if start + data.len() as u64 <= at {
                    self.stats.wasted += data.len() as u64;
                    return;
                }
                return self.fail(
                    conn,
                    format!("part data at {start} leaves a gap (block has data up to {at})"),
                );
            }
            let n = (p.end - start).min(data.len() as u64) as usize;
            let chunk = data.split_to(n);
            p.data.push(chunk);
            p.got += n as u64;
            start += n as u64;
            if p.start + p.got == p.end {
                let p = d.pending.remove(i).expect("index valid");
                self.block_done(conn, p, now);
            }
        }
    }

    /// `OP_COMPRESSEDPART`: a piece of the zlib stream of the block
    /// starting at `start`, inflated into at most the block's length.
    pub(super) fn on_packed_data(
        &mut self,
        conn: ConnId,
        hash: Md4Hash,
        start: u64,
        packed_len: u32,
        data: Bytes,
        now: Instant,
    ) {
        let Some(_) = self.down_for(conn, &hash) else {
            self.stats.wasted += data.len() as u64;
            return;
        };
        let d = self.down_mut(conn);
        d.last_data_at = now;
        let Some(i) = d.pending.iter().position(|p| p.start == start) else {
            self.stats.wasted += data.len() as u64;
            return;
        };
        let p = &mut d.pending[i];
        if p.got > 0 && p.inflater.is_none() {
            return self.fail(
                conn,
                format!("packed data for block {start} after plain data"),
            );
        }
        let limit = p.end - p.start;
        let inf = p.inflater.get_or_insert_with(|| BlockInflater::new(limit));
        p.packed_got += data.len() as u64;
        if p.packed_got > u64::from(packed_len) {
            return self.fail(
                conn,
                format!("packed block {start}: more than the {packed_len} bytes announced"),
            );
        }
        let out = match inf.feed(&data) {
            Ok(o) => o,
            Err(e) => return self.fail(conn, format!("packed block {start}: {e}")),
        };
        let done = inf.is_done();
        let n = out.len() as u64;
        p.got += n;
        if !out.is_empty() {
            p.data.push(out);
        }
        // Decoded payload: metered here, once, as it is inflated.
        d.meter.record(now, n);
        let got = d.pending[i].got;
        let finished = (done || got == limit).then(|| d.pending.remove(i).expect("index valid"));
        self.stats.downloaded += n;
        if let Some(p) = finished {
            if got != limit || !done {
                return self.fail(
                    conn,
                    format!("packed block {start} inflated to {got} of {limit} bytes"),
                );
            }
            self.block_done(conn, p, now);
        }
    }

    fn block_done(&mut self, conn: ConnId, p: Pending, now: Instant) {
        let c = self.conns.get_mut(&conn).expect("caller checked");
        let from = Sender {
            conn,
            ip: super::canonical(c.addr.ip()),
        };
        let d = c.down.as_mut().expect("caller checked");
        let file = d.file;
        let len = (p.end - p.start) as u32;
        d.pipeline
            .on_block(now, now.saturating_duration_since(p.sent_at), len);
        let f = &mut self.files[file as usize];
        let mut wasted = 0u64;
        let mut cancels: Vec<(ConnId, BlockSpan)> = Vec::new();
        let mut rest = p.data;
        for (i, sp) in p.spans.iter().enumerate() {
            let chunks = if i + 1 == p.spans.len() {
                std::mem::take(&mut rest)
            } else {
                split_chunks(&mut rest, sp.len as usize)
            };
            match f.content.received(from, *sp, chunks) {
                Accepted::New { cancel } => cancels.extend(cancel.into_iter().map(|o| (o, *sp))),
                Accepted::Duplicate | Accepted::Unexpected => wasted += u64::from(sp.len),
            }
        }
        self.stats.wasted += wasted;
        for (other, sp) in cancels {
            // An endgame duplicate asked of another source: forget it
            // there (eD2k has no cancel for one block); the rest of a
            // range that held it goes back to the picker.
            let Some(d) = self.conns.get_mut(&other).and_then(|c| c.down.as_mut()) else {
                continue;
            };
            let Some(i) = d.pending.iter().position(|q| q.spans.contains(&sp)) else {
                continue;
            };
            let q = d.pending.remove(i).expect("index valid");
            let f = &mut self.files[file as usize];
            for o in q.spans.iter().filter(|o| **o != sp) {
                f.content.release(other, o.piece, o.begin);
            }
        }
        self.send_block_requests(conn, now);
    }

    /// Reports a complete file once and ends its downloads.
    pub(super) fn announce_complete(&mut self, file: FileId) {
        let f = &mut self.files[file as usize];
        if f.complete_announced {
            return;
        }
        f.complete_announced = true;
        self.events.push_back(Event::Complete { file });
        let conns: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.down.as_ref().is_some_and(|d| d.file == file))
            .map(|(k, _)| *k)
            .collect();
        for conn in conns {
            let c = self.conns.get_mut(&conn).expect("listed");
            let d = c.down.take().expect("listed");
            if matches!(
                d.state,
                DownState::Active | DownState::WaitSlot | DownState::Queued
            ) {
                c.send(&M::CancelTransfer);
                self.mark_dirty(conn);
            }
            if let Some(h) = &d.has {
                self.files[file as usize].content.peer_left(has_of(h));
            }
            self.close_if_unused(conn);
        }
    }

    /// Closes a connection that has no download and no upload going on.
    pub(super) fn close_if_unused(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get(&conn)
            && c.down.is_none()
            && c.up.file.is_none()
            && c.up.slot == super::conn::Slot::None
        {
            self.close(conn, CloseReason::NothingToTransfer);
        }
    }
}

fn has_of(b: &Bitfield) -> PeerHas<'_> {
    if b.is_full() {
        PeerHas::All
    } else {
        PeerHas::Some(b)
    }
}

/// Takes the first `n` bytes off `chunks` (shared slices, no copy).
fn split_chunks(chunks: &mut Vec<Bytes>, n: usize) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut want = n;
    while want > 0 && !chunks.is_empty() {
        let first = &mut chunks[0];
        if first.len() <= want {
            want -= first.len();
            out.push(chunks.remove(0));
        } else {
            out.push(first.split_to(want));
            want = 0;
        }
    }
    out
}
