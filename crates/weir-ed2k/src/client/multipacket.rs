//! `OP_MULTIPACKET` (`0x92`), `OP_MULTIPACKET_EXT` (`0xA4`, with the file
//! size) and `OP_MULTIPACKETANSWER` (`0x93`): several file requests for one
//! file in one packet, as aMule 2.3.3 sends them first after the handshake
//! (`DownloadClient.cpp:216-270` writes, `ClientTCPSocket.cpp:1036-1160`
//! reads):
//!
//! ```text
//! <file hash 16>[<file size u64> (EXT only)]
//!   0x58 OP_REQUESTFILENAME [<part status>[<complete sources u16>]]
//!   0x4F OP_SETREQFILEID          (only for files of more than one part)
//!   0x83 OP_REQUESTSOURCES2 <version u8><options u16> | 0x81 OP_REQUESTSOURCES
//!   0x9E OP_AICHFILEHASHREQ
//! ```
//!
//! The answer carries `0x59 <name string16>`, `0x50 <part status>` and
//! `0x9D <AICH master hash 20>` for the entries it can answer. The
//! extended info after `OP_REQUESTFILENAME` is present when the *sender's
//! peer* announced extended-requests version 1 (part status) or 2 (also
//! the complete-sources count), and is read according to what the sender
//! itself announced; both sides announcing 2, as aMule and weir do, keeps
//! them in step. Entry opcodes aMule does not know are skipped by aMule
//! without consuming data; weir rejects them (their length is unknown).

use bytes::{BufMut, Bytes};

use super::parts::PartStatus;
use super::{emule_op, op};
use crate::AichHash;
use crate::wire::{Reader, WireError, invalid};

/// The extended info after a file name request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtInfo {
    /// The requester's own part status for the file.
    pub part_status: PartStatus,
    /// How many complete sources the requester knows (version 2, and only
    /// when the part status is not empty).
    pub complete_sources: Option<u16>,
}

impl ExtInfo {
    /// Reads it for a peer that announced extended-requests `version`.
    pub fn decode(r: &mut Reader, version: u8) -> Result<Option<Self>, WireError> {
        if version == 0 {
            return Ok(None);
        }
        let part_status = PartStatus::decode(r)?;
        let complete_sources = if version > 1 && part_status.count > 0 {
            Some(r.u16("complete sources")?)
        } else {
            None
        };
        Ok(Some(ExtInfo {
            part_status,
            complete_sources,
        }))
    }

    /// Writes it.
    pub fn encode(&self, out: &mut impl BufMut) {
        self.part_status.encode(out);
        if self.part_status.count > 0 {
            if let Some(c) = self.complete_sources {
                out.put_u16_le(c);
            }
        }
    }
}

/// One entry of a multipacket request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MultiRequest {
    /// File name, with the requester's extended info.
    RequestFileName(Option<ExtInfo>),
    /// File status.
    SetReqFileId,
    /// Source exchange v1.
    RequestSources,
    /// Source exchange v2.
    RequestSources2 {
        /// SX2 version.
        version: u8,
        /// Options (reserved).
        options: u16,
    },
    /// AICH master hash.
    AichFileHashReq,
}

impl MultiRequest {
    /// Reads the entries after the hash (and size).
    pub fn decode_all(r: &mut Reader, ext_version: u8) -> Result<Vec<Self>, WireError> {
        let mut out = Vec::new();
        while !r.is_empty() {
            let sub = r.u8("multipacket entry")?;
            out.push(match sub {
                op::REQUESTFILENAME => {
                    MultiRequest::RequestFileName(ExtInfo::decode(r, ext_version)?)
                }
                op::SETREQFILEID => MultiRequest::SetReqFileId,
                emule_op::REQUESTSOURCES => MultiRequest::RequestSources,
                emule_op::REQUESTSOURCES2 => MultiRequest::RequestSources2 {
                    version: r.u8("SX2 version")?,
                    options: r.u16("SX2 options")?,
                },
                emule_op::AICHFILEHASHREQ => MultiRequest::AichFileHashReq,
                other => {
                    return Err(invalid(
                        "multipacket entry",
                        format!("unknown entry opcode {other:#04x}"),
                    ));
                }
            });
            if out.len() > 64 {
                return Err(invalid("multipacket", "more than 64 entries"));
            }
        }
        Ok(out)
    }

    /// Writes one entry.
    pub fn encode(&self, out: &mut impl BufMut) {
        match self {
            MultiRequest::RequestFileName(ext) => {
                out.put_u8(op::REQUESTFILENAME);
                if let Some(e) = ext {
                    e.encode(out);
                }
            }
            MultiRequest::SetReqFileId => out.put_u8(op::SETREQFILEID),
            MultiRequest::RequestSources => out.put_u8(emule_op::REQUESTSOURCES),
            MultiRequest::RequestSources2 { version, options } => {
                out.put_u8(emule_op::REQUESTSOURCES2);
                out.put_u8(*version);
                out.put_u16_le(*options);
            }
            MultiRequest::AichFileHashReq => out.put_u8(emule_op::AICHFILEHASHREQ),
        }
    }
}

/// One entry of a multipacket answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MultiAnswer {
    /// The file name (raw string bytes).
    FileName(Bytes),
    /// The part status.
    FileStatus(PartStatus),
    /// The AICH master hash.
    AichFileHash(AichHash),
}

impl MultiAnswer {
    /// Reads the entries after the hash.
    pub fn decode_all(r: &mut Reader) -> Result<Vec<Self>, WireError> {
        let mut out = Vec::new();
        while !r.is_empty() {
            let sub = r.u8("multipacket answer entry")?;
            out.push(match sub {
                op::REQFILENAMEANSWER => MultiAnswer::FileName(r.string16("file name")?),
                op::FILESTATUS => MultiAnswer::FileStatus(PartStatus::decode(r)?),
                emule_op::AICHFILEHASHANS => MultiAnswer::AichFileHash(r.aich("AICH hash")?),
                other => {
                    return Err(invalid(
                        "multipacket answer entry",
                        format!("unknown entry opcode {other:#04x}"),
                    ));
                }
            });
            if out.len() > 64 {
                return Err(invalid("multipacket answer", "more than 64 entries"));
            }
        }
        Ok(out)
    }

    /// Writes one entry.
    pub fn encode(&self, out: &mut impl BufMut) {
        match self {
            MultiAnswer::FileName(n) => {
                out.put_u8(op::REQFILENAMEANSWER);
                crate::wire::put_string16(out, n);
            }
            MultiAnswer::FileStatus(s) => {
                out.put_u8(op::FILESTATUS);
                s.encode(out);
            }
            MultiAnswer::AichFileHash(h) => {
                out.put_u8(emule_op::AICHFILEHASHANS);
                out.put_slice(&h.0);
            }
        }
    }
}
