//! The client-to-server protocol (TCP, `0xE3`; packed `0xD4` packets from
//! a client unpack to eDonkey opcodes), and a small sans-IO index server.
//!
//! Layouts (`Client2Server/TCP.h`, aMule `ServerConnect.cpp:210-260` for
//! the login, `ServerSocket.cpp` for what a client reads,
//! `KnownFile.cpp:1080-1220` for offered files, `DownloadQueue.cpp:1088-1108`
//! for source requests):
//!
//! | opcode | direction | payload |
//! |---|---|---|
//! | `0x01` LOGINREQUEST | c→s | `<user hash 16><id u32><port u16><tags>` |
//! | `0x14` GETSERVERLIST | c→s | empty |
//! | `0x15` OFFERFILES | c→s | `<count u32>(<hash 16><id u32><port u16><tags>)*` |
//! | `0x19` GETSOURCES | c→s | `<hash 16><size u32>` or `<hash 16><0 u32><size u64>` |
//! | `0x23` GETSOURCES_OBFU | c→s | same as GETSOURCES |
//! | `0x1C` CALLBACKREQUEST | c→s | `<id u32>` |
//! | `0x32` SERVERLIST | s→c | `<count u8>(<ip u32><port u16>)*` |
//! | `0x34` SERVERSTATUS | s→c | `<users u32><files u32>` |
//! | `0x35` CALLBACKREQUESTED | s→c | `<ip u32><port u16>[<crypt u8><hash 16>]` |
//! | `0x36` CALLBACK_FAIL | s→c | empty |
//! | `0x38` SERVERMESSAGE | s→c | `<len u16><text>` |
//! | `0x40` IDCHANGE | s→c | `<id u32>[<tcp flags u32>[<aux port u32>[<ip u32><obfu port u32>]]]` |
//! | `0x41` SERVERIDENT | s→c | `<hash 16><ip u32><port u16><tags>` |
//! | `0x42` FOUNDSOURCES | s→c | `<hash 16><count u8>(<id u32><port u16>)*` |
//! | `0x44` FOUNDSOURCES_OBFU | s→c | `<hash 16><count u8>(<id u32><port u16><crypt u8>[<hash 16> if crypt & 0x80])*` |

pub mod index;

use std::net::Ipv4Addr;

use bytes::{BufMut, Bytes, BytesMut};

use crate::Md4Hash;
use crate::client::DecodeError;
use crate::packet::{self, Packet, Protocol};
use crate::tag::{self, Tag};
use crate::wire::{Reader, WireError, invalid};

pub use index::{ConnId, IndexServer, ServerConfig, ServerEvent};

/// Server opcodes.
pub mod op {
    /// Login.
    pub const LOGINREQUEST: u8 = 0x01;
    /// Command rejected.
    pub const REJECT: u8 = 0x05;
    /// Ask for known servers.
    pub const GETSERVERLIST: u8 = 0x14;
    /// Publish shared files.
    pub const OFFERFILES: u8 = 0x15;
    /// Search.
    pub const SEARCHREQUEST: u8 = 0x16;
    /// Disconnect.
    pub const DISCONNECT: u8 = 0x18;
    /// Ask for sources of a file.
    pub const GETSOURCES: u8 = 0x19;
    /// Ask a low-id client to call back.
    pub const CALLBACKREQUEST: u8 = 0x1C;
    /// Ask for sources, with obfuscation info in the answer.
    pub const GETSOURCES_OBFU: u8 = 0x23;
    /// Known servers.
    pub const SERVERLIST: u8 = 0x32;
    /// Search results.
    pub const SEARCHRESULT: u8 = 0x33;
    /// Users and files.
    pub const SERVERSTATUS: u8 = 0x34;
    /// "Connect to this client".
    pub const CALLBACKREQUESTED: u8 = 0x35;
    /// Callback impossible.
    pub const CALLBACK_FAIL: u8 = 0x36;
    /// Text message.
    pub const SERVERMESSAGE: u8 = 0x38;
    /// Your id.
    pub const IDCHANGE: u8 = 0x40;
    /// Server name and description.
    pub const SERVERIDENT: u8 = 0x41;
    /// Sources of a file.
    pub const FOUNDSOURCES: u8 = 0x42;
    /// Sources with obfuscation info.
    pub const FOUNDSOURCES_OBFU: u8 = 0x44;
}

/// TCP flags a server announces in `OP_IDCHANGE` (`SRV_TCPFLG_*`).
pub mod flags {
    /// Accepts packed packets.
    pub const COMPRESSION: u32 = 0x01;
    /// Understands compact tags (clients then send them in OFFERFILES).
    pub const NEWTAGS: u32 = 0x08;
    /// UTF-8 strings.
    pub const UNICODE: u32 = 0x10;
    /// Related search.
    pub const RELATEDSEARCH: u32 = 0x40;
    /// Integer file type tags.
    pub const TYPETAGINTEGER: u32 = 0x80;
    /// Files above 4 GB.
    pub const LARGEFILES: u32 = 0x100;
    /// TCP obfuscation.
    pub const TCPOBFUSCATION: u32 = 0x400;
}

/// File tag names used in OFFERFILES (`FileTags.h`).
pub mod ft {
    /// Name.
    pub const FILENAME: u8 = 0x01;
    /// Size (low 32 bits, or all of it as u64).
    pub const FILESIZE: u8 = 0x02;
    /// Type string ("Audio", "Pro", ...).
    pub const FILETYPE: u8 = 0x03;
    /// Size high 32 bits (large files to servers).
    pub const FILESIZE_HI: u8 = 0x3A;
}

/// One file of an OFFERFILES list.
#[derive(Clone, Debug, PartialEq)]
pub struct OfferedFile {
    /// ed2k hash.
    pub hash: Md4Hash,
    /// Offering client's id, or 0xFBFBFBFB/0xFCFCFCFC (complete/partial)
    /// when the server announced compression.
    pub client_id: u32,
    /// Offering client's port (or 0xFBFB/0xFCFC, see `client_id`).
    pub port: u16,
    /// Tags ([`ft`]).
    pub tags: Vec<Tag>,
}

impl OfferedFile {
    /// The file name, decoded.
    pub fn name(&self) -> Option<String> {
        tag::find(&self.tags, ft::FILENAME)
            .and_then(Tag::as_str)
            .map(|s| crate::wire::decode_string(s))
    }

    /// The file size (FT_FILESIZE, plus FT_FILESIZE_HI for large files).
    pub fn size(&self) -> Option<u64> {
        let lo = tag::find(&self.tags, ft::FILESIZE)?.as_int()?;
        let hi = tag::find(&self.tags, ft::FILESIZE_HI)
            .and_then(Tag::as_int)
            .unwrap_or(0);
        Some(lo | hi << 32)
    }

    fn decode(r: &mut Reader) -> Result<Self, WireError> {
        Ok(OfferedFile {
            hash: r.md4("file hash")?,
            client_id: r.u32("client id")?,
            port: r.u16("port")?,
            tags: tag::decode_list(r)?,
        })
    }

    fn encode(&self, new_tags: bool, out: &mut impl BufMut) {
        out.put_slice(&self.hash.0);
        out.put_u32_le(self.client_id);
        out.put_u16_le(self.port);
        tag::encode_list(&self.tags, new_tags, out);
    }
}

/// A source in FOUNDSOURCES(_OBFU).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// Its ed2k id (IPv4 for high ids).
    pub id: u32,
    /// Its TCP port.
    pub port: u16,
    /// Obfuscation options (`_OBFU` only; bit 0x80: user hash present).
    pub crypt: Option<(u8, Option<Md4Hash>)>,
}

/// At most this many files are read from one OFFERFILES.
pub const MAX_OFFERED: usize = 20_000;

/// A message from a client to a server.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientToServer {
    /// `OP_LOGINREQUEST`.
    Login {
        /// User hash.
        user_hash: Md4Hash,
        /// Id the client had (usually 0).
        client_id: u32,
        /// TCP listen port.
        port: u16,
        /// Tags (name, version, server flags, eMule version).
        tags: Vec<Tag>,
    },
    /// `OP_GETSERVERLIST`.
    GetServerList,
    /// `OP_OFFERFILES`.
    OfferFiles {
        /// The files.
        files: Vec<OfferedFile>,
        /// Whether the list used compact tags (how it is re-encoded).
        new_tags: bool,
    },
    /// `OP_GETSOURCES` / `OP_GETSOURCES_OBFU`.
    GetSources {
        /// File.
        file: Md4Hash,
        /// Size, when given.
        size: Option<u64>,
        /// The `_OBFU` variant (answer with FOUNDSOURCES_OBFU).
        obfu: bool,
    },
    /// `OP_CALLBACKREQUEST`: connect me to the low-id client `id`.
    CallbackRequest {
        /// Target id.
        id: u32,
    },
    /// `OP_DISCONNECT`.
    Disconnect,
    /// Anything else (search requests, ...).
    Unknown {
        /// Opcode.
        opcode: u8,
        /// Payload.
        payload: Bytes,
    },
}

/// A message from a server to a client.
#[derive(Clone, Debug, PartialEq)]
pub enum ServerToClient {
    /// `OP_SERVERMESSAGE`.
    Message {
        /// Text (lines separated by `\r\n`).
        text: Bytes,
    },
    /// `OP_IDCHANGE`.
    IdChange {
        /// The client's id.
        id: u32,
        /// Server TCP flags ([`flags`]).
        flags: u32,
    },
    /// `OP_SERVERSTATUS`.
    Status {
        /// Users online.
        users: u32,
        /// Files known.
        files: u32,
    },
    /// `OP_SERVERIDENT`.
    Ident {
        /// Server hash.
        hash: Md4Hash,
        /// Server IP.
        ip: Ipv4Addr,
        /// Server port.
        port: u16,
        /// Tags (`ST_SERVERNAME` 0x01, `ST_DESCRIPTION` 0x0B).
        tags: Vec<Tag>,
    },
    /// `OP_SERVERLIST`.
    ServerList {
        /// Servers.
        servers: Vec<(Ipv4Addr, u16)>,
    },
    /// `OP_FOUNDSOURCES` / `OP_FOUNDSOURCES_OBFU` (when every source has
    /// `crypt`).
    FoundSources {
        /// File.
        file: Md4Hash,
        /// Sources (at most 255).
        sources: Vec<Source>,
        /// The `_OBFU` form.
        obfu: bool,
    },
    /// `OP_CALLBACKREQUESTED`: connect to this client.
    CallbackRequested {
        /// Its IP.
        ip: Ipv4Addr,
        /// Its port.
        port: u16,
    },
    /// `OP_CALLBACK_FAIL`.
    CallbackFail,
    /// `OP_REJECT`.
    Reject,
    /// Anything else.
    Unknown {
        /// Opcode.
        opcode: u8,
        /// Payload.
        payload: Bytes,
    },
}

fn err(opcode: u8, err: WireError) -> DecodeError {
    DecodeError {
        protocol: Protocol::Edonkey,
        opcode,
        err,
    }
}

fn check_proto(p: &Packet) -> Result<(), DecodeError> {
    if p.protocol != Protocol::Edonkey {
        return Err(err(
            p.opcode,
            invalid("protocol", "server packets are eDonkey (0xE3)"),
        ));
    }
    Ok(())
}

/// Whether a tag list is in compact form (any 0x80 type byte), judged from
/// the first tag's type byte.
fn first_tag_is_new(r: &Reader) -> bool {
    let mut probe = r.clone();
    // count u32, then the first tag's type byte
    probe.u32("tag count").is_ok() && probe.u8("tag type").is_ok_and(|t| t & 0x80 != 0)
}

impl ClientToServer {
    /// Decodes a packet from a client.
    pub fn decode(p: &Packet) -> Result<Self, DecodeError> {
        check_proto(p)?;
        let mut r = Reader::new(p.payload.clone());
        Self::decode_inner(p.opcode, &mut r).map_err(|e| err(p.opcode, e))
    }

    fn decode_inner(opcode: u8, r: &mut Reader) -> Result<Self, WireError> {
        Ok(match opcode {
            op::LOGINREQUEST => ClientToServer::Login {
                user_hash: r.md4("user hash")?,
                client_id: r.u32("client id")?,
                port: r.u16("port")?,
                tags: tag::decode_list(r)?,
            },
            op::GETSERVERLIST => ClientToServer::GetServerList,
            op::DISCONNECT => ClientToServer::Disconnect,
            op::OFFERFILES => {
                let n = r.u32("file count")? as usize;
                if n > MAX_OFFERED {
                    return Err(invalid("file count", format!("{n} (limit {MAX_OFFERED})")));
                }
                let mut files = Vec::with_capacity(n.min(r.remaining() / 26));
                let mut new_tags = false;
                // aMule may announce more files than it writes (large files
                // skipped for old servers): read while data remains.
                while files.len() < n && !r.is_empty() {
                    let mut probe = r.clone();
                    probe.bytes(22, "offered file")?;
                    new_tags |= first_tag_is_new(&probe);
                    files.push(OfferedFile::decode(r)?);
                }
                r.finish()?;
                ClientToServer::OfferFiles { files, new_tags }
            }
            op::GETSOURCES | op::GETSOURCES_OBFU => {
                let file = r.md4("file hash")?;
                let size = match r.remaining() {
                    0 => None,
                    4 => Some(r.u32("file size")? as u64),
                    12 => {
                        let lo = r.u32("file size")?;
                        if lo != 0 {
                            return Err(invalid("file size", "64-bit form must start with 0"));
                        }
                        Some(r.u64("file size")?)
                    }
                    n => return Err(WireError::Trailing(n)),
                };
                ClientToServer::GetSources {
                    file,
                    size,
                    obfu: opcode == op::GETSOURCES_OBFU,
                }
            }
            op::CALLBACKREQUEST => {
                let id = r.u32("client id")?;
                r.finish()?;
                ClientToServer::CallbackRequest { id }
            }
            _ => ClientToServer::Unknown {
                opcode,
                payload: r.rest(),
            },
        })
    }

    /// Appends the packet.
    pub fn encode(&self, out: &mut BytesMut) {
        use ClientToServer as C;
        let opcode = match self {
            C::Login { .. } => op::LOGINREQUEST,
            C::GetServerList => op::GETSERVERLIST,
            C::OfferFiles { .. } => op::OFFERFILES,
            C::GetSources { obfu: false, .. } => op::GETSOURCES,
            C::GetSources { obfu: true, .. } => op::GETSOURCES_OBFU,
            C::CallbackRequest { .. } => op::CALLBACKREQUEST,
            C::Disconnect => op::DISCONNECT,
            C::Unknown { opcode, .. } => *opcode,
        };
        packet::build(out, Protocol::Edonkey, opcode, |o| match self {
            C::Login {
                user_hash,
                client_id,
                port,
                tags,
            } => {
                o.put_slice(&user_hash.0);
                o.put_u32_le(*client_id);
                o.put_u16_le(*port);
                tag::encode_list(tags, false, o);
            }
            C::OfferFiles { files, new_tags } => {
                o.put_u32_le(files.len() as u32);
                for f in files {
                    f.encode(*new_tags, o);
                }
            }
            C::GetSources { file, size, .. } => {
                o.put_slice(&file.0);
                match size {
                    Some(s) if *s > 0xFFFF_FFFF => {
                        o.put_u32_le(0);
                        o.put_u64_le(*s);
                    }
                    Some(s) => o.put_u32_le(*s as u32),
                    None => {}
                }
            }
            C::CallbackRequest { id } => o.put_u32_le(*id),
            C::GetServerList | C::Disconnect => {}
            C::Unknown { payload, .. } => o.put_slice(payload),
        });
    }
}

impl ServerToClient {
    /// Decodes a packet from a server.
    pub fn decode(p: &Packet) -> Result<Self, DecodeError> {
        check_proto(p)?;
        let mut r = Reader::new(p.payload.clone());
        Self::decode_inner(p.opcode, &mut r).map_err(|e| err(p.opcode, e))
    }

    fn decode_inner(opcode: u8, r: &mut Reader) -> Result<Self, WireError> {
        Ok(match opcode {
            op::SERVERMESSAGE => ServerToClient::Message {
                text: r.string16("message")?,
            },
            op::IDCHANGE => {
                let id = r.u32("client id")?;
                let flags = if r.remaining() >= 4 {
                    r.u32("tcp flags")?
                } else {
                    0
                };
                r.rest(); // aux port, reported IP, obfuscation port
                ServerToClient::IdChange { id, flags }
            }
            op::SERVERSTATUS => ServerToClient::Status {
                users: r.u32("users")?,
                files: r.u32("files")?,
            },
            op::SERVERIDENT => ServerToClient::Ident {
                hash: r.md4("server hash")?,
                ip: Ipv4Addr::from(r.u32("server ip")?.to_le_bytes()),
                port: r.u16("server port")?,
                tags: tag::decode_list(r)?,
            },
            op::SERVERLIST => {
                let n = r.u8("server count")?;
                let servers = (0..n)
                    .map(|_| {
                        Ok((
                            Ipv4Addr::from(r.u32("server ip")?.to_le_bytes()),
                            r.u16("server port")?,
                        ))
                    })
                    .collect::<Result<_, WireError>>()?;
                ServerToClient::ServerList { servers }
            }
            op::FOUNDSOURCES | op::FOUNDSOURCES_OBFU => {
                let obfu = opcode == op::FOUNDSOURCES_OBFU;
                let file = r.md4("file hash")?;
                let n = r.u8("source count")?;
                let mut sources = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let id = r.u32("source id")?;
                    let port = r.u16("source port")?;
                    let crypt = if obfu {
                        let c = r.u8("crypt options")?;
                        let h = if c & 0x80 != 0 {
                            Some(r.md4("user hash")?)
                        } else {
                            None
                        };
                        Some((c, h))
                    } else {
                        None
                    };
                    sources.push(Source { id, port, crypt });
                }
                ServerToClient::FoundSources {
                    file,
                    sources,
                    obfu,
                }
            }
            op::CALLBACKREQUESTED => {
                let ip = Ipv4Addr::from(r.u32("ip")?.to_le_bytes());
                let port = r.u16("port")?;
                r.rest(); // crypt options and user hash (newer servers)
                ServerToClient::CallbackRequested { ip, port }
            }
            op::CALLBACK_FAIL => ServerToClient::CallbackFail,
            op::REJECT => ServerToClient::Reject,
            _ => ServerToClient::Unknown {
                opcode,
                payload: r.rest(),
            },
        })
    }

    /// Appends the packet.
    pub fn encode(&self, out: &mut BytesMut) {
        use ServerToClient as S;
        let opcode = match self {
            S::Message { .. } => op::SERVERMESSAGE,
            S::IdChange { .. } => op::IDCHANGE,
            S::Status { .. } => op::SERVERSTATUS,
            S::Ident { .. } => op::SERVERIDENT,
            S::ServerList { .. } => op::SERVERLIST,
            S::FoundSources { obfu: false, .. } => op::FOUNDSOURCES,
            S::FoundSources { obfu: true, .. } => op::FOUNDSOURCES_OBFU,
            S::CallbackRequested { .. } => op::CALLBACKREQUESTED,
            S::CallbackFail => op::CALLBACK_FAIL,
            S::Reject => op::REJECT,
            S::Unknown { opcode, .. } => *opcode,
        };
        packet::build(out, Protocol::Edonkey, opcode, |o| match self {
            S::Message { text } => crate::wire::put_string16(o, text),
            S::IdChange { id, flags } => {
                o.put_u32_le(*id);
                o.put_u32_le(*flags);
            }
            S::Status { users, files } => {
                o.put_u32_le(*users);
                o.put_u32_le(*files);
            }
            S::Ident {
                hash,
                ip,
                port,
                tags,
            } => {
                o.put_slice(&hash.0);
                o.put_slice(&ip.octets());
                o.put_u16_le(*port);
                tag::encode_list(tags, false, o);
            }
            S::ServerList { servers } => {
                let n = servers.len().min(255);
                o.put_u8(n as u8);
                for (ip, port) in &servers[..n] {
                    o.put_slice(&ip.octets());
                    o.put_u16_le(*port);
                }
            }
            S::FoundSources {
                file,
                sources,
                obfu,
            } => {
                o.put_slice(&file.0);
                let n = sources.len().min(255);
                o.put_u8(n as u8);
                for s in &sources[..n] {
                    o.put_u32_le(s.id);
                    o.put_u16_le(s.port);
                    if *obfu {
                        let (c, h) = s.crypt.unwrap_or((0, None));
                        match h {
                            Some(h) => {
                                o.put_u8(c | 0x80);
                                o.put_slice(&h.0);
                            }
                            None => o.put_u8(c & 0x7f),
                        }
                    }
                }
            }
            S::CallbackRequested { ip, port } => {
                o.put_slice(&ip.octets());
                o.put_u16_le(*port);
            }
            S::CallbackFail | S::Reject => {}
            S::Unknown { payload, .. } => o.put_slice(payload),
        });
    }
}

#[cfg(test)]
mod tests;
