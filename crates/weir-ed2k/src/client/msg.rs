//! The client message enum and its codec.

use std::net::Ipv4Addr;

use bytes::{BufMut, Bytes, BytesMut};

use super::hello::{EmuleInfo, Hello};
use super::multipacket::{ExtInfo, MultiAnswer, MultiRequest};
use super::parts::PartStatus;
use super::parts::put_offsets;
use super::{emule_op as eop, op};
use crate::hash::RecoveryData;
use crate::packet::{self, Packet, Protocol};
use crate::wire::{Reader, WireError, invalid};
use crate::{AichHash, Md4Hash};

/// What the decoder must know about the peer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeCtx {
    /// The peer's announced extended-requests version (misc options 1):
    /// how much extended info follows its file name requests.
    pub peer_ext_requests: u8,
}

/// A known opcode with a payload that does not fit its layout.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{protocol:?} opcode {opcode:#04x}: {err}")]
pub struct DecodeError {
    /// Namespace.
    pub protocol: Protocol,
    /// Opcode.
    pub opcode: u8,
    /// What is wrong.
    pub err: WireError,
}

/// A client-to-client message.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientMessage {
    /// `OP_HELLO`.
    Hello(Hello),
    /// `OP_HELLOANSWER`.
    HelloAnswer(Hello),
    /// `OP_EMULEINFO`.
    EmuleInfo(EmuleInfo),
    /// `OP_EMULEINFOANSWER`.
    EmuleInfoAnswer(EmuleInfo),
    /// `OP_REQUESTFILENAME` (the older single request).
    RequestFileName {
        /// File.
        file: Md4Hash,
        /// Requester's part status (when extended requests are on).
        ext: Option<ExtInfo>,
    },
    /// `OP_REQFILENAMEANSWER`.
    ReqFileNameAnswer {
        /// File.
        file: Md4Hash,
        /// Raw name bytes.
        name: Bytes,
    },
    /// `OP_SETREQFILEID`: asks for the file status.
    SetReqFileId {
        /// File.
        file: Md4Hash,
    },
    /// `OP_FILESTATUS`.
    FileStatus {
        /// File.
        file: Md4Hash,
        /// Which parts the sender has.
        status: PartStatus,
    },
    /// `OP_FILEREQANSNOFIL`: the peer does not share the file.
    FileReqAnsNoFil {
        /// File.
        file: Md4Hash,
    },
    /// `OP_HASHSETREQUEST`.
    HashSetRequest {
        /// File.
        file: Md4Hash,
    },
    /// `OP_HASHSETANSWER`: `<file><count u16><hashes>`.
    HashSetAnswer {
        /// File.
        file: Md4Hash,
        /// The wire hashset.
        hashes: Vec<Md4Hash>,
    },
    /// `OP_MULTIPACKET` / `OP_MULTIPACKET_EXT`.
    MultiPacket {
        /// File.
        file: Md4Hash,
        /// File size (`OP_MULTIPACKET_EXT` only).
        size: Option<u64>,
        /// Requests.
        entries: Vec<MultiRequest>,
    },
    /// `OP_MULTIPACKETANSWER`.
    MultiPacketAnswer {
        /// File.
        file: Md4Hash,
        /// Answers.
        entries: Vec<MultiAnswer>,
    },
    /// `OP_AICHFILEHASHREQ` (outside a multipacket).
    AichFileHashReq {
        /// File.
        file: Md4Hash,
    },
    /// `OP_AICHFILEHASHANS` (outside a multipacket).
    AichFileHashAns {
        /// File.
        file: Md4Hash,
        /// Master hash.
        master: AichHash,
    },
    /// `OP_AICHREQUEST`: recovery data for one part.
    AichRequest {
        /// File.
        file: Md4Hash,
        /// Part index.
        part: u16,
        /// The master hash the requester trusts.
        master: AichHash,
    },
    /// `OP_AICHANSWER`: `data` is `None` for the failure answer (hash only).
    AichAnswer {
        /// File.
        file: Md4Hash,
        /// Part, master hash and recovery data.
        data: Option<(u16, AichHash, RecoveryData)>,
    },
    /// `OP_STARTUPLOADREQ`: asks for an upload slot.
    StartUploadReq {
        /// File.
        file: Md4Hash,
    },
    /// `OP_ACCEPTUPLOADREQ`: slot granted, send block requests.
    AcceptUploadReq,
    /// `OP_QUEUERANKING` (eMule): `<rank u16>` + 10 zero bytes.
    QueueRanking {
        /// Place in the queue.
        rank: u16,
    },
    /// `OP_QUEUERANK` (eDonkey): `<rank u32>`.
    QueueRank {
        /// Place in the queue.
        rank: u32,
    },
    /// `OP_REQUESTPARTS` / `OP_REQUESTPARTS_I64`: exactly three
    /// `[start, end)` ranges; unused ones are `(0, 0)`.
    RequestParts {
        /// File.
        file: Md4Hash,
        /// The three ranges.
        ranges: [(u64, u64); 3],
    },
    /// `OP_SENDINGPART` / `OP_SENDINGPART_I64`: `data` is `[start, end)`.
    SendingPart {
        /// File.
        file: Md4Hash,
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
        /// The bytes (a slice of the receive buffer).
        data: Bytes,
        /// Sent with 64-bit offsets.
        wide: bool,
    },
    /// `OP_COMPRESSEDPART` / `_I64`: a piece of the zlib stream of the
    /// block starting at `start`.
    CompressedPart {
        /// File.
        file: Md4Hash,
        /// Start of the block this stream inflates to.
        start: u64,
        /// Total compressed length of the block's stream.
        packed_len: u32,
        /// This piece of the stream.
        data: Bytes,
        /// Sent with a 64-bit offset.
        wide: bool,
    },
    /// `OP_CANCELTRANSFER`.
    CancelTransfer,
    /// `OP_OUTOFPARTREQS`: the uploader ends the slot.
    OutOfPartReqs,
    /// `OP_END_OF_DOWNLOAD`.
    EndOfDownload {
        /// File.
        file: Md4Hash,
    },
    /// `OP_SECIDENTSTATE`: `<state u8><challenge u32>` (1: signature
    /// needed, 2: key and signature needed).
    SecIdentState {
        /// State.
        state: u8,
        /// Random challenge to sign.
        challenge: u32,
    },
    /// `OP_PUBLICKEY`: `<len u8><key>`.
    PublicKey {
        /// DER public key.
        key: Bytes,
    },
    /// `OP_SIGNATURE`: `<len u8><signature>[<ip kind u8>]`.
    Signature {
        /// The signature.
        signature: Bytes,
        /// SecIdent v2 challenge-IP kind.
        ip_kind: Option<u8>,
    },
    /// `OP_REQUESTSOURCES` (outside a multipacket).
    RequestSources {
        /// File.
        file: Md4Hash,
    },
    /// `OP_REQUESTSOURCES2`.
    RequestSources2 {
        /// File.
        file: Md4Hash,
        /// SX2 version.
        version: u8,
        /// Options.
        options: u16,
    },
    /// `OP_PUBLICIP_REQ`.
    PublicIpReq,
    /// `OP_PUBLICIP_ANSWER`.
    PublicIpAnswer {
        /// The requester's address as seen by the peer.
        ip: Ipv4Addr,
    },
    /// `OP_MESSAGE`: a chat line.
    Message {
        /// Raw text.
        text: Bytes,
    },
    /// `OP_CHANGE_CLIENT_ID`.
    ChangeClientId {
        /// New id.
        id: u32,
        /// New server.
        server_ip: Ipv4Addr,
    },
    /// `OP_FILEDESC`: rating and comment.
    FileDesc {
        /// Rating.
        rating: u8,
        /// Raw comment.
        comment: Bytes,
    },
    /// Any other opcode, kept raw.
    Unknown {
        /// Namespace.
        protocol: Protocol,
        /// Opcode.
        opcode: u8,
        /// Payload.
        payload: Bytes,
    },
}

/// Largest hashset accepted (a 256 GiB file has 28,260 parts).
const MAX_HASHSET: usize = 30_000;

impl ClientMessage {
    /// Decodes a packet.
    pub fn decode(p: &Packet, ctx: &DecodeCtx) -> Result<Self, DecodeError> {
        let mut r = Reader::new(p.payload.clone());
        decode_inner(p.protocol, p.opcode, &mut r, ctx).map_err(|err| DecodeError {
            protocol: p.protocol,
            opcode: p.opcode,
            err,
        })
    }

    /// The protocol byte and opcode this message is sent with.
    pub fn opcode(&self) -> (Protocol, u8) {
        use ClientMessage as M;
        use Protocol::{Edonkey as E, Emule as X};
        match self {
            M::Hello(_) => (E, op::HELLO),
            M::HelloAnswer(_) => (E, op::HELLOANSWER),
            M::EmuleInfo(_) => (X, eop::EMULEINFO),
            M::EmuleInfoAnswer(_) => (X, eop::EMULEINFOANSWER),
            M::RequestFileName { .. } => (E, op::REQUESTFILENAME),
            M::ReqFileNameAnswer { .. } => (E, op::REQFILENAMEANSWER),
            M::SetReqFileId { .. } => (E, op::SETREQFILEID),
            M::FileStatus { .. } => (E, op::FILESTATUS),
            M::FileReqAnsNoFil { .. } => (E, op::FILEREQANSNOFIL),
            M::HashSetRequest { .. } => (E, op::HASHSETREQUEST),
            M::HashSetAnswer { .. } => (E, op::HASHSETANSWER),
            M::MultiPacket { size: Some(_), .. } => (X, eop::MULTIPACKET_EXT),
            M::MultiPacket { size: None, .. } => (X, eop::MULTIPACKET),
            M::MultiPacketAnswer { .. } => (X, eop::MULTIPACKETANSWER),
            M::AichFileHashReq { .. } => (X, eop::AICHFILEHASHREQ),
            M::AichFileHashAns { .. } => (X, eop::AICHFILEHASHANS),
            M::AichRequest { .. } => (X, eop::AICHREQUEST),
            M::AichAnswer { .. } => (X, eop::AICHANSWER),
            M::StartUploadReq { .. } => (E, op::STARTUPLOADREQ),
            M::AcceptUploadReq => (E, op::ACCEPTUPLOADREQ),
            M::QueueRanking { .. } => (X, eop::QUEUERANKING),
            M::QueueRank { .. } => (E, op::QUEUERANK),
            M::RequestParts { ranges, .. } => {
                if ranges
                    .iter()
                    .any(|&(s, e)| s > 0xFFFF_FFFF || e > 0xFFFF_FFFF)
                {
                    (X, eop::REQUESTPARTS_I64)
                } else {
                    (E, op::REQUESTPARTS)
                }
            }
            M::SendingPart { wide: true, .. } => (X, eop::SENDINGPART_I64),
            M::SendingPart { wide: false, .. } => (E, op::SENDINGPART),
            M::CompressedPart { wide: true, .. } => (X, eop::COMPRESSEDPART_I64),
            M::CompressedPart { wide: false, .. } => (X, eop::COMPRESSEDPART),
            M::CancelTransfer => (E, op::CANCELTRANSFER),
            M::OutOfPartReqs => (E, op::OUTOFPARTREQS),
            M::EndOfDownload { .. } => (E, op::END_OF_DOWNLOAD),
            M::SecIdentState { .. } => (X, eop::SECIDENTSTATE),
            M::PublicKey { .. } => (X, eop::PUBLICKEY),
            M::Signature { .. } => (X, eop::SIGNATURE),
            M::RequestSources { .. } => (X, eop::REQUESTSOURCES),
            M::RequestSources2 { .. } => (X, eop::REQUESTSOURCES2),
            M::PublicIpReq => (X, eop::PUBLICIP_REQ),
            M::PublicIpAnswer { .. } => (X, eop::PUBLICIP_ANSWER),
            M::Message { .. } => (E, op::MESSAGE),
            M::ChangeClientId { .. } => (E, op::CHANGE_CLIENT_ID),
            M::FileDesc { .. } => (X, eop::FILEDESC),
            M::Unknown {
                protocol, opcode, ..
            } => (*protocol, *opcode),
        }
    }

    /// Appends the whole packet (header and payload) to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        let (proto, opcode) = self.opcode();
        packet::build(out, proto, opcode, |o| self.encode_payload(o));
    }

    fn encode_payload(&self, o: &mut BytesMut) {
        use ClientMessage as M;
        match self {
            M::Hello(h) => {
                o.put_u8(16);
                h.encode_body(o);
            }
            M::HelloAnswer(h) => h.encode_body(o),
            M::EmuleInfo(i) | M::EmuleInfoAnswer(i) => i.encode(o),
            M::RequestFileName { file, ext } => {
                o.put_slice(&file.0);
                if let Some(e) = ext {
                    e.encode(o);
                }
            }
            M::ReqFileNameAnswer { file, name } => {
                o.put_slice(&file.0);
                crate::wire::put_string16(o, name);
            }
            M::SetReqFileId { file }
            | M::FileReqAnsNoFil { file }
            | M::HashSetRequest { file }
            | M::AichFileHashReq { file }
            | M::StartUploadReq { file }
            | M::EndOfDownload { file }
            | M::RequestSources { file } => o.put_slice(&file.0),
            M::FileStatus { file, status } => {
                o.put_slice(&file.0);
                status.encode(o);
            }
            M::HashSetAnswer { file, hashes } => {
                o.put_slice(&file.0);
                o.put_u16_le(hashes.len() as u16);
                for h in hashes {
                    o.put_slice(&h.0);
                }
            }
            M::MultiPacket {
                file,
                size,
                entries,
            } => {
                o.put_slice(&file.0);
                if let Some(s) = size {
                    o.put_u64_le(*s);
                }
                for e in entries {
                    e.encode(o);
                }
            }
            M::MultiPacketAnswer { file, entries } => {
                o.put_slice(&file.0);
                for e in entries {
                    e.encode(o);
                }
            }
            M::AichFileHashAns { file, master } => {
                o.put_slice(&file.0);
                o.put_slice(&master.0);
            }
            M::AichRequest { file, part, master } => {
                o.put_slice(&file.0);
                o.put_u16_le(*part);
                o.put_slice(&master.0);
            }
            M::AichAnswer { file, data } => {
                o.put_slice(&file.0);
                if let Some((part, master, rd)) = data {
                    o.put_u16_le(*part);
                    o.put_slice(&master.0);
                    rd.encode(o);
                }
            }
            M::AcceptUploadReq | M::CancelTransfer | M::OutOfPartReqs | M::PublicIpReq => {}
            M::QueueRanking { rank } => {
                o.put_u16_le(*rank);
                o.put_bytes(0, 10);
            }
            M::QueueRank { rank } => o.put_u32_le(*rank),
            M::RequestParts { file, ranges } => {
                o.put_slice(&file.0);
                let wide = self.opcode().1 == eop::REQUESTPARTS_I64;
                for pick in [|r: &(u64, u64)| r.0, |r: &(u64, u64)| r.1] {
                    for r in ranges {
                        if wide {
                            o.put_u64_le(pick(r));
                        } else {
                            o.put_u32_le(pick(r) as u32);
                        }
                    }
                }
            }
            M::SendingPart {
                file,
                start,
                end,
                data,
                wide,
            } => {
                put_offsets(o, file, *start, *end, *wide);
                o.put_slice(data);
            }
            M::CompressedPart {
                file,
                start,
                packed_len,
                data,
                wide,
            } => {
                o.put_slice(&file.0);
                if *wide {
                    o.put_u64_le(*start);
                } else {
                    o.put_u32_le(*start as u32);
                }
                o.put_u32_le(*packed_len);
                o.put_slice(data);
            }
            M::SecIdentState { state, challenge } => {
                o.put_u8(*state);
                o.put_u32_le(*challenge);
            }
            M::PublicKey { key } => {
                o.put_u8(key.len().min(255) as u8);
                o.put_slice(&key[..key.len().min(255)]);
            }
            M::Signature { signature, ip_kind } => {
                o.put_u8(signature.len().min(255) as u8);
                o.put_slice(&signature[..signature.len().min(255)]);
                if let Some(k) = ip_kind {
                    o.put_u8(*k);
                }
            }
            M::RequestSources2 {
                file,
                version,
                options,
            } => {
                o.put_u8(*version);
                o.put_u16_le(*options);
                o.put_slice(&file.0);
            }
            M::PublicIpAnswer { ip } => o.put_slice(&ip.octets()),
            M::Message { text } => crate::wire::put_string16(o, text),
            M::ChangeClientId { id, server_ip } => {
                o.put_u32_le(*id);
                o.put_slice(&server_ip.octets());
            }
            M::FileDesc { rating, comment } => {
                o.put_u8(*rating);
                o.put_u32_le(comment.len() as u32);
                o.put_slice(comment);
            }
            M::Unknown { payload, .. } => o.put_slice(payload),
        }
    }
}

fn file_only(r: &mut Reader) -> Result<Md4Hash, WireError> {
    let f = r.md4("file hash")?;
    r.finish()?;
    Ok(f)
}

fn decode_inner(
    proto: Protocol,
    opcode: u8,
    r: &mut Reader,
    ctx: &DecodeCtx,
) -> Result<ClientMessage, WireError> {
    use ClientMessage as M;
    Ok(match (proto, opcode) {
        (Protocol::Edonkey, op::HELLO) => M::Hello(Hello::decode_hello(r)?),
        (Protocol::Edonkey, op::HELLOANSWER) => M::HelloAnswer(Hello::decode_body(r)?),
        (Protocol::Emule, eop::EMULEINFO) => M::EmuleInfo(EmuleInfo::decode(r)?),
        (Protocol::Emule, eop::EMULEINFOANSWER) => M::EmuleInfoAnswer(EmuleInfo::decode(r)?),
        (Protocol::Edonkey, op::REQUESTFILENAME) => {
            let file = r.md4("file hash")?;
            let ext = if r.is_empty() {
                None
            } else {
                ExtInfo::decode(r, ctx.peer_ext_requests)?
            };
            r.finish()?;
            M::RequestFileName { file, ext }
        }
        (Protocol::Edonkey, op::REQFILENAMEANSWER) => {
            let file = r.md4("file hash")?;
            let name = r.string16("file name")?;
            M::ReqFileNameAnswer { file, name }
        }
        (Protocol::Edonkey, op::SETREQFILEID) => M::SetReqFileId {
            file: file_only(r)?,
        },
        (Protocol::Edonkey, op::FILESTATUS) => {
            let file = r.md4("file hash")?;
            let status = PartStatus::decode(r)?;
            M::FileStatus { file, status }
        }
        (Protocol::Edonkey, op::FILEREQANSNOFIL) => M::FileReqAnsNoFil {
            file: file_only(r)?,
        },
        (Protocol::Edonkey, op::HASHSETREQUEST) => M::HashSetRequest {
            file: file_only(r)?,
        },
        (Protocol::Edonkey, op::HASHSETANSWER) => {
            let file = r.md4("file hash")?;
            let n = r.u16("hash count")? as usize;
            if n > MAX_HASHSET {
                return Err(invalid("hash count", format!("{n}")));
            }
            if r.remaining() != n * 16 {
                return Err(invalid(
                    "hashset",
                    format!("{n} hashes announced, {} bytes follow", r.remaining()),
                ));
            }
            let hashes = (0..n)
                .map(|_| r.md4("part hash"))
                .collect::<Result<_, _>>()?;
            M::HashSetAnswer { file, hashes }
        }
        (Protocol::Emule, eop::MULTIPACKET | eop::MULTIPACKET_EXT) => {
            let file = r.md4("file hash")?;
            let size = if opcode == eop::MULTIPACKET_EXT {
                Some(r.u64("file size")?)
            } else {
                None
            };
            let entries = MultiRequest::decode_all(r, ctx.peer_ext_requests)?;
            M::MultiPacket {
                file,
                size,
                entries,
            }
        }
        (Protocol::Emule, eop::MULTIPACKETANSWER) => {
            let file = r.md4("file hash")?;
            M::MultiPacketAnswer {
                file,
                entries: MultiAnswer::decode_all(r)?,
            }
        }
        (Protocol::Emule, eop::AICHFILEHASHREQ) => M::AichFileHashReq {
            file: file_only(r)?,
        },
        (Protocol::Emule, eop::AICHFILEHASHANS) => {
            let file = r.md4("file hash")?;
            let master = r.aich("AICH master hash")?;
            r.finish()?;
            M::AichFileHashAns { file, master }
        }
        (Protocol::Emule, eop::AICHREQUEST) => {
            let file = r.md4("file hash")?;
            let part = r.u16("part")?;
            let master = r.aich("AICH master hash")?;
            r.finish()?;
            M::AichRequest { file, part, master }
        }
        (Protocol::Emule, eop::AICHANSWER) => {
            let file = r.md4("file hash")?;
            let data = if r.is_empty() {
                None
            } else {
                let part = r.u16("part")?;
                let master = r.aich("AICH master hash")?;
                let rd =
                    RecoveryData::decode(r).map_err(|e| invalid("AICH answer", e.to_string()))?;
                Some((part, master, rd))
            };
            M::AichAnswer { file, data }
        }
        (Protocol::Edonkey, op::STARTUPLOADREQ) => M::StartUploadReq {
            file: file_only(r)?,
        },
        (Protocol::Edonkey, op::ACCEPTUPLOADREQ) => M::AcceptUploadReq,
        (Protocol::Edonkey, op::CANCELTRANSFER) => M::CancelTransfer,
        (Protocol::Edonkey, op::OUTOFPARTREQS) => M::OutOfPartReqs,
        (Protocol::Emule, eop::QUEUERANKING) => {
            // aMule requires exactly 12 bytes (ClientTCPSocket.cpp:1455).
            if r.remaining() != 12 {
                return Err(invalid(
                    "queue ranking",
                    format!("{} bytes, expected 12", r.remaining()),
                ));
            }
            let rank = r.u16("rank")?;
            r.rest();
            M::QueueRanking { rank }
        }
        (Protocol::Edonkey, op::QUEUERANK) => M::QueueRank {
            rank: r.u32("rank")?,
        },
        (Protocol::Edonkey, op::REQUESTPARTS) | (Protocol::Emule, eop::REQUESTPARTS_I64) => {
            let wide = opcode == eop::REQUESTPARTS_I64;
            let file = r.md4("file hash")?;
            let mut v = [0u64; 6];
            for x in v.iter_mut() {
                *x = if wide {
                    r.u64("range offset")?
                } else {
                    r.u32("range offset")? as u64
                };
            }
            r.finish()?;
            M::RequestParts {
                file,
                ranges: [(v[0], v[3]), (v[1], v[4]), (v[2], v[5])],
            }
        }
        (Protocol::Edonkey, op::SENDINGPART) | (Protocol::Emule, eop::SENDINGPART_I64) => {
            let wide = opcode == eop::SENDINGPART_I64;
            let file = r.md4("file hash")?;
            let (start, end) = if wide {
                (r.u64("start")?, r.u64("end")?)
            } else {
                (r.u32("start")? as u64, r.u32("end")? as u64)
            };
            if end <= start || (end - start) != r.remaining() as u64 {
                return Err(invalid(
                    "part data",
                    format!("range {start}..{end} with {} bytes of data", r.remaining()),
                ));
            }
            M::SendingPart {
                file,
                start,
                end,
                data: r.rest(),
                wide,
            }
        }
        (Protocol::Emule, eop::COMPRESSEDPART | eop::COMPRESSEDPART_I64) => {
            let wide = opcode == eop::COMPRESSEDPART_I64;
            let file = r.md4("file hash")?;
            let start = if wide {
                r.u64("start")?
            } else {
                r.u32("start")? as u64
            };
            let packed_len = r.u32("packed length")?;
            if r.is_empty() {
                return Err(invalid("compressed part", "no data"));
            }
            M::CompressedPart {
                file,
                start,
                packed_len,
                data: r.rest(),
                wide,
            }
        }
        (Protocol::Edonkey, op::END_OF_DOWNLOAD) => M::EndOfDownload {
            file: r.md4("file hash")?,
        },
        (Protocol::Emule, eop::SECIDENTSTATE) => {
            let state = r.u8("secident state")?;
            let challenge = r.u32("challenge")?;
            r.finish()?;
            M::SecIdentState { state, challenge }
        }
        (Protocol::Emule, eop::PUBLICKEY) => {
            let n = r.u8("key length")? as usize;
            let key = r.bytes(n, "public key")?;
            r.finish()?;
            M::PublicKey { key }
        }
        (Protocol::Emule, eop::SIGNATURE) => {
            let n = r.u8("signature length")? as usize;
            let signature = r.bytes(n, "signature")?;
            let ip_kind = if r.is_empty() {
                None
            } else {
                Some(r.u8("challenge ip kind")?)
            };
            r.finish()?;
            M::Signature { signature, ip_kind }
        }
        (Protocol::Emule, eop::REQUESTSOURCES) => M::RequestSources {
            file: file_only(r)?,
        },
        (Protocol::Emule, eop::REQUESTSOURCES2) => {
            let version = r.u8("SX2 version")?;
            let options = r.u16("SX2 options")?;
            let file = file_only(r)?;
            M::RequestSources2 {
                file,
                version,
                options,
            }
        }
        (Protocol::Emule, eop::PUBLICIP_REQ) => M::PublicIpReq,
        (Protocol::Emule, eop::PUBLICIP_ANSWER) => M::PublicIpAnswer {
            ip: Ipv4Addr::from(r.u32("ip")?.to_le_bytes()),
        },
        (Protocol::Edonkey, op::MESSAGE) => {
            let text = r.string16("message")?;
            r.finish()?;
            M::Message { text }
        }
        (Protocol::Edonkey, op::CHANGE_CLIENT_ID) => M::ChangeClientId {
            id: r.u32("client id")?,
            server_ip: Ipv4Addr::from(r.u32("server ip")?.to_le_bytes()),
        },
        (Protocol::Emule, eop::FILEDESC) => M::FileDesc {
            rating: r.u8("rating")?,
            comment: r.string32("comment")?,
        },
        (protocol, opcode) => M::Unknown {
            protocol,
            opcode,
            payload: r.rest(),
        },
    })
}
