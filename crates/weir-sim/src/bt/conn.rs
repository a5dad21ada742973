//! One end of a connection, read and written exactly as the runtime's
//! tasks do (`weir_runtime::bt::conn`):
//!
//! - **Reader**: decode every whole message in the buffer and hand the
//!   batch to the torrent; if less than 64 KiB of the buffer is free,
//!   reserve 512 KiB more; reserve the free space from the download chain
//!   (waiting for the next refill while it grants nothing); then wait for
//!   data and read at most the grant; refund what the read did not use.
//!   Tokens are held while waiting for data, as the runtime holds them
//!   across `read_buf().await`.
//! - **Writer**: runs of control messages (payload 0) never wait for the
//!   upload chain and go ahead of block runs still waiting for tokens; a
//!   block run is paid in full before its first byte is written (credit
//!   accumulates across grants); paid runs are written together (at most
//!   512 slices per write), as much as the send buffer takes; each write is
//!   reported with `Torrent::on_sent`.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use weir_bt::torrent::ConnId;
use weir_bt::wire::{self, BlockRef, Limits, Message};
use weir_core::bucket::{TokenBucket, refund_chain, reserve_chain};

use crate::measure::Series;
use crate::world::{BucketId, LinkId, NodeId, SideId, Waiter, Work, World};

/// The runtime's read size (`conn::READ_BUF`).
pub const READ_BUF: usize = 512 * 1024;
/// The runtime refills the read buffer when less than this is free.
pub const MIN_FREE: usize = 64 * 1024;
/// Most slices in one vectored write (`conn::MAX_IOV`).
pub const MAX_IOV: usize = 512;

/// What one end of a connection saw.
#[derive(Clone, Debug, Default)]
pub struct ConnStats {
    /// Requests this end sent.
    pub requests_sent: u64,
    /// Cancels this end sent.
    pub cancels_sent: u64,
    /// Blocks (piece messages) this end received.
    pub blocks_received: u64,
    /// Rejects this end received.
    pub rejects_received: u64,
    /// Block payload bytes this end received.
    pub payload_received: u64,
    /// The same, cumulative over virtual time.
    pub payload: Series,
    /// Bytes read from the socket.
    pub bytes_read: u64,
    /// Bytes written to the socket.
    pub bytes_written: u64,
    /// Socket reads.
    pub reads: u64,
    /// Socket writes.
    pub writes: u64,
    /// Every request sent, with its time (with [`World::trace_blocks`]).
    pub requested: Vec<(Duration, BlockRef)>,
    /// Every block received, with its time (with [`World::trace_blocks`]).
    pub received: Vec<(Duration, u32, u32)>,
}

impl ConnStats {
    /// Requests in flight as the wire shows them: sent, minus cancelled,
    /// answered or rejected.
    pub fn outstanding(&self) -> u64 {
        self.requests_sent
            .saturating_sub(self.cancels_sent + self.blocks_received + self.rejects_received)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadState {
    /// About to reserve tokens.
    Ready,
    /// The download chain granted nothing: waits for the next refill.
    WaitTokens,
    /// Holds this many tokens and waits for data.
    WaitData(usize),
    /// Aborted.
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteState {
    Idle,
    Ready,
    WaitTokens,
    WaitWritable,
    Done,
}

pub(crate) struct Reader {
    buf: BytesMut,
    limits: Limits,
    pub(crate) state: ReadState,
    pub(crate) queued: bool,
}

struct Unit {
    data: VecDeque<Bytes>,
    payload: u64,
    paid: bool,
}

pub(crate) struct Writer {
    queue: VecDeque<Unit>,
    credit: u64,
    unlimited: bool,
    pub(crate) state: WriteState,
    pub(crate) queued: bool,
    pub(super) closing: bool,
}

/// One end of a connection.
pub(crate) struct Side {
    pub(super) node: NodeId,
    pub(super) conn: ConnId,
    tx: LinkId,
    rx: LinkId,
    pub(super) open: bool,
    pub(crate) reader: Reader,
    pub(crate) writer: Writer,
    pub(super) stats: ConnStats,
}

impl Side {
    /// A new end of connection `conn` of `node`, writing to `tx` and
    /// reading from `rx`.
    pub(crate) fn new(
        node: NodeId,
        conn: ConnId,
        tx: LinkId,
        rx: LinkId,
        limits: Limits,
        unlimited_up: bool,
    ) -> Self {
        Self {
            node,
            conn,
            tx,
            rx,
            open: true,
            reader: Reader {
                buf: BytesMut::with_capacity(READ_BUF),
                limits,
                state: ReadState::Ready,
                queued: false,
            },
            writer: Writer {
                queue: VecDeque::new(),
                credit: 0,
                unlimited: unlimited_up,
                state: WriteState::Idle,
                queued: false,
                closing: false,
            },
            stats: ConnStats::default(),
        }
    }
}

fn reserve(buckets: &[TokenBucket], chain: &[BucketId], want: u64) -> u64 {
    if want == 0 {
        return 0;
    }
    let refs: Vec<&TokenBucket> = chain.iter().map(|&b| &buckets[b]).collect();
    if refs.iter().all(|b| b.is_unlimited()) {
        return want;
    }
    reserve_chain(&refs, want)
}

pub(super) fn refund(buckets: &[TokenBucket], chain: &[BucketId], unused: u64) {
    if unused == 0 {
        return;
    }
    let refs: Vec<&TokenBucket> = chain.iter().map(|&b| &buckets[b]).collect();
    if refs.iter().all(|b| b.is_unlimited()) {
        return;
    }
    refund_chain(&refs, unused);
}

impl World {
    pub(super) fn queue_send(&mut self, s: SideId, data: Vec<Bytes>, payload: u64) {
        let trace = self.trace_blocks;
        let now = self.now();
        let side = &mut self.sides[s];
        if payload == 0 {
            // Count what the control run asks for (a copy: the run itself
            // goes out untouched).
            let mut copy = BytesMut::new();
            for d in &data {
                copy.extend_from_slice(d);
            }
            while let Ok(Some(m)) = wire::decode(&mut copy, &side.reader.limits) {
                match m {
                    Message::Request(r) => {
                        side.stats.requests_sent += 1;
                        if trace {
                            side.stats.requested.push((now, r));
                        }
                    }
                    Message::Cancel(_) => side.stats.cancels_sent += 1,
                    _ => {}
                }
            }
        }
        let w = &mut side.writer;
        let data: VecDeque<Bytes> = data.into_iter().filter(|b| !b.is_empty()).collect();
        if !data.is_empty() {
            w.queue.push_back(Unit {
                data,
                payload,
                paid: w.unlimited || payload == 0,
            });
        }
        // A writer waiting for tokens also wakes for new messages (the
        // runtime's select); one inside a write does not.
        if matches!(w.state, WriteState::Idle | WriteState::WaitTokens) && !w.queued {
            w.queued = true;
            self.work.push_back(Work::Writer(s));
        }
    }

    /// The runtime's `drop_conn`: the reader is aborted, the writer flushes
    /// what is queued and then ends the stream.
    pub(crate) fn wake_reader_for_data(&mut self, s: SideId) {
        let r = &mut self.sides[s].reader;
        if matches!(r.state, ReadState::WaitData(_)) && !r.queued {
            r.queued = true;
            self.work.push_back(Work::Reader(s));
        }
    }

    pub(crate) fn wake_reader_for_tokens(&mut self, s: SideId) {
        let r = &mut self.sides[s].reader;
        if r.state == ReadState::WaitTokens {
            r.state = ReadState::Ready;
            if !r.queued {
                r.queued = true;
                self.work.push_back(Work::Reader(s));
            }
        }
    }

    pub(crate) fn wake_writer_for_room(&mut self, s: SideId) {
        let w = &mut self.sides[s].writer;
        if w.state == WriteState::WaitWritable {
            w.state = WriteState::Ready;
            if !w.queued {
                w.queued = true;
                self.work.push_back(Work::Writer(s));
            }
        }
    }

    pub(crate) fn wake_writer_for_tokens(&mut self, s: SideId) {
        let w = &mut self.sides[s].writer;
        if w.state == WriteState::WaitTokens {
            w.state = WriteState::Ready;
            if !w.queued {
                w.queued = true;
                self.work.push_back(Work::Writer(s));
            }
        }
    }

    /// The runtime's reader loop (`conn::reader`), run until it waits.
    pub(crate) fn run_reader(&mut self, s: SideId) {
        let now = self.now();
        loop {
            let n = self.sides[s].node;
            if !self.sides[s].open || self.nodes[n].frozen {
                return;
            }
            // Decode every whole message and hand the batch over.
            let mut msgs = Vec::new();
            let mut error = None;
            {
                let r = &mut self.sides[s].reader;
                loop {
                    match wire::decode(&mut r.buf, &r.limits) {
                        Ok(Some(m)) => msgs.push(m),
                        Ok(None) => break,
                        Err(e) => {
                            error = Some(e.to_string());
                            break;
                        }
                    }
                }
            }
            if !msgs.is_empty() {
                self.deliver(s, msgs);
            }
            if let Some(reason) = error {
                return self.peer_gone(s, Some(reason));
            }
            if !self.sides[s].open {
                return;
            }
            // Reserve the free space from the download chain.
            let side = &mut self.sides[s];
            if matches!(side.reader.state, ReadState::Ready | ReadState::WaitTokens) {
                let r = &mut side.reader;
                if r.buf.capacity() - r.buf.len() < MIN_FREE {
                    r.buf.reserve(READ_BUF);
                }
                let want = r.buf.capacity() - r.buf.len();
                let grant = reserve(&self.buckets, &self.nodes[n].down, want as u64) as usize;
                if grant == 0 {
                    if r.state != ReadState::WaitTokens {
                        r.state = ReadState::WaitTokens;
                        self.waiters.push(Waiter::Reader(s));
                    }
                    return;
                }
                r.state = ReadState::WaitData(grant);
            }
            let ReadState::WaitData(grant) = side.reader.state else {
                return;
            };
            // Wait for data (holding the tokens), read at most the grant.
            let link = &mut self.links[side.rx].link;
            if link.readable() == 0 {
                if link.is_eof() {
                    refund(&self.buckets, &self.nodes[n].down, grant as u64);
                    side.reader.state = ReadState::Done;
                    return self.peer_gone(s, None);
                }
                return;
            }
            let got = link.read_into(now, &mut side.reader.buf, grant);
            refund(&self.buckets, &self.nodes[n].down, (grant - got) as u64);
            side.reader.state = ReadState::Ready;
            side.stats.bytes_read += got as u64;
            side.stats.reads += 1;
            let rx = side.rx;
            self.touch(rx);
        }
    }

    /// Hands decoded messages to the torrent, counting what they carry.
    fn deliver(&mut self, s: SideId, msgs: Vec<Message>) {
        let now = self.now();
        let at = self.instant();
        let trace = self.trace_blocks;
        let (n, conn) = (self.sides[s].node, self.sides[s].conn);
        for m in msgs {
            let stats = &mut self.sides[s].stats;
            match &m {
                Message::Piece { index, begin, data } => {
                    stats.blocks_received += 1;
                    stats.payload_received += data.len() as u64;
                    stats.payload.add(now, data.len() as u64);
                    if trace {
                        stats.received.push((now, *index, *begin));
                    }
                    self.nodes[n].received.add(now, data.len() as u64);
                }
                Message::Reject(_) => stats.rejects_received += 1,
                _ => {}
            }
            self.nodes[n].torrent.handle_message(conn, m, at);
        }
        self.drain(n);
    }

    /// The runtime's writer loop (`conn::writer`), run until it waits.
    pub(crate) fn run_writer(&mut self, s: SideId) {
        let now = self.now();
        loop {
            let n = self.sides[s].node;
            if self.nodes[n].frozen {
                return;
            }
            let side = &mut self.sides[s];
            let w = &mut side.writer;
            if w.queue.is_empty() {
                if w.closing {
                    w.state = WriteState::Done;
                    let tx = side.tx;
                    self.links[tx].link.close(now);
                    self.touch(tx);
                } else {
                    w.state = WriteState::Idle;
                }
                return;
            }
            if !w.queue[0].paid {
                // Control runs queued behind go first.
                if let Some(at) = w.queue.iter().position(|u| u.payload == 0) {
                    let u = w.queue.remove(at).expect("position is valid");
                    w.queue.push_front(u);
                    continue;
                }
                let payload = w.queue[0].payload;
                let need = payload - w.credit.min(payload);
                let g = reserve(&self.buckets, &self.nodes[n].up, need);
                if g == 0 {
                    if w.state != WriteState::WaitTokens {
                        w.state = WriteState::WaitTokens;
                        self.waiters.push(Waiter::Writer(s));
                    }
                    return;
                }
                w.state = WriteState::Ready;
                w.credit += g;
                if w.credit >= payload {
                    w.credit -= payload;
                    w.queue[0].paid = true;
                }
                continue;
            }
            let tx = side.tx;
            let slices = w
                .queue
                .iter()
                .take_while(|u| u.paid)
                .flat_map(|u| u.data.iter())
                .take(MAX_IOV);
            let wrote = self.links[tx].link.write(now, slices);
            self.touch(tx);
            let side = &mut self.sides[s];
            let w = &mut side.writer;
            if wrote == 0 {
                w.state = WriteState::WaitWritable;
                return;
            }
            w.state = WriteState::Ready;
            let mut adv = wrote;
            while adv > 0 {
                let u = w.queue.front_mut().expect("wrote queued bytes");
                let front = u.data.front_mut().expect("units are never empty");
                if adv >= front.len() {
                    adv -= front.len();
                    u.data.pop_front();
                    if u.data.is_empty() {
                        w.queue.pop_front();
                    }
                } else {
                    front.advance(adv);
                    adv = 0;
                }
            }
            side.stats.bytes_written += wrote as u64;
            side.stats.writes += 1;
            if side.open {
                let (conn, at) = (side.conn, self.instant());
                self.nodes[n].torrent.on_sent(conn, wrote as u64, at);
                self.drain(n);
            }
        }
    }
}
