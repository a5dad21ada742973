//! The state the torrent keeps about one peer connection.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use weir_core::bitfield::Bitfield;
use weir_core::meter::{RECENT_SPAN, RateMeter, TransferMeter};
use weir_core::outbox::{Outbox, Unit};
use weir_core::picker::PeerHas;
use weir_core::pipeline::{Pipeline, PipelineConfig};

use crate::wire::{self, BLOCK_LEN, BlockRef, Message};

/// What a peer has told us it has.
#[derive(Clone, Debug)]
pub(crate) enum Has {
    /// Nothing yet (no bitfield received, or have-none).
    Nothing(Bitfield),
    /// Some pieces.
    Some(Bitfield),
    /// Every piece (have-all, or a full bitfield).
    All,
}

impl Has {
    pub(crate) fn as_peer_has(&self) -> PeerHas<'_> {
        match self {
            Has::Nothing(b) | Has::Some(b) => PeerHas::Some(b),
            Has::All => PeerHas::All,
        }
    }

    pub(crate) fn is_seed(&self) -> bool {
        matches!(self, Has::All)
    }
}

/// One of our requests to the peer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Outstanding {
    pub(crate) len: u32,
    pub(crate) sent_at: Instant,
}

/// One peer connection.
#[derive(Debug)]
pub(crate) struct Peer {
    pub(crate) addr: SocketAddr,
    /// The peer id from its handshake.
    pub(crate) peer_id: [u8; 20],
    pub(crate) fast: bool,
    pub(crate) extended: bool,
    pub(crate) client: Option<String>,
    /// The port it listens on, from its extension handshake (`p`).
    pub(crate) listen_port: Option<u16>,
    /// It sent its DHT port (BEP 5 `port`); later ones are ignored.
    pub(crate) told_dht_port: bool,
    /// Peer exchange with it (BEP 11), once both sides offered ut_pex:
    /// the state and the id it receives ut_pex messages on.
    pub(crate) pex: Option<(crate::pex::PexState, u8)>,
    pub(crate) am_choking: bool,
    pub(crate) am_interested: bool,
    pub(crate) peer_choking: bool,
    pub(crate) peer_interested: bool,
    pub(crate) has: Has,
    pub(crate) pipeline: Pipeline,
    pub(crate) down: TransferMeter,
    pub(crate) up: TransferMeter,
    /// Our requests in flight to the peer, by (piece, begin).
    pub(crate) outstanding: BTreeMap<(u32, u32), Outstanding>,
    /// Requests we dropped without the peer's answer (cancelled, choked
    /// away, timed out): their blocks may still arrive, and are no
    /// violation. Bounded: the oldest are forgotten first.
    late: BTreeSet<(u32, u32)>,
    late_order: VecDeque<(u32, u32)>,
    /// Blocks the peer sent that we never asked it for.
    pub(crate) unrequested: u32,
    /// Requests we could not serve (choked, a piece we lack) since we
    /// last unchoked it.
    pub(crate) unanswerable: u32,
    /// Its cancels of blocks already being read for it.
    pub(crate) cancelled_reads: u32,
    /// Blocks sent to it.
    pub(crate) blocks_sent: u32,
    /// The peer's requests waiting to be read from storage.
    pub(crate) requests: VecDeque<BlockRef>,
    /// Bytes of reads in flight plus bytes queued to the socket.
    pub(crate) upload_queued: u64,
    /// Bytes its connection took (the writer's reports): the rate that
    /// sizes its upload window (`Torrent::upload_window`). Not `up`, which
    /// counts blocks when they are handed to the writer, read or not.
    pub(crate) taken: RateMeter,
    pub(crate) last_block_at: Instant,
    pub(crate) last_recv_at: Instant,
    /// When the connection became a peer.
    pub(crate) connected_at: Instant,
    pub(crate) last_send_at: Instant,
    pub(crate) snubbed: bool,
    pub(crate) strikes: u32,
    pub(crate) unchoked_at: Option<Instant>,
    /// When it last took upload bytes (the writer reported bytes while
    /// blocks were queued for it): with `unchoked_at`, whether it uses
    /// its upload slot (`Torrent::slot_stalled`).
    pub(crate) last_progress_at: Instant,
    /// It held an upload slot and took nothing in it: it waits behind
    /// every other peer for a slot, and gives its connection to a
    /// newcomer when the peer slots are full. Cleared when it takes
    /// upload bytes again.
    pub(crate) wasted_slot: bool,
    /// Requests it sent before we ever unchoked it (we send no
    /// AllowedFast, so an honest peer sends none).
    pub(crate) premature_requests: u32,
    pub(crate) optimistic: bool,
    /// A Close was issued; ignore whatever else arrives.
    pub(crate) closing: bool,
    /// Everything queued for the socket, in order, as runs of control
    /// messages (payload 0) or of blocks (payload = data bytes).
    out: Outbox,
}

impl Peer {
    pub(crate) fn new(
        addr: SocketAddr,
        fast: bool,
        extended: bool,
        pieces: u32,
        max_requests: u32,
        now: Instant,
    ) -> Self {
        let mut pipe = PipelineConfig::new(BLOCK_LEN);
        pipe.max_depth = max_requests.max(1);
        pipe.min_depth = pipe.min_depth.min(pipe.max_depth);
        pipe.initial_depth = pipe.initial_depth.min(pipe.max_depth);
        Self {
            addr,
            peer_id: [0; 20],
            fast,
            extended,
            client: None,
            listen_port: None,
            told_dht_port: false,
            pex: None,
            am_choking: true,
            am_interested: false,
            peer_choking: true,
            peer_interested: false,
            has: Has::Nothing(Bitfield::new(pieces)),
            pipeline: Pipeline::new(pipe),
            down: TransferMeter::new(now),
            up: TransferMeter::new(now),
            outstanding: BTreeMap::new(),
            late: BTreeSet::new(),
            late_order: VecDeque::new(),
            unrequested: 0,
            unanswerable: 0,
            cancelled_reads: 0,
            blocks_sent: 0,
            requests: VecDeque::new(),
            upload_queued: 0,
            taken: RateMeter::new(now, RECENT_SPAN),
            last_block_at: now,
            last_recv_at: now,
            connected_at: now,
            last_send_at: now,
            snubbed: false,
            strikes: 0,
            unchoked_at: None,
            last_progress_at: now,
            wasted_slot: false,
            premature_requests: 0,
            optimistic: false,
            closing: false,
            out: Outbox::new(),
        }
    }

    /// Notes that our request for this block was dropped without an
    /// answer: the block may still come (it crossed our cancel or choke).
    pub(crate) fn forget_request(&mut self, piece: u32, begin: u32) {
        if !self.late.insert((piece, begin)) {
            return;
        }
        self.late_order.push_back((piece, begin));
        if self.late_order.len() > LATE_MEMORY
            && let Some(old) = self.late_order.pop_front()
        {
            self.late.remove(&old);
        }
    }

    /// Whether a block that is not outstanding was asked of this peer
    /// before (see [`Peer::forget_request`]); it is forgotten either way.
    pub(crate) fn take_late(&mut self, piece: u32, begin: u32) -> bool {
        // The order queue keeps the stale entry; it is dropped when it
        // reaches the front (removing it from the set is what counts).
        self.late.remove(&(piece, begin))
    }

    /// Queues a control message.
    pub(crate) fn send(&mut self, msg: &Message, now: Instant) {
        wire::encode(msg, self.out.control());
        self.last_send_at = now;
    }

    /// Queues a frame encoded elsewhere (a metadata answer).
    pub(crate) fn send_frame(&mut self, frame: &[u8], now: Instant) {
        self.out.control().extend_from_slice(frame);
        self.last_send_at = now;
    }

    /// Queues a block: its 13-byte header and the shared payload, no copy.
    pub(crate) fn send_block(&mut self, index: u32, begin: u32, data: Bytes, now: Instant) {
        let header = Bytes::copy_from_slice(&wire::piece_header(index, begin, data.len() as u32));
        self.out.block(header, data);
        self.last_send_at = now;
    }

    /// Whether anything waits to be handed to the runtime.
    pub(crate) fn has_output(&self) -> bool {
        self.out.has_output()
    }

    /// Takes everything queued for the socket, as (chunks, payload bytes)
    /// runs in order.
    pub(crate) fn take_output(&mut self) -> Vec<Unit> {
        self.out.take()
    }
}

/// Dropped requests remembered per peer (more than a deep pipeline).
const LATE_MEMORY: usize = 4096;
