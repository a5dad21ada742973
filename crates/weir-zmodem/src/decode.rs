//! The streaming wire decoder: bytes in (split anywhere), headers and
//! checked data subpackets out.
//!
//! It follows lrzsz's reading rules (`zgethdr`, `zdlread`, `zrdata`):
//! - headers start with `ZPAD` (any number, high bit ignored), `ZDLE`, then
//!   `A` (binary, CRC-16), `B` (hex) or `C` (binary, CRC-32); anything else
//!   before a header is garbage and is counted;
//! - raw XON/XOFF (any parity) are dropped everywhere, and with ESCCTL every
//!   raw control byte is;
//! - after a header whose type carries data (ZFILE, ZDATA, ZSINIT, ...) data
//!   subpackets follow, each checked with the CRC kind of that header;
//!   ZCRCG/ZCRCQ keep the frame open, ZCRCE/ZCRCW close it;
//! - five CANs in a row (ZDLE is CAN) cancel the session.
//!
//! Data is unescaped a run at a time: the leading run of plain bytes is found
//! with a 256-entry table and appended with one copy. Decoded subpacket data
//! is appended straight to the caller's buffer, and taken back out again if
//! its check fails, so a receiver decodes into its write buffer in place.

use bytes::BytesMut;

use crate::consts::{CAN, XOFF, XON, ZBIN, ZBIN32, ZDLE, ZHEX, ZPAD, ZRUB0, ZRUB1, frame};
use crate::crc::{Check, CrcKind};
use crate::escape::{RxClass, UnescapeTable};
use crate::frame::{FrameEnd, Header, HeaderFormat};

/// What the decoder found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    /// A header with a good check.
    Header(Header, HeaderFormat),
    /// A data subpacket with a good check; its `len` bytes were appended to
    /// the caller's buffer.
    Subpacket {
        /// How it ended.
        end: FrameEnd,
        /// Bytes of data it carried.
        len: usize,
    },
    /// A malformed or corrupted frame; the decoder is hunting for the next
    /// header again (any partial data was removed from the buffer).
    Error(DecodeError),
    /// Five CANs: the peer cancelled the session.
    Cancel,
}

/// Why a frame was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A header's check did not match.
    #[error("header CRC mismatch")]
    HeaderCrc,
    /// A hex header held a character that is not a hex digit.
    #[error("bad hex digit in header")]
    BadHex,
    /// A data subpacket's check did not match.
    #[error("data subpacket CRC mismatch")]
    SubpacketCrc,
    /// A data subpacket grew past the limit without an end.
    #[error("data subpacket longer than {0} bytes")]
    SubpacketTooLong(usize),
    /// ZDLE was followed by a byte that is not a valid escape.
    #[error("bad escape sequence ZDLE {0:#04x}")]
    BadEscape(u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Looking for ZPAD.
    Hunt,
    /// Saw ZPAD; want more ZPAD or ZDLE.
    Pad,
    /// Saw ZPAD ZDLE; want the format byte.
    Format,
    /// Reading the 14 hex digits of a hex header.
    HexHeader,
    /// After a hex header: an optional CR (then one more byte) to eat.
    HexTrailer,
    /// Eating the LF after a hex header's CR.
    HexLf,
    /// Reading the escaped bytes of a binary header.
    BinHeader,
    /// Reading an escaped data subpacket.
    Data,
    /// Reading the escaped check of a data subpacket.
    DataCrc,
}

/// Result of feeding one byte to the escape reader.
enum Esc {
    /// Nothing yet (byte dropped or ZDLE pending).
    More,
    /// A data byte.
    Byte(u8),
    /// ZDLE plus a frame-end character.
    End(FrameEnd),
    /// Five CANs.
    Cancel,
    /// ZDLE plus an invalid byte.
    Bad(u8),
}

/// The streaming decoder. See the module docs.
#[derive(Clone)]
pub struct Decoder {
    state: State,
    table: UnescapeTable,
    max_subpacket: usize,
    /// Consecutive raw CAN bytes.
    cans: u8,
    /// A ZDLE was read and its escaped byte is pending.
    zdle: bool,
    garbage: u64,
    fmt: HeaderFormat,
    hdr: [u8; 9],
    hdr_len: usize,
    nibble: Option<u8>,
    /// A hex header that carries data was read; data starts after its trailer.
    pending_data: bool,
    data_crc: CrcKind,
    sub_len: usize,
    end: FrameEnd,
    crc: [u8; 4],
    crc_len: usize,
}

impl Decoder {
    /// A decoder hunting for a header. `escape_ctl` drops raw control bytes;
    /// `max_subpacket` bounds a data subpacket.
    pub fn new(escape_ctl: bool, max_subpacket: usize) -> Self {
        Decoder {
            state: State::Hunt,
            table: UnescapeTable::new(escape_ctl),
            max_subpacket,
            cans: 0,
            zdle: false,
            garbage: 0,
            fmt: HeaderFormat::Hex,
            hdr: [0; 9],
            hdr_len: 0,
            nibble: None,
            pending_data: false,
            data_crc: CrcKind::Crc16,
            sub_len: 0,
            end: FrameEnd::Crce,
            crc: [0; 4],
            crc_len: 0,
        }
    }

    /// Turns ESCCTL reading on or off (after ZSINIT or ZRINIT asks for it).
    pub fn set_escape_ctl(&mut self, on: bool) {
        if on != self.table.escape_ctl() {
            self.table = UnescapeTable::new(on);
        }
    }

    /// Whether raw control bytes are dropped.
    pub fn escape_ctl(&self) -> bool {
        self.table.escape_ctl()
    }

    /// Garbage bytes skipped while hunting since the last
    /// [`Decoder::reset_garbage`].
    pub fn garbage(&self) -> u64 {
        self.garbage
    }

    /// Restarts the garbage count (after a good frame).
    pub fn reset_garbage(&mut self) {
        self.garbage = 0;
    }

    /// Whether the decoder is inside a data subpacket (data appended to the
    /// buffer belongs to a subpacket not yet checked).
    pub fn in_data(&self) -> bool {
        matches!(self.state, State::Data | State::DataCrc)
    }

    /// Abandons any frame in progress and hunts for the next header. Partial
    /// subpacket data stays in the caller's buffer: pass it to
    /// [`Decoder::abandon`] instead to remove it.
    pub fn hunt(&mut self) {
        self.state = State::Hunt;
        self.pending_data = false;
        self.zdle = false;
        self.sub_len = 0;
    }

    /// Abandons any frame in progress, removes partial subpacket data from
    /// `out`, and hunts for the next header.
    pub fn abandon(&mut self, out: &mut BytesMut) {
        if self.in_data() {
            let keep = out.len().saturating_sub(self.sub_len);
            out.truncate(keep);
        }
        self.hunt();
    }

    /// Decodes from `input` until one item is complete or the input ends.
    /// Returns the bytes consumed and the item, if any.
    ///
    /// Subpacket data is appended to `out`; pass the same buffer, and do not
    /// change it, until the subpacket's item comes back.
    pub fn decode(&mut self, input: &[u8], out: &mut BytesMut) -> (usize, Option<Item>) {
        let mut i = 0;
        while i < input.len() {
            if self.state == State::Data && !self.zdle {
                // Fast path: whole blocks of data and simple escapes.
                let room = self.max_subpacket - self.sub_len;
                let (used, made) = self.table.unescape_blocks(&input[i..], out, room);
                if used > 0 {
                    i += used;
                    self.sub_len += made;
                    self.cans = 0;
                    continue;
                }
                // Medium path: copy the run of plain data bytes.
                let run = self.table.data_run(&input[i..]);
                if run > 0 {
                    let room = self.max_subpacket - self.sub_len;
                    if run > room {
                        out.extend_from_slice(&input[i..i + room]);
                        self.sub_len += room;
                        let item =
                            self.fail(out, DecodeError::SubpacketTooLong(self.max_subpacket));
                        return (i + room, Some(item));
                    }
                    out.extend_from_slice(&input[i..i + run]);
                    self.sub_len += run;
                    self.cans = 0;
                    i += run;
                    continue;
                }
            }
            let b = input[i];
            i += 1;
            if let Some(item) = self.step(b, out) {
                return (i, Some(item));
            }
        }
        (i, None)
    }

    /// Feeds one byte that is not on the data fast path.
    fn step(&mut self, b: u8, out: &mut BytesMut) -> Option<Item> {
        match self.state {
            State::Hunt => {
                if b == CAN {
                    return self.count_can();
                }
                self.cans = 0;
                if b & 0x7f == ZPAD {
                    self.state = State::Pad;
                } else if !is_flow(b) {
                    self.garbage += 1;
                }
                None
            }
            State::Pad | State::Format => {
                if b == CAN {
                    if let Some(item) = self.count_can() {
                        return Some(item);
                    }
                } else {
                    self.cans = 0;
                }
                let c = b & 0x7f;
                if c == ZDLE {
                    // ZPAD ZDLE: the format byte comes next. A second ZDLE
                    // is a CAN, not a header.
                    self.state = if self.state == State::Pad {
                        State::Format
                    } else {
                        State::Hunt
                    };
                    return None;
                }
                if is_flow(c) || (self.table.escape_ctl() && c & 0x60 == 0) {
                    return None;
                }
                if self.state == State::Pad {
                    if c != ZPAD {
                        self.garbage += 1;
                        self.state = State::Hunt;
                    }
                    return None;
                }
                match c {
                    ZHEX => {
                        self.fmt = HeaderFormat::Hex;
                        self.start_header(State::HexHeader);
                    }
                    ZBIN => {
                        self.fmt = HeaderFormat::Bin16;
                        self.start_header(State::BinHeader);
                    }
                    ZBIN32 => {
                        self.fmt = HeaderFormat::Bin32;
                        self.start_header(State::BinHeader);
                    }
                    _ => {
                        self.garbage += 1;
                        self.state = if c == ZPAD { State::Pad } else { State::Hunt };
                    }
                }
                None
            }
            State::HexHeader => self.hex_digit(b),
            State::HexTrailer => {
                if b & 0x7f == b'\r' {
                    self.state = State::HexLf;
                    return None;
                }
                // Not a CR: it belongs to whatever follows the header.
                self.leave_hex_trailer();
                self.step(b, out)
            }
            State::HexLf => {
                self.leave_hex_trailer();
                if b & 0x7f == b'\n' {
                    return None;
                }
                self.step(b, out)
            }
            State::BinHeader => match self.escaped(b) {
                Esc::More => None,
                Esc::Cancel => Some(self.cancel()),
                Esc::Byte(v) => {
                    self.hdr[self.hdr_len] = v;
                    self.hdr_len += 1;
                    if self.hdr_len == 5 + self.fmt.data_crc().wire_len() {
                        Some(self.finish_binary_header())
                    } else {
                        None
                    }
                }
                Esc::End(e) => Some(self.fail(out, DecodeError::BadEscape(e.byte()))),
                Esc::Bad(c) => Some(self.fail(out, DecodeError::BadEscape(c))),
            },
            State::Data => match self.escaped(b) {
                Esc::More => None,
                Esc::Cancel => {
                    self.abandon(out);
                    Some(self.cancel())
                }
                Esc::Byte(v) => {
                    if self.sub_len == self.max_subpacket {
                        return Some(
                            self.fail(out, DecodeError::SubpacketTooLong(self.max_subpacket)),
                        );
                    }
                    out.extend_from_slice(&[v]);
                    self.sub_len += 1;
                    None
                }
                Esc::End(e) => {
                    self.end = e;
                    self.crc_len = 0;
                    self.state = State::DataCrc;
                    None
                }
                Esc::Bad(c) => Some(self.fail(out, DecodeError::BadEscape(c))),
            },
            State::DataCrc => match self.escaped(b) {
                Esc::More => None,
                Esc::Cancel => {
                    self.abandon(out);
                    Some(self.cancel())
                }
                Esc::Byte(v) => {
                    self.crc[self.crc_len] = v;
                    self.crc_len += 1;
                    if self.crc_len == self.data_crc.wire_len() {
                        Some(self.finish_subpacket(out))
                    } else {
                        None
                    }
                }
                Esc::End(e) => Some(self.fail(out, DecodeError::BadEscape(e.byte()))),
                Esc::Bad(c) => Some(self.fail(out, DecodeError::BadEscape(c))),
            },
        }
    }

    /// Leaves the hex-header trailer for data (if the header carries data)
    /// or for hunting.
    fn leave_hex_trailer(&mut self) {
        if self.pending_data {
            self.pending_data = false;
            self.enter_data();
        } else {
            self.state = State::Hunt;
        }
    }

    fn start_header(&mut self, state: State) {
        self.state = state;
        self.hdr_len = 0;
        self.nibble = None;
        self.zdle = false;
    }

    fn hex_digit(&mut self, b: u8) -> Option<Item> {
        if b == CAN {
            if let Some(item) = self.count_can() {
                return Some(item);
            }
        } else {
            self.cans = 0;
        }
        let c = b & 0x7f;
        if is_flow(c) || (self.table.escape_ctl() && c & 0x60 == 0 && c != ZDLE) {
            return None;
        }
        let v = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => {
                self.state = State::Hunt;
                return Some(Item::Error(DecodeError::BadHex));
            }
        };
        match self.nibble.take() {
            None => {
                self.nibble = Some(v);
                None
            }
            Some(hi) => {
                self.hdr[self.hdr_len] = hi << 4 | v;
                self.hdr_len += 1;
                if self.hdr_len < 7 {
                    return None;
                }
                let (h, ok) = self.header_from(CrcKind::Crc16);
                if !ok {
                    self.state = State::Hunt;
                    return Some(Item::Error(DecodeError::HeaderCrc));
                }
                self.state = State::HexTrailer;
                self.pending_data = frame::has_data(h.frame_type);
                if self.pending_data {
                    self.data_crc = CrcKind::Crc16;
                }
                Some(Item::Header(h, HeaderFormat::Hex))
            }
        }
    }

    fn header_from(&self, kind: CrcKind) -> (Header, bool) {
        let h = Header {
            frame_type: self.hdr[0],
            data: [self.hdr[1], self.hdr[2], self.hdr[3], self.hdr[4]],
        };
        let mut c = Check::new(kind);
        c.update(&self.hdr[..5]);
        let mut want = [0u8; 4];
        let n = c.finish_into(&mut want);
        (h, want[..n] == self.hdr[5..5 + n])
    }

    fn finish_binary_header(&mut self) -> Item {
        let kind = self.fmt.data_crc();
        let (h, ok) = self.header_from(kind);
        self.state = State::Hunt;
        if !ok {
            return Item::Error(DecodeError::HeaderCrc);
        }
        if frame::has_data(h.frame_type) {
            self.data_crc = kind;
            self.enter_data();
        }
        Item::Header(h, self.fmt)
    }

    fn enter_data(&mut self) {
        self.state = State::Data;
        self.sub_len = 0;
        self.zdle = false;
    }

    fn finish_subpacket(&mut self, out: &mut BytesMut) -> Item {
        let start = out.len() - self.sub_len;
        let mut c = Check::new(self.data_crc);
        c.update(&out[start..]);
        c.update(&[self.end.byte()]);
        let mut want = [0u8; 4];
        let n = c.finish_into(&mut want);
        if want[..n] != self.crc[..n] {
            return self.fail(out, DecodeError::SubpacketCrc);
        }
        let len = self.sub_len;
        if self.end.continues() {
            self.enter_data();
        } else {
            self.hunt();
        }
        Item::Subpacket { end: self.end, len }
    }

    fn fail(&mut self, out: &mut BytesMut, e: DecodeError) -> Item {
        self.abandon(out);
        Item::Error(e)
    }

    fn count_can(&mut self) -> Option<Item> {
        self.cans += 1;
        if self.cans >= 5 {
            return Some(self.cancel());
        }
        None
    }

    fn cancel(&mut self) -> Item {
        self.cans = 0;
        self.hunt();
        Item::Cancel
    }

    /// The escape reader (lrzsz `zdlread`) for one byte.
    fn escaped(&mut self, b: u8) -> Esc {
        if !self.zdle {
            match self.table.class(b) {
                RxClass::Data => {
                    self.cans = 0;
                    Esc::Byte(b)
                }
                RxClass::Skip => {
                    self.cans = 0;
                    Esc::More
                }
                RxClass::Zdle => {
                    self.zdle = true;
                    self.cans = 1;
                    Esc::More
                }
            }
        } else {
            if b == CAN {
                self.cans += 1;
                if self.cans >= 5 {
                    self.zdle = false;
                    return Esc::Cancel;
                }
                return Esc::More;
            }
            self.cans = 0;
            if is_flow(b & 0x7f) || (self.table.escape_ctl() && b & 0x60 == 0) {
                return Esc::More;
            }
            self.zdle = false;
            if let Some(e) = FrameEnd::from_byte(b) {
                return Esc::End(e);
            }
            match b {
                ZRUB0 => Esc::Byte(0x7f),
                ZRUB1 => Esc::Byte(0xff),
                _ if b & 0x60 == 0x40 => Esc::Byte(b ^ 0x40),
                _ => Esc::Bad(b),
            }
        }
    }
}

/// XON or XOFF (7-bit).
fn is_flow(b: u8) -> bool {
    let c = b & 0x7f;
    c == XON || c == XOFF
}

#[cfg(test)]
mod tests;
