//! Client-to-client messages: typed decode and encode of every opcode a
//! download or upload with aMule/eMule uses. Layouts are from aMule 2.3.3
//! (`ClientTCPSocket.cpp` `ProcessPacket`/`ProcessExtPacket`,
//! `DownloadClient.cpp`, `UploadClient.cpp`); see PROTOCOL-NOTES.md.
//!
//! Opcodes weir does not use decode to [`ClientMessage::Unknown`] with the
//! raw payload; a known opcode with a malformed payload is an error.

pub mod hello;
mod msg;
pub mod multipacket;
mod parts;

pub use hello::{EmuleInfo, Hello, HelloInfo, MiscOptions1, MiscOptions2, OwnHello};
pub use msg::{ClientMessage, DecodeCtx, DecodeError};
pub use multipacket::{ExtInfo, MultiAnswer, MultiRequest};
pub use parts::{PartStatus, request_parts, sending_part_head};

/// eDonkey (`0xE3`) client opcodes (`Client2Client/TCP.h`).
pub mod op {
    /// Hello.
    pub const HELLO: u8 = 0x01;
    /// Part data.
    pub const SENDINGPART: u8 = 0x46;
    /// Three block requests.
    pub const REQUESTPARTS: u8 = 0x47;
    /// "I do not have that file".
    pub const FILEREQANSNOFIL: u8 = 0x48;
    /// Download finished.
    pub const END_OF_DOWNLOAD: u8 = 0x49;
    /// Hello answer.
    pub const HELLOANSWER: u8 = 0x4C;
    /// Client id changed.
    pub const CHANGE_CLIENT_ID: u8 = 0x4D;
    /// Chat message.
    pub const MESSAGE: u8 = 0x4E;
    /// File status request.
    pub const SETREQFILEID: u8 = 0x4F;
    /// File status (part bitfield).
    pub const FILESTATUS: u8 = 0x50;
    /// Hashset request.
    pub const HASHSETREQUEST: u8 = 0x51;
    /// Hashset answer.
    pub const HASHSETANSWER: u8 = 0x52;
    /// Ask for an upload slot.
    pub const STARTUPLOADREQ: u8 = 0x54;
    /// Upload slot granted.
    pub const ACCEPTUPLOADREQ: u8 = 0x55;
    /// Stop sending.
    pub const CANCELTRANSFER: u8 = 0x56;
    /// Uploader ends the slot.
    pub const OUTOFPARTREQS: u8 = 0x57;
    /// File name request.
    pub const REQUESTFILENAME: u8 = 0x58;
    /// File name answer.
    pub const REQFILENAMEANSWER: u8 = 0x59;
    /// Queue rank (eDonkey, u32).
    pub const QUEUERANK: u8 = 0x5C;
}

/// eMule (`0xC5`) client opcodes (`Client2Client/TCP.h`).
pub mod emule_op {
    /// eMule info.
    pub const EMULEINFO: u8 = 0x01;
    /// eMule info answer.
    pub const EMULEINFOANSWER: u8 = 0x02;
    /// zlib-compressed part data.
    pub const COMPRESSEDPART: u8 = 0x40;
    /// Queue rank (u16 + 10 zero bytes).
    pub const QUEUERANKING: u8 = 0x60;
    /// File comment and rating.
    pub const FILEDESC: u8 = 0x61;
    /// Source exchange request.
    pub const REQUESTSOURCES: u8 = 0x81;
    /// Source exchange answer.
    pub const ANSWERSOURCES: u8 = 0x82;
    /// Source exchange 2 request.
    pub const REQUESTSOURCES2: u8 = 0x83;
    /// Source exchange 2 answer.
    pub const ANSWERSOURCES2: u8 = 0x84;
    /// SecIdent public key.
    pub const PUBLICKEY: u8 = 0x85;
    /// SecIdent signature.
    pub const SIGNATURE: u8 = 0x86;
    /// SecIdent state and challenge.
    pub const SECIDENTSTATE: u8 = 0x87;
    /// Several file requests in one packet.
    pub const MULTIPACKET: u8 = 0x92;
    /// Their answers.
    pub const MULTIPACKETANSWER: u8 = 0x93;
    /// "What is my IP".
    pub const PUBLICIP_REQ: u8 = 0x97;
    /// The answer.
    pub const PUBLICIP_ANSWER: u8 = 0x98;
    /// AICH recovery data request.
    pub const AICHREQUEST: u8 = 0x9B;
    /// AICH recovery data.
    pub const AICHANSWER: u8 = 0x9C;
    /// AICH master hash answer.
    pub const AICHFILEHASHANS: u8 = 0x9D;
    /// AICH master hash request.
    pub const AICHFILEHASHREQ: u8 = 0x9E;
    /// Compressed part data, 64-bit offset.
    pub const COMPRESSEDPART_I64: u8 = 0xA1;
    /// Part data, 64-bit offsets.
    pub const SENDINGPART_I64: u8 = 0xA2;
    /// Block requests, 64-bit offsets.
    pub const REQUESTPARTS_I64: u8 = 0xA3;
    /// Multipacket with the file size.
    pub const MULTIPACKET_EXT: u8 = 0xA4;
}

#[cfg(test)]
mod tests;
