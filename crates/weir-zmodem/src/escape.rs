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

use bytes::BytesMut;

use crate::consts::{XOFF, XON, ZDLE};
use crate::scan::{Set, copy64, mask64};

const RAW: u8 = 0;
const ALWAYS: u8 = 1;
const AFTER_AT: u8 = 2;

/// Bytes [`UnescapeTable::unescape_blocks`] decodes on the stack before
/// appending them to the caller's buffer: one copy of about 1 KiB per
/// append, small enough for libc's vector loop (a string instruction
/// takes over at a few KiB).
const STAGE: usize = 1024;

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
    ///
    /// Blocks of 64 bytes are scanned with SSE2 candidate masks; between
    /// candidates whole 64-byte windows are copied (the output is sized
    /// ahead, with slack) and only the cursor moves, so a run costs one
    /// fixed-size copy. The last 128 bytes go through the scalar path.
    pub fn escape_into(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let n = data.len();
        let mut i = 0;
        if n >= 128 {
            let set = if self.escape_ctl {
                Set::Ctl
            } else {
                Set::TxStd
            };
            let mut j = out.len();
            // Expected growth is small (1/26 of random bytes are escaped,
            // 1/4 under ESCCTL); the loop grows the buffer when needed.
            out.resize(j + n + n / 4 + 256, 0);
            while i + 128 <= n {
                if j + 192 > out.len() {
                    let grow = out.len() + (n - i) + 256;
                    out.resize(grow, 0);
                }
                let block: &[u8; 64] = data[i..i + 64].try_into().expect("64-byte block");
                let mut m = mask64(block, set);
                let mut p = 0;
                while m != 0 {
                    let k = m.trailing_zeros() as usize;
                    m &= m - 1;
                    copy64(&mut out[j..], &data[i + p..]);
                    j += k - p;
                    let c = block[k];
                    let prev = if k > 0 { block[k - 1] } else { self.last };
                    let cls = self.table[usize::from(c)];
                    // Branch-free: a third of the candidates are not escaped
                    // (0x12, or CR without `@` before it).
                    let esc = (cls == ALWAYS) | ((cls == AFTER_AT) & (prev & 0x7f == b'@'));
                    out[j] = if esc { ZDLE } else { c };
                    out[j + 1] = c ^ 0x40;
                    j += 1 + usize::from(esc);
                    p = k + 1;
                }
                copy64(&mut out[j..], &data[i + p..]);
                j += 64 - p;
                i += 64;
                // In normal mode `@` and its high form are never escaped, so
                // the raw byte is what the `@ CR` rule needs to see.
                let c = block[63];
                self.last = if self.table[usize::from(c)] == ALWAYS {
                    c ^ 0x40
                } else {
                    c
                };
            }
            out.truncate(j);
        }
        self.escape_scalar(&data[i..], out);
    }

    /// The byte-run path for short spans and block tails.
    fn escape_scalar(&mut self, data: &[u8], out: &mut Vec<u8>) {
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

    /// Unescapes data from `input` into `out` a 64-byte block at a time:
    /// plain bytes, simple escapes (ZDLE + a byte with bit 0x40 set) and
    /// dropped noise bytes. Stops before anything else (a frame end, CAN, a
    /// ZRUB, noise after ZDLE), within the last 128 bytes of `input`, or
    /// before producing more than `room` bytes. Returns (consumed, produced).
    ///
    /// The runs between candidates are moved as whole 64-byte windows,
    /// which write past the end of what is decoded. They land in a small
    /// stage on the stack, appended to `out` about 1 KiB at a time:
    /// writing the windows into `out` itself needed its spare capacity
    /// initialised first, and zeroing it on every call (a call per frame
    /// end, 8 KiB or more each) cost more than the decoding.
    pub fn unescape_blocks(&self, input: &[u8], out: &mut BytesMut, room: usize) -> (usize, usize) {
        let n = input.len();
        if n < 128 || room < 64 {
            return (0, 0);
        }
        let set = if self.escape_ctl {
            Set::Ctl
        } else {
            Set::RxStd
        };
        // Output never exceeds input. A block makes at most 64 bytes, and
        // its window copies write at most 127 bytes past where it started,
        // so a block starts only while `j <= STAGE`.
        let limit = n.min(room);
        let mut stage = [0u8; STAGE + 128];
        let mut made = 0;
        let mut i = 0;
        let mut j = 0;
        'blocks: while i + 128 <= n && made + j + 64 <= limit {
            if j > STAGE {
                out.extend_from_slice(&stage[..j]);
                made += j;
                j = 0;
            }
            let buf = &mut stage[..];
            let block: &[u8; 64] = input[i..i + 64].try_into().expect("64-byte block");
            let mut m = mask64(block, set);
            let mut p = 0;
            while m != 0 {
                let k = m.trailing_zeros() as usize;
                m &= m - 1;
                if k < p {
                    continue;
                }
                copy64(&mut buf[j..], &input[i + p..]);
                j += k - p;
                if block[k] == ZDLE {
                    let e = input[i + k + 1];
                    if e & 0x60 != 0x40 {
                        i += k;
                        break 'blocks;
                    }
                    buf[j] = e ^ 0x40;
                    j += 1;
                    p = k + 2;
                } else {
                    p = k + 1;
                }
            }
            if p < 64 {
                copy64(&mut buf[j..], &input[i + p..]);
                j += 64 - p;
            }
            i += p.max(64);
        }
        out.extend_from_slice(&stage[..j]);
        (i, made + j)
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

    proptest::proptest! {
        #[test]
        fn block_path_matches_byte_path(data in proptest::collection::vec(
                proptest::prop_oneof![proptest::num::u8::ANY, proptest::sample::select(vec![0x0du8, 0x8d, b'@', 0xc0, 0x18, 0x11, 0x91, 0x12])],
                0..1500),
                ctl in proptest::bool::ANY, last in proptest::num::u8::ANY) {
            let mut fast = Escaper::new(ctl);
            fast.last = last;
            let mut slow = fast.clone();
            let mut a = b"prefix".to_vec();
            let mut b = a.clone();
            fast.escape_into(&data, &mut a);
            slow.escape_scalar(&data, &mut b);
            proptest::prop_assert_eq!(a, b);
            proptest::prop_assert_eq!(fast.last & 0x7f == b'@', slow.last & 0x7f == b'@');
        }
    }

    /// Feeds escaped data to `unescape_blocks` as the decoder does (the
    /// rest a byte at a time), so runs cross the stage many times over.
    fn unescape_all(t: &UnescapeTable, wire: &[u8], room: usize) -> (Vec<u8>, usize) {
        let mut out = BytesMut::from(&b"kept"[..]);
        let mut i = 0;
        let mut fast = 0;
        while i < wire.len() {
            let left = room - (out.len() - 4);
            let (used, made) = t.unescape_blocks(&wire[i..], &mut out, left);
            assert!(made <= used && made <= left);
            fast += made;
            if used > 0 {
                i += used;
                continue;
            }
            if wire[i] == ZDLE {
                out.extend_from_slice(&[wire[i + 1] ^ 0x40]);
                i += 2;
            } else {
                out.extend_from_slice(&wire[i..=i]);
                i += 1;
            }
        }
        assert_eq!(&out[..4], b"kept");
        (out[4..].to_vec(), fast)
    }

    #[test]
    fn block_path_unescapes_long_runs_through_its_stage() {
        // Every byte value, so a twentieth or so are escaped.
        let data: Vec<u8> = (0..20_000u32)
            .map(|k| (k.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let mut wire = Vec::new();
        Escaper::new(false).escape_into(&data, &mut wire);
        let t = UnescapeTable::new(false);
        let (got, fast) = unescape_all(&t, &wire, usize::MAX / 2);
        assert_eq!(got, data);
        assert!(fast > 19_000, "block path made {fast}");
        // A bound on what one call may produce is kept.
        for room in [64, 100, 1_000, 1_100, 3_000] {
            let mut out = BytesMut::new();
            let (used, made) = t.unescape_blocks(&wire, &mut out, room);
            assert!(made <= room && made + 64 > room);
            assert_eq!(out.len(), made);
            assert_eq!(&out[..], &data[..made]);
            assert!(used >= made);
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
