//! The downloader side: asking a source for the file, its hashset and an
//! upload slot; keeping its pending list full (three ranges per
//! `OP_REQUESTPARTS`, as many packets as the list needs); receiving part
//! data (plain or zlib-packed, bounded) into blocks; handing blocks to
//! storage in order; and dealing with parts that fail their MD4 check.

use std::net::IpAddr;
use std::time::Instant;

use bytes::Bytes;
use weir_core::bitfield::Bitfield;
use weir_core::geometry::BlockSpan;
use weir_core::picker::{PeerHas, Received};
use weir_core::storage::StorageOp;

use super::conn::{DownState, Pending};
use super::{Client, ConnId, Event, FileId};
use crate::client::{ClientMessage as M, ExtInfo, MultiAnswer, MultiRequest, PartStatus};
use crate::hash::file_hash_from_hashset;
use crate::inflate::BlockInflater;
use crate::{AichHash, Md4Hash};

/// Contiguous data goes to storage in runs of at least this much (or at
/// the end of a part), blocks still arriving included ([`EARLY_RUN`]):
/// what a killed download held in memory and loses is then less than a
/// run.
const WRITE_RUN: u32 = 64 * 1024;
/// A block still arriving is handed to storage in runs of this much.
const EARLY_RUN: u32 = 64 * 1024;
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
                f.picker.had().get(i as u32)
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
        let bits = f.status_bits(s).ok_or_else(|| {
            format!(
                "part status of {} parts for a file of {}",
                s.count,
                crate::ed2k_part_count(f.size)
            )
        })?;
        let c = self.conns.get_mut(&conn).expect("caller checked");
        let d = c.down.as_mut().expect("caller checked");
        if let Some(old) = &d.has {
            f.picker.peer_left(has_of(old));
        }
        f.picker.peer_joined(has_of(&bits));
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
            self.ban(
                ip,
                "sent a hashset that does not match the file hash".into(),
            );
            return;
        }
        f.hashset = Some(hashes);
        self.digests_known(file as FileId);
        let conns: Vec<ConnId> = self.conns.keys().copied().collect();
        for c in conns {
            self.down_advance(c, now);
        }
    }

    /// The part hashes of `file` became known.
    pub(super) fn digests_known(&mut self, file: FileId) {
        self.events.push_back(Event::DigestsKnown { file });
        self.issue_checks(file);
    }

    fn issue_checks(&mut self, file: FileId) {
        const IN_FLIGHT: u32 = 8;
        let f = &mut self.files[file as usize];
        while f.checks_in_flight < IN_FLIGHT && f.check_cursor < f.geo.piece_count() {
            let p = f.check_cursor;
            f.check_cursor += 1;
            if f.checking.get(p) {
                f.checks_in_flight += 1;
                self.events.push_back(Event::Storage {
                    file,
                    op: StorageOp::Check { piece: p },
                });
            }
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
            f.picker.is_interesting(has) || f.picker.in_endgame()
        };
        let c = self.conns.get_mut(&conn).expect("checked");
        let d = c.down.as_mut().expect("checked");
        if d.has.is_none() {
            let n = f.geo.piece_count();
            d.has = Some(Bitfield::full(n));
            self.files[file as usize].picker.peer_joined(PeerHas::All);
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
            f.picker.release(conn, p.span.piece, p.span.begin);
        }
        self.kick_file(file, now);
    }

    /// Forgets a download role: its blocks go back to the picker.
    pub(super) fn drop_down(&mut self, conn: ConnId, d: super::conn::Down, now: Instant) {
        let f = &mut self.files[d.file as usize];
        for p in &d.pending {
            f.picker.release(conn, p.span.piece, p.span.begin);
        }
        if let Some(h) = &d.has {
            f.picker.peer_left(has_of(h));
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
        let max_unverified = self.cfg.max_unverified;
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
                f.picker.release(conn, p.span.piece, p.span.begin);
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
        if f.unverified < max_unverified {
            let mut n = d.pipeline.top_up(d.pending.len() as u32) as usize;
            if f.picker.in_endgame() {
                n = n.min(ENDGAME_DEPTH.saturating_sub(d.pending.len()));
            }
            if n > 0 {
                let has = d.has.as_ref().map_or(PeerHas::All, has_of);
                let mut spans: Vec<BlockSpan> = Vec::with_capacity(n);
                f.picker.pick(conn, has, n, &mut spans);
                for s in spans {
                    // A block an earlier run began is asked from where it
                    // stopped.
                    let skip = f
                        .assembly
                        .get(&s.piece)
                        .map(|a| a.next)
                        .filter(|&n| n > s.begin && n < s.begin + s.len)
                        .map_or(0, |n| n - s.begin);
                    let start = f.geo.piece_offset(s.piece) + u64::from(s.begin + skip);
                    if d.session.contains(&start) {
                        // Served once in this session already.
                        f.picker.release(conn, s.piece, s.begin);
                        d.restart = true;
                        continue;
                    }
                    d.pending.push_back(Pending {
                        span: s,
                        start,
                        end: start + u64::from(s.len - skip),
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
        if d.pending.is_empty() && !d.restart && !f.picker.is_interesting(has) {
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
            } else {
                self.hand_early(conn, i);
            }
        }
    }

    /// Hands the bytes received so far of pending block `i` to storage
    /// before the block is complete, when they continue the part's data
    /// (at least [`EARLY_RUN`] of them, and not in endgame, where a block
    /// may come from two sources): a download killed meanwhile keeps them,
    /// and the next run asks for the rest of the block only.
    fn hand_early(&mut self, conn: ConnId, i: usize) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let ip = super::canonical(c.addr.ip());
        let Some(d) = c.down.as_mut() else {
            return;
        };
        let f = &self.files[d.file as usize];
        let Some(p) = d.pending.get_mut(i) else {
            return;
        };
        let off = f.geo.piece_offset(p.span.piece);
        let begin = (p.start - off) as u32;
        let next = f.assembly.get(&p.span.piece).map_or(0, |a| a.next);
        if p.got < u64::from(EARLY_RUN) || begin != next || f.picker.in_endgame() {
            return;
        }
        let file = d.file;
        let span = BlockSpan {
            piece: p.span.piece,
            begin,
            len: p.got as u32,
        };
        let data = std::mem::take(&mut p.data);
        p.start += p.got;
        p.got = 0;
        self.assemble(file, span, data, Some((conn, ip)));
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
        let ip = super::canonical(c.addr.ip());
        let d = c.down.as_mut().expect("caller checked");
        let file = d.file;
        let len = p.span.len;
        d.pipeline
            .on_block(now, now.saturating_duration_since(p.sent_at), len);
        let f = &mut self.files[file as usize];
        match f.picker.received(conn, p.span.piece, p.span.begin, len) {
            Received::New { cancel, .. } => {
                for other in cancel {
                    // An endgame duplicate asked of another source: forget
                    // it there (eD2k has no cancel for one block).
                    if let Some(d) = self.conns.get_mut(&other).and_then(|c| c.down.as_mut()) {
                        d.pending.retain(|q| q.span != p.span);
                    }
                }
                // The bytes received (a resumed block's rest only).
                let off = self.files[file as usize].geo.piece_offset(p.span.piece);
                let got = BlockSpan {
                    piece: p.span.piece,
                    begin: (p.start - off) as u32,
                    len: (p.end - p.start) as u32,
                };
                self.assemble(file, got, p.data, Some((conn, ip)));
            }
            Received::Duplicate | Received::Unexpected => {
                self.stats.wasted += u64::from(len);
            }
        }
        self.send_block_requests(conn, now);
    }

    /// Hands a part's contiguous data to storage in runs.
    pub(super) fn assemble(
        &mut self,
        file: FileId,
        span: BlockSpan,
        chunks: Vec<Bytes>,
        from: Option<(ConnId, IpAddr)>,
    ) {
        let f = &mut self.files[file as usize];
        let size = f.geo.piece_size(span.piece);
        let a = f.assembly.entry(span.piece).or_default();
        a.from.push((span.begin, span.len, from));
        if span.begin != a.next {
            a.ahead.insert(span.begin, (span.len, chunks));
            return;
        }
        a.next += span.len;
        a.ready.extend(chunks);
        while let Some((len, c)) = a.ahead.remove(&a.next) {
            a.next += len;
            a.ready.extend(c);
        }
        if a.next - a.handed >= WRITE_RUN || a.next == size {
            let begin = a.handed;
            f.unverified += u64::from(a.next - a.handed);
            a.handed = a.next;
            let data = std::mem::take(&mut a.ready);
            self.events.push_back(Event::Storage {
                file,
                op: StorageOp::Write {
                    piece: span.piece,
                    begin,
                    data,
                },
            });
        }
    }

    /// Storage verified (or rejected) a part.
    pub(super) fn on_part_done(&mut self, file: FileId, piece: u32, ok: bool, now: Instant) {
        let f = &mut self.files[file as usize];
        if f.checking.get(piece) {
            f.checking.clear(piece);
            f.checks_in_flight = f.checks_in_flight.saturating_sub(1);
            if ok {
                f.picker.set_had(piece);
                self.events
                    .push_back(Event::PartVerified { file, part: piece });
            }
            self.issue_checks(file);
            let f = &self.files[file as usize];
            if !f.is_checking() {
                if f.is_complete() {
                    self.announce_complete(file);
                }
                self.kick_file(file, now);
            }
            return;
        }
        let size = u64::from(f.geo.piece_size(piece));
        f.unverified = f.unverified.saturating_sub(size);
        let a = f.assembly.remove(&piece).unwrap_or_default();
        if ok {
            f.picker.piece_verified(piece);
            self.part_passed(file, piece);
            self.events
                .push_back(Event::PartVerified { file, part: piece });
            if self.files[file as usize].is_complete() {
                self.announce_complete(file);
            }
        } else {
            self.stats.hash_failures += 1;
            self.part_failed(file, piece, a.from, now);
        }
        self.kick_file(file, now);
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
                self.files[file as usize].picker.peer_left(has_of(h));
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
            self.close(conn, "nothing to transfer".into());
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
