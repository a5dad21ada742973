//! What the client keeps about one connection: who the peer is, its
//! downloader and uploader roles, and the bytes queued for its socket.

use std::collections::{HashSet, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use weir_core::bitfield::Bitfield;
use weir_core::geometry::BlockSpan;
use weir_core::meter::TransferMeter;
use weir_core::outbox::{Outbox, Unit};
use weir_core::pipeline::{Pipeline, PipelineConfig};

use super::FileId;
use crate::client::{ClientMessage, DecodeCtx, HelloInfo};
use crate::inflate::BlockInflater;
use crate::{AichHash, EMBLOCKSIZE, Md4Hash};

/// Block messages are grouped into runs of about this much data: one run is
/// what an upload cap charges before it starts.
const BLOCK_RUN: u64 = 512 * 1024;

/// The peer, as its hello described it.
#[derive(Clone, Debug)]
pub(super) struct PeerInfo {
    pub(super) user_hash: Md4Hash,
    pub(super) info: HelloInfo,
}

/// Where a download from this peer stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DownState {
    /// File requests sent, waiting for the answers.
    Asked,
    /// The peer has the file; waiting for the hashset (from it or another
    /// peer) before asking for a slot.
    NeedHashset,
    /// `OP_STARTUPLOADREQ` sent.
    WaitSlot,
    /// On the peer's queue.
    Queued,
    /// Upload slot granted: block requests flow.
    Active,
    /// The peer has nothing we still want.
    Idle,
}

/// One block in the local pending list (aMule #484): asked over the wire
/// or not yet, and the data received for it so far.
#[derive(Debug)]
pub(super) struct Pending {
    /// The content's blocks this range covers, in order and contiguous:
    /// one 180 KiB block of an eD2k file, or several smaller ones of an
    /// attached file (a torrent's 16 KiB blocks, asked as one range).
    pub(super) spans: Vec<BlockSpan>,
    /// Absolute `[start, end)` in the file.
    pub(super) start: u64,
    pub(super) end: u64,
    /// In a sent `OP_REQUESTPARTS` (the peer owes us the bytes).
    pub(super) asked: bool,
    pub(super) sent_at: Instant,
    /// Bytes received (contiguous from `start`).
    pub(super) got: u64,
    pub(super) data: Vec<Bytes>,
    /// The zlib stream of a compressed block, once one began.
    pub(super) inflater: Option<BlockInflater>,
    /// Compressed bytes of that stream received so far.
    pub(super) packed_got: u64,
}

/// The downloader role of a connection: we download `file` from the peer.
#[derive(Debug)]
pub(super) struct Down {
    pub(super) file: FileId,
    pub(super) state: DownState,
    /// The parts it has (`None` until its status arrived).
    pub(super) has: Option<Bitfield>,
    /// Whether the answer to our file request is complete.
    pub(super) answered: bool,
    /// An `OP_ACCEPTUPLOADREQ` arrived (possibly before we were ready).
    pub(super) accepted: bool,
    /// Its announced AICH master hash.
    pub(super) aich: Option<AichHash>,
    pub(super) pipeline: Pipeline,
    pub(super) meter: TransferMeter,
    pub(super) pending: VecDeque<Pending>,
    pub(super) last_data_at: Instant,
    /// Queue rank the peer reported.
    pub(super) rank: u32,
    /// Starts of the blocks asked in this upload session: an uploader
    /// serves a range once per session (aMule's done list), so a block
    /// needed again from the same source needs a new session.
    pub(super) session: HashSet<u64>,
    /// A block must be asked again: end the session once nothing asked is
    /// outstanding, and ask for a new slot.
    pub(super) restart: bool,
}

impl Down {
    pub(super) fn new(file: FileId, max_requests: u32, now: Instant) -> Self {
        let mut cfg = PipelineConfig::new(EMBLOCKSIZE as u32);
        cfg.max_depth = max_requests.max(1);
        cfg.min_depth = cfg.min_depth.min(cfg.max_depth);
        cfg.initial_depth = cfg.initial_depth.min(cfg.max_depth);
        Self {
            file,
            state: DownState::Asked,
            has: None,
            answered: false,
            accepted: false,
            aich: None,
            pipeline: Pipeline::new(cfg),
            meter: TransferMeter::new(now),
            pending: VecDeque::new(),
            last_data_at: now,
            rank: 0,
            session: HashSet::new(),
            restart: false,
        }
    }
}

/// Whether the peer holds one of our upload slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Slot {
    /// Not asked for one.
    None,
    /// Waiting on our queue.
    Queued,
    /// Being served.
    Active,
}

/// The uploader role of a connection: the peer downloads from us.
#[derive(Debug)]
pub(super) struct Up {
    /// The file of its last upload request.
    pub(super) file: Option<FileId>,
    pub(super) slot: Slot,
    /// When it joined the queue (for its rank).
    pub(super) queued_at: Option<Instant>,
    /// Ranges waiting for a storage read.
    pub(super) requests: VecDeque<(u64, u64)>,
    /// Ranges asked this session, queued or served, oldest first (aMule
    /// repeats pending ranges in every request; each is served once).
    pub(super) served: VecDeque<(u64, u64)>,
    /// The same ranges, for lookups.
    pub(super) known: HashSet<(u64, u64)>,
    /// Bytes of reads in flight plus bytes queued for the socket.
    pub(super) in_flight: u64,
    pub(super) meter: TransferMeter,
    /// Compression: blocks left before the next sample (0: sample now).
    pub(super) plain_for: u32,
    /// Whether the last sample said compression pays.
    pub(super) compress: bool,
    /// When the peer last asked for data (or got its slot).
    pub(super) last_request_at: Instant,
    /// When we last nudged it (see `Client::nudge_idle_downloaders`).
    pub(super) last_nudge_at: Option<Instant>,
    /// The ranges of its last request (its pending list, for aMule).
    pub(super) last_ranges: Vec<(u64, u64)>,
}

/// How many served ranges are remembered for de-duplication: more than a
/// deep pending list of any downloader.
pub(super) const SERVED_MEMORY: usize = 8192;

impl Up {
    pub(super) fn new(now: Instant) -> Self {
        Self {
            file: None,
            slot: Slot::None,
            queued_at: None,
            requests: VecDeque::new(),
            served: VecDeque::new(),
            known: HashSet::new(),
            in_flight: 0,
            meter: TransferMeter::new(now),
            plain_for: 0,
            compress: false,
            last_request_at: now,
            last_nudge_at: None,
            last_ranges: Vec::new(),
        }
    }

    /// Queues a requested range unless it was asked before in this
    /// session; returns whether it was new.
    pub(super) fn ask(&mut self, r: (u64, u64)) -> bool {
        if !self.known.insert(r) {
            return false;
        }
        if self.served.len() >= SERVED_MEMORY
            && let Some(old) = self.served.pop_front()
        {
            self.known.remove(&old);
        }
        self.served.push_back(r);
        self.requests.push_back(r);
        true
    }

    /// Ends the session (slot freed): forget its requests.
    pub(super) fn end_session(&mut self) {
        self.slot = Slot::None;
        self.queued_at = None;
        self.forget();
    }

    /// Forgets the ranges of the session.
    pub(super) fn forget(&mut self) {
        self.requests.clear();
        self.served.clear();
        self.known.clear();
    }
}

/// One connection.
#[derive(Debug)]
pub(super) struct Conn {
    pub(super) addr: SocketAddr,
    /// Our address on this connection (our high id).
    pub(super) local_ip: Option<Ipv4Addr>,
    pub(super) peer: Option<PeerInfo>,
    /// We sent our hello (or hello answer).
    pub(super) hello_sent: bool,
    pub(super) ctx: DecodeCtx,
    pub(super) down: Option<Down>,
    pub(super) up: Up,
    /// Files asked of this peer already (each is asked once per connection).
    pub(super) asked: Vec<FileId>,
    pub(super) last_recv_at: Instant,
    /// When the connection was taken up (the hello is due within the
    /// hello timeout).
    pub(super) opened_at: Instant,
    pub(super) closing: bool,
    out: Outbox,
    heads: BytesMut,
}

impl Conn {
    pub(super) fn new(addr: SocketAddr, local_ip: Option<Ipv4Addr>, now: Instant) -> Self {
        Self {
            addr,
            local_ip,
            peer: None,
            hello_sent: false,
            ctx: DecodeCtx::default(),
            down: None,
            up: Up::new(now),
            asked: Vec::new(),
            last_recv_at: now,
            opened_at: now,
            closing: false,
            out: Outbox::with_run(BLOCK_RUN),
            heads: BytesMut::new(),
        }
    }

    /// Queues a control message.
    pub(super) fn send(&mut self, msg: &ClientMessage) {
        msg.encode(self.out.control());
    }

    /// Space to write a packet header into; [`Conn::push_part`] takes it.
    pub(super) fn head_buf(&mut self) -> &mut BytesMut {
        if self.heads.capacity() - self.heads.len() < 64 {
            self.heads.reserve(4096);
        }
        &mut self.heads
    }

    /// Queues a part-data packet: the header written into [`Conn::head_buf`]
    /// and the payload slices (shared, not copied).
    pub(super) fn push_part(&mut self, data: &[Bytes], payload: u64) {
        let head = self.heads.split().freeze();
        self.out.block_chunks(head, data, payload);
    }

    /// Whether anything waits to be handed to the runtime.
    pub(super) fn has_output(&self) -> bool {
        self.out.has_output()
    }

    /// Takes everything queued, as (chunks, payload bytes) runs in order.
    pub(super) fn take_output(&mut self) -> Vec<Unit> {
        self.out.take()
    }

    /// The peer's IPv4 address (ed2k is IPv4 only).
    pub(super) fn ip4(&self) -> Option<Ipv4Addr> {
        match self.addr {
            SocketAddr::V4(a) => Some(*a.ip()),
            SocketAddr::V6(a) => a.ip().to_ipv4_mapped(),
        }
    }
}
