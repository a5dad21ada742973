//! Server protocol and index server tests.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::*;
use crate::client::hello::{id_to_ip, ip_to_id};
use crate::packet::{Decoder, Limits};
use crate::tag::TagValue;

fn c2s(m: &ClientToServer) -> ClientToServer {
    let mut b = BytesMut::new();
    m.encode(&mut b);
    let p = Decoder::new(Limits::SERVER)
        .decode(&mut b)
        .unwrap()
        .unwrap();
    assert!(b.is_empty());
    ClientToServer::decode(&p).unwrap()
}

fn s2c(m: &ServerToClient) -> ServerToClient {
    let mut b = BytesMut::new();
    m.encode(&mut b);
    let p = Decoder::new(Limits::CLIENT)
        .decode(&mut b)
        .unwrap()
        .unwrap();
    ServerToClient::decode(&p).unwrap()
}

fn offered(hash: u8, name: &str, size: u64) -> OfferedFile {
    OfferedFile {
        hash: Md4Hash([hash; 16]),
        client_id: 0,
        port: 0,
        tags: vec![
            Tag::string(ft::FILENAME, Bytes::from(name.to_string())),
            Tag::u32(ft::FILESIZE, size as u32),
            Tag::u32(ft::FILESIZE_HI, (size >> 32) as u32),
        ],
    }
}

#[test]
fn amule_login_bytes_decode() {
    // ServerConnect.cpp: hash, id 0, port 4662, 4 old-style tags.
    let mut p = vec![0x11u8; 16];
    p.extend_from_slice(&0u32.to_le_bytes());
    p.extend_from_slice(&4662u16.to_le_bytes());
    p.extend_from_slice(&4u32.to_le_bytes());
    p.extend_from_slice(&[0x02, 1, 0, 0x01, 4, 0, b'n', b'i', b'c', b'k']);
    p.extend_from_slice(&[0x03, 1, 0, 0x11, 0x3c, 0, 0, 0]);
    p.extend_from_slice(&[0x03, 1, 0, 0x20, 0x19, 0x03, 0, 0]);
    p.extend_from_slice(&[0x03, 1, 0, 0xFB, 0x80, 0x0c, 0x04, 0x03]);
    let mut b = BytesMut::new();
    crate::packet::put_packet(
        &mut b,
        crate::packet::Protocol::Edonkey,
        op::LOGINREQUEST,
        &p,
    );
    let pk = Decoder::new(Limits::SERVER)
        .decode(&mut b)
        .unwrap()
        .unwrap();
    let ClientToServer::Login { port, tags, .. } = ClientToServer::decode(&pk).unwrap() else {
        panic!()
    };
    assert_eq!(port, 4662);
    assert_eq!(tags.len(), 4);
    assert_eq!(tags[2].as_int(), Some(0x0319));
}

#[test]
fn offerfiles_new_and_old_tags_and_large_sizes() {
    for new_tags in [false, true] {
        let m = ClientToServer::OfferFiles {
            files: vec![offered(1, "a.bin", 5), offered(2, "big", 6 << 30)],
            new_tags,
        };
        let back = c2s(&m);
        let ClientToServer::OfferFiles {
            files,
            new_tags: nt,
        } = &back
        else {
            panic!()
        };
        assert_eq!(*nt, new_tags);
        assert_eq!(files[0].name().as_deref(), Some("a.bin"));
        assert_eq!(files[0].size(), Some(5));
        assert_eq!(files[1].size(), Some(6 << 30));
    }
    // More files announced than present (aMule skips large files for old
    // servers but keeps the count): read what is there.
    let mut b = BytesMut::new();
    ClientToServer::OfferFiles {
        files: vec![offered(1, "a", 1)],
        new_tags: false,
    }
    .encode(&mut b);
    b[6] = 3;
    let p = Decoder::new(Limits::SERVER)
        .decode(&mut b)
        .unwrap()
        .unwrap();
    let ClientToServer::OfferFiles { files, .. } = ClientToServer::decode(&p).unwrap() else {
        panic!()
    };
    assert_eq!(files.len(), 1);
}

#[test]
fn getsources_forms() {
    for size in [None, Some(5u64), Some(6 << 30)] {
        for obfu in [false, true] {
            let m = ClientToServer::GetSources {
                file: Md4Hash([3; 16]),
                size,
                obfu,
            };
            assert_eq!(c2s(&m), m);
        }
    }
}

#[test]
fn index_server_scenario() {
    let mut s = IndexServer::new(ServerConfig::default());
    let a: Ipv4Addr = "10.99.0.2".parse().unwrap();
    let b: Ipv4Addr = "10.99.0.3".parse().unwrap();
    s.connected(1, a).unwrap();
    s.connected(2, b).unwrap();
    // Anything before a login closes the connection.
    assert_eq!(
        s.handle(2, ClientToServer::GetServerList),
        Err(index::ServerError::NotLoggedIn)
    );
    let login = |port| ClientToServer::Login {
        user_hash: Md4Hash([port as u8; 16]),
        client_id: 0,
        port,
        tags: vec![Tag::string(0x01, &b"nick"[..])],
    };
    let out = s.handle(1, login(4662)).unwrap();
    assert_eq!(out.len(), 4);
    assert!(
        matches!(&out[0].1, ServerToClient::Message { text } if text.starts_with(b"server version"))
    );
    assert_eq!(
        out[1].1,
        ServerToClient::IdChange {
            id: ip_to_id(a),
            flags: ServerConfig::default().flags
        }
    );
    s.handle(2, login(4663)).unwrap();
    s.handle(
        1,
        ClientToServer::OfferFiles {
            files: vec![offered(7, "x.bin", 9_728_000)],
            new_tags: true,
        },
    )
    .unwrap();
    assert_eq!(
        s.file_info(&Md4Hash([7; 16])),
        Some((Some("x.bin"), Some(9_728_000), 1))
    );
    // B asks: A is the source, with A's address and listen port.
    let out = s
        .handle(
            2,
            ClientToServer::GetSources {
                file: Md4Hash([7; 16]),
                size: Some(9_728_000),
                obfu: false,
            },
        )
        .unwrap();
    let ServerToClient::FoundSources { sources, .. } = &out[0].1 else {
        panic!()
    };
    assert_eq!(sources.len(), 1);
    assert_eq!((id_to_ip(sources[0].id), sources[0].port), (a, 4662));
    // A asking for its own file gets nobody.
    let out = s
        .handle(
            1,
            ClientToServer::GetSources {
                file: Md4Hash([7; 16]),
                size: None,
                obfu: true,
            },
        )
        .unwrap();
    assert!(
        matches!(&out[0].1, ServerToClient::FoundSources { sources, obfu: true, .. } if sources.is_empty())
    );
    // Callback: B asks for A; A is told to connect to B.
    let out = s
        .handle(2, ClientToServer::CallbackRequest { id: ip_to_id(a) })
        .unwrap();
    assert_eq!(
        out,
        vec![(1, ServerToClient::CallbackRequested { ip: b, port: 4663 })]
    );
    let out = s
        .handle(2, ClientToServer::CallbackRequest { id: 12345 })
        .unwrap();
    assert_eq!(out, vec![(2, ServerToClient::CallbackFail)]);
    assert_eq!(s.stats(), (2, 1));
    // A leaves: its file goes.
    s.disconnected(1);
    assert_eq!(s.stats(), (1, 0));
    let ev = s.take_events();
    assert!(ev.contains(&ServerEvent::Left { conn: 1 }));
    assert!(
        ev.iter()
            .any(|e| matches!(e, ServerEvent::SourcesAsked { found: 1, .. }))
    );
}

#[test]
fn server_messages_round_trip() {
    let msgs = vec![
        ServerToClient::Message {
            text: Bytes::from_static(b"hi\r\nthere"),
        },
        ServerToClient::IdChange {
            id: 5,
            flags: 0x119,
        },
        ServerToClient::Status { users: 1, files: 2 },
        ServerToClient::Ident {
            hash: Md4Hash([1; 16]),
            ip: "10.0.0.1".parse().unwrap(),
            port: 4661,
            tags: vec![Tag::new(0x01, TagValue::Str(Bytes::from_static(b"srv")))],
        },
        ServerToClient::ServerList {
            servers: vec![("1.2.3.4".parse().unwrap(), 4661)],
        },
        ServerToClient::FoundSources {
            file: Md4Hash([2; 16]),
            sources: vec![Source {
                id: 9,
                port: 1,
                crypt: None,
            }],
            obfu: false,
        },
        ServerToClient::FoundSources {
            file: Md4Hash([2; 16]),
            sources: vec![
                Source {
                    id: 9,
                    port: 1,
                    crypt: Some((1, None)),
                },
                Source {
                    id: 10,
                    port: 2,
                    crypt: Some((0x81, Some(Md4Hash([4; 16])))),
                },
            ],
            obfu: true,
        },
        ServerToClient::CallbackRequested {
            ip: "10.0.0.2".parse().unwrap(),
            port: 7,
        },
        ServerToClient::CallbackFail,
        ServerToClient::Reject,
    ];
    for m in msgs {
        assert_eq!(s2c(&m), m);
    }
}

proptest! {
    #[test]
    fn arbitrary_server_packets_never_panic(opcode in any::<u8>(), payload in proptest::collection::vec(any::<u8>(), 0..200)) {
        let p = crate::packet::Packet { protocol: crate::packet::Protocol::Edonkey, opcode, payload: payload.into(), packed: false };
        // What decodes encodes to a packet that decodes the same; an error
        // names the opcode. (Compared as text: a float tag may be NaN.)
        match ClientToServer::decode(&p) {
            Ok(m) => {
                let again = c2s(&m);
                let m = match m {
                    ClientToServer::OfferFiles { files, new_tags: true } => ClientToServer::OfferFiles {
                        files: files
                            .into_iter()
                            .map(|mut f| {
                                f.tags = f.tags.iter().map(crate::tag::Tag::normalized).collect();
                                f
                            })
                            .collect(),
                        new_tags: true,
                    },
                    m => m,
                };
                prop_assert_eq!(format!("{again:?}"), format!("{m:?}"));
            }
            Err(e) => prop_assert_eq!(e.opcode, opcode),
        }
        match ServerToClient::decode(&p) {
            Ok(m) => prop_assert_eq!(format!("{:?}", s2c(&m)), format!("{m:?}")),
            Err(e) => prop_assert_eq!(e.opcode, opcode),
        }
    }

    #[test]
    fn index_server_never_panics(ops in proptest::collection::vec((0u64..4, 0u8..6, any::<u8>()), 0..60)) {
        let mut s = IndexServer::new(ServerConfig::default());
        for c in 0..4 { s.connected(c, Ipv4Addr::new(10, 0, 0, c as u8 + 1)).unwrap(); }
        for (conn, kind, x) in ops {
            let msg = match kind {
                0 => ClientToServer::Login { user_hash: Md4Hash([x; 16]), client_id: 0, port: x as u16, tags: vec![] },
                1 => ClientToServer::OfferFiles { files: vec![offered(x % 4, "f", x as u64 + 1)], new_tags: true },
                2 => ClientToServer::GetSources { file: Md4Hash([x % 4; 16]), size: None, obfu: x & 1 == 1 },
                3 => ClientToServer::CallbackRequest { id: ip_to_id(Ipv4Addr::new(10, 0, 0, x % 5)) },
                4 => { s.disconnected(conn); s.connected(conn, Ipv4Addr::new(10, 0, 0, conn as u8 + 1)).unwrap(); continue; }
                _ => ClientToServer::GetServerList,
            };
            if let Ok(out) = s.handle(conn, msg) {
                for (to, _) in out { prop_assert!(to < 4); }
            }
        }
    }
}

fn offer(first: u32, n: u32, name_len: usize) -> ClientToServer {
    let files = (first..first + n)
        .map(|i| {
            let mut h = [0u8; 16];
            h[..4].copy_from_slice(&i.to_le_bytes());
            OfferedFile {
                hash: Md4Hash(h),
                client_id: 0,
                port: 0,
                tags: vec![
                    Tag::string(ft::FILENAME, Bytes::from("é".repeat(name_len / 2))),
                    Tag::u32(ft::FILESIZE, 1000),
                ],
            }
        })
        .collect();
    ClientToServer::OfferFiles {
        files,
        new_tags: false,
    }
}

fn logged_in(s: &mut IndexServer, conn: ConnId, ip: Ipv4Addr) {
    s.connected(conn, ip).unwrap();
    s.handle(
        conn,
        ClientToServer::Login {
            user_hash: Md4Hash([conn as u8; 16]),
            client_id: 0,
            port: 4662,
            tags: vec![],
        },
    )
    .unwrap();
}

#[test]
fn offers_are_bounded_per_client_by_name_length_and_in_all() {
    let cfg = ServerConfig {
        max_files_per_client: 1000,
        max_files: 1500,
        ..ServerConfig::default()
    };
    let mut s = IndexServer::new(cfg);
    // 10,000 files with 64 KiB names from one client: 1,000 kept, names
    // cut to 255 bytes.
    logged_in(&mut s, 1, Ipv4Addr::new(10, 0, 0, 1));
    s.handle(1, offer(0, 10_000, 64 << 10)).unwrap();
    let ev = s.take_events();
    assert!(ev.contains(&ServerEvent::Offered {
        conn: 1,
        files: 10_000,
        total: 1000,
        refused: 9000
    }));
    let (_, files) = s.stats();
    assert_eq!(files, 1000);
    let (name, _, _) = s.file_info(&Md4Hash([0; 16])).unwrap();
    let name = name.unwrap();
    assert!(name.len() <= 255 && name.len() >= 250, "{}", name.len());
    assert!(name.chars().all(|c| c == 'é'), "cut inside a character");
    // A second client fills the global cap.
    logged_in(&mut s, 2, Ipv4Addr::new(10, 0, 0, 2));
    s.handle(2, offer(100_000, 1000, 10)).unwrap();
    assert_eq!(s.stats().1, 1500);
    // About 1,500 entries with short names and 255-byte ones: well under
    // a megabyte (196 MiB before the bounds).
    assert!(s.index_bytes() < 1 << 20, "{}", s.index_bytes());
    // Leaving takes its files and their bytes with it.
    s.disconnected(1);
    s.disconnected(2);
    assert_eq!(s.stats().1, 0);
    assert_eq!(s.index_bytes(), 0);
}

#[test]
fn the_index_bytes_are_bounded() {
    let cfg = ServerConfig {
        max_index_bytes: 100_000,
        ..ServerConfig::default()
    };
    let mut s = IndexServer::new(cfg);
    logged_in(&mut s, 1, Ipv4Addr::new(10, 0, 0, 1));
    s.handle(1, offer(0, 1000, 255)).unwrap();
    assert!(s.index_bytes() <= 100_000, "{}", s.index_bytes());
    assert!(s.stats().1 > 100, "{}", s.stats().1);
}

#[test]
fn connections_are_bounded_per_ip_and_in_all() {
    let cfg = ServerConfig {
        max_clients_per_ip: 3,
        max_clients: 5,
        ..ServerConfig::default()
    };
    let mut s = IndexServer::new(cfg);
    let ip = Ipv4Addr::new(10, 0, 0, 1);
    for c in 0..3 {
        s.connected(c, ip).unwrap();
    }
    assert_eq!(
        s.connected(3, ip),
        Err(index::ServerError::TooManyFromIp { ip, limit: 3 })
    );
    // A refused connection is not kept.
    assert_eq!(s.clients(), 3);
    s.disconnected(0);
    s.connected(3, ip).unwrap();
    s.connected(10, Ipv4Addr::new(10, 0, 0, 2)).unwrap();
    s.connected(11, Ipv4Addr::new(10, 0, 0, 3)).unwrap();
    assert_eq!(
        s.connected(12, Ipv4Addr::new(10, 0, 0, 4)),
        Err(index::ServerError::Full(5))
    );
}
