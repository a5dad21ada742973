//! The two frame checks of ZMODEM: CRC-16/XMODEM (CCITT polynomial 0x1021,
//! initial value 0, sent big-endian) and CRC-32 (IEEE, as in zip; sent
//! little-endian). Both run over whole spans.

use crc::{CRC_16_XMODEM, Crc, Table};

static CRC16: Crc<u16, Table<16>> = Crc::<u16, Table<16>>::new(&CRC_16_XMODEM);

/// Which check a header or data subpacket carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrcKind {
    /// CRC-16/XMODEM, two bytes big-endian.
    Crc16,
    /// CRC-32 (IEEE), four bytes little-endian.
    Crc32,
}

impl CrcKind {
    /// Bytes of check value on the wire (before escaping).
    pub fn wire_len(self) -> usize {
        match self {
            CrcKind::Crc16 => 2,
            CrcKind::Crc32 => 4,
        }
    }
}

/// An incremental frame check of either kind.
#[derive(Clone)]
pub enum Check {
    /// CRC-16 in progress.
    Crc16(crc::Digest<'static, u16, Table<16>>),
    /// CRC-32 in progress.
    Crc32(crc32fast::Hasher),
}

impl Check {
    /// Starts a check of `kind`.
    pub fn new(kind: CrcKind) -> Self {
        match kind {
            CrcKind::Crc16 => Check::Crc16(CRC16.digest()),
            CrcKind::Crc32 => Check::Crc32(crc32fast::Hasher::new()),
        }
    }

    /// Feeds a span.
    pub fn update(&mut self, data: &[u8]) {
        match self {
            Check::Crc16(d) => d.update(data),
            Check::Crc32(h) => h.update(data),
        }
    }

    /// Finishes and writes the check value in wire byte order into `out`;
    /// returns how many bytes were written (2 or 4).
    pub fn finish_into(self, out: &mut [u8; 4]) -> usize {
        match self {
            Check::Crc16(d) => {
                out[..2].copy_from_slice(&d.finalize().to_be_bytes());
                2
            }
            Check::Crc32(h) => {
                *out = h.finalize().to_le_bytes();
                4
            }
        }
    }
}

/// CRC-16/XMODEM of `data`.
pub fn crc16(data: &[u8]) -> u16 {
    CRC16.checksum(data)
}

/// CRC-32 (IEEE) of `data`.
pub fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

/// The wire bytes of the check of `kind` over `parts` (concatenated).
pub fn check_bytes(kind: CrcKind, parts: &[&[u8]]) -> ([u8; 4], usize) {
    let mut c = Check::new(kind);
    for p in parts {
        c.update(p);
    }
    let mut out = [0u8; 4];
    let n = c.finish_into(&mut out);
    (out, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // The standard check values of both algorithms.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        let (b, n) = check_bytes(CrcKind::Crc16, &[b"1234", b"56789"]);
        assert_eq!(&b[..n], &[0x31, 0xc3]);
        let (b, n) = check_bytes(CrcKind::Crc32, &[b"123456789"]);
        assert_eq!(&b[..n], &0xcbf4_3926u32.to_le_bytes());
    }
}
