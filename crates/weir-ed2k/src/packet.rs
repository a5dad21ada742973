//! eD2k TCP framing.
//!
//! ```text
//! <protocol u8><length u32 LE><opcode u8><payload: length - 1 bytes>
//! ```
//!
//! Protocol `0xE3` carries eDonkey opcodes, `0xC5` eMule extension opcodes,
//! and `0xD4` an eMule opcode whose payload is zlib-compressed (aMule
//! `CPacket::PackPacket` / `UnPackPacket`, `Packet.cpp`). A packed packet
//! from a client unpacks to an eMule packet; from a server to an eDonkey
//! packet (`ServerSocket.cpp:677-683`).
//!
//! [`Decoder`] cuts packets out of a receive buffer without copying: the
//! payload is a [`Bytes`] slice of the buffer, so part data goes on to
//! storage as is. A length above the limit is rejected as soon as the
//! header is in, before anything is buffered for it; packed payloads are
//! inflated into a bounded size.

use bytes::{BufMut, Bytes, BytesMut};

use crate::inflate::{InflateError, inflate_bounded};

/// eDonkey protocol byte.
pub const OP_EDONKEYPROT: u8 = 0xE3;
/// eMule extensions protocol byte.
pub const OP_EMULEPROT: u8 = 0xC5;
/// zlib-packed eMule packet.
pub const OP_PACKEDPROT: u8 = 0xD4;

/// Bytes before the payload: protocol, length, opcode.
pub const HEADER_LEN: usize = 6;

/// The namespace of an opcode (after unpacking).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// `0xE3`: eDonkey opcodes.
    Edonkey,
    /// `0xC5`: eMule extension opcodes.
    Emule,
}

impl Protocol {
    /// The protocol byte.
    pub fn byte(self) -> u8 {
        match self {
            Protocol::Edonkey => OP_EDONKEYPROT,
            Protocol::Emule => OP_EMULEPROT,
        }
    }
}

/// A packet whose frame was not acceptable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// The protocol byte is none of 0xE3, 0xC5, 0xD4.
    #[error("unknown protocol byte {0:#04x}")]
    UnknownProtocol(u8),
    /// The announced length is over the limit.
    #[error("packet of {len} bytes announced, limit is {max}")]
    TooLarge {
        /// Announced length (opcode + payload).
        len: u32,
        /// The limit.
        max: u32,
    },
    /// A length of 0 cannot hold the opcode.
    #[error("packet length 0 (no opcode)")]
    ZeroLength,
    /// A packed payload did not inflate.
    #[error("packed packet (opcode {opcode:#04x}): {err}")]
    Inflate {
        /// The opcode.
        opcode: u8,
        /// Why.
        err: InflateError,
    },
}

/// One packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    /// Opcode namespace.
    pub protocol: Protocol,
    /// The opcode.
    pub opcode: u8,
    /// The payload (after the opcode; inflated if it was packed).
    pub payload: Bytes,
    /// Whether it arrived zlib-packed.
    pub packed: bool,
}

/// Decoder limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest acceptable length field (opcode + payload). aMule drops a
    /// client connection above 2,000,000 (`EMSocket.cpp:41`).
    pub max_packet: u32,
    /// Largest size a packed payload may inflate to (aMule: 50,000 for
    /// clients, 250,000 for servers, `Packet.h:60`, `ServerSocket.cpp:678`).
    pub max_unpacked: usize,
    /// The protocol a packed packet unpacks to.
    pub packed_as: Protocol,
}

impl Limits {
    /// Client-to-client connections.
    pub const CLIENT: Limits = Limits {
        max_packet: 2_000_000,
        max_unpacked: 250_000,
        packed_as: Protocol::Emule,
    };
    /// Client-to-server connections.
    pub const SERVER: Limits = Limits {
        max_packet: 2_000_000,
        max_unpacked: 1_000_000,
        packed_as: Protocol::Edonkey,
    };
}

/// Cuts packets out of a receive buffer.
#[derive(Clone, Debug)]
pub struct Decoder {
    limits: Limits,
}

impl Decoder {
    /// A decoder with these limits.
    pub fn new(limits: Limits) -> Self {
        Self { limits }
    }

    /// The limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Total frame length of the packet at the start of `buf`, once its
    /// header is in; checks protocol and length limit.
    pub fn frame_len(&self, buf: &[u8]) -> Result<Option<usize>, PacketError> {
        if buf.is_empty() {
            return Ok(None);
        }
        match buf[0] {
            OP_EDONKEYPROT | OP_EMULEPROT | OP_PACKEDPROT => {}
            b => return Err(PacketError::UnknownProtocol(b)),
        }
        if buf.len() < 5 {
            return Ok(None);
        }
        let len = u32::from_le_bytes([buf[1], buf[2], buf[3], buf[4]]);
        if len == 0 {
            return Err(PacketError::ZeroLength);
        }
        if len > self.limits.max_packet {
            return Err(PacketError::TooLarge {
                len,
                max: self.limits.max_packet,
            });
        }
        Ok(Some(5 + len as usize))
    }

    /// Takes the next complete packet off the front of `buf`, or returns
    /// `None` when more bytes are needed. On error the connection should
    /// be closed: the stream can no longer be framed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Packet>, PacketError> {
        let Some(n) = self.frame_len(buf)? else {
            return Ok(None);
        };
        if buf.len() < n {
            // Make room once for the whole frame, not per read.
            buf.reserve(n - buf.len());
            return Ok(None);
        }
        let frame = buf.split_to(n).freeze();
        let opcode = frame[5];
        let payload = frame.slice(HEADER_LEN..);
        Ok(Some(match frame[0] {
            OP_EDONKEYPROT => Packet {
                protocol: Protocol::Edonkey,
                opcode,
                payload,
                packed: false,
            },
            OP_EMULEPROT => Packet {
                protocol: Protocol::Emule,
                opcode,
                payload,
                packed: false,
            },
            _ => Packet {
                protocol: self.limits.packed_as,
                opcode,
                payload: inflate_bounded(&payload, self.limits.max_unpacked)
                    .map_err(|err| PacketError::Inflate { opcode, err })?,
                packed: true,
            },
        }))
    }
}

/// The 6-byte header of a packet with `payload_len` bytes after the opcode.
pub fn header(protocol_byte: u8, opcode: u8, payload_len: usize) -> [u8; HEADER_LEN] {
    let l = (payload_len as u32 + 1).to_le_bytes();
    [protocol_byte, l[0], l[1], l[2], l[3], opcode]
}

/// Appends a whole packet.
pub fn put_packet(out: &mut BytesMut, protocol: Protocol, opcode: u8, payload: &[u8]) {
    out.reserve(HEADER_LEN + payload.len());
    out.put_slice(&header(protocol.byte(), opcode, payload.len()));
    out.put_slice(payload);
}

/// Appends a packet, zlib-packed (`0xD4`) when that makes it smaller
/// (aMule `PackPacket`). Only eMule opcodes (or server packets) may be
/// packed.
pub fn put_packed(out: &mut BytesMut, opcode: u8, payload: &[u8], level: u32) {
    match crate::inflate::deflate_if_smaller(payload, level) {
        Some(z) => {
            out.put_slice(&header(OP_PACKEDPROT, opcode, z.len()));
            out.put_slice(&z);
        }
        None => put_packet(out, Protocol::Emule, opcode, payload),
    }
}

/// Builds a packet by letting `f` write the payload in place (no
/// intermediate buffer); the length is patched afterwards.
pub fn build(out: &mut BytesMut, protocol: Protocol, opcode: u8, f: impl FnOnce(&mut BytesMut)) {
    let at = out.len();
    out.put_slice(&header(protocol.byte(), opcode, 0));
    f(out);
    let len = (out.len() - at - 5) as u32;
    out[at + 1..at + 5].copy_from_slice(&len.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn enc(p: Protocol, op: u8, payload: &[u8]) -> BytesMut {
        let mut b = BytesMut::new();
        put_packet(&mut b, p, op, payload);
        b
    }

    #[test]
    fn frames_and_partial_reads() {
        let mut wire = enc(Protocol::Edonkey, 0x01, b"hello");
        wire.extend_from_slice(&enc(Protocol::Emule, 0x87, &[1, 2, 3, 4, 5]));
        assert_eq!(&wire[..6], &[0xE3, 6, 0, 0, 0, 0x01]);
        let mut d = Decoder::new(Limits::CLIENT);
        // Feed byte by byte: nothing until a frame is whole.
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for b in wire.iter() {
            buf.put_u8(*b);
            while let Some(p) = d.decode(&mut buf).unwrap() {
                got.push(p);
            }
        }
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].payload.as_ref(), b"hello");
        assert_eq!((got[1].protocol, got[1].opcode), (Protocol::Emule, 0x87));
        assert!(buf.is_empty());
    }

    #[test]
    fn zero_copy_payload() {
        let mut buf = enc(Protocol::Edonkey, 0x46, &[9u8; 1000]);
        let base = buf.as_ptr() as usize;
        let p = Decoder::new(Limits::CLIENT)
            .decode(&mut buf)
            .unwrap()
            .unwrap();
        assert_eq!(p.payload.as_ptr() as usize, base + HEADER_LEN);
    }

    #[test]
    fn oversized_rejected_before_buffering() {
        let mut d = Decoder::new(Limits::CLIENT);
        let mut buf = BytesMut::from(&[0xE3, 0xff, 0xff, 0xff, 0x7f][..]);
        assert!(matches!(
            d.decode(&mut buf),
            Err(PacketError::TooLarge { .. })
        ));
        assert!(buf.capacity() < 1000);
        let mut buf = BytesMut::from(&[0x00, 1, 0, 0, 0, 1][..]);
        assert_eq!(d.decode(&mut buf), Err(PacketError::UnknownProtocol(0)));
        let mut buf = BytesMut::from(&[0xC5, 0, 0, 0, 0][..]);
        assert_eq!(d.decode(&mut buf), Err(PacketError::ZeroLength));
    }

    #[test]
    fn packed_packets() {
        let payload = vec![42u8; 20_000];
        let mut buf = BytesMut::new();
        put_packed(&mut buf, 0x40, &payload, 9);
        assert_eq!(buf[0], OP_PACKEDPROT);
        assert!(buf.len() < 1000);
        let p = Decoder::new(Limits::CLIENT)
            .decode(&mut buf)
            .unwrap()
            .unwrap();
        assert!(p.packed);
        assert_eq!(p.protocol, Protocol::Emule);
        assert_eq!(p.payload.as_ref(), &payload[..]);
        // A server-side decoder unpacks to eDonkey.
        let mut buf = BytesMut::new();
        put_packed(&mut buf, 0x15, &payload, 9);
        let p = Decoder::new(Limits::SERVER)
            .decode(&mut buf)
            .unwrap()
            .unwrap();
        assert_eq!(p.protocol, Protocol::Edonkey);
        // A zip bomb in a packed packet is an error.
        let mut buf = BytesMut::new();
        put_packed(&mut buf, 0x40, &vec![0u8; 5_000_000], 9);
        assert!(matches!(
            Decoder::new(Limits::CLIENT).decode(&mut buf),
            Err(PacketError::Inflate {
                err: InflateError::TooLarge { .. },
                ..
            })
        ));
        // Incompressible payloads are sent plain.
        let mut buf = BytesMut::new();
        put_packed(&mut buf, 0x40, &[1, 2, 3], 9);
        assert_eq!(buf[0], OP_EMULEPROT);
    }

    #[test]
    fn build_patches_length() {
        let mut b = BytesMut::new();
        build(&mut b, Protocol::Emule, 0x60, |o| o.put_slice(&[1; 12]));
        assert_eq!(&b[..6], &header(0xC5, 0x60, 12));
        assert_eq!(b.len(), 18);
    }

    proptest! {
        #[test]
        fn round_trip(packets in proptest::collection::vec((any::<bool>(), any::<u8>(), proptest::collection::vec(any::<u8>(), 0..300)), 0..10), cut in 1usize..64) {
            let mut wire = BytesMut::new();
            for (e, op, pl) in &packets {
                put_packet(&mut wire, if *e { Protocol::Emule } else { Protocol::Edonkey }, *op, pl);
            }
            let mut d = Decoder::new(Limits::CLIENT);
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            for chunk in wire.chunks(cut) {
                buf.extend_from_slice(chunk);
                while let Some(p) = d.decode(&mut buf).unwrap() {
                    got.push((p.protocol == Protocol::Emule, p.opcode, p.payload.to_vec()));
                }
            }
            prop_assert_eq!(got, packets);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut d = Decoder::new(Limits { max_packet: 1000, max_unpacked: 1000, packed_as: Protocol::Emule });
            let mut buf = BytesMut::from(&bytes[..]);
            loop {
                let head = buf.first().copied();
                match d.decode(&mut buf) {
                    // Within the limits, and framed again it is the same packet.
                    Ok(Some(p)) => {
                        prop_assert!(p.payload.len() < 1000);
                        prop_assert_eq!(p.packed, head == Some(OP_PACKEDPROT));
                        let mut again = BytesMut::new();
                        put_packet(&mut again, p.protocol, p.opcode, &p.payload);
                        let q = Decoder::new(Limits::CLIENT).decode(&mut again).unwrap().unwrap();
                        prop_assert_eq!((q.protocol, q.opcode, q.payload), (p.protocol, p.opcode, p.payload));
                    }
                    Ok(None) => break,
                    Err(e) => {
                        match e {
                            PacketError::UnknownProtocol(b) => prop_assert_eq!(Some(b), head),
                            PacketError::TooLarge { len, max } => prop_assert!(len > max && max == 1000),
                            PacketError::ZeroLength => {}
                            PacketError::Inflate { .. } => prop_assert_eq!(head, Some(OP_PACKEDPROT)),
                        }
                        break;
                    }
                }
            }
        }

        #[test]
        fn truncated_is_incomplete_not_garbage(op in any::<u8>(), pl in proptest::collection::vec(any::<u8>(), 0..100)) {
            let wire = enc(Protocol::Edonkey, op, &pl);
            for cut in 0..wire.len() {
                let mut buf = BytesMut::from(&wire[..cut]);
                prop_assert_eq!(Decoder::new(Limits::CLIENT).decode(&mut buf), Ok(None));
            }
        }
    }
}
