//! A small eD2k index server, sans-IO: the runtime feeds it connections and
//! decoded messages and sends what it returns.
//!
//! What it does (enough for aMule 2.3.3 to count as "connected to a
//! server", publish its files and get sources, see PROTOCOL-NOTES.md):
//!
//! - login: every client gets a **high id** (its IPv4 address as seen on
//!   the socket), with no reachability probe; the answer is the sequence
//!   real servers send: `SERVERMESSAGE` ("server version ..."), `IDCHANGE`
//!   with the TCP flags, `SERVERSTATUS`, `SERVERIDENT`;
//! - `OFFERFILES` adds the files to the client's set (aMule sends only new
//!   files after the first list);
//! - `GETSOURCES(_OBFU)` answers `FOUNDSOURCES(_OBFU)` with up to 255
//!   other clients offering the file (an empty list when none);
//! - `CALLBACKREQUEST` forwards `CALLBACKREQUESTED` to the target client or
//!   answers `CALLBACK_FAIL`;
//! - a client disconnecting takes its files with it.
//!
//! Everything a client controls is bounded ([`ServerConfig`]): files per
//! client and name length, connections per IP address, clients and files
//! in all, and the bytes the index holds; offers past a bound are not
//! indexed, connections past one are refused.

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;

use bytes::Bytes;

use super::{ClientToServer, ServerToClient, Source, flags};
use crate::Md4Hash;
use crate::client::hello::{ct, ip_to_id};
use crate::tag::{self, Tag};

/// Identifies one client connection (chosen by the runtime).
pub type ConnId = u64;

/// Server settings.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Name shown by clients (`ST_SERVERNAME`).
    pub name: String,
    /// Description (`ST_DESCRIPTION`).
    pub description: String,
    /// Server hash in `SERVERIDENT`.
    pub hash: Md4Hash,
    /// Address announced in `SERVERIDENT`.
    pub ip: Ipv4Addr,
    /// Port announced in `SERVERIDENT`.
    pub port: u16,
    /// TCP flags in `IDCHANGE` (compact tags, UTF-8, large files; no
    /// compression, so OFFERFILES carry real addresses).
    pub flags: u32,
    /// At most this many files are indexed per client.
    pub max_files_per_client: usize,
    /// File names are cut to this many bytes (at a character boundary).
    pub max_name_len: usize,
    /// Most connections from one IP address.
    pub max_clients_per_ip: usize,
    /// Most connections in all.
    pub max_clients: usize,
    /// Most distinct files indexed in all.
    pub max_files: usize,
    /// Most bytes the index may hold (names and per-source entries,
    /// estimated).
    pub max_index_bytes: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            name: "weir ed2k-server".into(),
            description: "weir's small index server".into(),
            hash: Md4Hash([0x57; 16]),
            ip: Ipv4Addr::UNSPECIFIED,
            port: 0,
            flags: flags::NEWTAGS | flags::UNICODE | flags::LARGEFILES,
            max_files_per_client: 1_000,
            max_name_len: 255,
            max_clients_per_ip: 10,
            max_clients: 5_000,
            max_files: 200_000,
            max_index_bytes: 64 << 20,
        }
    }
}

/// Something that happened, for logs and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerEvent {
    /// A client logged in.
    LoggedIn {
        /// Connection.
        conn: ConnId,
        /// Id given.
        id: u32,
        /// Its user hash.
        user_hash: Md4Hash,
        /// Its nick.
        name: Option<String>,
        /// Its listen port.
        port: u16,
    },
    /// A client offered files.
    Offered {
        /// Connection.
        conn: ConnId,
        /// Files in this list.
        files: usize,
        /// Files it offers in total now.
        total: usize,
        /// Files of this list not indexed (a limit was reached).
        refused: usize,
    },
    /// A client asked for sources.
    SourcesAsked {
        /// Connection.
        conn: ConnId,
        /// File.
        file: Md4Hash,
        /// Sources returned.
        found: usize,
    },
    /// A callback was asked for.
    Callback {
        /// Asking connection.
        conn: ConnId,
        /// Target id.
        target: u32,
        /// Whether the target was found.
        forwarded: bool,
    },
    /// A connection went away.
    Left {
        /// Connection.
        conn: ConnId,
    },
}

/// Why a connection must be closed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ServerError {
    /// A message other than a login came first.
    #[error("message before login")]
    NotLoggedIn,
    /// The client said goodbye.
    #[error("client disconnected")]
    Disconnect,
    /// Unknown connection.
    #[error("unknown connection {0}")]
    UnknownConn(ConnId),
    /// Too many connections from this address.
    #[error("too many connections from {ip} (limit {limit})")]
    TooManyFromIp {
        /// The address.
        ip: Ipv4Addr,
        /// The limit.
        limit: usize,
    },
    /// Too many connections in all.
    #[error("server full ({0} clients)")]
    Full(usize),
}

/// Bytes an index entry costs besides its name (hash, tree nodes, the
/// source sets on both sides), as the memory bound counts it.
const ENTRY_COST: u64 = 128;

#[derive(Debug)]
struct Client {
    ip: Ipv4Addr,
    login: Option<(u32, u16)>,
    files: BTreeSet<Md4Hash>,
}

#[derive(Debug, Default)]
struct FileEntry {
    name: Option<String>,
    size: Option<u64>,
    sources: BTreeSet<ConnId>,
}

/// The index server state.
#[derive(Debug)]
pub struct IndexServer {
    config: ServerConfig,
    clients: HashMap<ConnId, Client>,
    by_id: HashMap<u32, BTreeSet<ConnId>>,
    files: HashMap<Md4Hash, FileEntry>,
    per_ip: HashMap<Ipv4Addr, usize>,
    /// Estimated bytes held (names plus [`ENTRY_COST`] per source entry).
    bytes: u64,
    events: Vec<ServerEvent>,
}

impl IndexServer {
    /// A server with no clients.
    pub fn new(config: ServerConfig) -> Self {
        Self {
            config,
            clients: HashMap::new(),
            by_id: HashMap::new(),
            files: HashMap::new(),
            per_ip: HashMap::new(),
            bytes: 0,
            events: Vec::new(),
        }
    }

    /// Estimated bytes the index holds (what [`ServerConfig::max_index_bytes`]
    /// bounds).
    pub fn index_bytes(&self) -> u64 {
        self.bytes
    }

    /// Connections open.
    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// Users logged in and files indexed.
    pub fn stats(&self) -> (u32, u32) {
        let users = self.clients.values().filter(|c| c.login.is_some()).count();
        (users as u32, self.files.len() as u32)
    }

    /// The name and size a client published for `file`.
    pub fn file_info(&self, file: &Md4Hash) -> Option<(Option<&str>, Option<u64>, usize)> {
        self.files
            .get(file)
            .map(|f| (f.name.as_deref(), f.size, f.sources.len()))
    }

    /// Events since the last call.
    pub fn take_events(&mut self) -> Vec<ServerEvent> {
        std::mem::take(&mut self.events)
    }

    /// A new connection from `ip`; an error when a limit refuses it (the
    /// runtime then closes it; nothing is kept).
    pub fn connected(&mut self, conn: ConnId, ip: Ipv4Addr) -> Result<(), ServerError> {
        if self.clients.len() >= self.config.max_clients {
            return Err(ServerError::Full(self.clients.len()));
        }
        let n = self.per_ip.entry(ip).or_insert(0);
        if *n >= self.config.max_clients_per_ip {
            return Err(ServerError::TooManyFromIp {
                ip,
                limit: self.config.max_clients_per_ip,
            });
        }
        *n += 1;
        self.clients.insert(
            conn,
            Client {
                ip,
                login: None,
                files: BTreeSet::new(),
            },
        );
        Ok(())
    }

    /// A connection closed: its files go with it.
    pub fn disconnected(&mut self, conn: ConnId) {
        let Some(c) = self.clients.remove(&conn) else {
            return;
        };
        if let Some(n) = self.per_ip.get_mut(&c.ip) {
            *n -= 1;
            if *n == 0 {
                self.per_ip.remove(&c.ip);
            }
        }
        if let Some((id, _)) = c.login {
            if let Some(set) = self.by_id.get_mut(&id) {
                set.remove(&conn);
                if set.is_empty() {
                    self.by_id.remove(&id);
                }
            }
        }
        for f in c.files {
            if let Some(e) = self.files.get_mut(&f) {
                e.sources.remove(&conn);
                self.bytes = self.bytes.saturating_sub(ENTRY_COST);
                if e.sources.is_empty() {
                    let name = e.name.as_ref().map_or(0, |n| n.len() as u64);
                    self.bytes = self.bytes.saturating_sub(name);
                    self.files.remove(&f);
                }
            }
        }
        self.events.push(ServerEvent::Left { conn });
    }

    /// Handles one message; returns the messages to send (to this or other
    /// connections), or why the connection must close.
    pub fn handle(
        &mut self,
        conn: ConnId,
        msg: ClientToServer,
    ) -> Result<Vec<(ConnId, ServerToClient)>, ServerError> {
        let client = self
            .clients
            .get(&conn)
            .ok_or(ServerError::UnknownConn(conn))?;
        let logged_in = client.login.is_some();
        let ip = client.ip;
        match msg {
            ClientToServer::Login {
                user_hash,
                port,
                tags,
                ..
            } => {
                if logged_in {
                    return Ok(vec![]);
                }
                Ok(self.login(conn, ip, user_hash, port, &tags))
            }
            _ if !logged_in => Err(ServerError::NotLoggedIn),
            ClientToServer::Disconnect => Err(ServerError::Disconnect),
            ClientToServer::GetServerList => {
                Ok(vec![(conn, ServerToClient::ServerList { servers: vec![] })])
            }
            ClientToServer::OfferFiles { files, .. } => {
                let n = files.len();
                let mut refused = 0;
                for f in files {
                    if !self.index_offer(conn, &f) {
                        refused += 1;
                    }
                }
                let total = self.clients[&conn].files.len();
                self.events.push(ServerEvent::Offered {
                    conn,
                    files: n,
                    total,
                    refused,
                });
                Ok(vec![])
            }
            ClientToServer::GetSources { file, obfu, .. } => {
                let sources: Vec<Source> = self
                    .files
                    .get(&file)
                    .map(|e| {
                        e.sources
                            .iter()
                            .filter(|&&c| c != conn)
                            .filter_map(|c| self.clients.get(c))
                            .filter_map(|c| {
                                c.login.map(|(id, port)| Source {
                                    id,
                                    port,
                                    crypt: obfu.then_some((0, None)),
                                })
                            })
                            .take(255)
                            .collect()
                    })
                    .unwrap_or_default();
                self.events.push(ServerEvent::SourcesAsked {
                    conn,
                    file,
                    found: sources.len(),
                });
                Ok(vec![(
                    conn,
                    ServerToClient::FoundSources {
                        file,
                        sources,
                        obfu,
                    },
                )])
            }
            ClientToServer::CallbackRequest { id } => {
                let me = self.clients[&conn].login.map(|(_, p)| p).unwrap_or(0);
                let target = self
                    .by_id
                    .get(&id)
                    .and_then(|s| s.iter().find(|&&c| c != conn).copied());
                self.events.push(ServerEvent::Callback {
                    conn,
                    target: id,
                    forwarded: target.is_some(),
                });
                Ok(match target {
                    Some(t) => vec![(t, ServerToClient::CallbackRequested { ip, port: me })],
                    None => vec![(conn, ServerToClient::CallbackFail)],
                })
            }
            ClientToServer::Unknown { .. } => Ok(vec![]),
        }
    }

    /// Indexes one offered file under the limits; false if one refused it.
    fn index_offer(&mut self, conn: ConnId, f: &super::OfferedFile) -> bool {
        let cfg = &self.config;
        let c = self.clients.get_mut(&conn).expect("caller checked");
        let known_here = c.files.contains(&f.hash);
        let entry = self.files.get(&f.hash);
        if !known_here {
            if c.files.len() >= cfg.max_files_per_client
                || entry.is_none() && self.files.len() >= cfg.max_files
                || self.bytes + ENTRY_COST + cfg.max_name_len as u64 > cfg.max_index_bytes
            {
                return false;
            }
            c.files.insert(f.hash);
            self.bytes += ENTRY_COST;
        }
        let name = f.name().map(|n| cut(n, cfg.max_name_len));
        let size = f.size();
        let e = self.files.entry(f.hash).or_default();
        e.sources.insert(conn);
        if let Some(name) = name {
            let old = e.name.as_ref().map_or(0, |n| n.len() as u64);
            self.bytes = self.bytes.saturating_sub(old) + name.len() as u64;
            e.name = Some(name);
        }
        if let Some(size) = size {
            e.size = Some(size);
        }
        true
    }

    fn login(
        &mut self,
        conn: ConnId,
        ip: Ipv4Addr,
        user_hash: Md4Hash,
        port: u16,
        tags: &[Tag],
    ) -> Vec<(ConnId, ServerToClient)> {
        // High id for everyone: the address seen on the socket (no probe).
        let id = ip_to_id(ip);
        if let Some(c) = self.clients.get_mut(&conn) {
            c.login = Some((id, port));
        }
        self.by_id.entry(id).or_default().insert(conn);
        let name = tag::find(tags, ct::NAME)
            .and_then(Tag::as_str)
            .map(|s| crate::wire::decode_string(s));
        self.events.push(ServerEvent::LoggedIn {
            conn,
            id,
            user_hash,
            name,
            port,
        });
        let (users, files) = self.stats();
        let c = &self.config;
        vec![
            (
                conn,
                ServerToClient::Message {
                    text: Bytes::from(format!(
                        "server version {}\r\nwelcome to {}",
                        env!("CARGO_PKG_VERSION"),
                        c.name
                    )),
                },
            ),
            (conn, ServerToClient::IdChange { id, flags: c.flags }),
            (conn, ServerToClient::Status { users, files }),
            (
                conn,
                ServerToClient::Ident {
                    hash: c.hash,
                    ip: c.ip,
                    port: c.port,
                    tags: vec![
                        Tag::string(0x01, Bytes::from(c.name.clone())),
                        Tag::string(0x0B, Bytes::from(c.description.clone())),
                    ],
                },
            ),
        ]
    }
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut at = max;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
    }
    s
}
