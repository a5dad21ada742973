//! The real reader and writer over loopback TCP: batching, control ahead
//! of blocks under a cap, the queue bound, backpressure.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::*;
use crate::bandwidth::{Limiter, bucket};

/// `<len u32><payload>` frames.
struct Frames;

/// A frame longer than the test codec takes.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("frame of {0} bytes")]
struct TooLong(usize);

impl Decode for Frames {
    type Msg = Bytes;
    type Error = TooLong;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, TooLong> {
        if buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if len > 1 << 20 {
            return Err(TooLong(len));
        }
        if buf.len() < 4 + len {
            return Ok(None);
        }
        buf.advance(4);
        Ok(Some(buf.split_to(len).freeze()))
    }
}

fn frame(payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(4 + payload.len());
    b.put_u32(payload.len() as u32);
    b.put_slice(payload);
    b.freeze()
}

async fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (a, b) = tokio::join!(TcpStream::connect(addr), l.accept());
    (a.unwrap(), b.unwrap().0)
}

type Ev = ConnEvent<Bytes, TooLong>;

fn control(data: &[u8]) -> Outgoing {
    Outgoing {
        data: vec![Bytes::copy_from_slice(data)],
        payload: 0,
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_writer_sends_everything_queued_in_one_vectored_write() {
    let (ours, mut theirs) = pair().await;
    let (_rd, wr) = ours.into_split();
    let (q, rx) = write_queue(1 << 20);
    let (tx, mut ev) = mpsc::channel::<Ev>(1024);
    // Queued before the writer task first runs (one thread: it runs at
    // the next await).
    for i in 0..100u8 {
        q.send(control(&[i; 10])).unwrap();
    }
    // The bytes and what holding each message costs.
    assert_eq!(q.queued(), 1000 + 100 * (MESSAGE_OVERHEAD + CHUNK_OVERHEAD));
    tokio::spawn(writer::<Bytes, TooLong, Ev>(
        7,
        wr,
        rx,
        Limiter::unlimited(),
        tx,
    ));
    let mut got = vec![0u8; 1000];
    theirs.read_exact(&mut got).await.unwrap();
    let want: Vec<u8> = (0..100u8).flat_map(|i| [i; 10]).collect();
    assert_eq!(got, want);
    let mut writes = Vec::new();
    while writes.iter().sum::<u64>() < 1000 {
        match ev.recv().await.unwrap() {
            ConnEvent::Sent { conn: 7, bytes } => writes.push(bytes),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(writes, [1000], "one write for 100 queued messages");
    assert_eq!(q.queued(), 0);
}

#[tokio::test(flavor = "current_thread")]
async fn the_reader_forwards_what_one_read_holds_as_one_batch() {
    let (ours, mut theirs) = pair().await;
    let (rd, _wr) = ours.into_split();
    let (tx, mut ev) = mpsc::channel::<Ev>(16);
    let mut all = BytesMut::new();
    for i in 0..100u8 {
        all.extend_from_slice(&frame(&[i; 7]));
    }
    theirs.write_all(&all).await.unwrap();
    theirs.shutdown().await.unwrap();
    tokio::spawn(reader(
        3,
        rd,
        BytesMut::with_capacity(READ_BUF),
        Frames,
        Limiter::unlimited(),
        tx,
    ));
    let mut msgs = Vec::new();
    let mut batches = 0;
    loop {
        match ev.recv().await.unwrap() {
            ConnEvent::Messages {
                conn: 3, msgs: m, ..
            } => {
                batches += 1;
                msgs.extend(m);
            }
            ConnEvent::Closed { conn: 3 } => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(msgs.len(), 100);
    assert!(msgs.iter().enumerate().all(|(i, m)| m[..] == [i as u8; 7]));
    // 1,100 bytes written at once arrive in one read (two at worst).
    assert!((1..=2).contains(&batches), "{batches} batches");
}

#[tokio::test(flavor = "current_thread")]
async fn a_read_error_is_reported_after_the_messages_before_it() {
    let (ours, mut theirs) = pair().await;
    let (rd, _wr) = ours.into_split();
    let (tx, mut ev) = mpsc::channel::<Ev>(16);
    let mut all = BytesMut::new();
    all.extend_from_slice(&frame(b"ok"));
    all.put_u32(u32::MAX);
    theirs.write_all(&all).await.unwrap();
    tokio::spawn(reader(
        1,
        rd,
        BytesMut::new(),
        Frames,
        Limiter::unlimited(),
        tx,
    ));
    let mut seen = Vec::new();
    while let Some(e) = ev.recv().await {
        seen.push(e);
    }
    assert!(
        matches!(&seen[0], ConnEvent::Messages { msgs, .. } if msgs[..] == [Bytes::from_static(b"ok")])
    );
    assert!(
        matches!(
            &seen[1],
            ConnEvent::ReadError {
                error: ReadFailure::Decode(TooLong(n)),
                ..
            } if *n == u32::MAX as usize
        ),
        "{:?}",
        seen[1]
    );
    assert_eq!(seen.len(), 2);
}

/// An upload cap set while a connection is open (a daemon's speed limit
/// turned on over RPC) paces what it sends from then on: the writer looked
/// at its limiter once, at its start, and an uncapped connection stayed
/// uncapped for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_cap_set_on_an_open_connection_paces_it() {
    let (ours, mut theirs) = pair().await;
    let (_rd, wr) = ours.into_split();
    let (q, rx) = write_queue(8 << 20);
    let (tx, _ev) = mpsc::channel::<Ev>(4096);
    const BLOCK: usize = 200 * 1024;
    let own = bucket(0);
    let up = Limiter::unlimited().with(own.clone());
    tokio::spawn(writer::<Bytes, TooLong, Ev>(1, wr, rx, up, tx));
    // Running, uncapped.
    q.send(control(b"HELO")).unwrap();
    let mut first = [0u8; 4];
    theirs.read_exact(&mut first).await.unwrap();
    own.set_rate_live(1_000_000);
    let start = tokio::time::Instant::now();
    q.send(Outgoing {
        data: vec![Bytes::from(vec![0xAB; BLOCK])],
        payload: BLOCK as u64,
    })
    .unwrap();
    let mut rest = vec![0u8; BLOCK];
    theirs.read_exact(&mut rest).await.unwrap();
    let at = start.elapsed();
    // ~0.2 s at 1 MB/s; at once if the cap were ignored.
    assert!(at >= Duration::from_millis(120), "{at:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_goes_ahead_of_blocks_waiting_for_the_upload_cap() {
    let (ours, mut theirs) = pair().await;
    let (_rd, wr) = ours.into_split();
    let (q, rx) = write_queue(8 << 20);
    let (tx, _ev) = mpsc::channel::<Ev>(4096);
    const BLOCK: usize = 200 * 1024;
    let up = Limiter::new(vec![bucket(1_000_000)]);
    tokio::spawn(writer::<Bytes, TooLong, Ev>(1, wr, rx, up, tx));
    let start = tokio::time::Instant::now();
    q.send(Outgoing {
        data: vec![Bytes::from(vec![0xAB; BLOCK])],
        payload: BLOCK as u64,
    })
    .unwrap();
    q.send(control(b"CTRL")).unwrap();
    let mut first = [0u8; 4];
    theirs.read_exact(&mut first).await.unwrap();
    assert_eq!(
        &first, b"CTRL",
        "the control message waited behind the block"
    );
    let control_at = start.elapsed();
    let mut rest = vec![0u8; BLOCK];
    theirs.read_exact(&mut rest).await.unwrap();
    let block_at = start.elapsed();
    assert!(rest.iter().all(|&b| b == 0xAB));
    // The block run is paid before it starts: ~0.2 s at 1 MB/s (the
    // bucket may hold a little carry at first); the control message
    // did not wait for it.
    assert!(control_at < Duration::from_millis(100), "{control_at:?}");
    assert!(
        (Duration::from_millis(120)..Duration::from_millis(1500)).contains(&block_at),
        "{block_at:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_refuses_more_once_a_peer_that_does_not_read_is_past_the_bound() {
    let (ours, mut theirs) = pair().await;
    let (_rd, wr) = ours.into_split();
    const LIMIT: u64 = 1 << 20;
    let (q, rx) = write_queue(LIMIT);
    let (tx, mut ev) = mpsc::channel::<Ev>(1 << 16);
    tokio::spawn(writer::<Bytes, TooLong, Ev>(
        1,
        wr,
        rx,
        Limiter::unlimited(),
        tx,
    ));
    // The peer reads nothing: what the kernel buffers take, then the
    // bound, then refusals.
    let chunk = Bytes::from(vec![1u8; 64 * 1024]);
    let mut accepted = 0u64;
    let err = loop {
        match q.send(Outgoing {
            data: vec![chunk.clone()],
            payload: chunk.len() as u64,
        }) {
            Ok(()) => accepted += chunk.len() as u64,
            Err(e) => break e,
        }
        assert!(accepted < 256 << 20, "never refused");
        tokio::task::yield_now().await;
    };
    match err {
        QueueError::Full { queued, limit } => {
            assert_eq!(limit, LIMIT);
            assert!(
                queued <= LIMIT
                    && queued + chunk.len() as u64 + MESSAGE_OVERHEAD + CHUNK_OVERHEAD > LIMIT,
                "{queued}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(q.queued() <= LIMIT);
    // Kernel buffers on loopback hold a few MiB at most.
    assert!(accepted < 64 << 20, "{accepted}");
    // Once the peer reads, the queue drains and takes messages again.
    let mut got = vec![0u8; accepted as usize];
    theirs.read_exact(&mut got).await.unwrap();
    let mut written = 0;
    while written < accepted {
        if let Some(ConnEvent::Sent { bytes, .. }) = ev.recv().await {
            written += bytes;
        }
    }
    assert_eq!(q.queued(), 0);
    // A message larger than the bound goes when nothing is queued.
    q.send(Outgoing {
        data: vec![Bytes::from(vec![2u8; 2 << 20])],
        payload: 0,
    })
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_writer_refuses_with_closed() {
    let (ours, theirs) = pair().await;
    let (_rd, wr) = ours.into_split();
    drop(theirs);
    let (q, rx) = write_queue(1 << 20);
    let (tx, mut ev) = mpsc::channel::<Ev>(16);
    tokio::spawn(writer::<Bytes, TooLong, Ev>(
        1,
        wr,
        rx,
        Limiter::unlimited(),
        tx,
    ));
    // Writes to a reset connection fail; the writer reports Closed and ends.
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let _ = q.send(control(&[0; 4096]));
            tokio::select! {
                e = ev.recv() => if matches!(e, Some(ConnEvent::Closed { .. }) | None) { return; },
                _ = tokio::task::yield_now() => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "writer never noticed the reset");
    let r = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Err(QueueError::Closed) = q.send(control(b"x")) {
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(r.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reader_stops_reading_while_the_driver_is_behind() {
    let (ours, mut theirs) = pair().await;
    let (rd, _wr) = ours.into_split();
    // The driver takes nothing: one batch in the channel, then the
    // reader waits, and TCP stops the sender.
    let (tx, mut ev) = mpsc::channel::<Ev>(1);
    tokio::spawn(reader(
        1,
        rd,
        BytesMut::with_capacity(READ_BUF),
        Frames,
        Limiter::unlimited(),
        tx,
    ));
    let msg = frame(&vec![5u8; 60_000]);
    let total = 64u64 << 20;
    let (sent_tx, mut sent_rx) = tokio::sync::watch::channel(0u64);
    let writer = tokio::spawn(async move {
        let mut sent = 0u64;
        while sent < total {
            theirs.write_all(&msg).await.unwrap();
            sent += msg.len() as u64;
            let _ = sent_tx.send(sent);
        }
        theirs
    });
    // Writing stalls well short of 64 MiB while nothing is taken.
    let stalled = tokio::time::timeout(Duration::from_secs(2), async {
        sent_rx.wait_for(|&s| s >= total).await.is_ok()
    })
    .await;
    assert!(stalled.is_err(), "the sender was never slowed");
    let sent = *sent_rx.borrow();
    assert!(
        sent < 32 << 20,
        "{sent} bytes taken with the driver stopped"
    );
    // The driver catches up: everything arrives, in order.
    let mut msgs = 0u64;
    while msgs * msg_len() < total {
        match ev.recv().await {
            Some(ConnEvent::Messages { msgs: m, .. }) => {
                assert!(m.iter().all(|x| x.len() == 60_000 && x[0] == 5));
                msgs += m.len() as u64;
            }
            other => panic!("{other:?}"),
        }
    }
    writer.await.unwrap();
}

fn msg_len() -> u64 {
    60_004
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_writer_let_go_of_flushes_for_at_most_the_linger_time() {
    let (ours, _theirs) = pair().await;
    let (_rd, wr) = ours.into_split();
    let (q, rx) = write_queue(64 << 20);
    let (tx, mut ev) = mpsc::channel::<Ev>(1 << 16);
    // More than the kernel buffers hold; the peer never reads.
    for _ in 0..256 {
        q.send(Outgoing {
            data: vec![Bytes::from(vec![3u8; 64 * 1024])],
            payload: 0,
        })
        .unwrap();
    }
    let task = tokio::spawn(writer::<Bytes, TooLong, Ev>(
        1,
        wr,
        rx,
        Limiter::unlimited(),
        tx,
    ));
    tokio::task::yield_now().await;
    let start = tokio::time::Instant::now();
    drop(q);
    linger(task);
    // The writer's end drops its event sender: the channel closes.
    tokio::time::timeout(WRITE_LINGER * 2, async {
        while ev.recv().await.is_some() {}
    })
    .await
    .expect("the writer kept a peer that does not read");
    let took = start.elapsed();
    assert!(
        took >= WRITE_LINGER && took < WRITE_LINGER + Duration::from_secs(1),
        "{took:?}"
    );
}

/// Not TCP: both tasks over the halves of an in-memory stream split with
/// `tokio::io::split`, as an encrypted or uTP stream would be. A leftover
/// from before (a handshake's tail) is decoded first; what the writer
/// sends comes out the other end, each write reported.
#[tokio::test(flavor = "current_thread")]
async fn both_tasks_run_over_any_split_stream() {
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    let (rd, wr) = tokio::io::split(ours);
    let (mut their_rd, mut their_wr) = tokio::io::split(theirs);
    let (tx, mut ev) = mpsc::channel::<Ev>(64);
    let mut leftover = BytesMut::new();
    leftover.extend_from_slice(&frame(b"before"));
    tokio::spawn(reader(
        5,
        rd,
        leftover,
        Frames,
        Limiter::unlimited(),
        tx.clone(),
    ));
    let (q, wrx) = write_queue(1 << 20);
    tokio::spawn(writer::<Bytes, TooLong, Ev>(
        5,
        wr,
        wrx,
        Limiter::unlimited(),
        tx,
    ));
    q.send(Outgoing {
        data: vec![frame(b"to them"), frame(b"and more")],
        payload: 0,
    })
    .unwrap();
    let mut out = frame(b"to them").to_vec();
    out.extend_from_slice(&frame(b"and more"));
    let mut got = vec![0u8; out.len()];
    their_rd.read_exact(&mut got).await.unwrap();
    assert_eq!(got, out);
    their_wr.write_all(&frame(b"after")).await.unwrap();
    their_wr.shutdown().await.unwrap();
    let (mut msgs, mut sent, mut closed) = (Vec::new(), 0u64, false);
    while !closed || sent < out.len() as u64 {
        let e = tokio::time::timeout(Duration::from_secs(5), ev.recv()).await;
        match e.expect("an event").unwrap() {
            ConnEvent::Messages {
                conn: 5, msgs: m, ..
            } => msgs.extend(m),
            ConnEvent::Sent { conn: 5, bytes } => sent += bytes,
            ConnEvent::Closed { conn: 5 } => closed = true,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        msgs,
        vec![Bytes::from_static(b"before"), Bytes::from_static(b"after")]
    );
    assert_eq!(sent, out.len() as u64);
    assert_eq!(q.queued(), 0);
}

#[tokio::test(flavor = "current_thread")]
async fn a_flooding_peer_has_at_most_its_batches_in_flight() {
    // 64k tiny frames: 64 full batches, while the driver's channel has
    // room for all of them. Only BATCHES_IN_FLIGHT are forwarded until the
    // driver lets go of one.
    let (ours, mut theirs) = pair().await;
    let (rd, _wr) = ours.into_split();
    let (tx, mut ev) = mpsc::channel::<Ev>(1 << 10);
    let mut all = BytesMut::new();
    for _ in 0..MAX_BATCH * 64 {
        all.extend_from_slice(&frame(b"x"));
    }
    let flood = tokio::spawn(async move {
        theirs.write_all(&all).await.unwrap();
        theirs
    });
    tokio::spawn(reader(
        4,
        rd,
        BytesMut::with_capacity(READ_BUF),
        Frames,
        Limiter::unlimited(),
        tx,
    ));
    let mut held = Vec::new();
    while held.len() < BATCHES_IN_FLIGHT {
        held.push(ev.recv().await.unwrap());
    }
    // Nothing more while all credits are held (the reader has plenty read).
    let more = tokio::time::timeout(Duration::from_millis(300), ev.recv()).await;
    assert!(more.is_err(), "a batch past the credits: {more:?}");
    assert!(
        held.iter()
            .all(|e| matches!(e, ConnEvent::Messages { msgs, .. } if msgs.len() <= MAX_BATCH))
    );
    let count = |e: &Ev| match e {
        ConnEvent::Messages { msgs, .. } => msgs.len(),
        other => panic!("{other:?}"),
    };
    let mut total: usize = held.iter().map(count).sum();
    // Letting go of one lets exactly one more through.
    held.pop();
    let next = ev.recv().await.unwrap();
    assert!(matches!(next, ConnEvent::Messages { conn: 4, .. }));
    total += count(&next);
    let more = tokio::time::timeout(Duration::from_millis(300), ev.recv()).await;
    assert!(more.is_err(), "two batches for one credit");
    // Handled as they come: the whole flood arrives.
    drop(held);
    drop(next);
    while total < MAX_BATCH * 64 {
        let e = ev.recv().await.unwrap();
        total += count(&e);
    }
    assert_eq!(total, MAX_BATCH * 64);
    drop(flood);
}
