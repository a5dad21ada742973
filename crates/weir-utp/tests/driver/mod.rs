//! A test-only tokio driver for an [`Endpoint`] on one UDP socket, and a
//! minimal BitTorrent peer (handshake, bitfield, request loop; seeding
//! side too) on a uTP connection. Not the runtime integration (that lives
//! in weir-runtime): just enough to prove the wire format against real
//! programs.

#![allow(dead_code, unreachable_pub)]

use std::collections::VecDeque;
use std::io;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::net::UdpSocket;
use weir_utp::{CloseReason, ConnHandle, Endpoint, Event, StreamError};

/// What the driver calls back.
pub trait App {
    /// An endpoint event.
    fn on_event(&mut self, ep: &mut Endpoint, ev: Event, now: Instant);
    /// Whether the test is over.
    fn done(&mut self) -> bool;
}

/// Runs `ep` on `sock` until `app` is done or `limit` passes.
pub async fn run<A: App>(
    sock: &UdpSocket,
    ep: &mut Endpoint,
    app: &mut A,
    limit: Duration,
) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut buf = vec![0u8; 65_536];
    loop {
        let now = Instant::now();
        ep.handle_timeout(now);
        loop {
            let mut any = false;
            while let Some(ev) = ep.poll_event() {
                app.on_event(ep, ev, now);
                any = true;
            }
            while let Some(t) = ep.poll_transmit(now) {
                sock.send_to(&t.data, t.dst).await.context("send_to")?;
                any = true;
            }
            if !any {
                break;
            }
        }
        if app.done() {
            return Ok(());
        }
        if start.elapsed() > limit {
            bail!("driver: not done after {limit:?}");
        }
        let cap = now + Duration::from_millis(50);
        let wake = ep.poll_timeout().map_or(cap, |t| t.min(cap));
        tokio::select! {
            r = sock.recv_from(&mut buf) => {
                let (n, from) = r.context("recv_from")?;
                let _ = ep.handle_datagram(from, &buf[..n], Instant::now());
                loop {
                    match sock.try_recv_from(&mut buf) {
                        Ok((n, from)) => {
                            let _ = ep.handle_datagram(from, &buf[..n], Instant::now());
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e).context("try_recv_from"),
                    }
                }
            }
            _ = tokio::time::sleep_until(wake.into()) => {}
        }
    }
}

/// A BitTorrent handshake (no extensions).
pub fn handshake(info_hash: &[u8; 20], peer_id: &[u8; 20]) -> Vec<u8> {
    let mut v = Vec::with_capacity(68);
    v.push(19);
    v.extend_from_slice(b"BitTorrent protocol");
    v.extend_from_slice(&[0u8; 8]);
    v.extend_from_slice(info_hash);
    v.extend_from_slice(peer_id);
    v
}

fn msg(id: u8, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(5 + body.len());
    v.extend_from_slice(&(1 + body.len() as u32).to_be_bytes());
    v.push(id);
    v.extend_from_slice(body);
    v
}

/// A byte stream on one connection with an output queue (writes take
/// only what fits; the rest goes out on Writable).
#[derive(Default)]
pub struct Stream {
    pub conn: Option<ConnHandle>,
    inbuf: Vec<u8>,
    out: VecDeque<u8>,
    pub eof: bool,
    pub closed: Option<CloseReason>,
}

impl Stream {
    pub fn send(&mut self, ep: &mut Endpoint, data: &[u8], now: Instant) {
        self.out.extend(data);
        self.flush(ep, now);
    }

    pub fn flush(&mut self, ep: &mut Endpoint, now: Instant) {
        let Some(h) = self.conn else { return };
        while !self.out.is_empty() {
            let (a, _) = self.out.as_slices();
            match ep.write(h, a, now) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    self.out.drain(..n);
                }
            }
        }
    }

    /// Reads what is ready into the input buffer.
    pub fn fill(&mut self, ep: &mut Endpoint, now: Instant) {
        let Some(h) = self.conn else { return };
        let mut buf = [0u8; 65_536];
        loop {
            match ep.read(h, &mut buf, now) {
                Ok(0) => {
                    self.eof = true;
                    return;
                }
                Ok(n) => self.inbuf.extend_from_slice(&buf[..n]),
                Err(StreamError::WouldBlock) | Err(_) => return,
            }
        }
    }

    /// Takes `n` bytes off the input if there are that many.
    pub fn take(&mut self, n: usize) -> Option<Vec<u8>> {
        (self.inbuf.len() >= n).then(|| self.inbuf.drain(..n).collect())
    }

    /// The next length-prefixed message (id, body), keep-alives skipped.
    pub fn next_msg(&mut self) -> Option<(u8, Vec<u8>)> {
        loop {
            if self.inbuf.len() < 4 {
                return None;
            }
            let len = u32::from_be_bytes(self.inbuf[..4].try_into().ok()?) as usize;
            if self.inbuf.len() < 4 + len {
                return None;
            }
            let m: Vec<u8> = self.inbuf.drain(..4 + len).collect();
            if len == 0 {
                continue;
            }
            return Some((m[4], m[5..].to_vec()));
        }
    }
}

/// Downloads a whole torrent from one peer over uTP.
pub struct Leech {
    pub info_hash: [u8; 20],
    pub piece_len: u64,
    pub total: u64,
    pub peer: std::net::SocketAddr,
    pub s: Stream,
    pub their_handshake: Option<Vec<u8>>,
    pub bitfield: Option<Vec<u8>>,
    pub unchoked: bool,
    next: u64,
    outstanding: usize,
    pub data: Vec<u8>,
    pub received: u64,
    pub error: Option<String>,
}

const BLOCK: u64 = 16 * 1024;

impl Leech {
    pub fn new(
        info_hash: [u8; 20],
        piece_len: u64,
        total: u64,
        peer: std::net::SocketAddr,
    ) -> Leech {
        Leech {
            info_hash,
            piece_len,
            total,
            peer,
            s: Stream::default(),
            their_handshake: None,
            bitfield: None,
            unchoked: false,
            next: 0,
            outstanding: 0,
            data: vec![0; total as usize],
            received: 0,
            error: None,
        }
    }

    pub fn start(&mut self, ep: &mut Endpoint, now: Instant) -> anyhow::Result<()> {
        let h = ep.connect(self.peer, now)?;
        self.s.conn = Some(h);
        // Queued before the connection is up: sent once it is.
        let mut hello = handshake(&self.info_hash, b"-WU0001-weirutptest1");
        hello.extend_from_slice(&msg(2, &[])); // interested
        self.s.send(ep, &hello, now);
        Ok(())
    }

    fn request_more(&mut self, ep: &mut Endpoint, now: Instant) {
        while self.unchoked && self.outstanding < 64 && self.next < self.total {
            let piece = self.next / self.piece_len;
            let begin = self.next % self.piece_len;
            let piece_end = ((piece + 1) * self.piece_len).min(self.total);
            let len = BLOCK.min(piece_end - self.next);
            let mut body = Vec::with_capacity(12);
            body.extend_from_slice(&(piece as u32).to_be_bytes());
            body.extend_from_slice(&(begin as u32).to_be_bytes());
            body.extend_from_slice(&(len as u32).to_be_bytes());
            self.s.send(ep, &msg(6, &body), now);
            self.next += len;
            self.outstanding += 1;
        }
    }

    fn process(&mut self, ep: &mut Endpoint, now: Instant) {
        if self.their_handshake.is_none() {
            let Some(hs) = self.s.take(68) else { return };
            if hs[28..48] != self.info_hash {
                self.error = Some("handshake for another info-hash".into());
            }
            self.their_handshake = Some(hs);
        }
        while let Some((id, body)) = self.s.next_msg() {
            match id {
                1 => {
                    self.unchoked = true;
                    self.request_more(ep, now);
                }
                0 => self.unchoked = false,
                5 => self.bitfield = Some(body),
                7 if body.len() >= 8 => {
                    let piece = u32::from_be_bytes(body[..4].try_into().unwrap()) as u64;
                    let begin = u32::from_be_bytes(body[4..8].try_into().unwrap()) as u64;
                    let off = (piece * self.piece_len + begin) as usize;
                    let block = &body[8..];
                    match self.data.get_mut(off..off + block.len()) {
                        Some(d) => d.copy_from_slice(block),
                        None => self.error = Some(format!("block out of range at {off}")),
                    }
                    self.received += block.len() as u64;
                    self.outstanding = self.outstanding.saturating_sub(1);
                    self.request_more(ep, now);
                }
                _ => {}
            }
        }
    }
}

impl App for Leech {
    fn on_event(&mut self, ep: &mut Endpoint, ev: Event, now: Instant) {
        match ev {
            Event::Connected(_) | Event::Writable(_) => self.s.flush(ep, now),
            Event::Readable(_) => {
                self.s.fill(ep, now);
                self.process(ep, now);
            }
            Event::Closed { reason, .. } => self.s.closed = Some(reason),
            _ => {}
        }
    }

    fn done(&mut self) -> bool {
        self.received >= self.total || self.s.closed.is_some() || self.error.is_some()
    }
}

/// Serves a whole torrent to the peers that connect (all pieces, never
/// choked), until `until` says stop.
pub struct Seed<F: FnMut() -> bool> {
    pub info_hash: [u8; 20],
    pub piece_len: u64,
    pub data: Vec<u8>,
    pub s: Stream,
    pub their_handshake: Option<Vec<u8>>,
    pub served: u64,
    pub error: Option<String>,
    pub until: F,
}

impl<F: FnMut() -> bool> Seed<F> {
    fn process(&mut self, ep: &mut Endpoint, now: Instant) {
        if self.their_handshake.is_none() {
            let Some(hs) = self.s.take(68) else { return };
            if hs[..20] != *b"\x13BitTorrent protocol" || hs[28..48] != self.info_hash {
                self.error = Some(format!("bad handshake {:02x?}", &hs[..48]));
                return;
            }
            self.their_handshake = Some(hs);
            let pieces = (self.data.len() as u64).div_ceil(self.piece_len) as usize;
            let mut bits = vec![0u8; pieces.div_ceil(8)];
            for i in 0..pieces {
                bits[i / 8] |= 0x80 >> (i % 8);
            }
            let mut out = handshake(&self.info_hash, b"-WU0001-weirutpseed1");
            out.extend_from_slice(&msg(5, &bits));
            out.extend_from_slice(&msg(1, &[])); // unchoke
            self.s.send(ep, &out, now);
        }
        while let Some((id, body)) = self.s.next_msg() {
            if id == 6 && body.len() == 12 {
                let piece = u32::from_be_bytes(body[..4].try_into().unwrap()) as u64;
                let begin = u32::from_be_bytes(body[4..8].try_into().unwrap()) as u64;
                let len = u32::from_be_bytes(body[8..12].try_into().unwrap()) as usize;
                let off = (piece * self.piece_len + begin) as usize;
                let Some(block) = self.data.get(off..off + len) else {
                    self.error = Some(format!("request out of range {off}+{len}"));
                    return;
                };
                let mut m = Vec::with_capacity(13 + len);
                m.extend_from_slice(&(9 + len as u32).to_be_bytes());
                m.push(7);
                m.extend_from_slice(&body[..8]);
                m.extend_from_slice(block);
                self.s.send(ep, &m, now);
                self.served += len as u64;
            }
        }
    }
}

impl<F: FnMut() -> bool> App for Seed<F> {
    fn on_event(&mut self, ep: &mut Endpoint, ev: Event, now: Instant) {
        match ev {
            Event::Incoming(h) if self.s.conn.is_none() => self.s.conn = Some(h),
            Event::Writable(_) => self.s.flush(ep, now),
            Event::Readable(_) => {
                self.s.fill(ep, now);
                self.process(ep, now);
            }
            Event::Closed { reason, .. } => self.s.closed = Some(reason),
            _ => {}
        }
    }

    fn done(&mut self) -> bool {
        self.error.is_some() || (self.until)()
    }
}
