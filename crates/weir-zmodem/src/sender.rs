//! The sending side (`sz`): ZRQINIT, ZRINIT handling, ZSINIT when needed,
//! ZFILE, ZDATA streaming, ZEOF, ZFIN and "OO"; ZRPOS restarts from any
//! position, ZSKIP, batches, resume and windowed or segmented modes.
//!
//! # Driving it
//!
//! The caller owns the line and the files. In a loop:
//! 1. feed whatever the line delivered to [`Sender::handle_input`];
//! 2. drain [`Sender::poll_event`];
//! 3. while [`Sender::poll_data_request`] asks for file data, read it (one
//!    large read) and hand it over with [`Sender::supply_data`]; the sender
//!    escapes and frames it into its output buffer at once;
//! 4. write [`Sender::pending_output`] to the line and report what was
//!    written with [`Sender::consume_output`];
//! 5. when there is nothing to do, wait for input until
//!    [`Sender::poll_timeout`] and then call [`Sender::handle_timeout`].
//!
//! The sender asks for data only while less than `low_water` bytes of
//! output are pending and, in windowed mode, while the window has room, so
//! the bytes in flight stay bounded: a line error costs a bounded ZRPOS
//! retransmission. What the kernel buffers below that is the driver's to
//! bound (socket send buffer, pipe size).

use std::collections::VecDeque;
use std::time::Instant;

use bytes::BytesMut;

use crate::consts::{BS, CAN, MAX_FILE_SIZE, TESCCTL, frame, zconv, zmanag, zrinit};
use crate::crc::CrcKind;
use crate::decode::{Decoder, Item};
use crate::escape::Escaper;
use crate::fileinfo::FileInfo;
use crate::frame::{FrameEnd, Header, HeaderFormat, encode_header, encode_subpacket};

mod types;

pub use types::{DataRequest, FileOffer, SendError, SendEvent, SenderConfig};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    WaitZrinit,
    WaitSinitAck,
    WaitFilePos,
    Data,
    WaitAck,
    WaitWindow,
    WaitEofAck,
    WaitFin,
    Done,
    Failed,
}

impl State {
    fn what(self) -> &'static str {
        match self {
            State::WaitZrinit => "ZRQINIT",
            State::WaitSinitAck => "ZSINIT",
            State::WaitFilePos => "ZFILE",
            State::WaitAck | State::WaitWindow | State::Data => "ZDATA",
            State::WaitEofAck => "ZEOF",
            State::WaitFin => "ZFIN",
            State::Done | State::Failed => "nothing",
        }
    }
}

/// The ZMODEM sender. See the module docs for the driving loop.
pub struct Sender {
    cfg: SenderConfig,
    files: Vec<FileOffer>,
    state: State,
    dec: Decoder,
    scratch: BytesMut,
    esc: Escaper,
    out: Vec<u8>,
    sent: usize,
    events: VecDeque<SendEvent>,
    deadline: Option<Instant>,
    tries: u32,
    zrqinits: u32,
    crc: CrcKind,
    block: usize,
    window: Option<u64>,
    segment: Option<u64>,
    file: usize,
    size: u64,
    pos: u64,
    acked: u64,
    since_q: u64,
    since_seg: u64,
    frame_open: bool,
    sync_once: bool,
    block_start: u64,
    wait_target: u64,
    last_sync: Option<u64>,
    same_sync: u32,
    /// The current WaitAck is for the block sent after a restart.
    syncing: bool,
    /// Highest position the receiver acknowledged in this file.
    max_acked: u64,
    /// The window is the streaming bound, not an explicit `-w`.
    stream_acks: bool,
    stale_zrpos: u64,
    restarts: u64,
}

impl Sender {
    /// Starts a session that sends `files` in order: queues `rz\r` and
    /// ZRQINIT. Fails if a file is over the 4 GiB limit.
    pub fn new(cfg: SenderConfig, files: Vec<FileOffer>, now: Instant) -> Result<Self, SendError> {
        for f in &files {
            if f.size > MAX_FILE_SIZE {
                return Err(SendError::FileTooLarge {
                    name: String::from_utf8_lossy(&f.name).into_owned(),
                    size: f.size,
                });
            }
        }
        let block = cfg.block_size.clamp(32, 64 * 1024);
        let mut s = Sender {
            dec: Decoder::new(false, 64 * 1024),
            scratch: BytesMut::new(),
            esc: Escaper::new(cfg.escape_ctl),
            cfg,
            files,
            state: State::WaitZrinit,
            out: Vec::with_capacity(512 * 1024),
            sent: 0,
            events: VecDeque::new(),
            deadline: None,
            tries: 0,
            zrqinits: 0,
            crc: CrcKind::Crc16,
            block,
            window: None,
            segment: None,
            file: 0,
            size: 0,
            pos: 0,
            acked: 0,
            since_q: 0,
            since_seg: 0,
            frame_open: false,
            sync_once: false,
            block_start: 0,
            wait_target: 0,
            last_sync: None,
            same_sync: 0,
            syncing: false,
            max_acked: 0,
            stream_acks: false,
            stale_zrpos: 0,
            restarts: 0,
        };
        s.esc.raw(b"rz\r", &mut s.out);
        s.send_zrqinit(now);
        Ok(s)
    }

    // ---- inputs -------------------------------------------------------

    /// Feeds bytes received from the line.
    pub fn handle_input(&mut self, now: Instant, mut input: &[u8]) -> Result<(), SendError> {
        while !input.is_empty() && !self.is_done() {
            let (used, item) = self.dec.decode(input, &mut self.scratch);
            input = &input[used..];
            self.scratch.clear();
            match item {
                None => {}
                Some(Item::Header(h, _)) => self.on_header(now, h)?,
                Some(Item::Cancel) => return self.fail_quiet(SendError::Cancelled),
                Some(Item::Subpacket { .. }) => {}
                Some(Item::Error(_)) => {
                    if matches!(self.state, State::WaitZrinit | State::WaitFilePos) {
                        // A garbled answer: say so, the receiver resends.
                        self.send_hex(Header::with_pos(frame::ZNAK, 0));
                    }
                }
            }
        }
        Ok(())
    }

    /// Acts on an expired timer (resend, restart, or give up).
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), SendError> {
        match self.deadline {
            Some(d) if now >= d => {}
            _ => return Ok(()),
        }
        self.tries += 1;
        let state = self.state;
        if self.tries > self.cfg.retries && state != State::WaitFin {
            return self.fail(SendError::Timeout(state.what(), self.tries - 1));
        }
        match state {
            State::WaitZrinit => {
                if self.zrqinits < 4 {
                    self.send_zrqinit(now);
                } else {
                    self.arm(now);
                }
            }
            State::WaitSinitAck => self.send_zsinit(now),
            State::WaitFilePos => self.send_zfile(now),
            State::WaitAck => {
                let at = self.block_start;
                self.restart(now, at)?;
            }
            State::WaitWindow => {
                let at = self.acked;
                self.restart(now, at)?;
            }
            State::WaitEofAck => self.send_zeof(now),
            State::WaitFin => {
                if self.tries > 3 {
                    self.finish();
                } else {
                    self.send_zfin(now);
                }
            }
            State::Data | State::Done | State::Failed => self.deadline = None,
        }
        Ok(())
    }

    /// File data asked for by [`Sender::poll_data_request`]. Data for a
    /// position the sender no longer wants (after a restart) is ignored. An
    /// empty `data` before the announced size is an error.
    pub fn supply_data(
        &mut self,
        now: Instant,
        file: usize,
        offset: u64,
        data: &[u8],
    ) -> Result<(), SendError> {
        if self.state != State::Data || file != self.file || offset != self.pos {
            return Ok(());
        }
        if data.is_empty() {
            return self.fail(SendError::FileShrank {
                file,
                at: offset,
                size: self.size,
            });
        }
        self.compact();
        let take = data.len().min((self.size - self.pos) as usize);
        let mut rest = &data[..take];
        if !self.frame_open {
            self.send_bin(Header::with_pos(frame::ZDATA, self.pos as u32));
            self.frame_open = true;
        }
        while !rest.is_empty() {
            let n = self.block.min(rest.len());
            let end_pos = self.pos + n as u64;
            let end = if end_pos == self.size {
                FrameEnd::Crce
            } else if self.sync_once || self.segment.is_some_and(|s| self.since_seg + n as u64 >= s)
            {
                FrameEnd::Crcw
            } else if self
                .window
                .is_some_and(|w| self.since_q + n as u64 >= (w / 4).max(1))
            {
                FrameEnd::Crcq
            } else {
                FrameEnd::Crcg
            };
            encode_subpacket(&rest[..n], end, self.crc, &mut self.esc, &mut self.out);
            rest = &rest[n..];
            self.pos = end_pos;
            self.since_q += n as u64;
            self.since_seg += n as u64;
            match end {
                FrameEnd::Crce => {
                    self.frame_open = false;
                    self.tries = 0;
                    self.send_zeof(now);
                    return Ok(());
                }
                FrameEnd::Crcw => {
                    self.frame_open = false;
                    self.syncing = self.sync_once;
                    self.sync_once = false;
                    self.since_seg = 0;
                    self.since_q = 0;
                    self.block_start = end_pos - n as u64;
                    self.wait_target = end_pos;
                    self.state = State::WaitAck;
                    self.tries = 0;
                    self.arm(now);
                    return Ok(());
                }
                FrameEnd::Crcq => self.since_q = 0,
                FrameEnd::Crcg => {}
            }
            if let Some(w) = self.window {
                if self.pos - self.acked >= w {
                    if end != FrameEnd::Crcq {
                        encode_subpacket(
                            &[],
                            FrameEnd::Crcq,
                            self.crc,
                            &mut self.esc,
                            &mut self.out,
                        );
                        self.since_q = 0;
                    }
                    self.state = State::WaitWindow;
                    self.tries = 0;
                    self.arm(now);
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Reports that the first `n` bytes of [`Sender::pending_output`] were
    /// written to the line.
    pub fn consume_output(&mut self, n: usize) {
        self.sent = (self.sent + n).min(self.out.len());
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
        }
    }

    // ---- outputs ------------------------------------------------------

    /// Cancels the session from this side (CAN*10 and backspaces, as
    /// lrzsz does when interrupted): the receiver stops and keeps what it
    /// checked. Nothing more is framed.
    pub fn cancel(&mut self) {
        if !self.is_done() {
            let _ = self.fail(SendError::Cancelled);
        }
    }

    /// Bytes waiting to be written to the line.
    pub fn pending_output(&self) -> &[u8] {
        &self.out[self.sent..]
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<SendEvent> {
        self.events.pop_front()
    }

    /// File data the sender can frame now, if any.
    pub fn poll_data_request(&self) -> Option<DataRequest> {
        if self.state != State::Data || self.pending_output().len() >= self.cfg.low_water {
            return None;
        }
        let mut len = (self.size - self.pos).min(self.cfg.chunk as u64);
        if let Some(w) = self.window {
            len = len.min(w.saturating_sub(self.pos - self.acked));
        }
        if let Some(s) = self.segment {
            len = len.min(s.saturating_sub(self.since_seg));
        }
        if len == 0 {
            return None;
        }
        Some(DataRequest {
            file: self.file,
            offset: self.pos,
            len: len as usize,
        })
    }

    /// When [`Sender::handle_timeout`] should be called next, if at all.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the session is over (finished or failed).
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done | State::Failed)
    }

    /// Whether the session finished cleanly.
    pub fn is_finished(&self) -> bool {
        self.state == State::Done
    }

    /// The file being sent, how far it is framed, and its size.
    pub fn position(&self) -> (usize, u64, u64) {
        (self.file, self.pos, self.size)
    }

    /// Restarts (ZRPOS retransmissions) so far.
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// Repeated or outdated ZRPOS frames that were ignored.
    pub fn stale_zrpos(&self) -> u64 {
        self.stale_zrpos
    }

    /// Whether data streams (no explicit window, no segments; acknowledgements
    /// may still be asked for to bound what is in flight). Known once the
    /// receiver's ZRINIT arrived.
    pub fn streaming(&self) -> bool {
        (self.window.is_none() || self.stream_acks) && self.segment.is_none()
    }

    /// The most bytes kept unacknowledged (streaming bound or window), if
    /// bounded. Known once the receiver's ZRINIT arrived.
    pub fn in_flight_bound(&self) -> Option<u64> {
        self.window
    }

    /// Whether acknowledgements flow during data (windowed, segmented, or
    /// streaming with a bound): the driver turns Nagle off then.
    pub fn wants_acks(&self) -> bool {
        self.window.is_some() || self.segment.is_some()
    }

    /// The subpacket size in use.
    pub fn block_size(&self) -> usize {
        self.block
    }

    // ---- protocol -----------------------------------------------------

    fn on_header(&mut self, now: Instant, h: Header) -> Result<(), SendError> {
        self.dec.reset_garbage();
        match h.frame_type {
            frame::ZCAN => return self.fail_quiet(SendError::Cancelled),
            frame::ZABORT | frame::ZFERR => return self.fail(SendError::Aborted(h.name())),
            frame::ZRQINIT => return self.fail(SendError::BothSenders),
            frame::ZCHALLENGE => {
                self.send_hex(Header::with_pos(frame::ZACK, h.pos()));
                return Ok(());
            }
            _ => {}
        }
        match self.state {
            State::WaitZrinit => match h.frame_type {
                frame::ZRINIT => self.on_zrinit(now, h),
                _ => Ok(()),
            },
            State::WaitSinitAck => match h.frame_type {
                frame::ZACK => {
                    self.start_file(now, 0);
                    Ok(())
                }
                frame::ZNAK => {
                    self.send_zsinit(now);
                    Ok(())
                }
                _ => Ok(()),
            },
            State::WaitFilePos => match h.frame_type {
                frame::ZRPOS => {
                    let p = u64::from(h.pos());
                    if p > self.size {
                        return self.fail(SendError::BadPosition {
                            pos: p,
                            size: self.size,
                        });
                    }
                    self.pos = p;
                    self.acked = p;
                    self.last_sync = None;
                    self.sync_once = false;
                    self.events.push_back(SendEvent::FileStarted {
                        file: self.file,
                        offset: p,
                    });
                    self.enter_data(now);
                    Ok(())
                }
                frame::ZSKIP => {
                    self.skip(now);
                    Ok(())
                }
                frame::ZNAK => {
                    self.send_zfile(now);
                    Ok(())
                }
                frame::ZFIN => self.fail(SendError::Aborted("ZFIN")),
                // A second ZRINIT (rz sends one at start and one for our
                // ZRQINIT) is absorbed; a lost ZFILE is resent on timeout.
                _ => Ok(()),
            },
            State::Data | State::WaitAck | State::WaitWindow => match h.frame_type {
                frame::ZRPOS => self.on_zrpos(now, u64::from(h.pos())),
                frame::ZACK => {
                    self.on_ack(now, u64::from(h.pos()));
                    Ok(())
                }
                frame::ZSKIP => {
                    self.skip(now);
                    Ok(())
                }
                frame::ZFIN => self.fail(SendError::Aborted("ZFIN")),
                _ => Ok(()),
            },
            State::WaitEofAck => match h.frame_type {
                frame::ZRINIT => {
                    self.events.push_back(SendEvent::FileDone {
                        file: self.file,
                        size: self.size,
                    });
                    self.start_file(now, self.file + 1);
                    Ok(())
                }
                frame::ZRPOS => self.on_zrpos(now, u64::from(h.pos())),
                frame::ZSKIP => {
                    self.skip(now);
                    Ok(())
                }
                frame::ZFIN => self.fail(SendError::Aborted("ZFIN")),
                _ => Ok(()),
            },
            State::WaitFin => {
                match h.frame_type {
                    frame::ZFIN => {
                        self.esc.raw(b"OO", &mut self.out);
                        self.finish();
                    }
                    frame::ZRINIT => self.send_zfin(now),
                    _ => {}
                }
                Ok(())
            }
            State::Done | State::Failed => Ok(()),
        }
    }

    fn on_zrinit(&mut self, now: Instant, h: Header) -> Result<(), SendError> {
        let flags = h.zf0();
        let buffer = u16::from_le_bytes([h.data[0], h.data[1]]);
        self.events.push_back(SendEvent::ReceiverReady {
            flags,
            flags1: h.zf1(),
            buffer,
        });
        self.crc = if self.cfg.crc32 && flags & zrinit::CANFC32 != 0 {
            CrcKind::Crc32
        } else {
            CrcKind::Crc16
        };
        if flags & zrinit::ESCCTL != 0 {
            self.esc.set_escape_ctl(true);
            self.dec.set_escape_ctl(true);
        }
        self.window = self.cfg.window.map(u64::from);
        self.segment = self.cfg.segment.map(u64::from);
        if buffer > 0 {
            self.block = self.block.min(usize::from(buffer));
            self.segment = Some(
                self.segment
                    .map_or(u64::from(buffer), |s| s.min(u64::from(buffer))),
            );
        }
        if flags & zrinit::CANFDX == 0 || flags & zrinit::CANOVIO == 0 {
            // No full duplex or no overlapped I/O: stop and wait per block.
            self.window = None;
            self.segment = Some(self.block as u64);
        }
        if let Some(w) = self.window {
            let w = w.max(256);
            self.window = Some(w);
            self.block = self.block.min((w / 4) as usize).max(32);
        } else if self.segment.is_none() {
            // Streaming: acknowledgements without stopping, bounded in flight.
            let bound = if h.zf1() & crate::consts::zrinit1::STALE_OK != 0 {
                self.cfg.stream_window_stale_ok
            } else {
                self.cfg.stream_window
            };
            self.window = bound.map(|w| u64::from(w.max(4 * self.block as u32)));
            self.stream_acks = self.window.is_some();
        }
        if let Some(s) = self.segment {
            self.block = self.block.min(s as usize).max(32);
            self.segment = Some(s.max(self.block as u64));
        }
        self.tries = 0;
        if self.cfg.escape_ctl && flags & zrinit::ESCCTL == 0 {
            self.send_zsinit(now);
        } else {
            self.start_file(now, 0);
        }
        Ok(())
    }

    /// A ZRPOS during data. A receiver that hunts through stale data after
    /// an error repeats its ZRPOS (lrzsz `rz`: once per ~40 KB of garbage);
    /// repeats are not new errors: the restart frame for that position is
    /// already on its way (a lost one is resent on timeout), and a position
    /// below one the receiver acknowledged since is history.
    fn on_zrpos(&mut self, now: Instant, p: u64) -> Result<(), SendError> {
        let resyncing = match self.state {
            // The restart block is out; its ZACK is awaited.
            State::WaitAck => self.syncing,
            // The restart is decided, its block not framed yet (several
            // ZRPOS can arrive in one read).
            State::Data => self.sync_once,
            _ => false,
        };
        let restarting = resyncing && self.last_sync == Some(p);
        if restarting || p < self.max_acked {
            self.stale_zrpos += 1;
            return Ok(());
        }
        self.restart(now, p)
    }

    fn on_ack(&mut self, now: Instant, p: u64) {
        if p > self.acked && p <= self.pos {
            self.acked = p;
        }
        if p <= self.pos {
            self.max_acked = self.max_acked.max(p);
        }
        match self.state {
            State::WaitAck if p == self.wait_target => {
                self.state = State::Data;
                self.deadline = None;
                self.tries = 0;
            }
            State::WaitWindow => {
                if let Some(w) = self.window {
                    if self.pos - self.acked < w {
                        self.state = State::Data;
                        self.deadline = None;
                        self.tries = 0;
                    } else {
                        self.arm(now);
                    }
                }
            }
            _ => {}
        }
    }

    fn start_file(&mut self, now: Instant, index: usize) {
        self.file = index;
        self.tries = 0;
        if index >= self.files.len() {
            self.send_zfin(now);
            return;
        }
        self.size = self.files[index].size;
        self.pos = 0;
        self.acked = 0;
        self.restarts_reset();
        self.send_zfile(now);
    }

    fn restarts_reset(&mut self) {
        self.last_sync = None;
        self.same_sync = 0;
        self.syncing = false;
        self.max_acked = 0;
    }

    fn skip(&mut self, now: Instant) {
        self.drop_pending();
        self.frame_open = false;
        self.events
            .push_back(SendEvent::FileSkipped { file: self.file });
        self.start_file(now, self.file + 1);
    }

    /// Resends from `p` after a ZRPOS (or a lost acknowledgement).
    fn restart(&mut self, now: Instant, p: u64) -> Result<(), SendError> {
        if p > self.size {
            return self.fail(SendError::BadPosition {
                pos: p,
                size: self.size,
            });
        }
        self.drop_pending();
        if self.last_sync == Some(p) {
            self.same_sync += 1;
            if self.same_sync > self.cfg.retries {
                return self.fail(SendError::TooManyErrors(p));
            }
        } else {
            self.same_sync = 0;
        }
        self.last_sync = Some(p);
        self.restarts += 1;
        self.pos = p;
        self.acked = p;
        self.sync_once = true;
        self.frame_open = false;
        self.events.push_back(SendEvent::Retransmit {
            file: self.file,
            pos: p,
        });
        self.enter_data(now);
        Ok(())
    }

    fn enter_data(&mut self, now: Instant) {
        self.state = State::Data;
        self.deadline = None;
        self.frame_open = false;
        self.since_q = 0;
        self.since_seg = 0;
        if self.pos == self.size {
            // Nothing (left) to send: an empty frame, then ZEOF, as lrzsz does.
            self.send_bin(Header::with_pos(frame::ZDATA, self.pos as u32));
            encode_subpacket(&[], FrameEnd::Crce, self.crc, &mut self.esc, &mut self.out);
            self.tries = 0;
            self.send_zeof(now);
        }
    }

    fn finish(&mut self) {
        self.state = State::Done;
        self.deadline = None;
        self.events.push_back(SendEvent::Finished);
    }

    /// Fails and tells the receiver (CAN*10, then backspaces, like lrzsz).
    fn fail(&mut self, e: SendError) -> Result<(), SendError> {
        self.drop_pending();
        self.out.extend_from_slice(&[CAN; 10]);
        self.out.extend_from_slice(&[BS; 10]);
        self.fail_quiet(e)
    }

    fn fail_quiet(&mut self, e: SendError) -> Result<(), SendError> {
        self.state = State::Failed;
        self.deadline = None;
        Err(e)
    }

    // ---- framing ------------------------------------------------------

    fn arm(&mut self, now: Instant) {
        self.deadline = Some(now + self.cfg.timeout);
    }

    fn send_zrqinit(&mut self, now: Instant) {
        self.zrqinits += 1;
        self.send_hex(Header::with_pos(frame::ZRQINIT, 0));
        self.state = State::WaitZrinit;
        self.arm(now);
    }

    fn send_zsinit(&mut self, now: Instant) {
        self.send_hex(Header::with_flags(frame::ZSINIT, TESCCTL, 0, 0, 0));
        // No attention string: a lone NUL.
        encode_subpacket(
            &[0],
            FrameEnd::Crcw,
            CrcKind::Crc16,
            &mut self.esc,
            &mut self.out,
        );
        self.state = State::WaitSinitAck;
        self.arm(now);
    }

    fn send_zfile(&mut self, now: Instant) {
        let f = &self.files[self.file];
        let info = FileInfo {
            name: f.name.clone(),
            size: Some(f.size),
            mtime: Some(f.mtime),
            mode: Some(f.mode),
            files_left: Some((self.files.len() - self.file) as u32),
            bytes_left: Some(self.files[self.file..].iter().map(|f| f.size).sum()),
        };
        let mut block = Vec::with_capacity(f.name.len() + 64);
        info.encode(&mut block);
        let conv = if self.cfg.resume {
            zconv::ZCRESUM
        } else {
            zconv::ZCBIN
        };
        let manag = if self.cfg.overwrite {
            zmanag::ZMCLOB
        } else {
            0
        };
        self.send_bin(Header::with_flags(frame::ZFILE, conv, manag, 0, 0));
        encode_subpacket(
            &block,
            FrameEnd::Crcw,
            self.crc,
            &mut self.esc,
            &mut self.out,
        );
        self.state = State::WaitFilePos;
        self.arm(now);
    }

    fn send_zeof(&mut self, now: Instant) {
        self.send_bin(Header::with_pos(frame::ZEOF, self.size as u32));
        self.state = State::WaitEofAck;
        self.arm(now);
    }

    fn send_zfin(&mut self, now: Instant) {
        self.send_hex(Header::with_pos(frame::ZFIN, 0));
        self.state = State::WaitFin;
        self.arm(now);
    }

    fn send_hex(&mut self, h: Header) {
        encode_header(&h, HeaderFormat::Hex, &mut self.esc, &mut self.out);
    }

    fn send_bin(&mut self, h: Header) {
        encode_header(
            &h,
            HeaderFormat::binary(self.crc),
            &mut self.esc,
            &mut self.out,
        );
    }

    /// Forgets output not yet written (data the receiver will not want).
    fn drop_pending(&mut self) {
        self.out.clear();
        self.sent = 0;
    }

    /// Moves unsent output to the front before appending a large chunk.
    fn compact(&mut self) {
        if self.sent > 0 {
            self.out.drain(..self.sent);
            self.sent = 0;
        }
    }
}

#[cfg(test)]
mod tests;
