//! Frame encoding: hex, binary CRC-16 and binary CRC-32 headers, and data
//! subpackets. (Decoding is the streaming [`crate::decode::Decoder`].)
//!
//! A header is a frame type and four bytes, which hold either a file
//! position (`ZP0` = least significant byte first) or four flag bytes
//! (`ZF0` is the *last* byte on the wire, `ZF3` the first).
//!
//! The check of a data subpacket follows the header before it: CRC-32 after
//! a `ZBIN32` header, CRC-16 after a `ZBIN` or hex header.

use crate::consts::{XON, ZBIN, ZBIN32, ZCRCE, ZCRCG, ZCRCQ, ZCRCW, ZDLE, ZHEX, ZPAD, frame};
use crate::crc::{Check, CrcKind, check_bytes};
use crate::escape::Escaper;

/// A ZMODEM header: frame type plus four bytes of position or flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Frame type (`consts::frame::*`).
    pub frame_type: u8,
    /// The four header bytes in wire order (`ZP0..ZP3` = `ZF3..ZF0`).
    pub data: [u8; 4],
}

impl Header {
    /// A header carrying a position.
    pub fn with_pos(frame_type: u8, pos: u32) -> Self {
        Header {
            frame_type,
            data: pos.to_le_bytes(),
        }
    }

    /// A header carrying flags `ZF0..ZF3`.
    pub fn with_flags(frame_type: u8, zf0: u8, zf1: u8, zf2: u8, zf3: u8) -> Self {
        Header {
            frame_type,
            data: [zf3, zf2, zf1, zf0],
        }
    }

    /// The position this header carries.
    pub fn pos(&self) -> u32 {
        u32::from_le_bytes(self.data)
    }

    /// Flag byte `ZF0` (capabilities of ZRINIT, conversion of ZFILE).
    pub fn zf0(&self) -> u8 {
        self.data[3]
    }

    /// Flag byte `ZF1` (management option of ZFILE).
    pub fn zf1(&self) -> u8 {
        self.data[2]
    }

    /// Flag byte `ZF2` (transport option of ZFILE).
    pub fn zf2(&self) -> u8 {
        self.data[1]
    }

    /// Flag byte `ZF3`.
    pub fn zf3(&self) -> u8 {
        self.data[0]
    }

    /// The printable name of the frame type.
    pub fn name(&self) -> &'static str {
        frame::name(self.frame_type)
    }
}

/// How a header is encoded on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderFormat {
    /// Hex digits, CRC-16; readable on a terminal. Used for short control frames.
    Hex,
    /// Binary, CRC-16.
    Bin16,
    /// Binary, CRC-32.
    Bin32,
}

impl HeaderFormat {
    /// The check that data subpackets after this header carry.
    pub fn data_crc(self) -> CrcKind {
        match self {
            HeaderFormat::Bin32 => CrcKind::Crc32,
            HeaderFormat::Hex | HeaderFormat::Bin16 => CrcKind::Crc16,
        }
    }

    /// The binary format that carries `crc`.
    pub fn binary(crc: CrcKind) -> Self {
        match crc {
            CrcKind::Crc16 => HeaderFormat::Bin16,
            CrcKind::Crc32 => HeaderFormat::Bin32,
        }
    }
}

/// How a data subpacket ends, and what the receiver does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameEnd {
    /// Frame ends; a header follows. No acknowledgement.
    Crce,
    /// Frame continues nonstop (streaming). No acknowledgement.
    Crcg,
    /// Frame continues; the receiver acknowledges with ZACK.
    Crcq,
    /// Frame ends; the receiver acknowledges with ZACK.
    Crcw,
}

impl FrameEnd {
    /// The byte after ZDLE that marks this end.
    pub fn byte(self) -> u8 {
        match self {
            FrameEnd::Crce => ZCRCE,
            FrameEnd::Crcg => ZCRCG,
            FrameEnd::Crcq => ZCRCQ,
            FrameEnd::Crcw => ZCRCW,
        }
    }

    /// The end marked by `b`, if it is one.
    pub fn from_byte(b: u8) -> Option<Self> {
        match b {
            ZCRCE => Some(FrameEnd::Crce),
            ZCRCG => Some(FrameEnd::Crcg),
            ZCRCQ => Some(FrameEnd::Crcq),
            ZCRCW => Some(FrameEnd::Crcw),
            _ => None,
        }
    }

    /// Whether the frame goes on (more subpackets follow without a header).
    pub fn continues(self) -> bool {
        matches!(self, FrameEnd::Crcg | FrameEnd::Crcq)
    }

    /// Whether the receiver must acknowledge it.
    pub fn wants_ack(self) -> bool {
        matches!(self, FrameEnd::Crcq | FrameEnd::Crcw)
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn push_hex(b: u8, out: &mut Vec<u8>) {
    out.push(HEX[usize::from(b >> 4)]);
    out.push(HEX[usize::from(b & 0xf)]);
}

/// Appends `h` encoded as `fmt` to `out`.
///
/// Hex headers end with CR, LF|0x80 and (except ZACK and ZFIN) an XON, as
/// lrzsz sends them.
pub fn encode_header(h: &Header, fmt: HeaderFormat, esc: &mut Escaper, out: &mut Vec<u8>) {
    match fmt {
        HeaderFormat::Hex => {
            let t = h.frame_type & 0x7f;
            let (crc, _) = check_bytes(CrcKind::Crc16, &[&[t], &h.data]);
            let start = out.len();
            out.extend_from_slice(&[ZPAD, ZPAD, ZDLE, ZHEX]);
            push_hex(t, out);
            for &b in &h.data {
                push_hex(b, out);
            }
            push_hex(crc[0], out);
            push_hex(crc[1], out);
            out.extend_from_slice(&[b'\r', b'\n' | 0x80]);
            if t != frame::ZACK && t != frame::ZFIN {
                out.push(XON);
            }
            if let Some(&last) = out[start..].last() {
                esc.mark_sent(last);
            }
        }
        HeaderFormat::Bin16 | HeaderFormat::Bin32 => {
            let kind = fmt.data_crc();
            esc.raw(
                &[
                    ZPAD,
                    ZDLE,
                    if kind == CrcKind::Crc32 { ZBIN32 } else { ZBIN },
                ],
                out,
            );
            let mut raw = [0u8; 5];
            raw[0] = h.frame_type;
            raw[1..].copy_from_slice(&h.data);
            let (crc, n) = check_bytes(kind, &[&raw]);
            esc.escape_into(&raw, out);
            esc.escape_into(&crc[..n], out);
        }
    }
}

/// Appends a data subpacket carrying `data` and ending with `end` to `out`:
/// the escaped data, `ZDLE end`, the escaped check over data and end byte,
/// and an XON after ZCRCW (as lrzsz sends it).
pub fn encode_subpacket(
    data: &[u8],
    end: FrameEnd,
    crc: CrcKind,
    esc: &mut Escaper,
    out: &mut Vec<u8>,
) {
    let mut check = Check::new(crc);
    check.update(data);
    check.update(&[end.byte()]);
    esc.escape_into(data, out);
    esc.raw(&[ZDLE, end.byte()], out);
    let mut c = [0u8; 4];
    let n = check.finish_into(&mut c);
    esc.escape_into(&c[..n], out);
    if end == FrameEnd::Crcw {
        esc.raw(&[XON], out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_header_matches_lrzsz_bytes() {
        // rz's first ZRINIT: flags CANFC32|CANFDX|CANOVIO (0x23), buffer 0.
        let h = Header::with_flags(frame::ZRINIT, 0x23, 0, 0, 0);
        let mut out = Vec::new();
        encode_header(&h, HeaderFormat::Hex, &mut Escaper::new(false), &mut out);
        assert_eq!(&out[..4], b"**\x18B");
        assert_eq!(&out[4..14], b"0100000023");
        let (crc, _) = check_bytes(CrcKind::Crc16, &[&[1, 0, 0, 0, 0x23]]);
        let mut hex = Vec::new();
        push_hex(crc[0], &mut hex);
        push_hex(crc[1], &mut hex);
        assert_eq!(&out[14..18], &hex[..]);
        assert_eq!(&out[18..], b"\r\x8a\x11");
        // ZACK and ZFIN carry no XON.
        let mut out = Vec::new();
        let h = Header::with_pos(frame::ZFIN, 0);
        encode_header(&h, HeaderFormat::Hex, &mut Escaper::new(false), &mut out);
        assert!(out.ends_with(b"\r\x8a"));
    }

    #[test]
    fn positions_are_little_endian() {
        let h = Header::with_pos(frame::ZRPOS, 0x0102_0304);
        assert_eq!(h.data, [4, 3, 2, 1]);
        assert_eq!(h.pos(), 0x0102_0304);
        let f = Header::with_flags(frame::ZFILE, 1, 2, 3, 4);
        assert_eq!((f.zf0(), f.zf1(), f.zf2(), f.zf3()), (1, 2, 3, 4));
    }

    #[test]
    fn binary_header_escapes_its_bytes() {
        let h = Header::with_pos(frame::ZDATA, 0x18);
        let mut out = Vec::new();
        encode_header(&h, HeaderFormat::Bin32, &mut Escaper::new(false), &mut out);
        assert_eq!(&out[..5], &[ZPAD, ZDLE, ZBIN32, frame::ZDATA, ZDLE]);
        assert_eq!(out[5], 0x18 ^ 0x40);
    }

    #[test]
    fn subpacket_layout() {
        let mut out = Vec::new();
        encode_subpacket(
            b"ab",
            FrameEnd::Crcw,
            CrcKind::Crc16,
            &mut Escaper::new(false),
            &mut out,
        );
        let (crc, _) = check_bytes(CrcKind::Crc16, &[b"ab", &[ZCRCW]]);
        assert_eq!(&out[..4], &[b'a', b'b', ZDLE, ZCRCW]);
        assert_eq!(*out.last().unwrap(), XON);
        // The two check bytes sit between the end marker and the XON
        // (escaped if needed).
        let mut esc_crc = Vec::new();
        Escaper::new(false).escape_into(&crc[..2], &mut esc_crc);
        assert_eq!(&out[4..out.len() - 1], &esc_crc[..]);
    }
}
