//! Writes the seed corpora, `fuzz/corpus/<target>/seed-*`: valid encodings
//! made with weir's own encoders, plus a few hand-made edge cases, each in
//! the input layout its target reads (choice bytes first, see the target's
//! source). Run after changing a target's layout or adding one:
//!
//! ```text
//! cargo +nightly run --manifest-path fuzz/Cargo.toml --example seeds
//! ```
//!
//! Files are named by content hash, so running it again only adds what is
//! new; old seeds of a changed layout should be deleted by hand.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use sha1::{Digest, Sha1};
use weir_bencode::OwnedValue;
use weir_bt::create::TorrentBuilder;
use weir_bt::tracker::udp;
use weir_bt::tracker::{AnnounceRequest, AnnounceResponse, Event};
use weir_bt::wire::{BlockRef, ExtHandshake, Handshake, Message};
use weir_ed2k::client::hello::{Hello, OwnHello, user_hash_from_random};
use weir_ed2k::client::{ClientMessage, EmuleInfo, ExtInfo, MultiAnswer, MultiRequest, PartStatus};
use weir_ed2k::hash::{AichTree, aich::leaf_count};
use weir_ed2k::link::{FileLink, LinkSource, SourceHost};
use weir_ed2k::packet::{Protocol, put_packed, put_packet};
use weir_ed2k::server::{ClientToServer, OfferedFile, ServerToClient, Source};
use weir_ed2k::tag::{Tag, TagName, TagValue, encode_list};
use weir_ed2k::{AichHash, Md4Hash, PARTSIZE};
use weir_zmodem::consts::frame;
use weir_zmodem::escape::Escaper;
use weir_zmodem::frame::{FrameEnd, Header, HeaderFormat, encode_header, encode_subpacket};
use weir_zmodem::{FileInfo, FileOffer, Receiver, ReceiverConfig, RecvEvent, Sender, SenderConfig};

#[path = "seed_sets/net.rs"]
mod net;

struct Out {
    dir: std::path::PathBuf,
    written: usize,
}

impl Out {
    fn put(&mut self, target: &str, data: &[u8]) {
        let d = self.dir.join(target);
        std::fs::create_dir_all(&d).expect("corpus dir");
        let h = Sha1::digest(data);
        let name: String = h[..8].iter().map(|b| format!("{b:02x}")).collect();
        std::fs::write(d.join(format!("seed-{name}")), data).expect("write seed");
        self.written += 1;
    }
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn bencode(o: &mut Out) {
    let mut d = OwnedValue::dict();
    d.insert("a", OwnedValue::Int(-1))
        .insert("b", OwnedValue::bytes("spam"))
        .insert(
            "c",
            OwnedValue::List(vec![OwnedValue::Int(0), OwnedValue::dict()]),
        );
    for v in [
        OwnedValue::Int(0),
        OwnedValue::Int(i64::MIN),
        OwnedValue::Int(i64::MAX),
        OwnedValue::bytes(""),
        OwnedValue::bytes(vec![0xffu8; 40]),
        OwnedValue::List(vec![]),
        d,
    ] {
        o.put("bencode", &v.to_vec());
    }
    let deep = |n: usize| [vec![b'l'; n], vec![b'e'; n]].concat();
    o.put("bencode", &deep(64));
    o.put("bencode", &deep(65));
    for edge in [
        &b"i-0e"[..],
        b"i03e",
        b"ie",
        b"i9223372036854775808e",
        b"03:abc",
        b"d1:b0:1:a0:e",
        b"d1:a0:1:a0:e",
        b"di1ei2ee",
        b"4:abc",
        b"i1ei2e",
        b"\x07d1:ai1ee",
    ] {
        o.put("bencode", edge);
    }
}

fn torrents() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut b = TorrentBuilder::single_file("a.bin", 40_000, 16_384);
    b.pieces(vec![[1; 20]; 3])
        .trackers(vec![vec!["http://127.0.0.1:6969/announce".into()]])
        .creation_date(Some(1_700_000_000));
    out.push(b.build().expect("single").bytes);
    let mut b = TorrentBuilder::multi_file("dir", 32_768);
    b.add_file(vec!["x".into(), "y.txt".into()], 10)
        .add_file(vec!["z".into()], 0)
        .add_file(vec!["x".into(), "w".into()], 70_000)
        .pieces(vec![[2; 20]; 3])
        .trackers(vec![
            vec!["udp://127.0.0.1:6969".into(), "http://127.0.0.2/a".into()],
            vec!["http://127.0.0.3/b".into()],
        ])
        .private(true)
        .comment(Some("comment".into()))
        .created_by(Some("weir".into()));
    out.push(b.build().expect("multi").bytes);
    out
}

fn bt(o: &mut Out) {
    for t in torrents() {
        o.put("bt_metainfo", &t);
    }
    // name.utf-8 and path.utf-8, and a hybrid-looking v2 key.
    let mut file = OwnedValue::dict();
    file.insert("length", OwnedValue::Int(5))
        .insert(
            "path",
            OwnedValue::List(vec![OwnedValue::bytes(b"\xe9t\xe9")]),
        )
        .insert(
            "path.utf-8",
            OwnedValue::List(vec![OwnedValue::bytes("été")]),
        );
    let mut info = OwnedValue::dict();
    info.insert("files", OwnedValue::List(vec![file]))
        .insert("name", OwnedValue::bytes(b"\xff"))
        .insert("name.utf-8", OwnedValue::bytes("ok"))
        .insert("piece length", OwnedValue::Int(4))
        .insert("pieces", OwnedValue::Bytes(vec![3; 40]));
    let mut top = OwnedValue::dict();
    top.insert("info", info.clone());
    o.put("bt_metainfo", &top.to_vec());
    o.put("bt_metainfo", &info.to_vec());

    // Wire: every message, with default limits and with a piece count.
    let msgs = vec![
        Message::KeepAlive,
        Message::Choke,
        Message::Unchoke,
        Message::Interested,
        Message::NotInterested,
        Message::Have { index: 3 },
        Message::Bitfield(Bytes::from_static(&[0xff, 0x80])),
        Message::Request(BlockRef {
            index: 1,
            begin: 16_384,
            length: 16_384,
        }),
        Message::Piece {
            index: 1,
            begin: 0,
            data: Bytes::from_static(b"data"),
        },
        Message::Cancel(BlockRef {
            index: 1,
            begin: 0,
            length: 16_384,
        }),
        Message::Port(6881),
        Message::Suggest { index: 2 },
        Message::HaveAll,
        Message::HaveNone,
        Message::Reject(BlockRef {
            index: 0,
            begin: 0,
            length: 1,
        }),
        Message::AllowedFast { index: 4 },
        Message::Extended {
            id: 0,
            payload: Bytes::from(ext_handshake()),
        },
    ];
    let mut stream = BytesMut::new();
    for m in &msgs {
        weir_bt::wire::encode(m, &mut stream);
    }
    stream.extend_from_slice(&[0, 0, 0, 3, 42, 1, 2]); // an unknown id, skipped
    o.put("bt_wire", &cat(&[&[0, 0], &stream]));
    o.put("bt_wire", &cat(&[&[0, 7], &stream]));
    o.put("bt_wire", &cat(&[&[1, 9, 0, 3], &stream])); // 9 pieces
    for m in &msgs {
        let mut one = BytesMut::new();
        weir_bt::wire::encode(m, &mut one);
        o.put("bt_wire", &cat(&[&[0, 0], &one]));
    }
    o.put("bt_wire", &[0, 0, 0xff, 0xff, 0xff, 0xff]);
    o.put(
        "bt_wire",
        &[2, 10, 0x20, 0, 0x20, 0, 0, 0, 0, 0, 0x1d, 7, 0, 0, 0, 1],
    );

    let mut h = BytesMut::new();
    Handshake::new([0xaa; 20], *b"-WE0001-000000000000").encode(&mut h);
    o.put("bt_handshake", &h);
    o.put("bt_handshake", &h[..30]);
    o.put("bt_handshake", b"GET / HTTP/1.1\r\n");

    o.put("bt_ext_handshake", &ext_handshake());
    o.put("bt_ext_handshake", b"d1:md6:ut_pexi0eee");
    o.put("bt_ext_handshake", b"d1:pi70000ee");

    // HTTP tracker answers.
    let mut compact = OwnedValue::dict();
    compact
        .insert("interval", OwnedValue::Int(1800))
        .insert("min interval", OwnedValue::Int(60))
        .insert("complete", OwnedValue::Int(3))
        .insert("incomplete", OwnedValue::Int(1))
        .insert(
            "peers",
            OwnedValue::Bytes(vec![127, 0, 0, 1, 0x1a, 0xe1, 127, 0, 0, 2, 0, 80]),
        )
        .insert(
            "peers6",
            OwnedValue::Bytes([vec![0; 15], vec![1, 0x1a, 0xe2]].concat()),
        )
        .insert("warning message", OwnedValue::bytes("slow down"));
    o.put("bt_tracker_http", &compact.to_vec());
    let peer = |ip: &str, port: i64| {
        let mut p = OwnedValue::dict();
        p.insert("ip", OwnedValue::bytes(ip))
            .insert("peer id", OwnedValue::bytes([b'p'; 20]))
            .insert("port", OwnedValue::Int(port));
        p
    };
    let mut dict = OwnedValue::dict();
    dict.insert("interval", OwnedValue::Int(900)).insert(
        "peers",
        OwnedValue::List(vec![
            peer("127.0.0.1", 6881),
            peer("::1", 6882),
            peer("example.com", 80),
            peer("127.0.0.1", 0),
        ]),
    );
    o.put("bt_tracker_http", &dict.to_vec());
    o.put("bt_tracker_http", b"d14:failure reason9:not founde");
    o.put("bt_tracker_http", b"d8:intervali1e5:peers5:abcdee");

    // UDP tracker packets: [sel][packet]; sel bit 2 = IPv6 answer.
    let req = AnnounceRequest {
        info_hash: [1; 20],
        peer_id: [2; 20],
        port: 6881,
        uploaded: 1,
        downloaded: 2,
        left: 3,
        event: Some(Event::Started),
        numwant: Some(50),
        key: Some(7),
        compact: true,
    };
    let resp = AnnounceResponse {
        interval: 1800,
        min_interval: None,
        peers: vec![
            SocketAddr::from(([127, 0, 0, 1], 6881)),
            "[::1]:6882".parse().expect("v6"),
        ],
        complete: Some(2),
        incomplete: Some(5),
        warning: None,
    };
    o.put(
        "bt_tracker_udp",
        &cat(&[&[1], &udp::connect_request(0x0102_0304)]),
    );
    o.put(
        "bt_tracker_udp",
        &cat(&[&[1], &udp::connect_response(9, 0xfeed)]),
    );
    o.put(
        "bt_tracker_udp",
        &cat(&[&[1], &udp::announce_request(0xfeed, 9, &req)]),
    );
    o.put(
        "bt_tracker_udp",
        &cat(&[&[1], &udp::announce_response(9, &resp, false)]),
    );
    o.put(
        "bt_tracker_udp",
        &cat(&[&[5], &udp::announce_response(9, &resp, true)]),
    );
    o.put(
        "bt_tracker_udp",
        &cat(&[&[1], &udp::error_response(9, "unregistered torrent")]),
    );
}

fn ext_handshake() -> Vec<u8> {
    let mut h = ExtHandshake {
        reqq: Some(500),
        v: Some("weir 0.1".into()),
        p: Some(6881),
        metadata_size: Some(31_235),
        yourip: Some(vec![127, 0, 0, 1]),
        ..Default::default()
    };
    h.m.insert("ut_metadata".into(), 2);
    h.m.insert("ut_pex".into(), 1);
    h.encode()
}

fn tags() -> Vec<Tag> {
    vec![
        Tag::string(0x01, &b"name.bin"[..]),
        Tag::u32(0x02, 300),
        Tag::u32(0x03, 70_000),
        Tag::new(0x04, TagValue::U64(5 << 32)),
        Tag::new(0x05, TagValue::Hash(Md4Hash([9; 16]))),
        Tag::new(0x06, TagValue::Float(1.5)),
        Tag::new(0x07, TagValue::Bool(1)),
        Tag::new(
            0x08,
            TagValue::BoolArray(10, Bytes::from_static(&[0xff, 0x03])),
        ),
        Tag::new(0x09, TagValue::Blob(Bytes::from_static(b"blob"))),
        Tag::new(0x0a, TagValue::Bsob(Bytes::from_static(b"bsob"))),
        Tag::new(0x0b, TagValue::U8(7)),
        Tag::new(0x0c, TagValue::U16(0x1234)),
        Tag {
            name: TagName::Str(Bytes::from_static(b"Artist")),
            value: TagValue::Str(Bytes::from(vec![b'x'; 20])),
        },
    ]
}

/// `[sel][opcode][payload]` for the client-message target.
fn client_seed(m: &ClientMessage, ext: u8) -> Vec<u8> {
    let mut b = BytesMut::new();
    m.encode(&mut b);
    let sel = u8::from(b[0] == 0xC5) | ext << 1;
    cat(&[&[sel, b[5]], &b[6..]])
}

fn ed2k(o: &mut Out) {
    // Packet streams: [sel][seed][stream].
    let mut s = BytesMut::new();
    put_packet(&mut s, Protocol::Edonkey, 0x01, b"hello");
    put_packet(&mut s, Protocol::Emule, 0x87, &[1, 2, 3, 4, 5]);
    put_packed(&mut s, 0x40, &[42u8; 5000], 9);
    put_packed(&mut s, 0x15, b"tiny", 9);
    for sel in [0u8, 1, 2] {
        let limits: &[u8] = if sel == 2 {
            &[0x00, 0x20, 0x00, 0x10]
        } else {
            &[]
        };
        o.put("ed2k_packet", &cat(&[&[sel], limits, &[5], &s]));
    }
    o.put("ed2k_packet", &[0, 0, 0xE3, 0xff, 0xff, 0xff, 0x7f]);
    o.put("ed2k_packet", &[0, 0, 0xC5, 0, 0, 0, 0]);

    // Inflate: [limit sel][seed][zlib].
    for data in [&b"hello hello hello"[..], &[0u8; 70_000], b""] {
        if let Some(z) = weir_ed2k::inflate::deflate_if_smaller(data, 9) {
            o.put("ed2k_inflate", &cat(&[&[3, 0], &z]));
            o.put("ed2k_inflate", &cat(&[&[2, 0x10, 0x27, 9], &z]));
            o.put("ed2k_inflate", &cat(&[&[3, 4], &z, b"xx"]));
            o.put("ed2k_inflate", &cat(&[&[3, 1], &z[..z.len() - 2]]));
        }
    }
    o.put(
        "ed2k_inflate",
        &[3, 0, 0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    );

    // Tag lists, old and new encodings.
    for new in [false, true] {
        let mut b = BytesMut::new();
        encode_list(&tags(), new, &mut b);
        o.put("ed2k_tag", &b);
    }
    o.put("ed2k_tag", &[0xff, 0xff, 0xff, 0xff]);
    o.put("ed2k_tag", &[2, 0, 0, 0, 0x89, 1, 5]);

    // Links.
    let h = "D3B6B09D73D3FE0DD41DDE5ED244215A";
    let l = FileLink {
        name: "my file.bin".into(),
        size: 9_728_000,
        hash: Md4Hash::from_hex(h).expect("hash"),
        aich: Some(AichHash([7; 20])),
        part_hashes: None,
        sources: vec![
            LinkSource {
                host: SourceHost::Ip(Ipv4Addr::new(127, 0, 0, 1)),
                port: 4662,
                crypt_options: 0,
                user_hash: None,
            },
            LinkSource {
                host: SourceHost::Name("host.lan".into()),
                port: 4663,
                crypt_options: 0x80,
                user_hash: Some(Md4Hash([5; 16])),
            },
        ],
    };
    o.put("ed2k_link", l.to_link().as_bytes());
    for s in [
        format!(
            "ed2k://|file|a%20b.bin|9728000|{h}|p=6E6DC9CAF5C2BAB98702E5C4E68769F0:31D6CFE0D16AE931B73C59D7E0C089C0|/"
        ),
        format!("ed2k://|file|x|5|{h}|sources,1.2.3.4:5|/"),
        format!("ed2k://|file|..%2Fetc|5|{h}|/"),
        "ed2k://|server|1.2.3.4|4661|/".into(),
        h.into(),
        "3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ".into(),
    ] {
        o.put("ed2k_link", s.as_bytes());
    }

    // Client messages.
    let f = Md4Hash([7; 16]);
    let own = OwnHello::weir("weir", 4672, true);
    let hello: Hello = own.hello(user_hash_from_random([1; 16]), 0x0100_007f, 4662);
    let mut with_trailer = hello.clone();
    with_trailer.trailer = Some(0x4b444c4d);
    let status = PartStatus::from_fn(10, |i| i % 3 == 0);
    let ext = ExtInfo {
        part_status: status.clone(),
        complete_sources: Some(3),
    };
    let tree = small_tree();
    let rd = tree.recovery_data(1).expect("part 1 has recovery data");
    let msgs = vec![
        ClientMessage::Hello(hello.clone()),
        ClientMessage::HelloAnswer(with_trailer),
        ClientMessage::EmuleInfo(EmuleInfo {
            version: 0x40,
            protocol: 1,
            tags: tags(),
        }),
        ClientMessage::RequestFileName {
            file: f,
            ext: Some(ext.clone()),
        },
        ClientMessage::ReqFileNameAnswer {
            file: f,
            name: Bytes::from_static(b"file.bin"),
        },
        ClientMessage::SetReqFileId { file: f },
        ClientMessage::FileStatus {
            file: f,
            status: status.clone(),
        },
        ClientMessage::FileReqAnsNoFil { file: f },
        ClientMessage::HashSetRequest { file: f },
        ClientMessage::HashSetAnswer {
            file: f,
            hashes: vec![Md4Hash([1; 16]), Md4Hash::EMPTY],
        },
        ClientMessage::MultiPacket {
            file: f,
            size: Some(2 * PARTSIZE),
            entries: vec![
                MultiRequest::RequestFileName(Some(ext)),
                MultiRequest::SetReqFileId,
                MultiRequest::RequestSources2 {
                    version: 4,
                    options: 0,
                },
                MultiRequest::AichFileHashReq,
            ],
        },
        ClientMessage::MultiPacketAnswer {
            file: f,
            entries: vec![
                MultiAnswer::FileName(Bytes::from_static(b"file.bin")),
                MultiAnswer::FileStatus(status),
                MultiAnswer::AichFileHash(AichHash([3; 20])),
            ],
        },
        ClientMessage::AichFileHashAns {
            file: f,
            master: tree.root(),
        },
        ClientMessage::AichRequest {
            file: f,
            part: 1,
            master: tree.root(),
        },
        ClientMessage::AichAnswer {
            file: f,
            data: Some((1, tree.root(), rd.clone())),
        },
        ClientMessage::AichAnswer {
            file: f,
            data: None,
        },
        ClientMessage::StartUploadReq { file: f },
        ClientMessage::AcceptUploadReq,
        ClientMessage::QueueRanking { rank: 12 },
        ClientMessage::QueueRank { rank: 99 },
        ClientMessage::RequestParts {
            file: f,
            ranges: [(0, 184_320), (184_320, 368_640), (0, 0)],
        },
        ClientMessage::RequestParts {
            file: f,
            ranges: [(5 << 30, (5 << 30) + 10), (0, 0), (0, 0)],
        },
        ClientMessage::SendingPart {
            file: f,
            start: 10,
            end: 15,
            data: Bytes::from_static(b"12345"),
            wide: false,
        },
        ClientMessage::SendingPart {
            file: f,
            start: 5 << 30,
            end: (5 << 30) + 3,
            data: Bytes::from_static(b"abc"),
            wide: true,
        },
        ClientMessage::CompressedPart {
            file: f,
            start: 0,
            packed_len: 20,
            data: Bytes::from_static(b"\x78\x9c"),
            wide: false,
        },
        ClientMessage::CancelTransfer,
        ClientMessage::OutOfPartReqs,
        ClientMessage::EndOfDownload { file: f },
        ClientMessage::SecIdentState {
            state: 2,
            challenge: 0xdead,
        },
        ClientMessage::PublicKey {
            key: Bytes::from_static(&[1; 76]),
        },
        ClientMessage::Signature {
            signature: Bytes::from_static(&[2; 48]),
            ip_kind: Some(1),
        },
        ClientMessage::RequestSources { file: f },
        ClientMessage::RequestSources2 {
            file: f,
            version: 4,
            options: 0,
        },
        ClientMessage::PublicIpReq,
        ClientMessage::PublicIpAnswer {
            ip: Ipv4Addr::new(127, 0, 0, 1),
        },
        ClientMessage::Message {
            text: Bytes::from_static(b"hi"),
        },
        ClientMessage::ChangeClientId {
            id: 5,
            server_ip: Ipv4Addr::new(127, 0, 0, 2),
        },
        ClientMessage::FileDesc {
            rating: 3,
            comment: Bytes::from_static(b"good"),
        },
        ClientMessage::Unknown {
            protocol: Protocol::Emule,
            opcode: 0xfe,
            payload: Bytes::from_static(b"?"),
        },
    ];
    for m in &msgs {
        o.put("ed2k_client_msg", &client_seed(m, 2));
    }
    o.put("ed2k_client_msg", &client_seed(&msgs[3], 1));
    o.put("ed2k_client_msg", &client_seed(&msgs[10], 0));

    // Hashset / AICH answers.
    let mut rdw = Vec::new();
    rd.encode(&mut rdw);
    let size = tree.size().to_le_bytes();
    o.put(
        "ed2k_hash_answers",
        &cat(&[&[0], &size, &[1, 0], &tree.root().0, &rdw]),
    );
    o.put(
        "ed2k_hash_answers",
        &cat(&[
            &[1],
            &(3 * PARTSIZE as u32 + 5).to_le_bytes(),
            &[0; 8],
            &[1, 0, 0, 0, 0],
        ]),
    );
    o.put(
        "ed2k_hash_answers",
        &cat(&[&[0xf1], &[0x10, 0, 0, 0], &[9; 8], &[0x20, 0, 3, 0, 1]]),
    );
    let hs = client_seed(&msgs[9], 0);
    o.put("ed2k_hash_answers", &cat(&[&[2], &size, &hs[2..]]));
    let aa = client_seed(&msgs[14], 0);
    o.put("ed2k_hash_answers", &cat(&[&[8 | 2], &size, &aa[2..]]));

    // Server messages: [sel][opcode][payload]; sel bit 0 = server to client.
    let offered = |new| ClientToServer::OfferFiles {
        files: vec![OfferedFile {
            hash: f,
            client_id: 0xFBFB_FBFB,
            port: 0xFBFB,
            tags: vec![
                Tag::string(0x01, &b"a.bin"[..]),
                Tag::u32(0x02, 1234),
                Tag::u32(0x3A, 1),
            ],
        }],
        new_tags: new,
    };
    let c2s = vec![
        ClientToServer::Login {
            user_hash: f,
            client_id: 0,
            port: 4662,
            tags: own.tags(),
        },
        ClientToServer::GetServerList,
        offered(false),
        offered(true),
        ClientToServer::GetSources {
            file: f,
            size: Some(1234),
            obfu: false,
        },
        ClientToServer::GetSources {
            file: f,
            size: Some(5 << 32),
            obfu: true,
        },
        ClientToServer::CallbackRequest { id: 77 },
        ClientToServer::Disconnect,
    ];
    for m in &c2s {
        let mut b = BytesMut::new();
        m.encode(&mut b);
        o.put("ed2k_server_msg", &cat(&[&[0, b[5]], &b[6..]]));
    }
    let s2c = vec![
        ServerToClient::Message {
            text: Bytes::from_static(b"welcome\r\n"),
        },
        ServerToClient::IdChange {
            id: 0x0100_007f,
            flags: 0x519,
        },
        ServerToClient::Status { users: 1, files: 2 },
        ServerToClient::Ident {
            hash: f,
            ip: Ipv4Addr::LOCALHOST,
            port: 4661,
            tags: vec![Tag::string(0x01, &b"srv"[..])],
        },
        ServerToClient::ServerList {
            servers: vec![(Ipv4Addr::LOCALHOST, 4661)],
        },
        ServerToClient::FoundSources {
            file: f,
            sources: vec![Source {
                id: 0x0100_007f,
                port: 4662,
                crypt: None,
            }],
            obfu: false,
        },
        ServerToClient::FoundSources {
            file: f,
            sources: vec![
                Source {
                    id: 5,
                    port: 4662,
                    crypt: Some((0x80, Some(Md4Hash([4; 16])))),
                },
                Source {
                    id: 6,
                    port: 4663,
                    crypt: Some((0, None)),
                },
            ],
            obfu: true,
        },
        ServerToClient::CallbackRequested {
            ip: Ipv4Addr::LOCALHOST,
            port: 4662,
        },
        ServerToClient::CallbackFail,
        ServerToClient::Reject,
    ];
    for m in &s2c {
        let mut b = BytesMut::new();
        m.encode(&mut b);
        o.put("ed2k_server_msg", &cat(&[&[1, b[5]], &b[6..]]));
    }
}

fn small_tree() -> AichTree {
    let size = 2 * PARTSIZE + 1000;
    let leaves = (0..leaf_count(size)).map(|i| [i as u8; 20]).collect();
    AichTree::from_leaves(size, leaves)
}

/// A real ZMODEM session between weir's sender and receiver: what each
/// side wrote to the line.
fn zmodem_session() -> (Vec<u8>, Vec<u8>) {
    let now = Instant::now();
    let file = FileOffer {
        name: b"f.bin".to_vec(),
        size: 3000,
        mtime: 0o14750457123,
        mode: 0o644,
    };
    let cfg = SenderConfig {
        block_size: 1024,
        window: Some(2048),
        ..Default::default()
    };
    let mut tx = Sender::new(cfg, vec![file], now).expect("sender");
    let mut rx = Receiver::new(
        ReceiverConfig {
            flush_at: 1,
            ..Default::default()
        },
        now,
    );
    let (mut to_rx, mut to_tx) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        if let Some(req) = tx.poll_data_request() {
            let data = vec![0x18u8; req.len];
            tx.supply_data(now, req.file, req.offset, &data)
                .expect("supply");
        }
        let out = tx.pending_output().to_vec();
        tx.consume_output(out.len());
        to_rx.extend_from_slice(&out);
        rx.handle_input(now, &out).expect("receiver");
        while let Some(ev) = rx.poll_event() {
            if let RecvEvent::FileOffered(_) = ev {
                rx.accept(now, 0);
            }
        }
        let back = rx.pending_output().to_vec();
        rx.consume_output(back.len());
        to_tx.extend_from_slice(&back);
        tx.handle_input(now, &back).expect("sender input");
        while tx.poll_event().is_some() {}
        if tx.is_done() && rx.is_done() {
            break;
        }
    }
    (to_rx, to_tx)
}

fn zmodem(o: &mut Out) {
    let (to_rx, to_tx) = zmodem_session();
    o.put("zmodem_decode", &cat(&[&[5 << 1, 0], &to_rx]));
    o.put("zmodem_decode", &cat(&[&[5 << 1, 9], &to_tx]));
    let mut esc = Escaper::new(true);
    let mut line = Vec::new();
    encode_header(
        &Header::with_pos(frame::ZDATA, 0),
        HeaderFormat::Hex,
        &mut esc,
        &mut line,
    );
    encode_subpacket(
        b"@\r\x18\x11\x13\x7f\xff",
        FrameEnd::Crcw,
        weir_zmodem::crc::CrcKind::Crc16,
        &mut esc,
        &mut line,
    );
    o.put("zmodem_decode", &cat(&[&[1 | 4 << 1, 3], &line]));
    o.put("zmodem_decode", &[0, 0, 0x18, 0x18, 0x18, 0x18, 0x18]);

    // Frames: [sel][seed] then per frame [fmt][type][pos u32] and, for data
    // frames, [count] and per subpacket [len u16][data][end].
    o.put(
        "zmodem_frames",
        &[
            2, 5, 2, 10, 0, 0, 0, 0, 1, 5, 0, b'h', b'e', b'l', b'l', b'o', 3,
        ],
    );
    o.put(
        "zmodem_frames",
        &[
            1, 0, 0, 4, 1, 2, 3, 4, 0, 3, 0, 0x18, 0x11, 0x0d, 1, 1, 1, 0, 0, 0, 0,
        ],
    );

    let body: Vec<u8> = (0..=255u8).cycle().take(700).collect();
    o.put("zmodem_escape", &cat(&[&[0, 7, 0, 4], &body]));
    o.put("zmodem_escape", &cat(&[&[1, 0, 0xff, 0xff], &body]));

    let mut b = Vec::new();
    FileInfo {
        name: b"a.txt".to_vec(),
        size: Some(3),
        mtime: Some(0o14750457123),
        mode: Some(0o100644),
        files_left: Some(1),
        bytes_left: Some(3),
    }
    .encode(&mut b);
    o.put("zmodem_fileinfo", &b);
    o.put("zmodem_fileinfo", b"x\0-5 9z");
    o.put(
        "zmodem_fileinfo",
        b"big\x00184467440737095516150 777777777777777777777777 0",
    );

    // Receiver: [sel] then ops (see the target): ZFILE header, ZFILE
    // block, accept, ZDATA, data subpackets, ZEOF, ZFIN.
    o.put(
        "zmodem_receiver",
        &[
            1, // crc32
            2, 2, // ZFILE header (hex), type index 2
            0x83, 3, b'a', b'b', b'c', 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            2, // ZFILE block, accept at 0
            0x11, 4, // ZDATA binary at current position
            3, 10, 0, b'0', b'1', b'2', b'3', b'4', b'5', b'6', b'7', b'8',
            b'9', // 10 bytes, ZCRCE
            0x11, 7, // ZEOF
            0x11, 9, // ZFIN
            0, 2, b'O', b'O',
        ],
    );
    o.put(
        "zmodem_receiver",
        &[
            0, 0, 20, b'r', b'z', b'\r', b'*', b'*', 0x18, b'B', b'0', b'0', 5, 7,
        ],
    );

    // Sender: [sel][file sizes...][cfg bytes] then ops.
    o.put(
        "zmodem_sender",
        &[
            33, // one file, CRC-32 allowed
            0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // 16 bytes, mtime, mode
            5, 0xff, 0x0f, // 1 KiB blocks, chunk
            0x43, 0, 0, 0, 0, 0x23, // ZRINIT (binary): CANFDX|CANOVIO|CANFC32
            1, 2, 128, // ZRPOS 0 (hex)
            4, 3, // supply the data asked for
            0x43, 0, 0, 0, 0, 0x23, // ZRINIT after ZEOF
            1, 8, 128, // ZFIN
        ],
    );
}

fn core(o: &mut Out) {
    for s in [
        "127.0.0.0/8,::1",
        "loopback",
        "any",
        "10.0.0.1",
        "  , 192.168.0.0/16",
        "300.1.1.1/8",
    ] {
        o.put("core_text", s.as_bytes());
    }
    for s in [
        "normal.txt",
        "..",
        "CON.txt",
        "a:b",
        "trailing. ",
        "a/b",
        "x\\y",
        "n\0ul",
    ] {
        o.put("core_text", s.as_bytes());
    }
    o.put("core_text", &[4, 0xff, 0xf0]);
    o.put("core_text", &[3, 0xff, 0x01]);
}

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut o = Out { dir, written: 0 };
    bencode(&mut o);
    bt(&mut o);
    ed2k(&mut o);
    zmodem(&mut o);
    core(&mut o);
    net::magnet(&mut o);
    net::metadata(&mut o);
    net::pex(&mut o);
    net::mse(&mut o);
    net::krpc(&mut o);
    net::utp(&mut o);
    net::rpc(&mut o);
    println!("wrote {} seeds under {}", o.written, o.dir.display());
}
