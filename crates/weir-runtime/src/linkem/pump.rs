//! One connection of the link emulator: four tasks (a reader and a writer
//! per direction) joined by a channel of timestamped chunks whose bytes are
//! bounded by a semaphore (the queue).

use std::io;
use std::net::Shutdown;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Semaphore, mpsc};

use super::faults::FaultPlan;
use super::{CHUNK, DirSummary, Direction, LinkConfig};

/// What a reader hands to its writer, stamped with the time it was read.
enum Item {
    Data(Instant, Bytes),
    /// The sender closed its write side.
    Eof(Instant),
    /// Reading failed (reset): end the connection after the delay.
    Reset(Instant),
}

#[derive(Default)]
struct Stats {
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    dropped: AtomicU64,
    corrupted: Mutex<Vec<(u64, u8)>>,
    error: Mutex<Option<String>>,
}

impl Stats {
    fn error(&self, e: String) {
        let mut g = self.error.lock().unwrap_or_else(|p| p.into_inner());
        g.get_or_insert(e);
    }

    fn summary(&self) -> (DirSummary, Option<String>) {
        let corrupted = self
            .corrupted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let err = self.error.lock().unwrap_or_else(|p| p.into_inner()).clone();
        (
            DirSummary {
                bytes_in: self.bytes_in.load(Ordering::Relaxed),
                bytes_out: self.bytes_out.load(Ordering::Relaxed),
                dropped: self.dropped.load(Ordering::Relaxed),
                corrupted,
            },
            err,
        )
    }
}

/// Sockets used only to shut a connection down from another task (a
/// duplicate descriptor of each side).
struct Ctl {
    src: std::net::TcpStream,
    dst: std::net::TcpStream,
}

/// A socket split into its halves plus two duplicate control descriptors
/// (one for each direction's writer).
type Split = (
    OwnedReadHalf,
    OwnedWriteHalf,
    std::net::TcpStream,
    std::net::TcpStream,
);

fn split_with_ctl(s: TcpStream) -> io::Result<Split> {
    let std = s.into_std()?;
    let ctl1 = std.try_clone()?;
    let ctl2 = std.try_clone()?;
    let s = TcpStream::from_std(std)?;
    let (r, w) = s.into_split();
    Ok((r, w, ctl1, ctl2))
}

/// Runs both directions to completion: (fwd, rev, first error).
pub(super) async fn run(
    client: TcpStream,
    server: TcpStream,
    cfg: &LinkConfig,
) -> (DirSummary, DirSummary, Option<String>) {
    // linkem adds no Nagle delay of its own: each chunk goes out when due.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let ((cr, cw, cctl1, cctl2), (sr, sw, sctl1, sctl2)) =
        match (split_with_ctl(client), split_with_ctl(server)) {
            (Ok(c), Ok(s)) => (c, s),
            (Err(e), _) | (_, Err(e)) => {
                return (
                    DirSummary::default(),
                    DirSummary::default(),
                    Some(format!("setting up sockets: {e}")),
                );
            }
        };
    let plan = FaultPlan::new(&cfg.faults);
    let plan = (!plan.is_empty()).then(|| Arc::new(plan));
    let fwd_plan = matches!(cfg.fault_direction, Direction::Fwd | Direction::Both)
        .then(|| plan.clone())
        .flatten();
    let rev_plan = matches!(cfg.fault_direction, Direction::Rev | Direction::Both)
        .then(|| plan.clone())
        .flatten();
    let fwd_stats = Arc::new(Stats::default());
    let rev_stats = Arc::new(Stats::default());
    let mut tasks = Vec::with_capacity(4);
    for (r, w, ctl, plan, stats) in [
        (
            cr,
            sw,
            Ctl {
                src: cctl1,
                dst: sctl1,
            },
            fwd_plan,
            fwd_stats.clone(),
        ),
        (
            sr,
            cw,
            Ctl {
                src: sctl2,
                dst: cctl2,
            },
            rev_plan,
            rev_stats.clone(),
        ),
    ] {
        let queue = cfg.queue.max(1);
        let sem = Arc::new(Semaphore::new(queue));
        let (tx, rx) = mpsc::unbounded_channel();
        tasks.push(tokio::spawn(reader(
            r,
            tx,
            sem.clone(),
            plan,
            stats.clone(),
            queue,
        )));
        tasks.push(tokio::spawn(writer(
            w,
            rx,
            sem,
            cfg.delay,
            cfg.rate.map(Pacer::new),
            stats,
            ctl,
        )));
    }
    for t in tasks {
        if let Err(e) = t.await {
            fwd_stats.error(format!("linkem task failed: {e}"));
        }
    }
    let (fwd, e1) = fwd_stats.summary();
    let (rev, e2) = rev_stats.summary();
    (fwd, rev, e1.or(e2))
}

async fn reader(
    mut src: OwnedReadHalf,
    tx: mpsc::UnboundedSender<Item>,
    sem: Arc<Semaphore>,
    plan: Option<Arc<FaultPlan>>,
    stats: Arc<Stats>,
    queue: usize,
) {
    let unit = CHUNK.min(queue);
    let permits = u32::try_from(unit).unwrap_or(u32::MAX);
    let mut buf = BytesMut::new();
    let mut offset = 0u64;
    let mut segs: Vec<Bytes> = Vec::new();
    loop {
        // Room in the queue first: a full queue stops reading (backpressure).
        match sem.acquire_many(permits).await {
            Ok(p) => p.forget(),
            Err(_) => return, // writer gone
        }
        buf.reserve(unit);
        let r = src.read_buf(&mut (&mut buf).limit(unit)).await;
        let now = Instant::now();
        let n = match r {
            Ok(0) => {
                sem.add_permits(unit);
                let _ = tx.send(Item::Eof(now));
                return;
            }
            Ok(n) => n,
            Err(e) => {
                sem.add_permits(unit);
                stats.error(format!("read: {e}"));
                let _ = tx.send(Item::Reset(now));
                return;
            }
        };
        sem.add_permits(unit - n);
        stats.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
        let chunk = buf.split();
        match &plan {
            None => segs.push(chunk.freeze()),
            Some(plan) => {
                let a = plan.apply(offset, chunk, &mut segs);
                if a.dropped > 0 {
                    sem.add_permits(a.dropped as usize);
                    stats.dropped.fetch_add(a.dropped, Ordering::Relaxed);
                }
                if !a.corrupted.is_empty() {
                    stats
                        .corrupted
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .extend(a.corrupted);
                }
            }
        }
        offset += n as u64;
        for s in segs.drain(..) {
            if tx.send(Item::Data(now, s)).is_err() {
                return;
            }
        }
    }
}

async fn wait_due(stamp: Instant, delay: Duration) {
    if !delay.is_zero() {
        let due = stamp + delay;
        if due > Instant::now() {
            tokio::time::sleep_until(due.into()).await;
        }
    }
}

async fn writer(
    mut dst: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Item>,
    sem: Arc<Semaphore>,
    delay: Duration,
    mut pacer: Option<Pacer>,
    stats: Arc<Stats>,
    ctl: Ctl,
) {
    let end = loop {
        match rx.recv().await {
            Some(Item::Data(stamp, b)) => {
                wait_due(stamp, delay).await;
                let len = b.len();
                // Counted as written, also when the connection fails part
                // way (the receiver may have read what got through).
                let r = match &mut pacer {
                    None => write_counted(&mut dst, &b, &stats.bytes_out).await,
                    Some(p) => p.write(&mut dst, &b, &stats.bytes_out).await,
                };
                sem.add_permits(len);
                match r {
                    Ok(()) => {}
                    Err(e) => {
                        stats.error(format!("write: {e}"));
                        break Shutdown::Both;
                    }
                }
            }
            Some(Item::Eof(stamp)) => {
                wait_due(stamp, delay).await;
                if let Err(e) = dst.shutdown().await {
                    stats.error(format!("shutdown: {e}"));
                    break Shutdown::Both;
                }
                sem.close();
                return;
            }
            Some(Item::Reset(stamp)) => {
                wait_due(stamp, delay).await;
                break Shutdown::Both;
            }
            None => break Shutdown::Both,
        }
    };
    // End the connection: the receiver gets EOF, the other direction's reader
    // (reading from this receiver) wakes, and this direction's reader stops.
    sem.close();
    let _ = ctl.dst.shutdown(end);
    let _ = ctl.src.shutdown(Shutdown::Read);
}

/// Paces writes at a rate: each slice of about 1 ms of traffic leaves when
/// the emulated line has finished sending it; an idle line accrues at most
/// [`Pacer::burst`] of credit.
pub(super) struct Pacer {
    rate: f64,
    slice: usize,
    burst: Duration,
    free: Instant,
}

impl Pacer {
    pub(super) fn new(rate: u64) -> Self {
        let rate = rate.max(1) as f64;
        let slice = ((rate / 1000.0) as usize).clamp(16 * 1024, CHUNK);
        let slice_time = slice as f64 / rate;
        Self {
            rate,
            slice,
            burst: Duration::from_secs_f64((2.0 * slice_time).max(0.010)),
            free: Instant::now(),
        }
    }

    async fn write(
        &mut self,
        dst: &mut OwnedWriteHalf,
        data: &[u8],
        out: &AtomicU64,
    ) -> io::Result<()> {
        for s in data.chunks(self.slice) {
            let now = Instant::now();
            let floor = now.checked_sub(self.burst).unwrap_or(now);
            if self.free < floor {
                self.free = floor;
            }
            self.free += Duration::from_secs_f64(s.len() as f64 / self.rate);
            if self.free > now {
                tokio::time::sleep_until(self.free.into()).await;
            }
            write_counted(dst, s, out).await?;
        }
        Ok(())
    }
}

/// Writes all of `data`, adding each successful write's bytes to `out`.
async fn write_counted(
    dst: &mut OwnedWriteHalf,
    mut data: &[u8],
    out: &AtomicU64,
) -> io::Result<()> {
    while !data.is_empty() {
        let n = dst.write(data).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        out.fetch_add(n as u64, Ordering::Relaxed);
        data = &data[n..];
    }
    Ok(())
}
