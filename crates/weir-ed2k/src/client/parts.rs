//! Part status bitfields and part-data packet helpers.

use bytes::{BufMut, Bytes, BytesMut};

use super::msg::ClientMessage;
use super::{emule_op as eop, op};
use crate::Md4Hash;
use crate::packet::{self, HEADER_LEN};
use crate::wire::{Reader, WireError};

/// A part bitfield (`OP_FILESTATUS`, extended info): `<count u16><bits>`,
/// bit `i` of byte `i / 8` (least significant first) set when part `i` is
/// complete. A count of 0 means "complete file" (`DownloadClient.cpp:400`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PartStatus {
    /// Number of parts (the ed2k part count) or 0 for a complete file.
    pub count: u16,
    /// `(count + 7) / 8` bytes.
    pub bits: Bytes,
}

impl PartStatus {
    /// The status of a complete file (count 0).
    pub fn complete() -> Self {
        Self::default()
    }

    /// A status of `count` parts, `has(i)` telling which are complete.
    pub fn from_fn(count: u16, has: impl Fn(usize) -> bool) -> Self {
        let mut b = vec![0u8; (count as usize).div_ceil(8)];
        for i in 0..count as usize {
            if has(i) {
                b[i / 8] |= 1 << (i % 8);
            }
        }
        PartStatus {
            count,
            bits: b.into(),
        }
    }

    /// Whether the peer has part `i` (always, for a complete file).
    pub fn has(&self, i: usize) -> bool {
        self.count == 0 || self.bits.get(i / 8).is_some_and(|b| b >> (i % 8) & 1 == 1)
    }

    /// Reads it.
    pub fn decode(r: &mut Reader) -> Result<Self, WireError> {
        let count = r.u16("part count")?;
        let bits = r.bytes((count as usize).div_ceil(8), "part status bits")?;
        Ok(PartStatus { count, bits })
    }

    /// Writes it.
    pub fn encode(&self, out: &mut impl BufMut) {
        out.put_u16_le(self.count);
        let n = (self.count as usize).div_ceil(8);
        out.put_slice(&self.bits[..n.min(self.bits.len())]);
        out.put_bytes(0, n.saturating_sub(self.bits.len()));
    }
}

/// Splits block ranges into `OP_REQUESTPARTS` packets of exactly three
/// `[start, end)` ranges each, the last padded with `(0, 0)`: the wire
/// carries three per packet however many are pending (aMule #484), so a
/// deeper local pending list goes out as several packets.
pub fn request_parts(
    file: Md4Hash,
    ranges: &[(u64, u64)],
) -> impl Iterator<Item = ClientMessage> + '_ {
    ranges.chunks(3).map(move |c| {
        let mut r = [(0, 0); 3];
        r[..c.len()].copy_from_slice(c);
        ClientMessage::RequestParts { file, ranges: r }
    })
}

pub(super) fn put_offsets(o: &mut impl BufMut, file: &Md4Hash, start: u64, end: u64, wide: bool) {
    o.put_slice(&file.0);
    if wide {
        o.put_u64_le(start);
        o.put_u64_le(end);
    } else {
        o.put_u32_le(start as u32);
        o.put_u32_le(end as u32);
    }
}

/// Writes the header of an `OP_SENDINGPART(_I64)` packet for `[start, end)`
/// (frame header, file hash, offsets), so that the data itself can follow
/// in the same vectored write without being copied. 64-bit offsets are
/// used when an offset does not fit 32 bits (as aMule does).
pub fn sending_part_head(out: &mut BytesMut, file: &Md4Hash, start: u64, end: u64) {
    let wide = start > 0xFFFF_FFFF || end > 0xFFFF_FFFF;
    let len = (end - start) as usize + 16 + if wide { 16 } else { 8 };
    let (proto, opcode) = if wide {
        (packet::OP_EMULEPROT, eop::SENDINGPART_I64)
    } else {
        (packet::OP_EDONKEYPROT, op::SENDINGPART)
    };
    out.reserve(HEADER_LEN + 32);
    out.put_slice(&packet::header(proto, opcode, len));
    put_offsets(out, file, start, end, wide);
}
