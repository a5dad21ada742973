//! The uploader side: answering file requests, the upload queue and its
//! slots, and serving requested ranges from storage without copying them
//! (or packed, where that pays).

use std::time::Instant;

use bytes::Bytes;

use super::conn::Slot;
use super::{Client, CloseReason, ConnId, Event, FileId};
use crate::client::{ClientMessage as M, MultiAnswer, MultiRequest};
use crate::inflate::deflate_if_smaller;
use crate::{AichHash, EMBLOCKSIZE, Md4Hash};

/// A storage read serving one peer's adjacent ranges.
#[derive(Debug)]
pub(super) struct Read {
    pub(super) conn: ConnId,
    file: FileId,
    start: u64,
    /// Bytes read, counted in the peer's `in_flight` until the read is
    /// done (what is not sent then is released).
    len: u64,
    /// The ranges to send (emptied when the upload ends meanwhile).
    pub(super) ranges: Vec<(u64, u64)>,
}

/// Bytes of a block deflated to decide whether packing pays.
const SAMPLE: usize = 16 * 1024;
/// Blocks sent plain after a sample showed packing does not pay.
const PLAIN_RUN: u32 = 64;
/// zlib level for packed parts (aMule 3.0 went from 9 to 1: most of the
/// gain for a fraction of the CPU).
const PACK_LEVEL: u32 = 1;

impl Client {
    /// The shared file `hash`, if we can serve any of it.
    fn shared(&self, hash: &Md4Hash) -> Option<FileId> {
        self.files
            .iter()
            .position(|f| f.hash == *hash && f.shareable())
            .map(|i| i as FileId)
    }

    fn no_file(&mut self, conn: ConnId, file: Md4Hash) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.send(&M::FileReqAnsNoFil { file });
            self.mark_dirty(conn);
        }
    }

    pub(super) fn on_file_name_request(&mut self, conn: ConnId, hash: Md4Hash) {
        let Some(file) = self.shared(&hash) else {
            return self.no_file(conn, hash);
        };
        let name = Bytes::from(self.files[file as usize].name.clone().into_bytes());
        let c = self.conns.get_mut(&conn).expect("caller checked");
        c.up.file = Some(file);
        c.send(&M::ReqFileNameAnswer { file: hash, name });
        self.mark_dirty(conn);
    }

    pub(super) fn on_status_request(&mut self, conn: ConnId, hash: Md4Hash) {
        let Some(file) = self.shared(&hash) else {
            return self.no_file(conn, hash);
        };
        let status = self.files[file as usize].part_status();
        let c = self.conns.get_mut(&conn).expect("caller checked");
        c.send(&M::FileStatus { file: hash, status });
        self.mark_dirty(conn);
    }

    pub(super) fn on_multipacket(
        &mut self,
        conn: ConnId,
        hash: Md4Hash,
        size: Option<u64>,
        entries: &[MultiRequest],
    ) {
        let file = self
            .shared(&hash)
            .filter(|&f| size.is_none_or(|s| s == self.files[f as usize].size));
        let Some(file) = file else {
            return self.no_file(conn, hash);
        };
        let f = &self.files[file as usize];
        let mut out = Vec::new();
        for e in entries {
            match e {
                MultiRequest::RequestFileName(_) => out.push(MultiAnswer::FileName(Bytes::from(
                    f.name.clone().into_bytes(),
                ))),
                MultiRequest::SetReqFileId => out.push(MultiAnswer::FileStatus(f.part_status())),
                MultiRequest::AichFileHashReq => {
                    if let Some(t) = &f.aich_tree {
                        out.push(MultiAnswer::AichFileHash(t.root()));
                    }
                }
                MultiRequest::RequestSources | MultiRequest::RequestSources2 { .. } => {}
            }
        }
        let c = self.conns.get_mut(&conn).expect("caller checked");
        c.up.file = Some(file);
        c.send(&M::MultiPacketAnswer {
            file: hash,
            entries: out,
        });
        self.mark_dirty(conn);
    }

    pub(super) fn on_hashset_request(&mut self, conn: ConnId, hash: Md4Hash) {
        let hs = self
            .files
            .iter()
            .find(|f| f.hash == hash)
            .and_then(|f| f.hashset.clone())
            .filter(|h| !h.is_empty());
        let c = self.conns.get_mut(&conn).expect("caller checked");
        match hs {
            Some(hashes) => c.send(&M::HashSetAnswer { file: hash, hashes }),
            None => c.send(&M::FileReqAnsNoFil { file: hash }),
        }
        self.mark_dirty(conn);
    }

    pub(super) fn on_aich_hash_request(&mut self, conn: ConnId, hash: Md4Hash) {
        let root = self
            .files
            .iter()
            .find(|f| f.hash == hash)
            .and_then(|f| f.aich_tree.as_ref().map(|t| t.root()));
        if let Some(master) = root {
            let c = self.conns.get_mut(&conn).expect("caller checked");
            c.send(&M::AichFileHashAns { file: hash, master });
            self.mark_dirty(conn);
        }
    }

    pub(super) fn on_aich_request(
        &mut self,
        conn: ConnId,
        hash: Md4Hash,
        part: u16,
        master: AichHash,
    ) {
        let data = self
            .files
            .iter()
            .find(|f| f.hash == hash)
            .and_then(|f| f.aich_tree.as_ref())
            .filter(|t| t.root() == master)
            .and_then(|t| t.recovery_data(u64::from(part)).ok())
            .map(|rd| (part, master, rd));
        let c = self.conns.get_mut(&conn).expect("caller checked");
        c.send(&M::AichAnswer { file: hash, data });
        self.mark_dirty(conn);
    }

    pub(super) fn on_start_upload(&mut self, conn: ConnId, hash: Md4Hash, now: Instant) {
        let Some(file) = self.shared(&hash) else {
            return self.no_file(conn, hash);
        };
        let c = self.conns.get_mut(&conn).expect("caller checked");
        if c.up.file != Some(file) && c.up.slot == Slot::Active {
            // A new file on the same slot: a new session.
            c.up.forget();
        }
        c.up.file = Some(file);
        match c.up.slot {
            Slot::Active => {
                c.send(&M::AcceptUploadReq);
                self.mark_dirty(conn);
            }
            Slot::Queued => self.send_rank(conn),
            Slot::None => {
                c.up.slot = Slot::Queued;
                c.up.queued_at = Some(now);
                self.grant_next_slot(now);
                if self.conns[&conn].up.slot == Slot::Queued {
                    self.send_rank(conn);
                }
            }
        }
    }

    fn send_rank(&mut self, conn: ConnId) {
        let Some(at) = self.conns.get(&conn).and_then(|c| c.up.queued_at) else {
            return;
        };
        let rank = 1 + self
            .conns
            .values()
            .filter(|c| c.up.slot == Slot::Queued && c.up.queued_at.is_some_and(|t| t < at))
            .count();
        let c = self.conns.get_mut(&conn).expect("caller checked");
        c.send(&M::QueueRanking {
            rank: rank.min(u16::MAX as usize) as u16,
        });
        self.mark_dirty(conn);
    }

    /// Gives free slots to the longest-waiting peers, at once.
    pub(super) fn grant_next_slot(&mut self, now: Instant) {
        loop {
            let active = self
                .conns
                .values()
                .filter(|c| c.up.slot == Slot::Active && !c.closing)
                .count();
            if active >= self.cfg.upload_slots {
                return;
            }
            let next = self
                .conns
                .iter()
                .filter(|(_, c)| c.up.slot == Slot::Queued && !c.closing)
                .min_by_key(|(k, c)| (c.up.queued_at, **k))
                .map(|(k, _)| *k);
            let Some(conn) = next else {
                return;
            };
            let c = self.conns.get_mut(&conn).expect("listed");
            c.up.slot = Slot::Active;
            c.up.last_request_at = now;
            c.up.forget();
            c.send(&M::AcceptUploadReq);
            self.mark_dirty(conn);
        }
    }

    /// The peer stopped downloading: its slot goes to the next in line.
    pub(super) fn end_upload(&mut self, conn: ConnId, now: Instant) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let was_active = c.up.slot == Slot::Active;
        c.up.end_session();
        c.up.file = None;
        // Reads in flight are still being made: they keep counting in
        // `in_flight` until they are done (so ending and restarting an
        // upload cannot pile up reads past the watermark), and nothing of
        // them is sent.
        for r in self.reads.values_mut().filter(|r| r.conn == conn) {
            r.ranges.clear();
        }
        if was_active {
            self.grant_next_slot(now);
        }
    }

    pub(super) fn on_request_parts(
        &mut self,
        conn: ConnId,
        hash: Md4Hash,
        ranges: [(u64, u64); 3],
        now: Instant,
    ) {
        let c = self.conns.get(&conn).expect("caller checked");
        let Some(file) = c.up.file.filter(|_| c.up.slot == Slot::Active) else {
            // Not in a slot (aMule ignores these too).
            return;
        };
        let f = &self.files[file as usize];
        if f.hash != hash {
            return;
        }
        for (s, e) in ranges {
            if s >= e {
                continue;
            }
            if e - s > 3 * EMBLOCKSIZE || !f.has_range(s, e) {
                return self.fail(conn, format!("request for {s}..{e}, which we cannot serve"));
            }
        }
        let c = self.conns.get_mut(&conn).expect("caller checked");
        if c.up.requests.len() + 3 > super::MAX_QUEUED_RANGES {
            return self.fail(
                conn,
                format!(
                    "more than {} ranges requested and not yet served",
                    super::MAX_QUEUED_RANGES
                ),
            );
        }
        c.up.last_request_at = now;
        c.up.last_ranges = ranges.iter().copied().filter(|r| r.0 < r.1).collect();
        for r in ranges {
            if r.0 < r.1 {
                c.up.ask(r);
            }
        }
        self.serve(conn, now);
    }

    /// Issues storage reads for the peer's queued ranges while its uploads
    /// in flight stay under the watermark; adjacent ranges are read
    /// together.
    pub(super) fn serve(&mut self, conn: ConnId, _now: Instant) {
        let (watermark, max_read) = (self.cfg.upload_watermark, u64::from(self.cfg.max_read));
        let Some(c) = self.conns.get_mut(&conn).filter(|c| !c.closing) else {
            return;
        };
        let Some(file) = c.up.file.filter(|_| c.up.slot == Slot::Active) else {
            return;
        };
        while c.up.in_flight < watermark {
            let Some(first) = c.up.requests.pop_front() else {
                break;
            };
            let mut ranges = vec![first];
            let mut end = first.1;
            while let Some(&next) = c.up.requests.front() {
                if next.0 != end || next.1 - first.0 > max_read {
                    break;
                }
                end = next.1;
                ranges.push(next);
                c.up.requests.pop_front();
            }
            let id = self.next_read;
            self.next_read += 1;
            c.up.in_flight += end - first.0;
            self.reads.insert(
                id,
                Read {
                    conn,
                    file,
                    start: first.0,
                    len: end - first.0,
                    ranges,
                },
            );
            let op = self.files[file as usize].read_op(id, first.0, (end - first.0) as u32);
            self.events.push_back(Event::Storage { file, op });
        }
    }

    pub(super) fn on_read_done(&mut self, id: u64, data: Result<Bytes, String>, now: Instant) {
        let Some(read) = self.reads.remove(&id) else {
            return;
        };
        let conn = read.conn;
        let data = match data {
            Ok(d) => d,
            Err(e) => {
                return self.close(
                    conn,
                    CloseReason::Storage(format!("cannot read for upload: {e}")),
                );
            }
        };
        let hash = self.files[read.file as usize].hash;
        let max_packet = u64::from(self.cfg.max_part_packet.max(1));
        let may_pack = self.cfg.compress_uploads;
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        // What the read does not send is released at the end; what it
        // sends is released as it is written (`on_sent`).
        let mut unsent = read.len;
        let packs = may_pack && c.peer.as_ref().is_some_and(|p| p.info.misc1.data_comp >= 1);
        for (s, e) in read.ranges {
            let at = (s - read.start) as usize;
            let Some(block) = data.get(at..at + (e - s) as usize) else {
                continue;
            };
            let block = data.slice_ref(block);
            unsent = unsent.saturating_sub(e - s);
            // The one place every uploaded payload byte passes through.
            c.up.meter.record(now, e - s);
            self.stats.uploaded += e - s;
            if packs && let Some(z) = pack(&mut c.up, &block) {
                // In flight is counted in wire bytes, as writes report them.
                c.up.in_flight =
                    c.up.in_flight
                        .saturating_sub(block.len() as u64 - z.len() as u64);
                let mut off = 0;
                let z = Bytes::from(z);
                while off < z.len() {
                    let n = (z.len() - off).min(max_packet as usize);
                    let head = c.head_buf();
                    packed_head(head, &hash, s, z.len() as u32, n);
                    c.push_part(&[z.slice(off..off + n)], n as u64);
                    off += n;
                }
                continue;
            }
            let mut at = s;
            while at < e {
                let n = (e - at).min(max_packet);
                let head = c.head_buf();
                crate::client::sending_part_head(head, &hash, at, at + n);
                let from = (at - s) as usize;
                c.push_part(&[block.slice(from..from + n as usize)], n);
                at += n;
            }
        }
        c.up.in_flight = c.up.in_flight.saturating_sub(unsent);
        self.mark_dirty(conn);
        if unsent > 0 {
            self.serve(conn, now);
        }
    }
}

impl Client {
    /// Downloaders that went quiet with everything they asked for sent.
    ///
    /// aMule 2.3.3's socket reader can wedge: in the lab, amuled stopped
    /// reading one connection for good (its last three requested blocks,
    /// 553,500 bytes, unread in its socket; weir's send queue empty; no
    /// answer to anything after that) while it kept sending on it, and
    /// gave up only after its 100 s download timeout. It then waits on
    /// its request list for blocks it will never read.
    ///
    /// First a 6-byte `OP_PUBLICIP_REQ` (which every eMule-compatible peer
    /// answers) after [`NUDGE_AFTER`] of silence; if nothing at all comes
    /// back within [`WEDGE_AFTER`], the peer is taken as wedged: we connect
    /// to its listen port again (aMule moves the client to the new socket),
    /// grant the slot there and send the blocks of its last request again,
    /// which completes them and restarts its requests.
    pub(super) fn nudge_idle_downloaders(&mut self, now: Instant) {
        let mut nudge = Vec::new();
        let mut wedged = Vec::new();
        for (k, c) in &self.conns {
            let Some(peer) = c.peer.as_ref() else {
                continue;
            };
            if c.closing
                || c.up.slot != Slot::Active
                || !c.up.requests.is_empty()
                || c.up.in_flight > 0
                || !peer.info.is_emule()
            {
                continue;
            }
            match c.up.last_nudge_at {
                Some(n) if n > c.up.last_request_at && c.last_recv_at < n => {
                    if now.saturating_duration_since(n) >= WEDGE_AFTER {
                        wedged.push(*k);
                    }
                }
                _ => {
                    let last = c.up.last_request_at.max(c.last_recv_at);
                    if now.saturating_duration_since(last) >= NUDGE_AFTER {
                        nudge.push(*k);
                    }
                }
            }
        }
        for conn in nudge {
            let c = self.conns.get_mut(&conn).expect("listed");
            c.up.last_nudge_at = Some(now);
            c.send(&M::PublicIpReq);
            self.mark_dirty(conn);
        }
        for conn in wedged {
            self.reconnect_wedged(conn, now);
        }
    }

    fn reconnect_wedged(&mut self, conn: ConnId, now: Instant) {
        let c = &self.conns[&conn];
        let (Some(peer), Some(file), Some(ip)) = (c.peer.as_ref(), c.up.file, c.ip4()) else {
            return;
        };
        let port = peer.info.port;
        let addr = std::net::SocketAddr::from((ip, port));
        if port != 0 {
            self.callbacks.push(Callback {
                user_hash: peer.user_hash,
                file,
                ranges: c.up.last_ranges.clone(),
                deadline: now + CALLBACK_TIMEOUT,
            });
            self.events.push_back(Event::Connect { addr });
        }
        self.close(conn, CloseReason::StoppedReading);
    }

    /// A peer we owe a slot (see [`Client::nudge_idle_downloaders`]) is
    /// connected again: grant it and resend its last request.
    pub(super) fn resume_callback(&mut self, conn: ConnId, now: Instant) {
        let Some(user) = self
            .conns
            .get(&conn)
            .and_then(|c| c.peer.as_ref())
            .map(|p| p.user_hash)
        else {
            return;
        };
        self.callbacks.retain(|cb| cb.deadline > now);
        let Some(i) = self.callbacks.iter().position(|cb| cb.user_hash == user) else {
            return;
        };
        let cb = self.callbacks.swap_remove(i);
        let c = self.conns.get_mut(&conn).expect("caller checked");
        c.up.file = Some(cb.file);
        c.up.slot = Slot::Active;
        c.up.last_request_at = now;
        c.up.forget();
        c.send(&M::AcceptUploadReq);
        for r in cb.ranges {
            c.up.ask(r);
        }
        self.mark_dirty(conn);
        self.serve(conn, now);
    }
}

/// A slot owed to a peer we are connecting to again.
#[derive(Debug)]
pub(super) struct Callback {
    user_hash: Md4Hash,
    file: FileId,
    ranges: Vec<(u64, u64)>,
    deadline: Instant,
}

/// How long a slot owed on reconnection is kept.
const CALLBACK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// Silence (after a nudge) that marks a downloader as wedged.
const WEDGE_AFTER: std::time::Duration = std::time::Duration::from_secs(3);

/// Silence after which an idle downloader with an open slot is nudged.
const NUDGE_AFTER: std::time::Duration = std::time::Duration::from_millis(1500);

/// Packs a block when a sample says it pays: a sample every
/// [`PLAIN_RUN`] blocks while it does not, each block's own result while
/// it does.
fn pack(up: &mut super::conn::Up, block: &[u8]) -> Option<Vec<u8>> {
    if !up.compress {
        if up.plain_for > 0 {
            up.plain_for -= 1;
            return None;
        }
        let sample = &block[..block.len().min(SAMPLE)];
        let pays = deflate_if_smaller(sample, PACK_LEVEL)
            .is_some_and(|z| z.len() * 10 <= sample.len() * 9);
        if !pays {
            up.plain_for = PLAIN_RUN;
            return None;
        }
        up.compress = true;
    }
    match deflate_if_smaller(block, PACK_LEVEL) {
        Some(z) if z.len() * 10 <= block.len() * 9 => Some(z),
        _ => {
            up.compress = false;
            up.plain_for = PLAIN_RUN;
            None
        }
    }
}

/// The header of an `OP_COMPRESSEDPART(_I64)` carrying `n` bytes of the
/// `total`-byte zlib stream of the block at `start`.
fn packed_head(out: &mut bytes::BytesMut, file: &Md4Hash, start: u64, total: u32, n: usize) {
    use bytes::BufMut;
    let wide = start > 0xFFFF_FFFF;
    let op = if wide {
        crate::client::emule_op::COMPRESSEDPART_I64
    } else {
        crate::client::emule_op::COMPRESSEDPART
    };
    let len = 16 + if wide { 8 } else { 4 } + 4 + n;
    out.put_slice(&crate::packet::header(crate::packet::OP_EMULEPROT, op, len));
    out.put_slice(&file.0);
    if wide {
        out.put_u64_le(start);
    } else {
        out.put_u32_le(start as u32);
    }
    out.put_u32_le(total);
}
