//! One peer connection's tasks: the handshake, then a reader that decodes
//! large reads in place and a writer that sends shared buffers with
//! vectored writes.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use weir_bt::torrent::ConnId;
use weir_bt::wire::{self, Handshake, Limits};

use super::Msg;
use crate::bandwidth::Limiter;

/// Bytes each read may fill. Large, so a fast peer costs few syscalls and
/// wake-ups (`SEEDS.md` section 1).
pub(crate) const READ_BUF: usize = 512 * 1024;
/// Refill the read buffer when less than this is free.
const MIN_FREE: usize = 64 * 1024;
/// Most slices in one vectored write.
const MAX_IOV: usize = 512;
/// A handshake must complete within this.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);

/// What the writer sends.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub(crate) data: Vec<Bytes>,
    /// Block data bytes in `data` (0: control messages only).
    pub(crate) payload: u64,
}

/// Exchanges handshakes. `ours_first`: we dialled, so we speak first.
/// `accept` decides whether the peer's handshake is for us (info-hash).
pub(crate) async fn handshake(
    stream: &mut TcpStream,
    ours: &Handshake,
    ours_first: bool,
) -> std::io::Result<(Handshake, BytesMut)> {
    let mut out = BytesMut::with_capacity(Handshake::LEN);
    ours.encode(&mut out);
    if ours_first {
        stream.write_all(&out).await?;
    }
    let mut buf = BytesMut::with_capacity(READ_BUF);
    let theirs = loop {
        match Handshake::decode(&buf) {
            Ok(Some(h)) => break h,
            Ok(None) => {}
            Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    };
    buf.advance(Handshake::LEN);
    if theirs.info_hash != ours.info_hash {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "handshake for another torrent",
        ));
    }
    if !ours_first {
        stream.write_all(&out).await?;
    }
    Ok((theirs, buf))
}

/// Reads, decodes in place and forwards message batches to the driver.
pub(crate) async fn reader(
    conn: ConnId,
    mut rd: OwnedReadHalf,
    mut buf: BytesMut,
    limits: Limits,
    down: Limiter,
    tx: mpsc::Sender<Msg>,
) {
    loop {
        let mut msgs = Vec::new();
        loop {
            match wire::decode(&mut buf, &limits) {
                Ok(Some(m)) => msgs.push(m),
                Ok(None) => break,
                Err(e) => {
                    if !msgs.is_empty() {
                        let _ = tx.send(Msg::Messages { conn, msgs }).await;
                    }
                    let _ = tx
                        .send(Msg::ReadError {
                            conn,
                            reason: e.to_string(),
                        })
                        .await;
                    return;
                }
            }
        }
        if !msgs.is_empty() && tx.send(Msg::Messages { conn, msgs }).await.is_err() {
            return;
        }
        if buf.capacity() - buf.len() < MIN_FREE {
            buf.reserve(READ_BUF);
        }
        let want = buf.capacity() - buf.len();
        let grant = down.acquire(want).await;
        let n = match rd.read_buf(&mut (&mut buf).limit(grant)).await {
            Ok(n) => n,
            Err(e) => {
                down.refund(grant);
                let _ = tx
                    .send(Msg::ReadError {
                        conn,
                        reason: e.to_string(),
                    })
                    .await;
                return;
            }
        };
        down.refund(grant - n);
        if n == 0 {
            let _ = tx.send(Msg::Closed { conn }).await;
            return;
        }
    }
}

/// A run of messages to write: control messages (`payload == 0`) or
/// blocks (`payload` = their data bytes, which the upload cap charges).
#[derive(Debug)]
struct Unit {
    data: VecDeque<Bytes>,
    payload: u64,
    paid: bool,
}

/// Writes what the driver queues, as vectored writes over shared buffers,
/// and reports each write back (upload backpressure). Under an upload cap a
/// block run is paid for before it starts; control runs never wait and go
/// ahead of block runs that are waiting for tokens (messages are never
/// split). Ends, after flushing, when the driver drops its sender.
pub(crate) async fn writer(
    conn: ConnId,
    mut wr: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    up: Limiter,
    tx: mpsc::Sender<Msg>,
) {
    let mut queue: VecDeque<Unit> = VecDeque::new();
    let mut credit: u64 = 0;
    let mut open = true;
    let unlimited = up.is_unlimited();
    loop {
        if queue.is_empty() {
            if !open {
                let _ = wr.shutdown().await;
                return;
            }
            match rx.recv().await {
                Some(o) => queue.extend(unit(o, unlimited)),
                None => open = false,
            }
            continue;
        }
        while let Ok(o) = rx.try_recv() {
            queue.extend(unit(o, unlimited));
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
            tokio::select! {
                g = up.acquire(want) => credit += g as u64,
                o = rx.recv(), if open => match o {
                    Some(o) => queue.extend(unit(o, unlimited)),
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
                let _ = tx.send(Msg::Closed { conn }).await;
                return;
            }
            Ok(n) => n,
        };
        drop(slices);
        let mut adv = n;
        while adv > 0 {
            let u = queue.front_mut().expect("wrote queued bytes");
            let front = u.data.front_mut().expect("units are never empty");
            if adv >= front.len() {
                adv -= front.len();
                u.data.pop_front();
                if u.data.is_empty() {
                    queue.pop_front();
                }
            } else {
                front.advance(adv);
                adv = 0;
            }
        }
        if tx
            .send(Msg::Sent {
                conn,
                bytes: n as u64,
            })
            .await
            .is_err()
        {
            return;
        }
    }
}

fn unit(o: Outgoing, unlimited: bool) -> Option<Unit> {
    let data: VecDeque<Bytes> = o.data.into_iter().filter(|b| !b.is_empty()).collect();
    (!data.is_empty()).then_some(Unit {
        data,
        payload: o.payload,
        paid: unlimited || o.payload == 0,
    })
}

/// Dials `addr` and shakes hands; the result goes to the driver.
pub(crate) async fn dial(
    policy: weir_core::policy::NetPolicy,
    addr: SocketAddr,
    ours: Handshake,
    tx: mpsc::Sender<Msg>,
) {
    let result = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        let mut s = crate::net::connect_tcp(&policy, addr).await?;
        s.set_nodelay(true)?;
        let (theirs, leftover) = handshake(&mut s, &ours, true).await?;
        Ok::<_, std::io::Error>((s, theirs, leftover))
    })
    .await;
    let msg = match result {
        Ok(Ok((stream, theirs, leftover))) => Msg::Handshaked {
            stream,
            addr,
            theirs,
            leftover,
        },
        Ok(Err(e)) => Msg::DialFailed {
            addr,
            error: e.to_string(),
        },
        Err(_) => Msg::DialFailed {
            addr,
            error: "handshake timed out".into(),
        },
    };
    let _ = tx.send(msg).await;
}

/// Shakes hands on an accepted connection.
pub(crate) async fn accept(
    mut stream: TcpStream,
    addr: SocketAddr,
    ours: Handshake,
    tx: mpsc::Sender<Msg>,
) {
    let _ = stream.set_nodelay(true);
    let r = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(&mut stream, &ours, false)).await;
    if let Ok(Ok((theirs, leftover))) = r {
        let _ = tx
            .send(Msg::Handshaked {
                stream,
                addr,
                theirs,
                leftover,
            })
            .await;
    }
}
