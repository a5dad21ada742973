//! ZDLE escaping, table-driven and run over whole spans.
//!
//! Sender side ([`Escaper`]): a 256-entry table classifies each byte as
//! sent raw, always escaped, or escaped only after `@` (the Telenet
//! `@ CR` escape, as lrzsz does). The encoder finds the next byte that needs
//! attention with the table and copies the run before it with one
//! `extend_from_slice`, so random data costs a table lookup per byte and a
//! copy per run, never a call or a lock per byte.
//!
//! What is escaped (exactly what lrzsz `rz` expects):
//! - always: ZDLE 0x18, DLE 0x10, XON 0x11, XOFF 0x13 and their high-bit
//!   forms 0x98, 0x90, 0x91, 0x93;
//! - CR (0x0d, 0x8d) when the byte sent before it was `@` (0x40 or 0xc0);
//! - with ESCCTL (either side asked for it): every byte in 0x00-0x1f and
//!   0x80-0x9f.
//!
//! An escaped byte `b` is sent as `ZDLE, b ^ 0x40`.
//!
//! Receiver side ([`UnescapeTable`]): bytes with bit 0x20 or 0x40 set are
//! always data; of the others ZDLE starts an escape, raw XON/XOFF (and, in
//! ESCCTL mode, every raw control byte) are line noise and dropped.

use crate::consts::{XOFF, XON, ZDLE};

const RAW: u8 = 0;
const ALWAYS: u8 = 1;
const AFTER_AT: u8 = 2;

/// Builds the sender's classification table.
fn escape_table(escape_ctl: bool) -> [u8; 256] {
    let mut t = [RAW; 256];
    for (i, slot) in t.iter_mut().enumerate() {
        let b = i as u8;
        if b & 0x60 != 0 {
            continue;
        }
        *slot = match b & 0x7f {
            0x10 | 0x11 | 0x13 | 0x18 => ALWAYS,
            _ if escape_ctl => ALWAYS,
            0x0d => AFTER_AT,
            _ => RAW,
        };
    }
    t
}

/// Escapes data for the wire. Keeps the last byte sent, which the `@ CR`
/// rule needs, across calls.
#[derive(Clone)]
pub struct Escaper {
    table: [u8; 256],
    escape_ctl: bool,
    last: u8,
}

impl Escaper {
    /// A new escaper; `escape_ctl` escapes every control byte (ESCCTL).
    pub fn new(escape_ctl: bool) -> Self {
        Escaper {
            table: escape_table(escape_ctl),
            escape_ctl,
            last: 0,
        }
    }

    /// Switches ESCCTL on or off (when the peer asks for it).
    pub fn set_escape_ctl(&mut self, on: bool) {
        if on != self.escape_ctl {
            self.table = escape_table(on);
            self.escape_ctl = on;
        }
    }

    /// Whether every control byte is escaped.
    pub fn escape_ctl(&self) -> bool {
        self.escape_ctl
    }

    /// Appends `data`, escaped, to `out`.
    pub fn escape_into(&mut self, data: &[u8], out: &mut Vec<u8>) {
        out.reserve(data.len() + data.len() / 16 + 8);
        let table = &self.table;
        let mut rest = data;
        while !rest.is_empty() {
            let run = rest
                .iter()
                .position(|&b| table[usize::from(b)] != RAW)
                .unwrap_or(rest.len());
            if run > 0 {
                out.extend_from_slice(&rest[..run]);
                self.last = rest[run - 1];
                rest = &rest[run..];
                if rest.is_empty() {
                    break;
                }
            }
            let b = rest[0];
            let escape = match table[usize::from(b)] {
                ALWAYS => true,
                _ => self.last & 0x7f == b'@',
            };
            if escape {
                out.push(ZDLE);
                out.push(b ^ 0x40);
                self.last = b ^ 0x40;
            } else {
                out.push(b);
                self.last = b;
            }
            rest = &rest[1..];
        }
    }

    /// Appends one byte, escaped.
    pub fn escape_byte(&mut self, b: u8, out: &mut Vec<u8>) {
        self.escape_into(&[b], out);
    }

    /// Records `b` as the last byte sent (for bytes written without the
    /// escaper, such as a hex header).
    pub fn mark_sent(&mut self, b: u8) {
        self.last = b;
    }

    /// Appends bytes that are sent as they are (frame delimiters); they
    /// count as "last sent" for the `@ CR` rule.
    pub fn raw(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        if let Some(&l) = bytes.last() {
            self.last = l;
        }
        out.extend_from_slice(bytes);
    }
}

/// Class of a received byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxClass {
    /// Plain data.
    Data,
    /// ZDLE: an escape (or a CAN) starts.
    Zdle,
    /// Line noise to drop (raw XON/XOFF; raw control bytes under ESCCTL).
    Skip,
}

/// The receiver's classification table.
#[derive(Clone)]
pub struct UnescapeTable {
    class: [RxClass; 256],
    escape_ctl: bool,
}

impl UnescapeTable {
    /// A new table; `escape_ctl` drops every raw control byte.
    pub fn new(escape_ctl: bool) -> Self {
        let mut class = [RxClass::Data; 256];
        for (i, slot) in class.iter_mut().enumerate() {
            let b = i as u8;
            if b & 0x60 != 0 {
                continue;
            }
            *slot = match b {
                ZDLE => RxClass::Zdle,
                XON | XOFF => RxClass::Skip,
                _ if b == XON | 0x80 || b == XOFF | 0x80 => RxClass::Skip,
                _ if escape_ctl => RxClass::Skip,
                _ => RxClass::Data,
            };
        }
        UnescapeTable { class, escape_ctl }
    }

    /// Whether raw control bytes are dropped.
    pub fn escape_ctl(&self) -> bool {
        self.escape_ctl
    }

    /// The class of `b`.
    #[inline]
    pub fn class(&self, b: u8) -> RxClass {
        self.class[usize::from(b)]
    }

    /// Length of the leading run of plain data bytes in `data`.
    #[inline]
    pub fn data_run(&self, data: &[u8]) -> usize {
        data.iter()
            .position(|&b| self.class[usize::from(b)] != RxClass::Data)
            .unwrap_or(data.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esc(data: &[u8], ctl: bool) -> Vec<u8> {
        let mut e = Escaper::new(ctl);
        let mut out = Vec::new();
        e.escape_into(data, &mut out);
        out
    }

    #[test]
    fn always_escaped_bytes() {
        for b in [0x10u8, 0x11, 0x13, 0x18, 0x90, 0x91, 0x93, 0x98] {
            assert_eq!(esc(&[b], false), vec![ZDLE, b ^ 0x40], "{b:#x}");
        }
        for b in [0x00u8, 0x01, 0x0a, 0x0d, 0x1f, 0x7f, 0x80, 0x8d, 0x9f, 0xff] {
            assert_eq!(esc(&[b], false), vec![b], "{b:#x}");
        }
    }

    #[test]
    fn cr_after_at() {
        assert_eq!(esc(b"@\r", false), vec![b'@', ZDLE, 0x4d]);
        assert_eq!(esc(&[0xc0, 0x8d], false), vec![0xc0, ZDLE, 0xcd]);
        assert_eq!(esc(b"a\r", false), b"a\r".to_vec());
        // Across calls the last byte is remembered.
        let mut e = Escaper::new(false);
        let mut out = Vec::new();
        e.escape_into(b"x@", &mut out);
        e.escape_into(b"\r", &mut out);
        assert_eq!(out, vec![b'x', b'@', ZDLE, 0x4d]);
    }

    #[test]
    fn escape_ctl_escapes_all_controls() {
        for b in (0x00u8..0x20).chain(0x80..0xa0) {
            assert_eq!(esc(&[b], true), vec![ZDLE, b ^ 0x40], "{b:#x}");
        }
        for b in (0x20u8..0x80).chain(0xa0..=0xff) {
            assert_eq!(esc(&[b], true), vec![b], "{b:#x}");
        }
    }

    #[test]
    fn receive_classes() {
        let t = UnescapeTable::new(false);
        assert_eq!(t.class(ZDLE), RxClass::Zdle);
        assert_eq!(t.class(0x91), RxClass::Skip);
        assert_eq!(t.class(0x01), RxClass::Data);
        assert_eq!(t.data_run(b"abc\x18d"), 3);
        let t = UnescapeTable::new(true);
        assert_eq!(t.class(0x01), RxClass::Skip);
        assert_eq!(t.class(0x98), RxClass::Skip);
    }
}
