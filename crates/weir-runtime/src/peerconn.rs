//! A framed peer connection's two tasks, for every protocol: a reader that
//! reads large chunks (reserving from the download cap first), decodes them
//! in place and forwards batches of messages, and a writer that sends
//! shared buffers with vectored writes (control runs never wait for the
//! upload cap; block runs are paid for before they start) and reports each
//! write back for upload backpressure.
//!
//! What a driver queues for a writer goes through a [`WriteQueue`], which
//! counts the bytes queued and not yet written and refuses more past its
//! bound: a peer that does not read cannot make weir hold its answers
//! (the driver drops it and counts it).
//!
//! Both tasks are generic over the stream: the reader takes any
//! [`PeerRead`] (a TCP read half, or the read half of any `AsyncRead +
//! AsyncWrite` stream split with `tokio::io::split`, so encrypted and uTP
//! streams use the same tasks), the writer any `AsyncWrite`.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::mpsc;

use crate::bandwidth::Limiter;
use crate::bufpool::BufPool;

/// Bytes each read may fill. Large, so a fast peer costs few syscalls and
/// wake-ups (`SEEDS.md` section 1).
pub const READ_BUF: usize = 512 * 1024;
/// Refill the read buffer when less than this is free.
const MIN_FREE: usize = 64 * 1024;
/// Most messages forwarded in one batch. A read of a peer's smallest
/// messages (4-byte keep-alives, 6-byte eD2k packets) is ~100,000 of them,
/// ~10 MB decoded, and the driver's channel holds dozens of batches: one
/// peer flooding them made the engine's process grow by ~480 MiB. Blocks
/// (16 KiB and more) come 32 or fewer per read, under the cap.
pub const MAX_BATCH: usize = 1024;
/// Batches one connection may have on their way to the driver. The
/// driver's channel is shared by every connection: without a bound of its
/// own, one peer flooding tiny messages fills all of it (its decoded
/// messages held there, honest peers' data queued behind). Several, so a
/// fast peer's next read is decoded while the driver takes the last.
pub const BATCHES_IN_FLIGHT: usize = 4;

/// A connection's credit for one batch in flight (see
/// [`ConnEvent::Messages`]); returned when dropped.
#[derive(Debug)]
pub struct Credit {
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Credit {
    /// A credit bound to nothing (for events made outside a [`reader`]).
    pub fn none() -> Self {
        Credit { _permit: None }
    }
}

/// Most slices in one vectored write.
const MAX_IOV: usize = 512;
/// After the driver lets go of a connection, the writer flushes what is
/// queued for at most this long ([`linger`]), then the socket is dropped
/// (a peer that does not read cannot keep it, and its queue, alive).
pub const WRITE_LINGER: Duration = Duration::from_secs(5);

/// Takes whole messages off the front of a receive buffer (zero copy:
/// payloads are split off and frozen). A protocol's codec behind a trait so
/// one reader serves every protocol.
pub trait Decode: Send + 'static {
    /// A decoded message.
    type Msg: Send + 'static;
    /// Why bytes do not decode (the protocol codec's own error).
    type Error: std::error::Error + Send + 'static;
    /// `Ok(None)`: need more bytes. An error ends the connection.
    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Self::Msg>, Self::Error>;
}

/// Why a connection's reader stopped, other than the peer closing it.
#[derive(Debug, thiserror::Error)]
pub enum ReadFailure<E> {
    /// The peer sent bytes its protocol's codec refused.
    #[error("undecodable input: {0}")]
    Decode(#[source] E),
    /// The socket (or the stream under it) failed.
    #[error("read: {0}")]
    Io(#[source] std::io::Error),
}

/// The read side of a connection, as the [`reader`] sees it: bytes, and a
/// hook after each read that returned some.
pub trait PeerRead: AsyncRead + Unpin + Send + 'static {
    /// Called after each read that returned data. TCP acknowledges at
    /// once rather than after the delayed-ACK timer: a peer that writes a
    /// block as header + payload without `TCP_NODELAY` (libtorrent does)
    /// otherwise holds the payload ~40 ms for our ACK, and Linux clears
    /// quick-ack mode by itself, so it is set per read.
    fn after_read(&self) {}
}

impl PeerRead for OwnedReadHalf {
    fn after_read(&self) {
        #[cfg(target_os = "linux")]
        let _ = socket2::SockRef::from(self.as_ref()).set_tcp_quickack(true);
    }
}

/// Any stream split in two (an encrypted stream, a uTP stream, an
/// in-memory pipe): nothing to do after a read.
impl<S: AsyncRead + AsyncWrite + Send + 'static> PeerRead for tokio::io::ReadHalf<S> {}

/// What a connection's tasks report to their driver. `E` is the decoder's
/// error ([`Decode::Error`]); a connection that only writes never has one.
#[derive(Debug)]
pub enum ConnEvent<M, E = std::convert::Infallible> {
    /// Messages decoded from one read, in order.
    Messages {
        /// The connection.
        conn: u32,
        /// The messages.
        msgs: Vec<M>,
        /// One of the connection's [`BATCHES_IN_FLIGHT`]: dropping the
        /// event (once handled) lets its reader forward another batch.
        credit: Credit,
    },
    /// The peer sent something undecodable, or the socket failed.
    ReadError {
        /// The connection.
        conn: u32,
        /// Why.
        error: ReadFailure<E>,
    },
    /// The peer closed the connection.
    Closed {
        /// The connection.
        conn: u32,
    },
    /// The writer wrote this many bytes.
    Sent {
        /// The connection.
        conn: u32,
        /// Bytes written.
        bytes: u64,
    },
}

/// What the writer sends: whole messages.
#[derive(Debug)]
pub struct Outgoing {
    /// Chunks, written in order with vectored writes.
    pub data: Vec<Bytes>,
    /// Block data bytes in `data` (0: control messages only).
    pub payload: u64,
}

/// Why a [`WriteQueue`] refused a message.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The peer is not reading: the queue is at its bound.
    #[error("peer is not reading: {queued} bytes queued for it (limit {limit})")]
    Full {
        /// Bytes queued and not yet written.
        queued: u64,
        /// The bound.
        limit: u64,
    },
    /// The writer ended (the socket failed or closed).
    #[error("connection closed")]
    Closed,
}

/// The driver's end of a connection's writer: queues whole messages and
/// counts the bytes queued and not yet written. A message that would take
/// the count past the bound is refused (unless nothing is queued, so one
/// message larger than the bound still goes).
#[derive(Clone, Debug)]
pub struct WriteQueue {
    tx: mpsc::UnboundedSender<Outgoing>,
    queued: Arc<AtomicU64>,
    limit: u64,
}

/// The writer's end of a [`WriteQueue`] (pass it to [`writer`]).
#[derive(Debug)]
pub struct WriteRx {
    rx: mpsc::UnboundedReceiver<Outgoing>,
    queued: Arc<AtomicU64>,
}

/// What holding one queued message costs besides its bytes (its chunks'
/// handles, its place in the channel and the writer's queue, the
/// allocator's headers), charged to the queue's bound with them: a peer
/// whose answers are tiny (an eD2k server's FOUNDSOURCES, ~30 bytes)
/// otherwise made the process hold ~5 bytes per byte counted.
const MESSAGE_OVERHEAD: u64 = 128;
/// The same per chunk of a message.
const CHUNK_OVERHEAD: u64 = 48;

fn overhead(o: &Outgoing) -> u64 {
    MESSAGE_OVERHEAD + CHUNK_OVERHEAD * o.data.len() as u64
}

/// A queue holding at most `limit` bytes not yet written (counting what
/// holding each message costs, [`MESSAGE_OVERHEAD`]).
pub fn write_queue(limit: u64) -> (WriteQueue, WriteRx) {
    let (tx, rx) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicU64::new(0));
    (
        WriteQueue {
            tx,
            queued: queued.clone(),
            limit,
        },
        WriteRx { rx, queued },
    )
}

impl WriteQueue {
    /// Queues `o` for the writer, or refuses it (see [`QueueError`]); a
    /// refused message is not sent at all (messages are never split).
    pub fn send(&self, o: Outgoing) -> Result<(), QueueError> {
        // A writer that ended leaves its unwritten bytes counted: say it is
        // closed, not full.
        if self.tx.is_closed() {
            return Err(QueueError::Closed);
        }
        let len: u64 = o.data.iter().map(|b| b.len() as u64).sum::<u64>() + overhead(&o);
        let before = self.queued.fetch_add(len, Ordering::AcqRel);
        if before > 0 && before + len > self.limit {
            self.queued.fetch_sub(len, Ordering::AcqRel);
            return Err(QueueError::Full {
                queued: before,
                limit: self.limit,
            });
        }
        self.tx.send(o).map_err(|_| {
            self.queued.fetch_sub(len, Ordering::AcqRel);
            QueueError::Closed
        })
    }

    /// Bytes queued and not yet written.
    pub fn queued(&self) -> u64 {
        self.queued.load(Ordering::Acquire)
    }

    /// The bound.
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

/// Reads, decodes in place and forwards message batches to the driver.
/// `buf` holds what was read before (after a handshake); an undecodable
/// message or a failed read is reported as [`ConnEvent::ReadError`] after
/// the messages before it, the peer's close as [`ConnEvent::Closed`].
pub async fn reader<R, D, T>(
    conn: u32,
    mut rd: R,
    buf: BytesMut,
    mut decoder: D,
    down: Limiter,
    tx: mpsc::Sender<T>,
) where
    R: PeerRead,
    D: Decode,
    T: From<ConnEvent<D::Msg, D::Error>>,
{
    // Everything the reader holds comes from the pool, and goes back to it
    // however the reader ends (its task is aborted when the driver drops
    // the connection): what the handshake read, in a small buffer of its
    // own, is moved into a pool buffer (a foreign buffer given to the pool
    // could never be handed out again, only take a place).
    let mut first = read_pool().take();
    first.extend_from_slice(&buf);
    drop(buf);
    let mut held = Pooled(first);
    let buf = &mut held.0;
    let failed = |error: ReadFailure<D::Error>| ConnEvent::ReadError { conn, error }.into();
    let credits = Arc::new(tokio::sync::Semaphore::new(BATCHES_IN_FLIGHT));
    let credit = || {
        let c = credits.clone();
        async move {
            // Never closed: the semaphore lives as long as this reader.
            Credit {
                _permit: c.acquire_owned().await.ok(),
            }
        }
    };
    loop {
        let mut msgs = Vec::new();
        let mut full = false;
        loop {
            if msgs.len() >= MAX_BATCH {
                full = true;
                break;
            }
            match decoder.decode(buf) {
                Ok(Some(m)) => msgs.push(m),
                Ok(None) => break,
                Err(e) => {
                    if !msgs.is_empty() {
                        let credit = credit().await;
                        let _ = tx
                            .send(ConnEvent::Messages { conn, msgs, credit }.into())
                            .await;
                    }
                    let _ = tx.send(failed(ReadFailure::Decode(e))).await;
                    return;
                }
            }
        }
        if !msgs.is_empty() {
            let credit = credit().await;
            if tx
                .send(ConnEvent::Messages { conn, msgs, credit }.into())
                .await
                .is_err()
            {
                return;
            }
        }
        if full {
            // The rest of what was read first, then read again.
            continue;
        }
        if buf.capacity() - buf.len() < MIN_FREE {
            read_pool().refill(buf);
        }
        let want = buf.capacity() - buf.len();
        let grant = down.acquire(want).await;
        let n = match rd.read_buf(&mut (&mut *buf).limit(grant)).await {
            Ok(n) => n,
            Err(e) => {
                down.refund(grant);
                let _ = tx.send(failed(ReadFailure::Io(e))).await;
                return;
            }
        };
        down.refund(grant - n);
        if n == 0 {
            let _ = tx.send(ConnEvent::Closed { conn }.into()).await;
            return;
        }
        rd.after_read();
    }
}

/// A reader's receive buffer, given back to [`read_pool`] when the reader
/// ends or is aborted: the next connection takes it again, its pages
/// mapped, instead of each connection's 512 KiB going back to glibc,
/// which keeps freed chunks of that size in its arenas (a flood of
/// connections one after another left ~0.15 MiB resident per closed
/// connection).
struct Pooled(BytesMut);

impl Drop for Pooled {
    fn drop(&mut self) {
        read_pool().give(std::mem::take(&mut self.0));
    }
}

/// A run of messages to write: control messages (`payload == 0`) or
/// blocks (`payload` = their data bytes, which the upload cap charges).
#[derive(Debug)]
struct Unit {
    data: VecDeque<Bytes>,
    payload: u64,
    paid: bool,
    /// Charged to the queue's count with the bytes; released once the
    /// unit is written.
    overhead: u64,
}

/// Writes what the driver queues, as vectored writes over shared buffers,
/// and reports each write back (upload backpressure). Under an upload cap a
/// block run is paid for before it starts; control runs never wait and go
/// ahead of block runs that are waiting for tokens (messages are never
/// split). Ends, after flushing, when the driver drops its sender; hand
/// its task to [`linger`] then, so the flush is bounded in time.
pub async fn writer<M, E, T>(
    conn: u32,
    mut wr: impl AsyncWrite + Unpin,
    rx: WriteRx,
    up: Limiter,
    tx: mpsc::Sender<T>,
) where
    T: From<ConnEvent<M, E>>,
{
    let WriteRx { mut rx, queued } = rx;
    let mut queue: VecDeque<Unit> = VecDeque::new();
    let mut credit: u64 = 0;
    let mut open = true;
    // Whether the limiter caps is read per message, not once: a cap set
    // while the connection is open (a speed limit turned on over RPC)
    // applies to what is queued from then on.
    loop {
        if queue.is_empty() {
            if !open {
                let _ = wr.shutdown().await;
                return;
            }
            // Nothing more to write now: a stream that holds accepted
            // bytes (an encrypted one) sends them before the wait.
            if wr.flush().await.is_err() {
                let _ = tx.send(ConnEvent::Closed { conn }.into()).await;
                return;
            }
            match rx.recv().await {
                Some(o) => queue.extend(unit(o, up.is_unlimited(), &queued)),
                None => open = false,
            }
            continue;
        }
        while let Ok(o) = rx.try_recv() {
            queue.extend(unit(o, up.is_unlimited(), &queued));
        }
        if !queue[0].paid {
            // Control runs queued behind go first.
            if let Some(at) = queue.iter().position(|u| u.payload == 0) {
                let u = queue.remove(at).expect("position is valid");
                queue.push_front(u);
                continue;
            }
            let need = queue[0].payload - credit.min(queue[0].payload);
            let want = usize::try_from(need).unwrap_or(usize::MAX);
            if wr.flush().await.is_err() {
                let _ = tx.send(ConnEvent::Closed { conn }.into()).await;
                return;
            }
            tokio::select! {
                g = up.acquire(want) => credit += g as u64,
                o = rx.recv(), if open => match o {
                    Some(o) => queue.extend(unit(o, up.is_unlimited(), &queued)),
                    None => open = false,
                },
            }
            if credit >= queue[0].payload {
                credit -= queue[0].payload;
                queue[0].paid = true;
            }
            continue;
        }
        let slices: Vec<IoSlice<'_>> = queue
            .iter()
            .take_while(|u| u.paid)
            .flat_map(|u| u.data.iter())
            .take(MAX_IOV)
            .map(|b| IoSlice::new(b))
            .collect();
        let n = match wr.write_vectored(&slices).await {
            Ok(0) | Err(_) => {
                let _ = tx.send(ConnEvent::Closed { conn }.into()).await;
                return;
            }
            Ok(n) => n,
        };
        drop(slices);
        queued.fetch_sub(n as u64, Ordering::AcqRel);
        let mut adv = n;
        while adv > 0 {
            let u = queue.front_mut().expect("wrote queued bytes");
            let front = u.data.front_mut().expect("units are never empty");
            if adv >= front.len() {
                adv -= front.len();
                u.data.pop_front();
                if u.data.is_empty() {
                    queued.fetch_sub(u.overhead, Ordering::AcqRel);
                    queue.pop_front();
                }
            } else {
                front.advance(adv);
                adv = 0;
            }
        }
        if tx
            .send(
                ConnEvent::Sent {
                    conn,
                    bytes: n as u64,
                }
                .into(),
            )
            .await
            .is_err()
        {
            return;
        }
    }
}

/// Lets a writer whose queue the driver dropped flush for at most
/// [`WRITE_LINGER`], then ends it (and with it the socket).
pub fn linger(task: tokio::task::JoinHandle<()>) {
    if task.is_finished() {
        return;
    }
    tokio::spawn(async move {
        let abort = task.abort_handle();
        if tokio::time::timeout(WRITE_LINGER, task).await.is_err() {
            abort.abort();
        }
    });
}

fn unit(o: Outgoing, unlimited: bool, queued: &AtomicU64) -> Option<Unit> {
    let overhead = overhead(&o);
    let data: VecDeque<Bytes> = o.data.into_iter().filter(|b| !b.is_empty()).collect();
    if data.is_empty() {
        queued.fetch_sub(overhead, Ordering::AcqRel);
        return None;
    }
    Some(Unit {
        data,
        payload: o.payload,
        paid: unlimited || o.payload == 0,
        overhead,
    })
}

/// Receive buffers the pool keeps at most (in use by blocks, or free):
/// 16 MiB of [`READ_BUF`] buffers.
pub const MAX_POOLED: usize = 32;

/// The receive buffers of every connection of the process.
pub fn read_pool() -> &'static BufPool {
    static POOL: OnceLock<BufPool> = OnceLock::new();
    POOL.get_or_init(|| BufPool::new(READ_BUF, MAX_POOLED))
}

#[cfg(test)]
mod tests;
