//! The ut_metadata message codec: a bencoded dictionary, followed by the
//! raw piece for `data` messages.

use bytes::Bytes;
use weir_bencode::OwnedValue;

use super::{PIECE_LEN, piece_count, piece_len};

/// `msg_type` of a request.
pub const MSG_REQUEST: i64 = 0;
/// `msg_type` of a data message.
pub const MSG_DATA: i64 = 1;
/// `msg_type` of a reject.
pub const MSG_REJECT: i64 = 2;

/// A ut_metadata message (the payload after the extended message id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetadataMsg {
    /// Asks for piece `piece`.
    Request {
        /// Piece index.
        piece: u32,
    },
    /// Piece `piece` of a `total_size`-byte info dictionary.
    Data {
        /// Piece index.
        piece: u32,
        /// Size of the whole info dictionary.
        total_size: u64,
        /// The piece (16 KiB, the last one shorter): a slice of the
        /// received payload.
        data: Bytes,
    },
    /// The sender will not send piece `piece`.
    Reject {
        /// Piece index.
        piece: u32,
    },
    /// A `msg_type` this codec does not know; BEP 9 says to ignore it.
    Unknown {
        /// The type.
        msg_type: i64,
    },
}

/// Bounds the decoder applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetadataLimits {
    /// Largest info dictionary accepted (bytes); piece indices and
    /// `total_size` are checked against it.
    pub max_size: u64,
}

impl Default for MetadataLimits {
    fn default() -> Self {
        Self {
            max_size: super::DEFAULT_MAX_SIZE,
        }
    }
}

/// A malformed ut_metadata message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MetadataMsgError {
    /// The dictionary is not valid bencode.
    #[error("ut_metadata: bad bencode: {0}")]
    Bencode(String),
    /// A required key is missing or has the wrong type.
    #[error("ut_metadata: `{0}` missing or not an integer")]
    Key(&'static str),
    /// A piece index past what the size allows.
    #[error("ut_metadata: piece {piece} out of range (at most {max} pieces)")]
    PieceRange {
        /// The index.
        piece: i64,
        /// Pieces allowed.
        max: u64,
    },
    /// `total_size` of 0 or above the limit.
    #[error("ut_metadata: total_size {size} outside 1..={max}")]
    Size {
        /// The size.
        size: i64,
        /// The limit.
        max: u64,
    },
    /// A data message whose piece is not the length the size implies.
    #[error("ut_metadata: piece {piece} carries {len} bytes, expected {expected}")]
    DataLength {
        /// The index.
        piece: u32,
        /// Bytes carried.
        len: usize,
        /// Bytes expected.
        expected: usize,
    },
    /// Bytes after the dictionary of a request or reject.
    #[error("ut_metadata: {0} bytes after a message that carries none")]
    Trailing(usize),
}

impl MetadataMsg {
    /// Decodes a payload (fuzz entry point: any bytes, never panics).
    /// `Data` is a zero-copy slice of `payload`.
    pub fn decode(payload: &Bytes, limits: &MetadataLimits) -> Result<Self, MetadataMsgError> {
        let bl = weir_bencode::Limits {
            max_depth: 4,
            max_input: payload.len(),
        };
        let (v, used) = weir_bencode::decode_prefix_with(payload, &bl)
            .map_err(|e| MetadataMsgError::Bencode(e.to_string()))?;
        let d = v
            .as_dict()
            .ok_or(MetadataMsgError::Bencode("not a dictionary".into()))?;
        let int = |k: &'static str| {
            d.get(k.as_bytes())
                .and_then(|v| v.as_int())
                .ok_or(MetadataMsgError::Key(k))
        };
        let msg_type = int("msg_type")?;
        if !(MSG_REQUEST..=MSG_REJECT).contains(&msg_type) {
            return Ok(MetadataMsg::Unknown { msg_type });
        }
        let max_pieces = u64::from(piece_count(limits.max_size));
        let raw_piece = int("piece")?;
        let piece = u32::try_from(raw_piece)
            .ok()
            .filter(|&p| u64::from(p) < max_pieces)
            .ok_or(MetadataMsgError::PieceRange {
                piece: raw_piece,
                max: max_pieces,
            })?;
        let rest = payload.len() - used;
        match msg_type {
            MSG_DATA => {
                let raw = int("total_size")?;
                let total_size = u64::try_from(raw)
                    .ok()
                    .filter(|&s| s >= 1 && s <= limits.max_size)
                    .ok_or(MetadataMsgError::Size {
                        size: raw,
                        max: limits.max_size,
                    })?;
                let count = piece_count(total_size);
                if piece >= count {
                    return Err(MetadataMsgError::PieceRange {
                        piece: raw_piece,
                        max: u64::from(count),
                    });
                }
                let expected = piece_len(total_size, piece);
                if rest != expected {
                    return Err(MetadataMsgError::DataLength {
                        piece,
                        len: rest,
                        expected,
                    });
                }
                Ok(MetadataMsg::Data {
                    piece,
                    total_size,
                    data: payload.slice(used..),
                })
            }
            _ if rest != 0 => Err(MetadataMsgError::Trailing(rest)),
            MSG_REQUEST => Ok(MetadataMsg::Request { piece }),
            _ => Ok(MetadataMsg::Reject { piece }),
        }
    }

    /// [`MetadataMsg::decode`] from a plain slice (copies a data piece).
    pub fn decode_slice(payload: &[u8], limits: &MetadataLimits) -> Result<Self, MetadataMsgError> {
        Self::decode(&Bytes::copy_from_slice(payload), limits)
    }

    /// The payload bytes (dictionary, then the piece for `Data`).
    pub fn encode(&self) -> Vec<u8> {
        let mut d = OwnedValue::dict();
        let (t, piece) = match self {
            MetadataMsg::Request { piece } => (MSG_REQUEST, *piece),
            MetadataMsg::Data { piece, .. } => (MSG_DATA, *piece),
            MetadataMsg::Reject { piece } => (MSG_REJECT, *piece),
            MetadataMsg::Unknown { msg_type } => (*msg_type, 0),
        };
        d.insert("msg_type", OwnedValue::Int(t));
        d.insert("piece", OwnedValue::Int(i64::from(piece)));
        if let MetadataMsg::Data { total_size, .. } = self {
            d.insert("total_size", OwnedValue::Int(*total_size as i64));
        }
        let mut out = d.to_vec();
        if let MetadataMsg::Data { data, .. } = self {
            out.reserve(PIECE_LEN.min(data.len()));
            out.extend_from_slice(data);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn lim() -> MetadataLimits {
        MetadataLimits::default()
    }

    #[test]
    fn known_encodings() {
        assert_eq!(
            MetadataMsg::Request { piece: 0 }.encode(),
            b"d8:msg_typei0e5:piecei0ee"
        );
        assert_eq!(
            MetadataMsg::Reject { piece: 3 }.encode(),
            b"d8:msg_typei2e5:piecei3ee"
        );
        let d = MetadataMsg::Data {
            piece: 1,
            total_size: 16384 + 5,
            data: Bytes::from_static(b"hello"),
        };
        let e = d.encode();
        assert_eq!(e, b"d8:msg_typei1e5:piecei1e10:total_sizei16389eehello");
        assert_eq!(MetadataMsg::decode(&Bytes::from(e), &lim()).unwrap(), d);
    }

    #[test]
    fn bad_messages_are_typed_errors() {
        let dec = |b: &[u8]| MetadataMsg::decode_slice(b, &lim());
        assert!(matches!(
            dec(b"d8:msg_typei0ee"),
            Err(MetadataMsgError::Key("piece"))
        ));
        assert!(matches!(
            dec(b"d5:piecei0ee"),
            Err(MetadataMsgError::Key("msg_type"))
        ));
        assert!(matches!(
            dec(b"d8:msg_typei0e5:piecei-1ee"),
            Err(MetadataMsgError::PieceRange { .. })
        ));
        assert!(matches!(
            dec(b"d8:msg_typei0e5:piecei1024ee"),
            Err(MetadataMsgError::PieceRange {
                piece: 1024,
                max: 1024
            })
        ));
        assert!(dec(b"d8:msg_typei0e5:piecei1023ee").is_ok());
        assert!(matches!(
            dec(b"d8:msg_typei0e5:piecei0eexx"),
            Err(MetadataMsgError::Trailing(2))
        ));
        assert!(matches!(
            dec(b"d8:msg_typei1e5:piecei0e10:total_sizei0eex"),
            Err(MetadataMsgError::Size { size: 0, .. })
        ));
        assert!(matches!(
            dec(b"d8:msg_typei1e5:piecei0e10:total_sizei16777217eex"),
            Err(MetadataMsgError::Size { .. })
        ));
        assert!(matches!(
            dec(b"d8:msg_typei1e5:piecei1e10:total_sizei5eehello"),
            Err(MetadataMsgError::PieceRange { piece: 1, max: 1 })
        ));
        assert!(matches!(
            dec(b"d8:msg_typei1e5:piecei0e10:total_sizei5eehell"),
            Err(MetadataMsgError::DataLength {
                len: 4,
                expected: 5,
                ..
            })
        ));
        assert!(matches!(dec(b"li1ee"), Err(MetadataMsgError::Bencode(_))));
        assert!(matches!(
            dec(b"d8:msg_type"),
            Err(MetadataMsgError::Bencode(_))
        ));
        assert_eq!(
            dec(b"d8:msg_typei9ee").unwrap(),
            MetadataMsg::Unknown { msg_type: 9 }
        );
        // A smaller limit shrinks the piece range.
        let small = MetadataLimits { max_size: 20_000 };
        assert!(matches!(
            MetadataMsg::decode_slice(b"d8:msg_typei0e5:piecei2ee", &small),
            Err(MetadataMsgError::PieceRange { max: 2, .. })
        ));
    }

    fn arb_msg() -> impl Strategy<Value = MetadataMsg> {
        prop_oneof![
            (0u32..1024).prop_map(|piece| MetadataMsg::Request { piece }),
            (0u32..1024).prop_map(|piece| MetadataMsg::Reject { piece }),
            (1u64..200_000, any::<u8>()).prop_map(|(size, fill)| {
                let count = piece_count(size);
                let piece = u32::from(fill) % count;
                let len = piece_len(size, piece);
                MetadataMsg::Data {
                    piece,
                    total_size: size,
                    data: Bytes::from(vec![fill; len]),
                }
            }),
        ]
    }

    proptest! {
        #[test]
        fn round_trip(m in arb_msg()) {
            let b = Bytes::from(m.encode());
            prop_assert_eq!(MetadataMsg::decode(&b, &lim()).unwrap(), m);
        }

        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = MetadataMsg::decode_slice(&b, &lim());
            let mut m = b"d8:msg_typei1e5:piecei0e10:total_sizei".to_vec();
            m.extend_from_slice(&b);
            let _ = MetadataMsg::decode_slice(&m, &lim());
        }
    }
}
