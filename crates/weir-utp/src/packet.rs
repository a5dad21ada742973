//! The uTP packet codec (BEP 29).
//!
//! ```text
//!  0       4       8               16              24              32
//!  +-------+-------+---------------+---------------+---------------+
//!  | type  | ver   | extension     | connection_id                 |
//!  +-------+-------+---------------+---------------+---------------+
//!  | timestamp_microseconds                                        |
//!  +---------------+---------------+---------------+---------------+
//!  | timestamp_difference_microseconds                             |
//!  +---------------+---------------+---------------+---------------+
//!  | wnd_size                                                      |
//!  +---------------+---------------+---------------+---------------+
//!  | seq_nr                        | ack_nr                        |
//!  +---------------+---------------+---------------+---------------+
//! ```
//!
//! All fields big-endian. `extension` names the first extension; each
//! extension is `[next extension type, length, length bytes]`, the chain
//! ends at type 0, and the payload follows it.
//!
//! - Selective ACK (type 1): a bitmask, bit `i` (byte `i / 8`, least
//!   significant bit first) says packet `ack_nr + 2 + i` was received. BEP 29
//!   asks for lengths that are multiples of 4, and [`encode`] writes only
//!   those; libtorrent sends `ceil(span / 8)` bytes, so the decoder takes any
//!   length (0 means no selective ACK). Only the first one counts.
//! - Unknown extensions (libtorrent's close reason, type 2, among them) are
//!   skipped. weir pads MTU probes with extensions of type
//!   [`EXT_PADDING`], which every implementation skips in the same way.
//!
//! Decoding is strict about bounds (a chain running past the datagram is an
//! error, never a panic) and borrows: nothing is copied.

use bytes::{BufMut, BytesMut};

/// Bytes in the fixed header.
pub const HEADER_LEN: usize = 20;

/// The only uTP version.
pub const VERSION: u8 = 1;

/// Extension type of a selective ACK.
pub const EXT_SACK: u8 = 1;

/// Extension type weir uses to pad MTU probes (skipped by receivers, as any
/// unknown extension).
pub const EXT_PADDING: u8 = 0x57;

/// Longest selective ACK bitmask weir writes (covers 1024 packets).
pub const MAX_SACK_LEN: usize = 128;

/// The five packet types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PacketType {
    /// Data (carries payload).
    Data = 0,
    /// End of the sender's stream; takes a sequence number.
    Fin = 1,
    /// A pure acknowledgement (its sequence number is not consumed).
    State = 2,
    /// Abort the connection.
    Reset = 3,
    /// Open a connection; takes a sequence number.
    Syn = 4,
}

impl PacketType {
    /// The type with wire number `n`, if any.
    pub fn from_u8(n: u8) -> Option<PacketType> {
        Some(match n {
            0 => PacketType::Data,
            1 => PacketType::Fin,
            2 => PacketType::State,
            3 => PacketType::Reset,
            4 => PacketType::Syn,
            _ => return None,
        })
    }
}

/// The fixed 20-byte header (the `extension` byte is derived from what
/// follows it, so it is not a field here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Packet type.
    pub ptype: PacketType,
    /// Connection id (the receiver's id, except in a SYN: see the crate docs).
    pub conn_id: u16,
    /// Sender's clock when sent, microseconds (wraps).
    pub timestamp_us: u32,
    /// Sender's receive time of the last packet it got minus that packet's
    /// timestamp, microseconds (0: none yet).
    pub timestamp_diff_us: u32,
    /// Bytes the sender can still take into its receive buffer.
    pub wnd_size: u32,
    /// This packet's sequence number.
    pub seq_nr: u16,
    /// Last sequence number received in order.
    pub ack_nr: u16,
}

/// A decoded datagram, borrowing from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The fixed header.
    pub header: Header,
    /// The first selective-ACK bitmask, if any (non-empty).
    pub sack: Option<&'a [u8]>,
    /// Offset of the payload in the datagram.
    pub payload_offset: usize,
    /// The payload (everything after the extension chain).
    pub payload: &'a [u8],
}

/// Why a datagram is not a valid uTP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than the fixed header.
    #[error("{len}-byte datagram is shorter than the 20-byte uTP header")]
    TooShort {
        /// Datagram length.
        len: usize,
    },
    /// Version nibble is not 1.
    #[error("uTP version {0} (only version 1 exists)")]
    Version(u8),
    /// Type nibble is above 4.
    #[error("unknown uTP packet type {0}")]
    Type(u8),
    /// An extension header or its data runs past the end.
    #[error("uTP extension at byte {at} runs past the end of the datagram")]
    Extension {
        /// Offset of the extension header that does not fit.
        at: usize,
    },
}

/// Decodes one datagram. Never panics; borrows the selective ACK and the
/// payload from `buf`.
pub fn decode(buf: &[u8]) -> Result<Packet<'_>, DecodeError> {
    if buf.len() < HEADER_LEN {
        return Err(DecodeError::TooShort { len: buf.len() });
    }
    let version = buf[0] & 0x0f;
    if version != VERSION {
        return Err(DecodeError::Version(version));
    }
    let ptype = PacketType::from_u8(buf[0] >> 4).ok_or(DecodeError::Type(buf[0] >> 4))?;
    let be16 = |i: usize| u16::from_be_bytes([buf[i], buf[i + 1]]);
    let be32 = |i: usize| u32::from_be_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
    let header = Header {
        ptype,
        conn_id: be16(2),
        timestamp_us: be32(4),
        timestamp_diff_us: be32(8),
        wnd_size: be32(12),
        seq_nr: be16(16),
        ack_nr: be16(18),
    };
    let mut ext = buf[1];
    let mut pos = HEADER_LEN;
    let mut sack = None;
    // Each extension takes at least 2 bytes, so the chain ends within the
    // datagram: no separate count bound is needed.
    while ext != 0 {
        if pos + 2 > buf.len() {
            return Err(DecodeError::Extension { at: pos });
        }
        let next = buf[pos];
        let len = usize::from(buf[pos + 1]);
        let data = pos + 2;
        if data + len > buf.len() {
            return Err(DecodeError::Extension { at: pos });
        }
        if ext == EXT_SACK && sack.is_none() && len > 0 {
            sack = Some(&buf[data..data + len]);
        }
        pos = data + len;
        ext = next;
    }
    Ok(Packet {
        header,
        sack,
        payload_offset: pos,
        payload: &buf[pos..],
    })
}

/// Writes the fixed header into `out[..20]`; `first_ext` is the type of the
/// first extension (0 for none).
///
/// # Panics
/// If `out` is shorter than [`HEADER_LEN`] (a caller bug, never input).
pub fn write_header(h: &Header, first_ext: u8, out: &mut [u8]) {
    out[0] = ((h.ptype as u8) << 4) | VERSION;
    out[1] = first_ext;
    out[2..4].copy_from_slice(&h.conn_id.to_be_bytes());
    out[4..8].copy_from_slice(&h.timestamp_us.to_be_bytes());
    out[8..12].copy_from_slice(&h.timestamp_diff_us.to_be_bytes());
    out[12..16].copy_from_slice(&h.wnd_size.to_be_bytes());
    out[16..18].copy_from_slice(&h.seq_nr.to_be_bytes());
    out[18..20].copy_from_slice(&h.ack_nr.to_be_bytes());
}

/// Bytes a selective ACK extension of `sack_len` bitmask bytes adds (0 for none).
pub fn sack_ext_len(sack_len: usize) -> usize {
    if sack_len == 0 { 0 } else { 2 + sack_len }
}

/// The data lengths of the padding extensions that make up `pad` bytes of
/// extension chain (each extension is 2 header bytes plus up to 255).
/// `pad` of 1 cannot be made and is rounded up to 2.
fn padding_chunks(pad: usize) -> impl Iterator<Item = u8> {
    let mut left = if pad == 1 { 2 } else { pad };
    std::iter::from_fn(move || {
        if left == 0 {
            return None;
        }
        // Never leave a remainder of 1 (it could not be made).
        let mut take = left.min(257);
        if left - take == 1 {
            take -= 1;
        }
        left -= take;
        Some((take - 2) as u8)
    })
}

/// Appends a whole packet to `out`: header, selective ACK (`sack`, whose
/// length [`encode`] pads with zero bytes to a multiple of 4, at most
/// [`MAX_SACK_LEN`]), `pad` bytes of padding extensions, then `payload`.
pub fn encode(h: &Header, sack: Option<&[u8]>, pad: usize, payload: &[u8], out: &mut BytesMut) {
    let sack = sack.filter(|s| !s.is_empty());
    let sack_len = sack
        .map_or(0, |s| s.len().div_ceil(4) * 4)
        .min(MAX_SACK_LEN);
    let pad_chunks: Vec<u8> = padding_chunks(pad).collect();
    let first_ext = if sack.is_some() {
        EXT_SACK
    } else if !pad_chunks.is_empty() {
        EXT_PADDING
    } else {
        0
    };
    out.reserve(HEADER_LEN + sack_ext_len(sack_len) + pad + payload.len() + 1);
    let start = out.len();
    out.put_bytes(0, HEADER_LEN);
    write_header(h, first_ext, &mut out[start..start + HEADER_LEN]);
    if let Some(s) = sack {
        out.put_u8(if pad_chunks.is_empty() {
            0
        } else {
            EXT_PADDING
        });
        out.put_u8(sack_len as u8);
        let n = s.len().min(sack_len);
        out.put_slice(&s[..n]);
        out.put_bytes(0, sack_len - n);
    }
    for (i, &len) in pad_chunks.iter().enumerate() {
        let last = i + 1 == pad_chunks.len();
        out.put_u8(if last { 0 } else { EXT_PADDING });
        out.put_u8(len);
        out.put_bytes(0, usize::from(len));
    }
    out.put_slice(payload);
}

/// Whether a datagram looks like uTP, for sharing one UDP socket with the
/// DHT and UDP trackers. Cheap: two bytes and the length are looked at.
///
/// The rule: at least 20 bytes, the low nibble of the first byte (the
/// version) is 1 and the high nibble (the type) is at most 4, so the first
/// byte is one of `0x01 0x11 0x21 0x31 0x41`.
///
/// - DHT (BEP 5) messages are bencoded dictionaries and start with `d`
///   (0x64): version nibble 4, never uTP.
/// - UDP tracker (BEP 15) responses start with a 4-byte big-endian action
///   (0 to 3), so their first byte is 0: never uTP. (Requests, which a
///   client never receives, start with the 64-bit protocol id `0x417..`
///   or a connection id; they are not expected on a client socket.)
///
/// Failure modes: any other protocol whose datagrams start with one of
/// those five bytes and are 20 bytes or more is taken for uTP, e.g. a STUN
/// binding response (type 0x0101, 20-byte header) or a random-looking
/// encrypted protocol (about 5 in 256 of its datagrams). Such a datagram is
/// then decoded as uTP and almost always dropped (no connection has its
/// address and id), so the cost is that protocol losing the datagram, never
/// a uTP connection being disturbed unless the id and address match.
/// A uTP packet is never taken for DHT or tracker traffic.
pub fn is_utp(data: &[u8]) -> bool {
    data.len() >= HEADER_LEN && data[0] & 0x0f == VERSION && data[0] >> 4 <= 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header(ptype: PacketType) -> Header {
        Header {
            ptype,
            conn_id: 0x1234,
            timestamp_us: 0xdead_beef,
            timestamp_diff_us: 77,
            wnd_size: 1 << 20,
            seq_nr: 65535,
            ack_nr: 3,
        }
    }

    #[test]
    fn known_bytes() {
        let mut out = BytesMut::new();
        encode(&header(PacketType::State), None, 0, &[], &mut out);
        assert_eq!(
            &out[..],
            &[
                0x21, 0, 0x12, 0x34, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 77, 0, 0x10, 0, 0, 0xff,
                0xff, 0, 3
            ]
        );
        let p = decode(&out).unwrap();
        assert_eq!(p.header, header(PacketType::State));
        assert_eq!(p.sack, None);
        assert!(p.payload.is_empty());
    }

    #[test]
    fn sack_is_padded_to_a_multiple_of_four() {
        let mut out = BytesMut::new();
        encode(&header(PacketType::State), Some(&[0b101]), 0, b"", &mut out);
        assert_eq!(out.len(), 20 + 2 + 4);
        assert_eq!(out[1], EXT_SACK);
        assert_eq!(&out[20..], &[0, 4, 0b101, 0, 0, 0]);
        assert_eq!(decode(&out).unwrap().sack, Some(&[0b101, 0, 0, 0][..]));
    }

    #[test]
    fn libtorrent_style_short_sack_and_unknown_extensions_are_accepted() {
        // SACK of 1 byte (libtorrent sends ceil(span/8)), then a close-reason
        // extension (type 2, 4 bytes), then payload.
        let mut b = vec![0u8; 20];
        write_header(&header(PacketType::Data), EXT_SACK, &mut b);
        b.extend_from_slice(&[2, 1, 0xff, 0, 4, 0, 0, 0, 9]);
        b.extend_from_slice(b"hello");
        let p = decode(&b).unwrap();
        assert_eq!(p.sack, Some(&[0xff][..]));
        assert_eq!(p.payload, b"hello");
        assert_eq!(p.payload_offset, 29);
    }

    #[test]
    fn bad_input_gives_the_right_error() {
        assert_eq!(decode(&[0x01; 19]), Err(DecodeError::TooShort { len: 19 }));
        let mut b = vec![0u8; 20];
        write_header(&header(PacketType::Data), 0, &mut b);
        b[0] = 0x02;
        assert_eq!(decode(&b), Err(DecodeError::Version(2)));
        b[0] = 0x51;
        assert_eq!(decode(&b), Err(DecodeError::Type(5)));
        b[0] = 0x01;
        b[1] = EXT_SACK;
        assert_eq!(decode(&b), Err(DecodeError::Extension { at: 20 }));
        b.extend_from_slice(&[0, 8, 1, 2]);
        assert_eq!(decode(&b), Err(DecodeError::Extension { at: 20 }));
        // A chain whose second link is cut off.
        let mut c = vec![0u8; 20];
        write_header(&header(PacketType::Data), 9, &mut c);
        c.extend_from_slice(&[9, 0, 9]);
        assert_eq!(decode(&c), Err(DecodeError::Extension { at: 22 }));
    }

    #[test]
    fn padding_reaches_exact_sizes() {
        for pad in [0usize, 2, 3, 100, 256, 257, 258, 259, 600, 5000] {
            let mut out = BytesMut::new();
            encode(&header(PacketType::Data), None, pad, b"xyz", &mut out);
            assert_eq!(out.len(), 20 + pad + 3, "pad {pad}");
            let p = decode(&out).unwrap();
            assert_eq!(p.payload, b"xyz");
            assert_eq!(p.sack, None);
        }
        // 1 cannot be made: it becomes 2.
        let mut out = BytesMut::new();
        encode(&header(PacketType::Data), None, 1, b"", &mut out);
        assert_eq!(out.len(), 22);
    }

    #[test]
    fn demux_rule() {
        let mut out = BytesMut::new();
        for t in [
            PacketType::Data,
            PacketType::Fin,
            PacketType::State,
            PacketType::Reset,
            PacketType::Syn,
        ] {
            out.clear();
            encode(&header(t), None, 0, &[], &mut out);
            assert!(is_utp(&out));
        }
        assert!(!is_utp(
            b"d1:ad2:id20:abcdefghij0123456789e1:q4:ping1:t2:aa1:y1:qe"
        ));
        // UDP tracker connect response: action 0, transaction id, connection id.
        assert!(!is_utp(&[0, 0, 0, 0, 1, 2, 3, 4, 9, 9, 9, 9, 9, 9, 9, 9]));
        assert!(!is_utp(&[
            0, 0, 0, 1, 1, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 1, 0, 0, 0, 2, 0
        ]));
        assert!(!is_utp(&[0x01; 19]));
        assert!(!is_utp(&[0x51; 40]));
    }

    fn any_type() -> impl Strategy<Value = PacketType> {
        (0u8..5).prop_map(|n| PacketType::from_u8(n).unwrap())
    }

    proptest! {
        #[test]
        fn round_trip(
            t in any_type(),
            conn_id: u16, ts: u32, td: u32, wnd: u32, seq: u16, ack: u16,
            sack in proptest::option::of(proptest::collection::vec(any::<u8>(), 1..=MAX_SACK_LEN)),
            pad in 0usize..1000,
            payload in proptest::collection::vec(any::<u8>(), 0..2000),
        ) {
            let h = Header { ptype: t, conn_id, timestamp_us: ts, timestamp_diff_us: td, wnd_size: wnd, seq_nr: seq, ack_nr: ack };
            let mut out = BytesMut::new();
            encode(&h, sack.as_deref(), pad, &payload, &mut out);
            prop_assert!(is_utp(&out));
            let p = decode(&out).unwrap();
            prop_assert_eq!(p.header, h);
            prop_assert_eq!(p.payload, &payload[..]);
            match &sack {
                None => prop_assert_eq!(p.sack, None),
                Some(s) => {
                    let got = p.sack.unwrap();
                    prop_assert_eq!(got.len() % 4, 0);
                    prop_assert_eq!(&got[..s.len()], &s[..]);
                    prop_assert!(got[s.len()..].iter().all(|&b| b == 0));
                }
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            match decode(&data) {
                Ok(p) => {
                    prop_assert!(data.len() >= HEADER_LEN);
                    prop_assert!(is_utp(&data));
                    prop_assert_eq!(p.payload_offset + p.payload.len(), data.len());
                }
                Err(DecodeError::TooShort { len }) => prop_assert!(len < HEADER_LEN),
                Err(DecodeError::Version(v)) => prop_assert_ne!(v, VERSION),
                Err(DecodeError::Type(t)) => prop_assert!(t > 4),
                Err(DecodeError::Extension { at }) => prop_assert!(at >= HEADER_LEN && at <= data.len()),
            }
        }

        #[test]
        fn arbitrary_extension_chains_never_panic(
            first: u8,
            tail in proptest::collection::vec(any::<u8>(), 0..600),
        ) {
            let mut b = vec![0u8; 20];
            write_header(&Header { ptype: PacketType::Data, conn_id: 1, timestamp_us: 0, timestamp_diff_us: 0, wnd_size: 0, seq_nr: 0, ack_nr: 0 }, first, &mut b);
            b.extend_from_slice(&tail);
            if let Ok(p) = decode(&b) {
                prop_assert!(p.payload_offset >= HEADER_LEN);
                if let Some(s) = p.sack { prop_assert!(!s.is_empty()); }
            }
        }
    }
}
