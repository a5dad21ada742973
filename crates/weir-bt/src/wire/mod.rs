//! The peer wire codec: BEP 3 messages, the BEP 6 fast extension and the
//! BEP 10 extension protocol.
//!
//! [`decode`] takes messages off the front of a `BytesMut` that the runtime
//! fills with large reads. It is length-checked before it waits: as soon as
//! a frame's 4-byte length and 1-byte id are in, a length that the message
//! type cannot have is a [`WireError`] (naming the message and the numbers),
//! so a peer announcing a 4 GiB frame is dropped without buffering anything.
//! `Piece` data, `Bitfield` and `Extended` payloads are `Bytes` slices of
//! the received buffer (split off and frozen): no copy.
//!
//! Message ids this codec does not know are **skipped** (consumed and
//! ignored) when their frame is at most [`UNKNOWN_MAX`] bytes, as BEP 3
//! asks of unknown messages; longer ones are an error.

mod ext;
mod handshake;

pub use ext::{ExtHandshake, MAX_M_ENTRIES, UT_METADATA, UT_PEX};
pub use handshake::{Handshake, PROTOCOL};

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The block size every client requests (16 KiB).
pub const BLOCK_LEN: u32 = 16 * 1024;
/// Default largest `Request`/`Piece` block accepted (128 KiB): requests up
/// to this size are served; peers normally ask for 16 KiB.
pub const MAX_BLOCK: u32 = 128 * 1024;
/// Default largest `Extended` payload (1 MiB).
pub const MAX_EXTENDED: u32 = 1 << 20;
/// Largest frame (length field) of an unknown message id that is skipped
/// rather than refused.
pub const UNKNOWN_MAX: u32 = 32 * 1024;
/// Largest bitfield accepted while the piece count is unknown (1 MiB: 8 Mi
/// pieces).
pub const UNKNOWN_BITFIELD_MAX: u32 = 1 << 20;

/// Where a block is: piece index, byte offset in the piece, length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockRef {
    /// Piece index.
    pub index: u32,
    /// Offset of the block in the piece.
    pub begin: u32,
    /// Length of the block.
    pub length: u32,
}

/// A peer wire message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// Zero-length frame.
    KeepAlive,
    /// id 0: the sender will not serve requests.
    Choke,
    /// id 1: the sender will serve requests.
    Unchoke,
    /// id 2: the sender wants data.
    Interested,
    /// id 3: the sender wants nothing.
    NotInterested,
    /// id 4: the sender has a piece.
    Have {
        /// Piece index.
        index: u32,
    },
    /// id 5: which pieces the sender has (bit 0x80 of byte 0 is piece 0).
    Bitfield(Bytes),
    /// id 6: ask for a block.
    Request(BlockRef),
    /// id 7: a block of data.
    Piece {
        /// Piece index.
        index: u32,
        /// Offset in the piece.
        begin: u32,
        /// The data (a slice of the receive buffer).
        data: Bytes,
    },
    /// id 8: withdraw a request.
    Cancel(BlockRef),
    /// id 9: the sender's DHT port.
    Port(u16),
    /// id 13 (BEP 6): the sender suggests a piece.
    Suggest {
        /// Piece index.
        index: u32,
    },
    /// id 14 (BEP 6): the sender has every piece.
    HaveAll,
    /// id 15 (BEP 6): the sender has no piece.
    HaveNone,
    /// id 16 (BEP 6): a request that will not be served.
    Reject(BlockRef),
    /// id 17 (BEP 6): a piece the receiver may request while choked.
    AllowedFast {
        /// Piece index.
        index: u32,
    },
    /// id 20 (BEP 10): an extension message; `id` 0 is the handshake.
    Extended {
        /// Extended message id.
        id: u8,
        /// Its payload.
        payload: Bytes,
    },
}

impl Message {
    /// The message's name, for errors and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Message::KeepAlive => "keep-alive",
            Message::Choke => "choke",
            Message::Unchoke => "unchoke",
            Message::Interested => "interested",
            Message::NotInterested => "not interested",
            Message::Have { .. } => "have",
            Message::Bitfield(_) => "bitfield",
            Message::Request(_) => "request",
            Message::Piece { .. } => "piece",
            Message::Cancel(_) => "cancel",
            Message::Port(_) => "port",
            Message::Suggest { .. } => "suggest",
            Message::HaveAll => "have all",
            Message::HaveNone => "have none",
            Message::Reject(_) => "reject",
            Message::AllowedFast { .. } => "allowed fast",
            Message::Extended { .. } => "extended",
        }
    }
}

/// What the decoder accepts from one peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Pieces in the torrent. 0 means not yet known (a magnet download
    /// before the metadata arrived): piece indices are then not checked and
    /// a bitfield may be any length up to [`UNKNOWN_BITFIELD_MAX`] bytes.
    pub piece_count: u32,
    /// Largest block length accepted in `Request`, `Cancel`, `Reject` and
    /// `Piece` (a length of 0 is always an error).
    pub max_block: u32,
    /// Largest `Extended` payload (after the extended id byte).
    pub max_extended: u32,
}

impl Limits {
    /// Limits for a torrent of `piece_count` pieces, with blocks up to
    /// [`MAX_BLOCK`] and extended payloads up to [`MAX_EXTENDED`].
    pub fn new(piece_count: u32) -> Self {
        Self {
            piece_count,
            max_block: MAX_BLOCK,
            max_extended: MAX_EXTENDED,
        }
    }

    fn bitfield_len(&self) -> Option<u32> {
        (self.piece_count != 0).then(|| self.piece_count.div_ceil(8))
    }

    /// The longest frame (value of the length prefix) any message may have.
    pub fn max_frame(&self) -> u32 {
        let bitfield = 1 + self.bitfield_len().unwrap_or(UNKNOWN_BITFIELD_MAX);
        self.max_block
            .saturating_add(9)
            .max(self.max_extended.saturating_add(2))
            .max(bitfield)
            .max(UNKNOWN_MAX)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self::new(0)
    }
}

/// A message a peer should not have sent; the caller disconnects it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The handshake does not start with `\x13BitTorrent protocol`.
    #[error("bad handshake: starts with {0:02x?}, expected \\x13BitTorrent protocol")]
    BadProtocol(Vec<u8>),
    /// A frame longer than any message may be (id not yet seen).
    #[error("frame length {len} exceeds the largest message allowed ({max})")]
    FrameTooLong {
        /// Declared length.
        len: u32,
        /// Largest allowed.
        max: u32,
    },
    /// A fixed-size message with the wrong length.
    #[error("{msg} message of length {len}, expected {expected}")]
    BadLength {
        /// Message name.
        msg: &'static str,
        /// Declared frame length.
        len: u32,
        /// Required frame length.
        expected: u32,
    },
    /// A variable-size message longer than allowed.
    #[error("{msg} message of length {len} exceeds the limit of {max}")]
    TooLong {
        /// Message name (or `unknown id N`).
        msg: String,
        /// Declared frame length.
        len: u32,
        /// Largest allowed frame length.
        max: u32,
    },
    /// A block length of 0 or above the limit.
    #[error("{msg} message with block length {length}, allowed 1..={max}")]
    BlockLength {
        /// Message name.
        msg: &'static str,
        /// The block length.
        length: u32,
        /// Largest allowed.
        max: u32,
    },
    /// A piece index past the end of the torrent.
    #[error("{msg} message for piece {index}, but the torrent has {piece_count} pieces")]
    IndexOutOfRange {
        /// Message name.
        msg: &'static str,
        /// The index.
        index: u32,
        /// Pieces in the torrent.
        piece_count: u32,
    },
    /// A bitfield with bits set past the last piece.
    #[error("bitfield has bits set past piece {piece_count}")]
    SpareBits {
        /// Pieces in the torrent.
        piece_count: u32,
    },
    /// A malformed extension handshake.
    #[error("extension handshake: {0}")]
    ExtHandshake(String),
}

const ID_NAMES: [&str; 21] = [
    "choke",
    "unchoke",
    "interested",
    "not interested",
    "have",
    "bitfield",
    "request",
    "piece",
    "cancel",
    "port",
    "",
    "",
    "",
    "suggest",
    "have all",
    "have none",
    "reject",
    "allowed fast",
    "",
    "",
    "extended",
];

/// Checks a frame's declared length against what message `id` allows.
/// Returns `Ok(true)` for a known id, `Ok(false)` for an unknown id to skip.
fn check_len(id: u8, len: u32, limits: &Limits) -> Result<bool, WireError> {
    let name = ID_NAMES.get(id as usize).copied().unwrap_or("");
    let exact = |expected: u32| {
        if len == expected {
            Ok(true)
        } else {
            Err(WireError::BadLength {
                msg: name,
                len,
                expected,
            })
        }
    };
    match id {
        0..=3 | 14 | 15 => exact(1),
        4 | 13 | 17 => exact(5),
        6 | 8 | 16 => exact(13),
        9 => exact(3),
        5 => match limits.bitfield_len() {
            Some(n) => exact(1 + n),
            None if len <= 1 + UNKNOWN_BITFIELD_MAX => Ok(true),
            None => Err(WireError::TooLong {
                msg: name.into(),
                len,
                max: 1 + UNKNOWN_BITFIELD_MAX,
            }),
        },
        7 => {
            if len < 9 {
                return Err(WireError::BadLength {
                    msg: name,
                    len,
                    expected: 9 + BLOCK_LEN,
                });
            }
            let length = len - 9;
            if length == 0 || length > limits.max_block {
                return Err(WireError::BlockLength {
                    msg: name,
                    length,
                    max: limits.max_block,
                });
            }
            Ok(true)
        }
        20 => {
            if len < 2 {
                return Err(WireError::BadLength {
                    msg: name,
                    len,
                    expected: 2,
                });
            }
            if len - 2 > limits.max_extended {
                return Err(WireError::TooLong {
                    msg: name.into(),
                    len,
                    max: limits.max_extended.saturating_add(2),
                });
            }
            Ok(true)
        }
        _ if len <= UNKNOWN_MAX => Ok(false),
        _ => Err(WireError::TooLong {
            msg: format!("unknown id {id}"),
            len,
            max: UNKNOWN_MAX,
        }),
    }
}

fn check_index(msg: &'static str, index: u32, limits: &Limits) -> Result<u32, WireError> {
    if limits.piece_count != 0 && index >= limits.piece_count {
        return Err(WireError::IndexOutOfRange {
            msg,
            index,
            piece_count: limits.piece_count,
        });
    }
    Ok(index)
}

fn block(msg: &'static str, p: &[u8], limits: &Limits) -> Result<BlockRef, WireError> {
    let index = check_index(msg, be32(&p[0..4]), limits)?;
    let length = be32(&p[8..12]);
    if length == 0 || length > limits.max_block {
        return Err(WireError::BlockLength {
            msg,
            length,
            max: limits.max_block,
        });
    }
    Ok(BlockRef {
        index,
        begin: be32(&p[4..8]),
        length,
    })
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Decodes one message from the front of `buf`, splitting it off (`Piece`
/// data, `Bitfield` and `Extended` payloads are `Bytes` slices of the
/// split-off frame: zero copy). `Ok(None)`: more bytes are needed. Frames
/// with an unknown id are skipped (see the module docs). After an error the
/// buffer is left as it was and the peer should be dropped.
pub fn decode(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Message>, WireError> {
    loop {
        if buf.len() < 4 {
            return Ok(None);
        }
        let len = be32(&buf[..4]);
        if len == 0 {
            buf.advance(4);
            return Ok(Some(Message::KeepAlive));
        }
        if buf.len() < 5 {
            let max = limits.max_frame();
            if len > max {
                return Err(WireError::FrameTooLong { len, max });
            }
            return Ok(None);
        }
        let id = buf[4];
        let known = check_len(id, len, limits)?;
        let total = 4 + len as usize;
        if buf.len() < total {
            return Ok(None);
        }
        if !known {
            buf.advance(total);
            continue;
        }
        let p = &buf[5..total];
        let msg = match id {
            0 => Message::Choke,
            1 => Message::Unchoke,
            2 => Message::Interested,
            3 => Message::NotInterested,
            4 => Message::Have {
                index: check_index("have", be32(p), limits)?,
            },
            5 => {
                if limits.piece_count != 0 {
                    let spare = (p.len() as u64) * 8 - u64::from(limits.piece_count);
                    let last = p[p.len() - 1];
                    if spare > 0 && last & ((1u8 << spare) - 1) != 0 {
                        return Err(WireError::SpareBits {
                            piece_count: limits.piece_count,
                        });
                    }
                }
                let frame = buf.split_to(total).freeze();
                return Ok(Some(Message::Bitfield(frame.slice(5..))));
            }
            6 => Message::Request(block("request", p, limits)?),
            7 => {
                let index = check_index("piece", be32(&p[0..4]), limits)?;
                let begin = be32(&p[4..8]);
                let frame = buf.split_to(total).freeze();
                return Ok(Some(Message::Piece {
                    index,
                    begin,
                    data: frame.slice(13..),
                }));
            }
            8 => Message::Cancel(block("cancel", p, limits)?),
            9 => Message::Port(u16::from_be_bytes([p[0], p[1]])),
            13 => Message::Suggest {
                index: check_index("suggest", be32(p), limits)?,
            },
            14 => Message::HaveAll,
            15 => Message::HaveNone,
            16 => Message::Reject(block("reject", p, limits)?),
            17 => Message::AllowedFast {
                index: check_index("allowed fast", be32(p), limits)?,
            },
            20 => {
                let ext = p[0];
                let frame = buf.split_to(total).freeze();
                return Ok(Some(Message::Extended {
                    id: ext,
                    payload: frame.slice(6..),
                }));
            }
            _ => unreachable!("check_len accepts only the ids above as known"),
        };
        buf.advance(total);
        return Ok(Some(msg));
    }
}

/// The 13-byte header of a `Piece` message carrying `len` bytes, so the
/// runtime can send header and a shared payload `Bytes` in one vectored
/// write without copying the payload.
pub fn piece_header(index: u32, begin: u32, len: u32) -> [u8; 13] {
    let mut h = [0u8; 13];
    h[0..4].copy_from_slice(&(9 + len).to_be_bytes());
    h[4] = 7;
    h[5..9].copy_from_slice(&index.to_be_bytes());
    h[9..13].copy_from_slice(&begin.to_be_bytes());
    h
}

fn put_block(out: &mut BytesMut, id: u8, b: &BlockRef) {
    out.put_u32(13);
    out.put_u8(id);
    out.put_u32(b.index);
    out.put_u32(b.begin);
    out.put_u32(b.length);
}

fn put_index(out: &mut BytesMut, id: u8, index: u32) {
    out.put_u32(5);
    out.put_u8(id);
    out.put_u32(index);
}

fn put_bare(out: &mut BytesMut, id: u8) {
    out.put_u32(1);
    out.put_u8(id);
}

/// Appends the encoded message to `out` (for `Piece`, header and data; see
/// [`piece_header`] for the copy-free path).
pub fn encode(msg: &Message, out: &mut BytesMut) {
    match msg {
        Message::KeepAlive => out.put_u32(0),
        Message::Choke => put_bare(out, 0),
        Message::Unchoke => put_bare(out, 1),
        Message::Interested => put_bare(out, 2),
        Message::NotInterested => put_bare(out, 3),
        Message::Have { index } => put_index(out, 4, *index),
        Message::Bitfield(bits) => {
            out.reserve(5 + bits.len());
            out.put_u32(1 + bits.len() as u32);
            out.put_u8(5);
            out.put_slice(bits);
        }
        Message::Request(b) => put_block(out, 6, b),
        Message::Piece { index, begin, data } => {
            out.reserve(13 + data.len());
            out.put_slice(&piece_header(*index, *begin, data.len() as u32));
            out.put_slice(data);
        }
        Message::Cancel(b) => put_block(out, 8, b),
        Message::Port(p) => {
            out.put_u32(3);
            out.put_u8(9);
            out.put_u16(*p);
        }
        Message::Suggest { index } => put_index(out, 13, *index),
        Message::HaveAll => put_bare(out, 14),
        Message::HaveNone => put_bare(out, 15),
        Message::Reject(b) => put_block(out, 16, b),
        Message::AllowedFast { index } => put_index(out, 17, *index),
        Message::Extended { id, payload } => {
            out.reserve(6 + payload.len());
            out.put_u32(2 + payload.len() as u32);
            out.put_u8(20);
            out.put_u8(*id);
            out.put_slice(payload);
        }
    }
}
