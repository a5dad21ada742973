//! The 68-byte BitTorrent handshake.

use bytes::{BufMut, BytesMut};

use super::WireError;

/// The protocol string every BitTorrent handshake starts with (after its
/// length byte, 19).
pub const PROTOCOL: &[u8; 19] = b"BitTorrent protocol";

/// The handshake: protocol string, 8 reserved (feature) bytes, info-hash
/// and peer id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handshake {
    /// Feature bits (BEP 4 assigns them).
    pub reserved: [u8; 8],
    /// The torrent.
    pub info_hash: [u8; 20],
    /// The sender's peer id.
    pub peer_id: [u8; 20],
}

impl Handshake {
    /// Encoded length in bytes.
    pub const LEN: usize = 68;

    /// weir's handshake: advertises the fast extension (BEP 6,
    /// `reserved[7] & 0x04`) and the extension protocol (BEP 10,
    /// `reserved[5] & 0x10`). DHT is advertised by [`Handshake::with_dht`].
    pub fn new(info_hash: [u8; 20], peer_id: [u8; 20]) -> Self {
        let mut reserved = [0u8; 8];
        reserved[5] |= 0x10;
        reserved[7] |= 0x04;
        Self {
            reserved,
            info_hash,
            peer_id,
        }
    }

    /// The same handshake advertising a DHT node (BEP 5,
    /// `reserved[7] & 0x01`): a peer that also runs one then sends us its
    /// DHT port in a `port` message, and we send it ours.
    pub fn with_dht(mut self) -> Self {
        self.reserved[7] |= 0x01;
        self
    }

    /// Appends the 68 encoded bytes to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        out.reserve(Self::LEN);
        out.put_u8(PROTOCOL.len() as u8);
        out.put_slice(PROTOCOL);
        out.put_slice(&self.reserved);
        out.put_slice(&self.info_hash);
        out.put_slice(&self.peer_id);
    }

    /// Decodes a handshake from the front of `buf` (the caller then drops
    /// [`Handshake::LEN`] bytes). `Ok(None)`: fewer than 68 bytes so far. A
    /// wrong protocol string is an error as soon as the bytes that differ
    /// have arrived, so a peer speaking something else is dropped at once.
    pub fn decode(buf: &[u8]) -> Result<Option<Handshake>, WireError> {
        let mut expected = [0u8; 20];
        expected[0] = PROTOCOL.len() as u8;
        expected[1..].copy_from_slice(PROTOCOL);
        let have = buf.len().min(20);
        if buf[..have] != expected[..have] {
            return Err(WireError::BadProtocol(buf[..have].to_vec()));
        }
        if buf.len() < Self::LEN {
            return Ok(None);
        }
        let mut h = Handshake {
            reserved: [0; 8],
            info_hash: [0; 20],
            peer_id: [0; 20],
        };
        h.reserved.copy_from_slice(&buf[20..28]);
        h.info_hash.copy_from_slice(&buf[28..48]);
        h.peer_id.copy_from_slice(&buf[48..68]);
        Ok(Some(h))
    }

    /// Whether the sender supports the fast extension (BEP 6).
    pub fn supports_fast(&self) -> bool {
        self.reserved[7] & 0x04 != 0
    }

    /// Whether the sender runs a DHT node (BEP 5).
    pub fn supports_dht(&self) -> bool {
        self.reserved[7] & 0x01 != 0
    }

    /// Whether the sender supports the extension protocol (BEP 10).
    pub fn supports_extended(&self) -> bool {
        self.reserved[5] & 0x10 != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bits() {
        let h = Handshake::new([1; 20], [2; 20]);
        assert!(h.supports_fast() && h.supports_extended());
        let mut out = BytesMut::new();
        h.encode(&mut out);
        assert_eq!(out.len(), Handshake::LEN);
        assert_eq!(&out[..20], b"\x13BitTorrent protocol");
        assert_eq!(Handshake::decode(&out).unwrap(), Some(h));
        for n in 0..Handshake::LEN {
            assert_eq!(Handshake::decode(&out[..n]).unwrap(), None, "{n}");
        }
        let plain = Handshake {
            reserved: [0; 8],
            ..h
        };
        assert!(!plain.supports_fast() && !plain.supports_extended());
    }

    #[test]
    fn wrong_protocol_is_refused_early() {
        assert!(matches!(
            Handshake::decode(b"GET / HTTP/1.1"),
            Err(WireError::BadProtocol(_))
        ));
        assert_eq!(
            Handshake::decode(b"\x13BitTorrent protocoX"),
            Err(WireError::BadProtocol(b"\x13BitTorrent protocoX".to_vec()))
        );
        assert_eq!(
            Handshake::decode(b"\x12"),
            Err(WireError::BadProtocol(vec![0x12]))
        );
    }
}
