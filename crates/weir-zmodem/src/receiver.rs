//! The receiving side (`rz`): ZRINIT (sent again while the sender is
//! silent), ZSINIT, ZFILE, checked data, ZRPOS on any error, ZEOF, ZFIN,
//! garbage and timeout limits, cancel on CAN*5.
//!
//! # Driving it
//!
//! 1. feed what the line delivered to [`Receiver::handle_input`] (and
//!    [`Receiver::handle_eof`] when the line closes);
//! 2. drain [`Receiver::poll_event`]: write [`RecvEvent::Data`] to the file
//!    at its offset; answer [`RecvEvent::FileOffered`] with
//!    [`Receiver::accept`] (from offset 0, or from a partial file's length
//!    to resume) or [`Receiver::skip`] before feeding more input;
//! 3. write [`Receiver::pending_output`] to the line, then
//!    [`Receiver::consume_output`];
//! 4. when idle, wait for input until [`Receiver::poll_timeout`], then call
//!    [`Receiver::handle_timeout`].
//!
//! Data is unescaped straight into one buffer, and only checked data leaves
//! it, in large [`bytes::Bytes`] chunks, so a failed subpacket is never
//! written and a partial file always ends at the last good byte (ready to
//! resume).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::consts::{LRZSZ_MAX_BLOCK, frame, zconv, zmanag, zrinit};
use crate::decode::{DecodeError, Decoder, Item};
use crate::escape::Escaper;
use crate::fileinfo::FileInfo;
use crate::frame::{FrameEnd, Header, HeaderFormat, encode_header};

/// Stale data after which an unanswered ZRPOS is sent again.
const ZRPOS_AGAIN_AFTER: u64 = 8 * 1024 * 1024;

/// How the receiver behaves.
#[derive(Clone, Debug)]
pub struct ReceiverConfig {
    /// Offer CRC-32 (CANFC32).
    pub crc32: bool,
    /// Ask the sender to escape every control byte (ESCCTL).
    pub escape_ctl: bool,
    /// Buffer size to announce (0: full streaming; otherwise the sender
    /// stops for an acknowledgement every this many bytes).
    pub buffer: u16,
    /// Silence that triggers a resend (ZRINIT, ZRPOS).
    pub timeout: Duration,
    /// Errors in a row (or resends) before giving up.
    pub retries: u32,
    /// Bytes of garbage between two headers before giving up.
    pub max_garbage: u64,
    /// Largest data subpacket accepted.
    pub max_subpacket: usize,
    /// Hand checked data to the driver in chunks of at least this much.
    pub flush_at: usize,
}

impl Default for ReceiverConfig {
    fn default() -> Self {
        ReceiverConfig {
            crc32: true,
            escape_ctl: false,
            buffer: 0,
            timeout: Duration::from_secs(10),
            retries: 20,
            max_garbage: 64 * 1024 * 1024,
            max_subpacket: 8 * LRZSZ_MAX_BLOCK,
            flush_at: 256 * 1024,
        }
    }
}

/// A file the sender offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRequest {
    /// Name, size, time and mode as sent.
    pub info: FileInfo,
    /// ZF0: conversion option (`consts::zconv`).
    pub conv: u8,
    /// ZF1: management option (`consts::zmanag`).
    pub manag: u8,
}

impl FileRequest {
    /// The sender asks to resume a partial file (ZCRESUM).
    pub fn wants_resume(&self) -> bool {
        self.conv == zconv::ZCRESUM
    }

    /// The sender asks to replace an existing file (ZMCLOB).
    pub fn wants_overwrite(&self) -> bool {
        self.manag & zmanag::MASK == zmanag::ZMCLOB
    }
}

/// Why the receiver asked for a retransmission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetransmitReason {
    /// A corrupted or malformed frame.
    Decode(DecodeError),
    /// Data for another position arrived.
    WrongPosition(u32),
    /// Nothing arrived in time.
    Timeout,
    /// The sender resent ZFILE or sent ZNAK.
    Resync,
}

/// Something the driver must act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecvEvent {
    /// A file is offered; answer with [`Receiver::accept`] or
    /// [`Receiver::skip`].
    FileOffered(FileRequest),
    /// Checked data to write at `offset` of the current file.
    Data {
        /// File offset of the first byte.
        offset: u64,
        /// The data.
        data: Bytes,
    },
    /// The current file is complete (all its data came before this event).
    FileDone {
        /// Its length.
        size: u64,
    },
    /// The sender gave up on the current file (ZSKIP) at `pos`.
    FileAbandoned {
        /// Bytes received.
        pos: u64,
    },
    /// A retransmission was requested from `pos`.
    Retransmit {
        /// The position asked for.
        pos: u64,
        /// Why.
        reason: RetransmitReason,
    },
    /// The session ended cleanly.
    Finished,
}

/// Why a receive failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecvError {
    /// The sender cancelled (CAN*5 or ZCAN).
    #[error("the sender cancelled the transfer")]
    Cancelled,
    /// The sender aborted with a frame.
    #[error("the sender aborted with {0}")]
    Aborted(&'static str),
    /// Nothing arrived after every resend.
    #[error("no answer from the sender after {0} tries ({1})")]
    Timeout(u32, &'static str),
    /// Errors in a row without progress.
    #[error("too many errors at position {0}")]
    TooManyErrors(u64),
    /// Too much garbage between headers.
    #[error("garbage count exceeded ({0} bytes without a valid header)")]
    GarbageExceeded(u64),
    /// The sender asked to run a command; weir never does.
    #[error("the sender asked to run a command (ZCOMMAND); refused")]
    CommandRefused,
    /// The line closed before the session ended.
    #[error("the line closed before the transfer finished")]
    LineClosed,
    /// The sender sent data past ZMODEM's 32-bit positions
    /// ([`crate::consts::MAX_FILE_SIZE`]); the file so far is kept.
    #[error("the sender sent more than ZMODEM's 4 GiB - 1 limit (at position {0}); cancelled")]
    TooLong(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Init,
    Sinit,
    FileInfo,
    Decide,
    Receiving,
    Fin,
    Done,
    Failed,
}

/// The ZMODEM receiver. See the module docs for the driving loop.
pub struct Receiver {
    cfg: ReceiverConfig,
    state: State,
    dec: Decoder,
    esc: Escaper,
    out: Vec<u8>,
    sent: usize,
    events: VecDeque<RecvEvent>,
    deadline: Option<Instant>,
    tries: u32,
    errors: u32,
    escape_ctl: bool,
    offer: (u8, u8),
    scratch: BytesMut,
    buf: BytesMut,
    buf_offset: u64,
    pos: u64,
    accepting: bool,
    zrpos_outstanding: bool,
    /// Garbage count when the outstanding ZRPOS was sent.
    zrpos_garbage: u64,
    o_count: u8,
    retransmits: u64,
}

impl Receiver {
    /// Starts a session: queues ZRINIT.
    pub fn new(cfg: ReceiverConfig, now: Instant) -> Self {
        let mut r = Receiver {
            dec: Decoder::new(cfg.escape_ctl, cfg.max_subpacket),
            esc: Escaper::new(cfg.escape_ctl),
            escape_ctl: cfg.escape_ctl,
            cfg,
            state: State::Init,
            out: Vec::new(),
            sent: 0,
            events: VecDeque::new(),
            deadline: None,
            tries: 0,
            errors: 0,
            offer: (0, 0),
            scratch: BytesMut::new(),
            buf: BytesMut::new(),
            buf_offset: 0,
            pos: 0,
            accepting: false,
            zrpos_outstanding: false,
            zrpos_garbage: 0,
            o_count: 0,
            retransmits: 0,
        };
        r.send_zrinit(now);
        r
    }

    // ---- inputs -------------------------------------------------------

    /// Feeds bytes received from the line.
    pub fn handle_input(&mut self, now: Instant, mut input: &[u8]) -> Result<(), RecvError> {
        if self.is_done() {
            return Ok(());
        }
        if matches!(self.state, State::Init | State::Receiving | State::Fin) {
            self.arm(now);
        }
        if self.state == State::Fin {
            // After our ZFIN the sender says "OO".
            let n = input.iter().filter(|&&b| b == b'O').count().min(2) as u8;
            self.o_count = self.o_count.saturating_add(n);
            if self.o_count >= 2 {
                self.finish();
                return Ok(());
            }
        }
        while !input.is_empty() && !self.is_done() {
            let out = if self.accepting {
                &mut self.buf
            } else {
                &mut self.scratch
            };
            let (used, item) = self.dec.decode(input, out);
            input = &input[used..];
            if let Some(item) = item {
                let r = self.on_item(now, item);
                self.scratch.clear();
                r?;
            }
            let g = self.dec.garbage();
            if g > self.cfg.max_garbage {
                return self.fail(RecvError::GarbageExceeded(g));
            }
            if self.zrpos_outstanding
                && self.state == State::Receiving
                && g >= self.zrpos_garbage + ZRPOS_AGAIN_AFTER
            {
                // Still no header for our position after this much stale
                // data: our ZRPOS may have been lost on the way back.
                self.zrpos_garbage = g;
                self.count_error()?;
                self.request_retransmit(now, RetransmitReason::Resync);
            }
        }
        if self.verified() >= self.cfg.flush_at {
            self.flush();
        }
        Ok(())
    }

    /// The line closed (end of input).
    pub fn handle_eof(&mut self, _now: Instant) -> Result<(), RecvError> {
        match self.state {
            State::Fin => {
                self.finish();
                Ok(())
            }
            State::Done | State::Failed => Ok(()),
            _ => self.fail_quiet(RecvError::LineClosed),
        }
    }

    /// Acts on an expired timer: resends ZRINIT or ZRPOS, or gives up.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), RecvError> {
        match self.deadline {
            Some(d) if now >= d => {}
            _ => return Ok(()),
        }
        self.tries += 1;
        match self.state {
            State::Fin => {
                if self.tries >= 3 {
                    self.finish();
                } else {
                    self.send_hex(Header::with_pos(frame::ZFIN, 0));
                    self.arm(now);
                }
                Ok(())
            }
            _ if self.tries > self.cfg.retries => {
                let what = match self.state {
                    State::Receiving => "waiting for data",
                    _ => "waiting for a file",
                };
                self.fail(RecvError::Timeout(self.tries - 1, what))
            }
            State::Receiving => {
                // A partial subpacket is in the buffer it was decoded into:
                // the file's data only while accepting, else the scratch
                // (a ZFILE's block, unwanted data). Removing its length from
                // the file's buffer instead cut checked data that `pos`
                // still counted, and the next flush panicked (fuzzing).
                if self.accepting {
                    self.dec.abandon(&mut self.buf);
                } else {
                    self.dec.abandon(&mut self.scratch);
                    self.scratch.clear();
                }
                self.accepting = false;
                self.request_retransmit(now, RetransmitReason::Timeout);
                Ok(())
            }
            State::Init | State::Sinit | State::FileInfo => {
                self.dec.hunt();
                self.state = State::Init;
                self.send_zrinit(now);
                Ok(())
            }
            State::Decide | State::Done | State::Failed => {
                self.deadline = None;
                Ok(())
            }
        }
    }

    /// Accepts the offered file from `offset` (0, or the length of a
    /// partial file to resume).
    pub fn accept(&mut self, now: Instant, offset: u32) {
        if self.state != State::Decide {
            return;
        }
        self.state = State::Receiving;
        self.pos = u64::from(offset);
        self.buf_offset = self.pos;
        self.buf.clear();
        self.buf.reserve(2 * self.span());
        self.accepting = false;
        self.errors = 0;
        self.tries = 0;
        self.send_zrpos();
        self.arm(now);
    }

    /// Declines the offered file (ZSKIP); the sender goes on to the next.
    pub fn skip(&mut self, now: Instant) {
        if self.state != State::Decide {
            return;
        }
        self.send_hex(Header::with_pos(frame::ZSKIP, 0));
        self.state = State::Init;
        self.tries = 0;
        self.arm(now);
    }

    /// Reports that the first `n` bytes of [`Receiver::pending_output`]
    /// were written.
    pub fn consume_output(&mut self, n: usize) {
        self.sent = (self.sent + n).min(self.out.len());
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
        }
    }

    /// Cancels the session from this side (CAN*10 and backspaces); checked
    /// data received so far is handed out first.
    pub fn cancel(&mut self) {
        if !self.is_done() {
            let _ = self.fail(RecvError::Cancelled);
        }
    }

    // ---- outputs ------------------------------------------------------

    /// Bytes waiting to be written to the line.
    pub fn pending_output(&self) -> &[u8] {
        &self.out[self.sent..]
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<RecvEvent> {
        self.events.pop_front()
    }

    /// When [`Receiver::handle_timeout`] should be called next, if at all.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the session is over.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done | State::Failed)
    }

    /// Whether the session finished cleanly.
    pub fn is_finished(&self) -> bool {
        self.state == State::Done
    }

    /// Checked bytes of the current file so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Retransmissions requested so far.
    pub fn retransmits(&self) -> u64 {
        self.retransmits
    }

    // ---- protocol -----------------------------------------------------

    fn on_item(&mut self, now: Instant, item: Item) -> Result<(), RecvError> {
        match item {
            Item::Cancel => {
                self.flush();
                self.fail_quiet(RecvError::Cancelled)
            }
            Item::Header(h, _) => {
                self.dec.reset_garbage();
                if h.frame_type == frame::ZCAN {
                    self.flush();
                    return self.fail_quiet(RecvError::Cancelled);
                }
                if h.frame_type == frame::ZABORT {
                    self.flush();
                    return self.fail(RecvError::Aborted("ZABORT"));
                }
                self.on_header(now, h)
            }
            Item::Subpacket { end, len } => self.on_subpacket(end, len),
            Item::Error(e) => self.on_error(now, e),
        }
    }

    fn on_header(&mut self, now: Instant, h: Header) -> Result<(), RecvError> {
        match self.state {
            State::Init | State::Sinit | State::FileInfo => {
                self.state = State::Init;
                match h.frame_type {
                    frame::ZSINIT => {
                        if h.zf0() & crate::consts::TESCCTL != 0 {
                            self.set_escape_ctl();
                        }
                        self.state = State::Sinit;
                    }
                    frame::ZFILE => {
                        self.offer = (h.zf0(), h.zf1());
                        self.state = State::FileInfo;
                    }
                    frame::ZFIN => {
                        self.send_hex(Header::with_pos(frame::ZFIN, 0));
                        self.state = State::Fin;
                        self.tries = 0;
                        self.o_count = 0;
                        self.deadline = Some(now + self.cfg.timeout.min(Duration::from_secs(2)));
                    }
                    frame::ZFREECNT => self.send_hex(Header::with_pos(frame::ZACK, u32::MAX)),
                    frame::ZCOMMAND => return self.fail(RecvError::CommandRefused),
                    // ZRQINIT, a repeated ZEOF, anything else: the sender has
                    // not seen our ZRINIT yet.
                    _ => self.send_zrinit(now),
                }
                Ok(())
            }
            State::Decide => Ok(()),
            State::Receiving => {
                match h.frame_type {
                    frame::ZDATA => {
                        if u64::from(h.pos()) == self.pos {
                            self.accepting = true;
                            self.zrpos_outstanding = false;
                        } else {
                            // Its subpackets are not wanted: treat them as
                            // garbage while hunting for the right header.
                            self.accepting = false;
                            self.dec.hunt();
                            self.count_error()?;
                            self.request_retransmit(now, RetransmitReason::WrongPosition(h.pos()));
                        }
                    }
                    frame::ZEOF => {
                        self.accepting = false;
                        if u64::from(h.pos()) == self.pos {
                            self.flush();
                            self.events
                                .push_back(RecvEvent::FileDone { size: self.pos });
                            self.state = State::Init;
                            self.tries = 0;
                            self.send_zrinit(now);
                        }
                        // An early ZEOF (sent before our ZRPOS arrived) is
                        // ignored; the sender comes back to our position.
                    }
                    frame::ZFILE | frame::ZNAK => {
                        self.accepting = false;
                        self.count_error()?;
                        self.request_retransmit(now, RetransmitReason::Resync);
                    }
                    frame::ZSKIP => {
                        self.accepting = false;
                        self.flush();
                        self.events
                            .push_back(RecvEvent::FileAbandoned { pos: self.pos });
                        self.state = State::Init;
                        self.send_zrinit(now);
                    }
                    frame::ZFIN => {
                        self.flush();
                        return self.fail(RecvError::Aborted("ZFIN in the middle of a file"));
                    }
                    _ => {}
                }
                Ok(())
            }
            State::Fin => {
                if h.frame_type == frame::ZFIN {
                    self.send_hex(Header::with_pos(frame::ZFIN, 0));
                }
                Ok(())
            }
            State::Done | State::Failed => Ok(()),
        }
    }

    fn on_subpacket(&mut self, end: FrameEnd, len: usize) -> Result<(), RecvError> {
        match self.state {
            State::Sinit => {
                // The attention string is not used.
                self.send_hex(Header::with_pos(frame::ZACK, 1));
                self.state = State::Init;
            }
            State::FileInfo => match FileInfo::parse(&self.scratch) {
                Ok(info) => {
                    let (conv, manag) = self.offer;
                    self.events.push_back(RecvEvent::FileOffered(FileRequest {
                        info,
                        conv,
                        manag,
                    }));
                    self.state = State::Decide;
                    self.deadline = None;
                }
                Err(_) => {
                    self.send_hex(Header::with_pos(frame::ZSKIP, 0));
                    self.state = State::Init;
                }
            },
            State::Receiving if self.accepting => {
                // Positions are 32-bit on the wire: data past them cannot be
                // acknowledged or restarted, and would grow the file without
                // bound. The checked data before it is handed out first.
                if self.pos + len as u64 > crate::consts::MAX_FILE_SIZE {
                    self.accepting = false;
                    return self.fail(RecvError::TooLong(self.pos));
                }
                self.pos += len as u64;
                self.errors = 0;
                self.tries = 0;
                if end.wants_ack() {
                    self.send_hex(Header::with_pos(frame::ZACK, self.pos as u32));
                }
                if !end.continues() {
                    self.accepting = false;
                }
                if self.verified() >= self.cfg.flush_at {
                    self.flush();
                    self.make_room();
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn on_error(&mut self, now: Instant, e: DecodeError) -> Result<(), RecvError> {
        match self.state {
            State::Receiving => {
                self.accepting = false;
                if self.zrpos_outstanding {
                    // Stale data still in flight after our ZRPOS: wait for
                    // the sender's new ZDATA header (or the timeout).
                    return Ok(());
                }
                self.count_error()?;
                self.request_retransmit(now, RetransmitReason::Decode(e));
                Ok(())
            }
            State::Sinit | State::FileInfo => {
                self.send_hex(Header::with_pos(frame::ZNAK, 0));
                self.state = State::Init;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn count_error(&mut self) -> Result<(), RecvError> {
        self.errors += 1;
        if self.errors > self.cfg.retries {
            self.flush();
            return self.fail(RecvError::TooManyErrors(self.pos));
        }
        Ok(())
    }

    fn request_retransmit(&mut self, now: Instant, reason: RetransmitReason) {
        self.retransmits += 1;
        self.events.push_back(RecvEvent::Retransmit {
            pos: self.pos,
            reason,
        });
        self.send_zrpos();
        self.arm(now);
    }

    fn send_zrpos(&mut self) {
        self.zrpos_outstanding = true;
        self.zrpos_garbage = self.dec.garbage();
        self.send_hex(Header::with_pos(frame::ZRPOS, self.pos as u32));
    }

    fn set_escape_ctl(&mut self) {
        self.escape_ctl = true;
        self.dec.set_escape_ctl(true);
        self.esc.set_escape_ctl(true);
    }

    fn verified(&self) -> usize {
        (self.pos - self.buf_offset) as usize
    }

    /// The most the file's buffer holds between two flushes: less than
    /// `flush_at` checked bytes, and the subpacket that crosses it.
    fn span(&self) -> usize {
        self.cfg.flush_at + self.cfg.max_subpacket
    }

    /// After a flush in the middle of a file, gives the buffer room for
    /// the next one. The data handed out keeps its allocation until the
    /// driver has written it, so the space in front cannot be taken back
    /// yet; left to itself, the buffer grew from a new allocation the size
    /// of the first append, doubling (and copying what it held) four or
    /// five times per flush. Two spans are reserved at once instead,
    /// moving only what follows the checked data (nothing, at a
    /// subpacket's end).
    fn make_room(&mut self) {
        let span = self.span();
        if self.buf.capacity() - self.buf.len() < span {
            self.buf.reserve(2 * span);
        }
    }

    /// Hands checked data to the driver.
    fn flush(&mut self) {
        let n = self.verified();
        if n == 0 {
            return;
        }
        let data = self.buf.split_to(n).freeze();
        self.events.push_back(RecvEvent::Data {
            offset: self.buf_offset,
            data,
        });
        self.buf_offset = self.pos;
    }

    fn finish(&mut self) {
        self.state = State::Done;
        self.deadline = None;
        self.events.push_back(RecvEvent::Finished);
    }

    /// Fails and tells the sender (CAN*10 and backspaces, like lrzsz).
    fn fail(&mut self, e: RecvError) -> Result<(), RecvError> {
        self.flush();
        self.out.extend_from_slice(&[crate::consts::CAN; 10]);
        self.out.extend_from_slice(&[crate::consts::BS; 10]);
        self.fail_quiet(e)
    }

    fn fail_quiet(&mut self, e: RecvError) -> Result<(), RecvError> {
        self.flush();
        self.state = State::Failed;
        self.deadline = None;
        Err(e)
    }

    fn arm(&mut self, now: Instant) {
        self.deadline = Some(now + self.cfg.timeout);
    }

    fn send_zrinit(&mut self, now: Instant) {
        let mut flags = zrinit::CANFDX | zrinit::CANOVIO;
        if self.cfg.crc32 {
            flags |= zrinit::CANFC32;
        }
        if self.escape_ctl {
            flags |= zrinit::ESCCTL;
        }
        let [lo, hi] = self.cfg.buffer.to_le_bytes();
        self.send_hex(Header {
            frame_type: frame::ZRINIT,
            data: [lo, hi, crate::consts::zrinit1::STALE_OK, flags],
        });
        self.arm(now);
    }

    fn send_hex(&mut self, h: Header) {
        encode_header(&h, HeaderFormat::Hex, &mut self.esc, &mut self.out);
    }
}

#[cfg(test)]
mod tests;
