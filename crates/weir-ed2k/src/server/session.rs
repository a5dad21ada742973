//! The client's side of a server connection, sans-IO: log in, publish the
//! files we share, ask for sources, relay callbacks.
//!
//! As aMule does it (`ServerConnect.cpp`, `ServerSocket.cpp`,
//! `SharedFileList.cpp`, `DownloadQueue.cpp`): the login carries our user
//! hash, port and four tags; the server answers with messages, a status,
//! its identity and `OP_IDCHANGE` (our id: our IPv4 address when others
//! can reach us, a small number when not). Once the id is in we offer our
//! files (at most 200 per packet, only those not offered yet) and ask for
//! sources. A low-id source can only be reached through the server: a
//! high-id client asks the server to make it call back
//! (`OP_CALLBACKREQUEST`); a low-id client is told whom to call
//! (`OP_CALLBACKREQUESTED`).

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddrV4};

use bytes::{Bytes, BytesMut};

use super::{ClientToServer, OfferedFile, ServerToClient, flags, ft};
use crate::Md4Hash;
use crate::client::DecodeError;
use crate::client::hello::{EDONKEY_VERSION, WEIR_COMPAT_CLIENT, ct, id_to_ip, is_low_id};
use crate::packet::Packet;
use crate::tag::Tag;

/// `CT_SERVER_FLAGS` in the login (`SRVCAP_*`).
pub mod caps {
    /// We accept zlib-packed server packets.
    pub const ZLIB: u32 = 0x01;
    /// Compact tags.
    pub const NEWTAGS: u32 = 0x08;
    /// UTF-8 strings.
    pub const UNICODE: u32 = 0x10;
    /// Files above 4 GB.
    pub const LARGEFILES: u32 = 0x100;
}

/// The login's `CT_SERVER_FLAGS` tag id.
const CT_SERVER_FLAGS: u8 = 0x20;
/// Most files in one `OP_OFFERFILES` (aMule's limit).
const OFFER_BATCH: usize = 200;
/// Placeholder ids for offers to a server that announced compression.
const ID_COMPLETE: u32 = 0xFBFB_FBFB;
const ID_PARTIAL: u32 = 0xFCFC_FCFC;

/// A file to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedInfo {
    /// ed2k hash.
    pub hash: Md4Hash,
    /// Name.
    pub name: String,
    /// Size.
    pub size: u64,
    /// Whether we have all of it.
    pub complete: bool,
}

/// What the server told us.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionEvent {
    /// Logged in: our id and the server's TCP flags.
    Connected {
        /// Our id (a low id means peers cannot connect to us).
        id: u32,
        /// Server flags ([`flags`]).
        flags: u32,
    },
    /// Sources of a file.
    Sources {
        /// The file.
        file: Md4Hash,
        /// Sources we can dial.
        reachable: Vec<SocketAddrV4>,
        /// Low-id sources (reachable only by callback).
        low_ids: Vec<u32>,
    },
    /// A low-id peer asked (through the server) that we connect to it.
    CallbackRequested {
        /// Where to connect.
        addr: SocketAddrV4,
    },
    /// A callback we asked for is impossible.
    CallbackFailed,
    /// A server message (text).
    Message(String),
    /// The server refused a command.
    Rejected,
}

/// One server connection's state.
#[derive(Debug)]
pub struct ServerSession {
    user_hash: Md4Hash,
    port: u16,
    nick: String,
    id: Option<u32>,
    flags: u32,
    offered: BTreeSet<Md4Hash>,
    out: BytesMut,
}

impl ServerSession {
    /// A session for our user hash, listen port and nick; queues the login.
    pub fn new(user_hash: Md4Hash, port: u16, nick: &str) -> Self {
        let mut s = Self {
            user_hash,
            port,
            nick: nick.to_string(),
            id: None,
            flags: 0,
            offered: BTreeSet::new(),
            out: BytesMut::new(),
        };
        s.login();
        s
    }

    fn login(&mut self) {
        let (mj, mn, up) = (0u32, 1u32, 0u32);
        let ver = (WEIR_COMPAT_CLIENT as u32) << 24 | mj << 17 | mn << 10 | up << 7;
        ClientToServer::Login {
            user_hash: self.user_hash,
            client_id: 0,
            port: self.port,
            tags: vec![
                Tag::string(ct::NAME, Bytes::from(self.nick.clone().into_bytes())),
                Tag::u32(ct::VERSION, EDONKEY_VERSION),
                Tag::u32(
                    CT_SERVER_FLAGS,
                    caps::ZLIB | caps::NEWTAGS | caps::UNICODE | caps::LARGEFILES,
                ),
                Tag::u32(ct::EMULE_VERSION, ver),
            ],
        }
        .encode(&mut self.out);
    }

    /// Our id, once logged in.
    pub fn id(&self) -> Option<u32> {
        self.id
    }

    /// Whether we are logged in with a low id.
    pub fn is_low_id(&self) -> bool {
        self.id.is_some_and(is_low_id)
    }

    /// Handles one packet from the server.
    pub fn handle(&mut self, p: &Packet) -> Result<Vec<SessionEvent>, DecodeError> {
        let mut ev = Vec::new();
        match ServerToClient::decode(p)? {
            ServerToClient::IdChange { id, flags } => {
                self.id = Some(id);
                self.flags = flags;
                ev.push(SessionEvent::Connected { id, flags });
            }
            ServerToClient::FoundSources { file, sources, .. } => {
                let mut reachable = Vec::new();
                let mut low_ids = Vec::new();
                for s in sources {
                    if is_low_id(s.id) {
                        low_ids.push(s.id);
                    } else if s.port != 0 {
                        reachable.push(SocketAddrV4::new(id_to_ip(s.id), s.port));
                    }
                }
                ev.push(SessionEvent::Sources {
                    file,
                    reachable,
                    low_ids,
                });
            }
            ServerToClient::CallbackRequested { ip, port } => {
                ev.push(SessionEvent::CallbackRequested {
                    addr: SocketAddrV4::new(ip, port),
                })
            }
            ServerToClient::CallbackFail => ev.push(SessionEvent::CallbackFailed),
            ServerToClient::Message { text } => {
                ev.push(SessionEvent::Message(crate::wire::decode_string(&text)))
            }
            ServerToClient::Reject => ev.push(SessionEvent::Rejected),
            _ => {}
        }
        Ok(ev)
    }

    /// Publishes the files not published yet (after the login).
    pub fn offer(&mut self, files: &[SharedInfo]) {
        let Some(id) = self.id else {
            return;
        };
        let new_tags = self.flags & flags::NEWTAGS != 0;
        let packed_ids = self.flags & flags::COMPRESSION != 0;
        let large_ok = self.flags & flags::LARGEFILES != 0;
        let fresh: Vec<&SharedInfo> = files
            .iter()
            .filter(|f| !self.offered.contains(&f.hash))
            .filter(|f| large_ok || f.size <= crate::OLD_MAX_FILE_SIZE)
            .collect();
        for batch in fresh.chunks(OFFER_BATCH) {
            let files = batch
                .iter()
                .map(|f| {
                    let (client_id, port) = if packed_ids {
                        let p = if f.complete { ID_COMPLETE } else { ID_PARTIAL };
                        (p, p as u16)
                    } else {
                        (id, self.port)
                    };
                    let mut tags = vec![
                        Tag::string(ft::FILENAME, Bytes::from(f.name.clone().into_bytes())),
                        Tag::u32(ft::FILESIZE, f.size as u32),
                    ];
                    if f.size > u64::from(u32::MAX) {
                        tags.push(Tag::u32(ft::FILESIZE_HI, (f.size >> 32) as u32));
                    }
                    OfferedFile {
                        hash: f.hash,
                        client_id,
                        port,
                        tags,
                    }
                })
                .collect();
            ClientToServer::OfferFiles { files, new_tags }.encode(&mut self.out);
        }
        self.offered.extend(fresh.iter().map(|f| f.hash));
    }

    /// Asks for sources of a file.
    pub fn get_sources(&mut self, file: Md4Hash, size: u64) {
        if self.id.is_none() {
            return;
        }
        ClientToServer::GetSources {
            file,
            size: Some(size),
            obfu: false,
        }
        .encode(&mut self.out);
    }

    /// Asks the server to make a low-id client connect to us.
    pub fn callback(&mut self, id: u32) {
        if self.id.is_some_and(|me| !is_low_id(me)) {
            ClientToServer::CallbackRequest { id }.encode(&mut self.out);
        }
    }

    /// The bytes to send, if any.
    pub fn take_output(&mut self) -> Option<Bytes> {
        (!self.out.is_empty()).then(|| self.out.split().freeze())
    }

    /// Our address as the server sees it (high ids only).
    pub fn public_ip(&self) -> Option<Ipv4Addr> {
        self.id.filter(|&i| !is_low_id(i)).map(id_to_ip)
    }
}

#[cfg(test)]
mod session_tests {
    use super::*;
    use crate::packet::{Decoder, Limits};
    use crate::server::{IndexServer, ServerConfig};

    fn packets(b: Bytes) -> Vec<Packet> {
        let mut buf = BytesMut::from(&b[..]);
        let mut d = Decoder::new(Limits::SERVER);
        std::iter::from_fn(|| d.decode(&mut buf).unwrap()).collect()
    }

    /// Two sessions against the sans-IO index server: login, offer, sources,
    /// callback.
    #[test]
    fn sessions_find_each_other_through_the_index() {
        let mut srv = IndexServer::new(ServerConfig::default());
        let a_ip = Ipv4Addr::new(10, 0, 0, 1);
        let b_ip = Ipv4Addr::new(10, 0, 0, 2);
        let mut a = ServerSession::new(Md4Hash([1; 16]), 4662, "a");
        let mut b = ServerSession::new(Md4Hash([2; 16]), 4663, "b");
        // The index server learns addresses from the runtime.
        srv.connected(1, a_ip).unwrap();
        srv.connected(2, b_ip).unwrap();
        let mut step = |conn: u64, s: &mut ServerSession| -> Vec<SessionEvent> {
            let mut evs = Vec::new();
            if let Some(bytes) = s.take_output() {
                for p in packets(bytes) {
                    let m = ClientToServer::decode(&p).unwrap();
                    for (to, reply) in srv.handle(conn, m).unwrap() {
                        assert_eq!(to, conn, "replies to the asker only here");
                        let mut b = BytesMut::new();
                        reply.encode(&mut b);
                        for p in packets(b.freeze()) {
                            evs.extend(s.handle(&p).unwrap());
                        }
                    }
                }
            }
            evs
        };
        let ev = step(1, &mut a);
        assert!(ev.contains(&SessionEvent::Connected {
            id: crate::client::hello::ip_to_id(a_ip),
            flags: ServerConfig::default().flags
        }));
        assert_eq!(a.public_ip(), Some(a_ip));
        let file = SharedInfo {
            hash: Md4Hash([7; 16]),
            name: "x.bin".into(),
            size: 5_000_000_000,
            complete: true,
        };
        a.offer(std::slice::from_ref(&file));
        // Offering again sends nothing.
        let first = a.take_output().unwrap();
        a.offer(std::slice::from_ref(&file));
        assert!(a.take_output().is_none());
        a.out.extend_from_slice(&first);
        step(1, &mut a);
        step(2, &mut b);
        b.get_sources(file.hash, file.size);
        let ev = step(2, &mut b);
        assert_eq!(
            ev,
            vec![SessionEvent::Sources {
                file: file.hash,
                reachable: vec![SocketAddrV4::new(a_ip, 4662)],
                low_ids: vec![],
            }]
        );
    }

    #[test]
    fn low_ids_and_callbacks() {
        let mut s = ServerSession::new(Md4Hash([1; 16]), 4662, "a");
        let _ = s.take_output();
        // Nothing is sent before the id is known.
        s.get_sources(Md4Hash([2; 16]), 10);
        s.callback(5);
        assert!(s.take_output().is_none());
        let mut b = BytesMut::new();
        ServerToClient::IdChange { id: 1234, flags: 0 }.encode(&mut b);
        ServerToClient::FoundSources {
            file: Md4Hash([2; 16]),
            sources: vec![
                crate::server::Source {
                    id: 77,
                    port: 4662,
                    crypt: None,
                },
                crate::server::Source {
                    id: crate::client::hello::ip_to_id(Ipv4Addr::new(10, 1, 1, 1)),
                    port: 4662,
                    crypt: None,
                },
            ],
            obfu: false,
        }
        .encode(&mut b);
        ServerToClient::CallbackRequested {
            ip: Ipv4Addr::new(10, 2, 2, 2),
            port: 4000,
        }
        .encode(&mut b);
        let evs: Vec<SessionEvent> = packets(b.freeze())
            .iter()
            .flat_map(|p| s.handle(p).unwrap())
            .collect();
        assert!(s.is_low_id());
        assert_eq!(s.public_ip(), None);
        assert!(evs.contains(&SessionEvent::Sources {
            file: Md4Hash([2; 16]),
            reachable: vec![SocketAddrV4::new(Ipv4Addr::new(10, 1, 1, 1), 4662)],
            low_ids: vec![77],
        }));
        assert!(evs.contains(&SessionEvent::CallbackRequested {
            addr: SocketAddrV4::new(Ipv4Addr::new(10, 2, 2, 2), 4000)
        }));
        // A low id cannot ask for callbacks.
        s.callback(77);
        assert!(s.take_output().is_none());
    }
}
