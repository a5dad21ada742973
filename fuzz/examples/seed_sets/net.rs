//! Seeds of the targets for magnet links, ut_metadata, ut_pex, MSE, KRPC,
//! uTP and the RPC server: encodings made with weir's own encoders, in
//! each target's input layout (see the top of each target).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use serde_json::json;
use weir_bt::magnet::{FileSelection, Magnet, PeerAddr};
use weir_bt::metadata::MetadataMsg;
use weir_bt::mse::{Encryption, Initiator, MseConfig};
use weir_bt::pex::{PexFlags, PexMessage, PexPeer};
use weir_bt::wire::Handshake;
use weir_dht::krpc::{Body, ErrorBody, Message, Query, Response, Want};
use weir_dht::{Id, NodeInfo};
use weir_utp::packet::{Header, PacketType, encode};

use super::Out;

fn v4(a: u8, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, a)), port)
}

fn v6(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port)
}

pub fn magnet(o: &mut Out) {
    let h = [0xab; 20];
    o.put("bt_magnet", Magnet::new(h).to_uri().as_bytes());
    let mut m = Magnet::new(h);
    m.info_hash_v2 = Some([0xcd; 32]);
    m.ed2k = Some([0x11; 16]);
    m.name = Some("a name + 100% é".into());
    m.length = Some(1_234_567);
    m.trackers = vec![
        "http://127.0.0.1:6969/announce?x=1&y=2".into(),
        "udp://127.0.0.1:6969".into(),
    ];
    m.unsupported_trackers = vec!["wss://127.0.0.1/ws".into()];
    m.peers = vec![
        PeerAddr::Ip(v4(2, 6881)),
        PeerAddr::Ip(v6(6882)),
        PeerAddr::Name {
            host: "peer.example".into(),
            port: 1,
        },
    ];
    m.select = FileSelection::new(vec![(0, 0), (2, 4), (7, 7)]);
    m.web_seeds = vec!["http://127.0.0.1/seed/".into()];
    o.put("bt_magnet", m.to_uri().as_bytes());
    let mut e = Magnet::default();
    e.ed2k = Some([0x22; 16]);
    e.length = Some(9_728_000);
    e.name = Some("file.bin".into());
    o.put("bt_magnet", e.to_uri().as_bytes());
    // Base32 btih, upper-case keys, numbered xt, junk parameters.
    o.put(
        "bt_magnet",
        b"MAGNET:?XT.1=urn:btih:VOVOVOVOVOVOVOVOVOVOVOVOVOVOVOVO&xt.2=urn:sha1:x&&kt=a+b&dn=x+y",
    );
}

pub fn metadata(o: &mut Out) {
    let msgs = [
        MetadataMsg::Request { piece: 0 },
        MetadataMsg::Reject { piece: 3 },
        MetadataMsg::Unknown { msg_type: 7 },
        MetadataMsg::Data {
            piece: 0,
            total_size: 40,
            data: Bytes::from(vec![b'd'; 40]),
        },
        MetadataMsg::Data {
            piece: 1,
            total_size: 16_384 + 5,
            data: Bytes::from_static(b"12345"),
        },
    ];
    for m in &msgs {
        let enc = m.encode();
        o.put("bt_metadata_msg", &[&[0u8][..], &enc].concat());
        o.put(
            "bt_metadata_msg",
            &[&[1u8, 0x00, 0x80, 0, 0][..], &enc].concat(),
        );
    }
    // The fetcher: [info size] then ops. Honest peers arrive (0x80) and
    // answer (1, pick); a hostile one (0x00) claims the true size and
    // sends a flipped piece (op 3 with 0x20|0x10), rejects (0x43), lets
    // time pass (5, ms) and leaves (7).
    let honest_answers: Vec<u8> = (0..8).flat_map(|_| [1u8, 0]).collect();
    for sel in 0..3u8 {
        o.put(
            "bt_metadata_fetch",
            &[&[sel, 0x80][..], &honest_answers].concat(),
        );
        o.put(
            "bt_metadata_fetch",
            &[
                &[sel, 0x00, 0x80, 0x33, 0, 0, 0, 1, 0, 1, 1, 0x53, 0][..],
                &honest_answers,
                &[5, 0xff, 0x10, 6, 7, 0],
            ]
            .concat(),
        );
    }
    o.put(
        "bt_metadata_fetch",
        &[
            1, 0x00, 0x08, 0x30, 0x00, 0x33, 1, 0x33, 0, 6, 6, 6, 6, 0x80, 1, 1, 1, 1,
        ],
    );
}

pub fn pex(o: &mut Out) {
    let msg = PexMessage {
        added: vec![
            PexPeer {
                addr: v4(2, 6881),
                flags: PexFlags::SEED.union(PexFlags::UTP),
            },
            PexPeer {
                addr: v6(6882),
                flags: PexFlags::ENCRYPTION,
            },
        ],
        dropped: vec![v4(3, 6883), v6(6884)],
    };
    let many = PexMessage {
        added: (0..60)
            .map(|i| PexPeer {
                addr: v4(i, 7000),
                flags: PexFlags(0),
            })
            .collect(),
        dropped: Vec::new(),
    };
    for m in [&msg, &many, &PexMessage::default()] {
        let enc = m.encode();
        let n = (enc.len() as u16).to_le_bytes();
        // sel 0: default list limit, decode checked; burst, rate, remember.
        let head = [0u8, 100, 50, 0xe8, 0x03];
        let session = [
            &head[..],
            &[0, n[0], n[1]],
            &enc,
            &[2, 4, 1, 2, 9, 0, 4, 0xff, 0xff, 0, n[0], n[1]],
            &enc,
            &[3, 20, 5],
        ]
        .concat();
        o.put("bt_pex", &session);
    }
}

pub fn mse(o: &mut Out) {
    let now = Instant::now();
    let mut rng = fastrand::Rng::with_seed(1);
    // Responder alone, prefer policy, default pads: a plaintext handshake
    // and an initiator's opening (Ya, PadA, then its step 3 never comes).
    let head = [0u8, 0, 0, 2, 0, 0, 1, 0, 0, 0, 0];
    let mut hs = BytesMut::new();
    Handshake::new([7; 20], [1; 20]).encode(&mut hs);
    o.put("bt_mse", &[&head[..], &hs].concat());
    let mut a = Initiator::new(
        MseConfig::new(Encryption::Prefer),
        [7; 20],
        &hs,
        &mut rng,
        now,
    )
    .expect("initiator");
    let ya = a.take_output();
    o.put("bt_mse", &[&head[..], &ya].concat());
    // Initiator alone: a responder's opening is 96 bytes of Yb and a pad.
    o.put(
        "bt_mse",
        &[&[1u8, 0, 0, 2, 0, 0, 1, 0, 0, 0, 0][..], &ya].concat(),
    );
    // Pairs: [2, cfgA (policy, pad_ab, pad_cd), cfgB, rng seed, IA length,
    // wrong hash, flip (0 none, 1 A->B, 2 B->A), flip at, bit, cuts...].
    for (pa, pb) in [(0u8, 0u8), (2, 1), (1, 2), (0, 3), (2, 2)] {
        o.put(
            "bt_mse",
            &[
                2, pa, 0, 2, 0, 0, pb, 0, 2, 0, 0, 5, 0, 0, 0, 68, 1, 0, 0, 0, 0,
            ],
        );
    }
    o.put(
        "bt_mse",
        &[
            2, 0, 0, 2, 8, 0, 0, 0, 1, 8, 0, 9, 0, 0, 0, 68, 1, 1, 100, 0, 3, 7, 1, 9, 200,
        ],
    );
}

pub fn krpc(o: &mut Out) {
    let id = Id([1; 20]);
    let msg = |body, t: &[u8]| Message {
        transaction: t.to_vec(),
        version: Some(b"WE01".to_vec()),
        read_only: false,
        ip: None,
        body,
    };
    let mut all = vec![
        msg(Body::Query(Query::Ping { id }), b"aa"),
        msg(
            Body::Query(Query::FindNode {
                id,
                target: Id([2; 20]),
                want: Want { v4: true, v6: true },
            }),
            b"ab",
        ),
        msg(
            Body::Query(Query::GetPeers {
                id,
                info_hash: Id([3; 20]),
                want: Want::default(),
            }),
            b"ac",
        ),
        msg(
            Body::Query(Query::AnnouncePeer {
                id,
                info_hash: Id([3; 20]),
                port: 0,
                implied_port: true,
                token: b"tok".to_vec(),
            }),
            b"ad",
        ),
        msg(
            Body::Query(Query::Other {
                id: Some(id),
                method: b"vote".to_vec(),
            }),
            b"ae",
        ),
        msg(
            Body::Response(Response {
                id,
                nodes: vec![NodeInfo {
                    id: Id([4; 20]),
                    addr: v4(5, 6881),
                }],
                nodes6: vec![NodeInfo {
                    id: Id([5; 20]),
                    addr: v6(6881),
                }],
                values: vec![v4(6, 1), v6(2)],
                token: Some(b"token".to_vec()),
                truncated: false,
            }),
            b"af",
        ),
        msg(
            Body::Error(ErrorBody {
                code: 203,
                message: "Protocol Error".into(),
            }),
            b"ag",
        ),
    ];
    all[0].read_only = true;
    all[5].ip = Some(v4(9, 4000));
    for m in &all {
        o.put("dht_krpc", &m.to_vec());
    }
}

pub fn utp(o: &mut Out) {
    let h = Header {
        ptype: PacketType::State,
        conn_id: 0x1234,
        timestamp_us: 1_000_000,
        timestamp_diff_us: 20_000,
        wnd_size: 1 << 20,
        seq_nr: 100,
        ack_nr: 50,
    };
    let mut cases: Vec<BytesMut> = Vec::new();
    for (ptype, sack, pad, payload) in [
        (PacketType::Syn, None, 0, &b""[..]),
        (
            PacketType::State,
            Some(&[0b101u8, 0, 0, 1][..]),
            0,
            &b""[..],
        ),
        (PacketType::Data, None, 0, &b"payload bytes"[..]),
        (PacketType::Data, Some(&[1u8][..]), 300, &b"x"[..]),
        (PacketType::Fin, None, 0, &b""[..]),
        (PacketType::Reset, None, 0, &b""[..]),
    ] {
        let mut out = BytesMut::new();
        encode(&Header { ptype, ..h }, sack, pad, payload, &mut out);
        cases.push(out);
    }
    for c in &cases {
        o.put("utp_packet", &[&[0u8][..], c].concat());
    }
    // Encode mode: [1 | type << 1 | sack flag, header fields, sack, pad].
    o.put(
        "utp_packet",
        &[
            &[0x81u8 | 2 << 1][..],
            &[7; 20],
            &[5, 1, 2, 3, 4, 5, 44, 1],
            b"data",
        ]
        .concat(),
    );
    // The endpoint: [sel, seed u32, ops...]. Connect to peer 0, answer
    // with a STATE on our SYN's id (type 3, f = 1), then data (type 0).
    let state = [1u8, 3, 1, 0, 0, 0, 0, 0, 0, 0, 0];
    let data = [
        1u8, 0, 1, 0, 0, 0, 0, 0x08, 0, 0, 5, 0, b'h', b'e', b'l', b'l', b'o',
    ];
    o.put(
        "utp_conn",
        &[
            &[0u8, 1, 2, 3, 4, 0][..],
            &state,
            &data,
            &[7, 0, 6, 0, 0, 4, 9, 8, 0, 9],
        ]
        .concat(),
    );
    // A SYN from a peer (type 7, random id), then its data on id + 1.
    o.put(
        "utp_conn",
        &[
            1u8, 9, 9, 9, 9, 1, 7, 0, 0x34, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 3, 1, 1, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 5, 0, b'h', b'e', b'l', b'l', b'o', 7, 0, 9,
        ],
    );
}

pub fn rpc(o: &mut Out) {
    let reqs = [
        json!({"method": "session-get", "tag": 1}),
        json!({"method": "torrent-get", "arguments": {"fields": ["id", "name", "status", "files", "peers", "trackerStats", "percentDone"], "ids": [1, "0101010101010101010101010101010101010101"]}, "tag": 2}),
        json!({"method": "torrent-get", "arguments": {"fields": ["id"], "ids": "recently-active", "format": "table"}}),
        json!({"method": "torrent-add", "arguments": {"filename": "magnet:?xt=urn:btih:abababababababababababababababababababab", "paused": true, "labels": ["a"], "files-wanted": [0, 2]}, "tag": 3}),
        json!({"method": "torrent-set", "arguments": {"ids": [1], "uploadLimit": 100, "uploadLimited": true, "files-unwanted": []}}),
        json!({"method": "session-set", "arguments": {"speed-limit-down": 10, "speed-limit-down-enabled": true, "encryption": "required"}}),
        json!({"method": "torrent-remove", "arguments": {"ids": [2], "delete-local-data": false}, "tag": 4}),
        json!({"method": "free-space", "arguments": {"path": "/tmp"}}),
        json!({"jsonrpc": "2.0", "method": "torrent_get", "params": {"fields": ["id", "hash_string"]}, "id": 5}),
        json!({"jsonrpc": "2.0", "method": "session_stats", "id": "x"}),
        json!({"jsonrpc": "2.0", "method": "torrent_start", "params": {"ids": [1]}}),
        json!([{"jsonrpc": "2.0", "method": "port_test", "id": 1}, {"jsonrpc": "2.0", "method": "torrent_stop"}, 5]),
    ];
    for r in &reqs {
        let body = serde_json::to_vec(r).expect("json");
        o.put("daemon_rpc", &[&[1u8][..], &body].concat());
        o.put("daemon_rpc", &[&[0u8][..], &body].concat());
    }
    o.put("daemon_rpc", b"\x01{\"jsonrpc\": \"2.0\", \"method\": ");
}
