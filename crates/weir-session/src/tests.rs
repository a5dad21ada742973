//! Session decisions in isolation: dial limits, backoff, bans, routing.
//! (Whole transfers between sessions run in `weir-sim`.)

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha1::{Digest as _, Sha1};
use weir_bt::metainfo::{FileEntry, Info, Metainfo};
use weir_bt::torrent::TorrentRef;
use weir_bt::wire::{Handshake, Message};
use weir_core::bitfield::Bitfield;
use weir_core::close::{BanReason, CloseReason};
use weir_core::policy::NetPolicy;
use weir_ed2k::Md4Hash;

use super::*;
use crate::conns::EVICT_IDLE_AFTER;

fn meta(tag: u8) -> Arc<Metainfo> {
    meta_of(format!("t{tag}"), [tag; 20], &vec![tag; 100_000])
}

/// A single-file torrent `name` of `data` in 32 KiB pieces.
fn meta_of(name: String, info_hash: [u8; 20], data: &[u8]) -> Arc<Metainfo> {
    Arc::new(Metainfo {
        info_bytes: None,
        info_hash,
        info: Info {
            name: name.as_str().into(),
            piece_length: 32_768,
            pieces: data
                .chunks(32_768)
                .map(|c| Sha1::digest(c).into())
                .collect(),
            files: vec![FileEntry {
                path: vec![name],
                length: data.len() as u64,
                ed2k: None,
            }],
            private: false,
            single_file: true,
        },
        announce: None,
        announce_list: vec![],
        comment: None,
        created_by: None,
        creation_date: None,
    })
}

fn session() -> Session {
    let mut cfg = SessionConfig::new(
        NetPolicy::loopback(),
        *b"-WR0100-aaaaaaaaaaaa",
        Md4Hash([1; 16]),
    );
    cfg.global.max_peers = 10;
    cfg.global.max_half_open = 4;
    cfg.global.max_handshakes = 3;
    cfg.per_transfer.max_peers = 6;
    cfg.per_transfer.max_half_open = 3;
    Session::new(cfg)
}

fn add(s: &mut Session, tag: u8, now: Instant) -> TransferId {
    add_meta(s, meta(tag), None, now)
}

/// Adds `m` to download, having nothing, wanting the pieces in `wanted`.
fn add_meta(
    s: &mut Session,
    m: Arc<Metainfo>,
    wanted: Option<Bitfield>,
    now: Instant,
) -> TransferId {
    add_with_peers(s, m, wanted, vec![], now)
}

/// [`add_meta`] with `peers` to dial.
fn add_with_peers(
    s: &mut Session,
    m: Arc<Metainfo>,
    wanted: Option<Bitfield>,
    peers: Vec<SocketAddr>,
    now: Instant,
) -> TransferId {
    let n = m.info.piece_count();
    s.add_torrent(
        AddTorrent {
            meta: m,
            had: Bitfield::new(n),
            check: Bitfield::new(n),
            partial: Vec::new(),
            peers,
            paused: false,
            seed: false,
            download: true,
            wanted,
            priorities: None,
        },
        now,
    )
    .unwrap()
}

fn dials(s: &mut Session) -> Vec<(ConnId, SocketAddr)> {
    let mut out = Vec::new();
    while let Some(ev) = s.poll_event() {
        if let SessionEvent::Dial { conn, addr, .. } = ev {
            out.push((conn, addr));
        }
    }
    out
}

fn peer(i: u32) -> SocketAddr {
    SocketAddr::from(([127, 0, (i >> 8) as u8, i as u8], 6881))
}

fn their_handshake(tag: u8, who: u8) -> Handshake {
    Handshake::new([tag; 20], [who; 20])
}

#[test]
fn a_flood_of_known_peers_is_dialled_within_the_half_open_and_peer_limits() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    let a = add(&mut s, 1, now);
    let b = add(&mut s, 2, now);
    let flood: Vec<SocketAddr> = (1..5000).map(peer).collect();
    // One answer's worth is taken at most, of a huge one.
    let taken = s.add_peers(a, Proto::Bt, &flood, Source::Tracker, now);
    assert!(taken <= s.config().book.max_per_answer, "took {taken}");
    s.add_peers(b, Proto::Bt, &flood[..50], Source::Tracker, now);
    s.handle_timeout(now);
    let first = dials(&mut s);
    // Global half-open 4, each transfer at most 3.
    assert_eq!(first.len(), 4, "{first:?}");
    assert_eq!(s.counts().dialing, 4);
    // Nothing more while they are pending, however long we wait.
    s.handle_timeout(now + Duration::from_secs(5));
    assert!(dials(&mut s).is_empty());
    // Each that connects frees a half-open slot; peers stop at 10 overall
    // and 6 per transfer.
    let mut t = now;
    let mut connected = 0;
    for round in 0..40u8 {
        t += Duration::from_secs(1);
        let pending: Vec<ConnId> = s
            .conns
            .iter()
            .filter(|(_, c)| c.stage == crate::session::Stage::Dialing)
            .map(|(k, _)| *k)
            .collect();
        for c in pending {
            let tr = s.conns[&c].transfer.unwrap();
            let tag = s.transfers[&tr].bt.as_ref().unwrap().meta.info_hash[0];
            let r = s.established(
                c,
                Established::Bt {
                    theirs: their_handshake(tag, round.wrapping_mul(7).wrapping_add(c as u8)),
                    preamble_sent: false,
                },
                t,
            );
            if r.is_ok() {
                connected += 1;
            }
        }
        s.handle_timeout(t);
        dials(&mut s);
        assert!(s.counts().dialing <= 4);
        assert!(s.counts().peers + s.counts().dialing <= 10);
    }
    // The torrents are still checking nothing, so every admitted one stuck.
    assert_eq!(s.counts().peers, 10, "connected {connected}");
    for id in [a, b] {
        assert!(s.transfers[&id].counts.peers <= 6);
    }
}

#[test]
fn a_failing_peer_backs_off_exponentially() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    let a = add(&mut s, 1, now);
    s.add_peers(a, Proto::Bt, &[peer(1)], Source::Manual, now);
    s.handle_timeout(now);
    let mut t = now;
    let mut gaps = Vec::new();
    let mut last = now;
    for _ in 0..4 {
        let d = loop {
            let d = dials(&mut s);
            if !d.is_empty() {
                break d;
            }
            t += Duration::from_millis(100);
            s.handle_timeout(t);
            assert!(t - now < Duration::from_secs(120), "no redial");
        };
        gaps.push((t - last).as_secs_f64());
        last = t;
        s.dial_failed(d[0].0, "refused", t);
    }
    // 2 s, 4 s, 8 s after the first immediate dial (within one look).
    assert!(gaps[0] < 0.6, "{gaps:?}");
    for (i, g) in gaps[1..].iter().enumerate() {
        let want = 2.0 * 2f64.powi(i as i32);
        assert!(*g >= want && *g <= want + 0.7, "gap {i}: {gaps:?}");
    }
}

/// A peer whose connection the session closed itself (idle: nothing
/// received for three minutes) is dialled again after the reconnect delay,
/// with no `closed` from the runtime (which sends none for a close the
/// session asked for). It was never dialled again: `weir get` of a torrent
/// whose only peer had gone quiet stopped for good with 0 peers.
#[test]
fn a_peer_the_session_closed_for_idleness_is_dialled_again() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    let a = add(&mut s, 1, now);
    s.add_peers(a, Proto::Bt, &[peer(1)], Source::Manual, now);
    s.handle_timeout(now);
    let d = dials(&mut s);
    assert_eq!(d.len(), 1);
    s.established(
        d[0].0,
        Established::Bt {
            theirs: their_handshake(1, 9),
            preamble_sent: false,
        },
        now,
    )
    .unwrap();
    let mut t = now;
    let mut closed_at = None;
    let redial = loop {
        t += Duration::from_millis(500);
        assert!(t - now < Duration::from_secs(400), "never dialled again");
        if s.poll_timeout().is_some_and(|due| due <= t) {
            s.handle_timeout(t);
        }
        let mut dialled = None;
        while let Some(ev) = s.poll_event() {
            match ev {
                SessionEvent::Close { conn, reason } => {
                    assert_eq!(conn, d[0].0);
                    assert_eq!(reason, CloseReason::Idle);
                    closed_at = Some(t);
                }
                SessionEvent::Dial { addr, .. } => dialled = Some(addr),
                _ => {}
            }
        }
        if let Some(addr) = dialled {
            break (addr, t);
        }
    };
    let closed_at = closed_at.expect("closed for idleness first");
    assert_eq!(redial.0, peer(1));
    let gap = redial.1 - closed_at;
    assert!(
        gap >= Duration::from_secs(4) && gap <= Duration::from_secs(7),
        "{gap:?}"
    );
    assert_eq!(s.transfers[&a].counts.peers, 0);
}

#[test]
fn a_banned_address_stays_banned_across_transfers_and_reconnects() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    let a = add(&mut s, 1, now);
    let b = add(&mut s, 2, now);
    let bad: IpAddr = "127.0.0.9".parse().unwrap();
    dials(&mut s);
    s.ban(bad, BanReason::BadHashset);
    assert!(matches!(s.poll_event(), Some(SessionEvent::Banned { .. })));
    let addr = SocketAddr::new(bad, 6881);
    assert_eq!(s.add_peers(a, Proto::Bt, &[addr], Source::Tracker, now), 0);
    assert_eq!(s.add_peers(b, Proto::Bt, &[addr], Source::Manual, now), 0);
    assert_eq!(s.incoming(Proto::Bt, addr, now), Err(Refused::Banned));
    assert_eq!(
        s.incoming(Proto::Ed2k, SocketAddr::new(bad, 4662), now),
        Err(Refused::Banned)
    );
    // A v4-mapped form of the same address is the same address.
    let mapped = SocketAddr::new("::ffff:127.0.0.9".parse().unwrap(), 5000);
    assert_eq!(s.incoming(Proto::Bt, mapped, now), Err(Refused::Banned));
}

#[test]
fn incoming_connections_are_bounded_and_routed_by_info_hash() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    let a = add(&mut s, 1, now);
    dials(&mut s);
    // Outside the policy: refused before any handshake.
    assert_eq!(
        s.incoming(Proto::Bt, "10.0.0.1:5000".parse().unwrap(), now),
        Err(Refused::Outside)
    );
    // Three handshakes at most; a fourth replaces the oldest.
    let c: Vec<ConnId> = (0..3)
        .map(|i| {
            s.incoming(
                Proto::Bt,
                peer(100 + i),
                now + Duration::from_millis(u64::from(i)),
            )
            .unwrap()
        })
        .collect();
    let d = s
        .incoming(Proto::Bt, peer(200), now + Duration::from_secs(1))
        .unwrap();
    let closed: Vec<ConnId> = std::iter::from_fn(|| s.poll_event())
        .filter_map(|e| match e {
            SessionEvent::Close { conn, .. } => Some(conn),
            _ => None,
        })
        .collect();
    assert_eq!(closed, [c[0]]);
    assert_eq!(s.counts().handshaking, 3);
    // Routed by the handshake's info-hash: an unknown torrent is refused.
    assert!(s.bt_route(&[9; 20]).is_none());
    let ours = s.bt_route(&[1; 20]).expect("torrent 1 takes peers");
    assert_eq!(ours.info_hash, [1; 20]);
    assert_eq!(
        s.established(
            c[1],
            Established::Bt {
                theirs: their_handshake(9, 1),
                preamble_sent: false
            },
            now
        ),
        Err(Refused::UnknownTorrent)
    );
    // Ourselves, and a second connection of one peer id, are refused.
    let me = Handshake::new([1; 20], s.config().peer_id);
    assert_eq!(
        s.established(
            c[2],
            Established::Bt {
                theirs: me,
                preamble_sent: false
            },
            now
        ),
        Err(Refused::Ourselves)
    );
    assert!(
        s.established(
            d,
            Established::Bt {
                theirs: their_handshake(1, 5),
                preamble_sent: false
            },
            now
        )
        .is_ok()
    );
    let e = s.incoming(Proto::Bt, peer(201), now).unwrap();
    assert_eq!(
        s.established(
            e,
            Established::Bt {
                theirs: their_handshake(1, 5),
                preamble_sent: false
            },
            now
        ),
        Err(Refused::Duplicate)
    );
    assert_eq!(s.transfers[&a].counts.peers, 1);
    assert_eq!(s.counts().handshaking, 0);
}

#[test]
fn a_paused_transfer_closes_its_peers_and_dials_nothing_until_resumed() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    let a = add(&mut s, 1, now);
    s.add_peers(a, Proto::Bt, &[peer(1), peer(2)], Source::Manual, now);
    s.handle_timeout(now);
    let d = dials(&mut s);
    assert_eq!(d.len(), 2);
    s.established(
        d[0].0,
        Established::Bt {
            theirs: their_handshake(1, 1),
            preamble_sent: false,
        },
        now,
    )
    .unwrap();
    dials(&mut s);
    s.pause(a, now);
    let closes = std::iter::from_fn(|| s.poll_event())
        .filter(|e| matches!(e, SessionEvent::Close { .. }))
        .count();
    assert_eq!(closes, 2, "the peer and the dial in progress");
    assert_eq!(s.counts(), Default::default());
    assert!(s.bt_route(&[1; 20]).is_none());
    s.handle_timeout(now + Duration::from_secs(60));
    assert!(dials(&mut s).is_empty());
    s.resume(a, now + Duration::from_secs(60));
    s.handle_timeout(now + Duration::from_secs(60));
    assert_eq!(dials(&mut s).len(), 2);
}

fn ed2k_link(name: &str, size: u64, hash: u8) -> weir_ed2k::link::FileLink {
    weir_ed2k::link::FileLink {
        name: name.into(),
        size,
        hash: Md4Hash([hash; 16]),
        aich: None,
        part_hashes: None,
        sources: vec![weir_ed2k::link::LinkSource {
            host: weir_ed2k::link::SourceHost::Ip("127.0.0.50".parse().unwrap()),
            port: 4662,
            crypt_options: 0,
            user_hash: None,
        }],
    }
}

#[test]
fn an_ed2k_link_of_a_torrents_file_joins_that_transfer_and_dials_its_sources() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    let a = add(&mut s, 1, now);
    dials(&mut s);
    // Size and name match the torrent's only file.
    let got = s
        .add_ed2k(
            AddEd2k {
                link: ed2k_link("t1", 100_000, 7),
                had: Bitfield::new(1),
                check: Bitfield::new(1),
                partial: Vec::new(),
                peers: vec![],
                paused: false,
                seed: false,
            },
            now,
        )
        .unwrap();
    assert_eq!(got, a, "joined the torrent's transfer");
    assert_eq!(s.transfer_ids().count(), 1);
    let info = s.info(a, now).unwrap();
    assert_eq!(info.ed2k_hash, Some(Md4Hash([7; 16])));
    assert_eq!(info.info_hash, Some([1; 20]));
    s.handle_timeout(now);
    let d: Vec<(ConnId, SocketAddr)> = std::iter::from_fn(|| s.poll_event())
        .filter_map(|e| match e {
            SessionEvent::Dial {
                conn,
                proto: Proto::Ed2k,
                addr,
                ..
            } => Some((conn, addr)),
            _ => None,
        })
        .collect();
    assert_eq!(d.len(), 1, "the link's source is dialled on eD2k");
    // A link of another size stays a transfer of its own.
    let other = s
        .add_ed2k(
            AddEd2k {
                link: ed2k_link("t1", 99_999, 8),
                had: Bitfield::new(1),
                check: Bitfield::new(1),
                partial: Vec::new(),
                peers: vec![],
                paused: false,
                seed: false,
            },
            now,
        )
        .unwrap();
    assert_ne!(other, a);
}

#[test]
fn a_connection_names_its_transfer_and_each_transfer_counts_its_own() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    let a = add(&mut s, 1, now);
    let b = add(&mut s, 2, now);
    s.add_peers(a, Proto::Bt, &[peer(1), peer(2)], Source::Manual, now);
    s.add_peers(b, Proto::Bt, &[peer(3)], Source::Manual, now);
    s.handle_timeout(now);
    let d = dials(&mut s);
    assert_eq!(d.len(), 3);
    for (conn, addr) in &d {
        let want = if *addr == peer(3) { b } else { a };
        assert_eq!(s.conn_transfer(*conn), Some(want));
    }
    assert_eq!(s.transfer_counts(a).map(|c| c.dialing), Some(2));
    assert_eq!(s.transfer_counts(b).map(|c| c.dialing), Some(1));
    let inc = s.incoming(Proto::Ed2k, peer(9), now).unwrap();
    assert_eq!(s.conn_transfer(inc), None, "accepted eD2k: any file");
    assert_eq!(s.conn_transfer(9999), None);
    assert_eq!(s.transfer_counts(TransferId(77)), None);
}

#[test]
fn a_transfer_added_after_a_ban_never_learns_or_dials_the_banned_address() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    add(&mut s, 1, now);
    dials(&mut s);
    let bad: IpAddr = "127.0.0.9".parse().unwrap();
    s.ban(bad, BanReason::BadHashset);
    // Added later, naming the banned address (`--peer`) and learning it
    // from a tracker at another port.
    let m = meta(2);
    let n = m.info.piece_count();
    let b = s
        .add_torrent(
            AddTorrent {
                meta: m,
                had: Bitfield::new(n),
                check: Bitfield::new(n),
                partial: Vec::new(),
                peers: vec![SocketAddr::new(bad, 6881), peer(1)],
                paused: false,
                seed: false,
                download: true,
                wanted: None,
                priorities: None,
            },
            now,
        )
        .unwrap();
    let other = SocketAddr::new(bad, 7000);
    assert_eq!(s.add_peers(b, Proto::Bt, &[other], Source::Tracker, now), 0);
    s.handle_timeout(now);
    let d = dials(&mut s);
    assert_eq!(d.iter().map(|x| x.1).collect::<Vec<_>>(), [peer(1)]);
    assert_eq!(s.info(b, now).unwrap().known, 1);
}

#[test]
fn a_ban_closes_the_address_s_connections_of_every_transfer_and_protocol() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    add(&mut s, 1, now);
    add(&mut s, 2, now);
    dials(&mut s);
    let bad: IpAddr = "127.0.0.9".parse().unwrap();
    let bt = s
        .incoming(Proto::Bt, SocketAddr::new(bad, 5000), now)
        .unwrap();
    s.established(
        bt,
        Established::Bt {
            theirs: their_handshake(2, 9),
            preamble_sent: false,
        },
        now,
    )
    .unwrap();
    let ed = s
        .incoming(Proto::Ed2k, SocketAddr::new(bad, 5001), now)
        .unwrap();
    s.established(ed, Established::Ed2k { local_ip: None }, now)
        .unwrap();
    // A peer once its hello came.
    s.ed2k_packets(ed, vec![ed2k_hello(9)], now);
    let good = s.incoming(Proto::Bt, peer(3), now).unwrap();
    s.established(
        good,
        Established::Bt {
            theirs: their_handshake(1, 3),
            preamble_sent: false,
        },
        now,
    )
    .unwrap();
    while s.poll_event().is_some() {}
    assert_eq!(s.counts().peers, 3);
    // Banned by transfer 1's torrent (or anything else): every connection
    // of that address closes, the others stay.
    s.ban(bad, BanReason::BadAichBlock);
    let closed: Vec<(ConnId, CloseReason)> = std::iter::from_fn(|| s.poll_event())
        .filter_map(|e| match e {
            SessionEvent::Close { conn, reason } => Some((conn, reason)),
            _ => None,
        })
        .collect();
    let why = CloseReason::Banned(BanReason::BadAichBlock);
    assert_eq!(closed, [(bt, why.clone()), (ed, why)]);
    assert_eq!(s.counts().peers, 1);
    assert_eq!(s.conn_transfer(good), Some(TransferId(1)));
}

fn ed2k_hello(who: u8) -> weir_ed2k::packet::Packet {
    let hello =
        weir_ed2k::client::OwnHello::weir("peer", 0, false).hello(Md4Hash([who; 16]), 1, 4662);
    let mut b = bytes::BytesMut::new();
    weir_ed2k::client::ClientMessage::Hello(hello).encode(&mut b);
    weir_ed2k::packet::Decoder::new(weir_ed2k::packet::Limits::CLIENT)
        .decode(&mut b)
        .unwrap()
        .unwrap()
}

fn closes(s: &mut Session) -> Vec<(ConnId, CloseReason)> {
    std::iter::from_fn(|| s.poll_event())
        .filter_map(|e| match e {
            SessionEvent::Close { conn, reason } => Some((conn, reason)),
            _ => None,
        })
        .collect()
}

#[test]
fn accepted_ed2k_connections_are_handshakes_until_their_hello() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    // Four connections that send nothing (three handshakes at most).
    let conns: Vec<ConnId> = (0..4)
        .map(|i| {
            let c = s.incoming(Proto::Ed2k, peer(20 + i), now).unwrap();
            s.established(c, Established::Ed2k { local_ip: None }, now)
                .unwrap();
            c
        })
        .collect();
    // The oldest gave way to the fourth.
    let closed: Vec<ConnId> = closes(&mut s).into_iter().map(|(c, _)| c).collect();
    assert_eq!(closed, [conns[0]]);
    let c = s.counts();
    assert_eq!((c.handshaking, c.peers), (3, 0));
    // A hello makes a peer of it.
    s.ed2k_packets(conns[1], vec![ed2k_hello(7)], now);
    assert!(closes(&mut s).is_empty());
    let c = s.counts();
    assert_eq!((c.handshaking, c.peers), (2, 1));
    // The others are closed at the hello timeout, not before.
    let timeout = s.config().ed2k_hello_timeout;
    let mut t = now;
    let mut closed = Vec::new();
    while t < now + timeout * 2 {
        t = s
            .poll_timeout()
            .unwrap_or(t + Duration::from_secs(1))
            .max(t + Duration::from_millis(100));
        s.handle_timeout(t);
        for (conn, why) in closes(&mut s) {
            closed.push((conn, why, t - now));
        }
    }
    assert_eq!(closed.len(), 2, "{closed:?}");
    for (conn, why, at) in &closed {
        assert!([conns[2], conns[3]].contains(conn), "{closed:?}");
        assert_eq!(*why, CloseReason::NoHello);
        assert!(
            *at > timeout && *at <= timeout + Duration::from_secs(2),
            "closed after {at:?}"
        );
    }
    let c = s.counts();
    assert_eq!((c.handshaking, c.peers), (0, 1));
}

#[test]
fn a_newcomer_takes_the_slot_of_a_peer_idle_since_it_connected_and_only_then() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    let a = add(&mut s, 1, now);
    dials(&mut s);
    let join = |s: &mut Session, i: u8, at: Instant| {
        let c = s.incoming(Proto::Bt, peer(300 + u32::from(i)), at).unwrap();
        s.established(
            c,
            Established::Bt {
                theirs: their_handshake(1, 40 + i),
                preamble_sent: false,
            },
            at,
        )
        .map(|()| c)
    };
    // The transfer's six slots, filled one second apart.
    let first: Vec<ConnId> = (0..6u8)
        .map(|i| join(&mut s, i, now + Duration::from_secs(u64::from(i))).unwrap())
        .collect();
    assert_eq!(s.transfers[&a].counts.peers, 6);
    closes(&mut s);
    // Full, and nobody has been idle long enough yet: refused.
    let early = now + EVICT_IDLE_AFTER - Duration::from_secs(1);
    assert_eq!(join(&mut s, 6, early), Err(Refused::Full));
    assert!(closes(&mut s).is_empty());
    // Once the first has had no block either way for that long, it gives
    // way (the oldest; the others are younger), and only it.
    let later = now + EVICT_IDLE_AFTER;
    assert!(join(&mut s, 7, later).is_ok());
    let closed = closes(&mut s);
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0].0, first[0]);
    assert!(
        matches!(closed[0].1, CloseReason::Evicted { .. }),
        "{}",
        closed[0].1
    );
    // Its close came back from the runtime: six again.
    s.closed(first[0], None, later);
    assert_eq!(s.transfers[&a].counts.peers, 6);
    // The next newcomer at the same moment: the second is not idle long
    // enough (it connected a second after the first).
    assert_eq!(join(&mut s, 8, later), Err(Refused::Full));
}

mod dial_pass;
mod flood;

#[test]
fn a_peer_s_dht_port_reaches_the_runtime_and_private_torrents_advertise_no_dht() {
    let now = Instant::now(); // test-epoch
    let mut cfg = SessionConfig::new(
        NetPolicy::loopback(),
        *b"-WR0100-aaaaaaaaaaaa",
        Md4Hash([1; 16]),
    );
    cfg.dht_port = Some(6881);
    let mut s = Session::new(cfg);
    let public = add(&mut s, 1, now);
    let mut private = (*meta(2)).clone();
    private.info.private = true;
    let n = private.info.piece_count();
    s.add_torrent(
        AddTorrent {
            meta: Arc::new(private),
            had: Bitfield::new(n),
            check: Bitfield::new(n),
            partial: Vec::new(),
            peers: vec![],
            paused: false,
            seed: false,
            download: true,
            wanted: None,
            priorities: None,
        },
        now,
    )
    .unwrap();
    assert!(s.bt_route(&[1; 20]).unwrap().supports_dht());
    assert!(!s.bt_route(&[2; 20]).unwrap().supports_dht());

    let mut nodes = Vec::new();
    for (tag, ip) in [(1u8, 9u8), (2, 10)] {
        let addr = SocketAddr::from(([127, 0, 0, ip], 51413));
        let conn = s.incoming(Proto::Bt, addr, now).unwrap();
        s.established(
            conn,
            Established::Bt {
                theirs: their_handshake(tag, ip).with_dht(),
                preamble_sent: false,
            },
            now,
        )
        .unwrap();
        s.bt_messages(conn, vec![Message::Port(7000), Message::Port(7001)], now);
        while let Some(ev) = s.poll_event() {
            if let SessionEvent::DhtNode(a) = ev {
                nodes.push(a);
            }
        }
    }
    assert_eq!(nodes, [SocketAddr::from(([127, 0, 0, 9], 7000))]);
    assert!(s.transfer_counts(public).unwrap().peers >= 1);
}

#[test]
fn an_ed2k_link_does_not_join_a_deselected_file_of_a_torrent() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    // Two files of 65,536 bytes: pieces 0-1 and 2-3.
    let mut m = (*meta(9)).clone();
    m.info.files = vec![
        FileEntry {
            path: vec!["a.bin".into()],
            length: 65_536,
            ed2k: None,
        },
        FileEntry {
            path: vec!["b.bin".into()],
            length: 34_464,
            ed2k: None,
        },
    ];
    m.info.single_file = false;
    let n = m.info.piece_count();
    let mut wanted = Bitfield::new(n);
    wanted.set(0);
    wanted.set(1);
    add_meta(&mut s, Arc::new(m), Some(wanted), now);
    assert!(s.ed2k_joins(&ed2k_link("a.bin", 65_536, 1)).is_some());
    assert_eq!(s.ed2k_joins(&ed2k_link("b.bin", 34_464, 2)), None);
}

/// What a snapshot gives must always be what a full walk gives; whether
/// it is a new vector.
fn assert_fresh(s: &mut Session, last: &mut Arc<Vec<TransferInfo>>, now: Instant) -> bool {
    let snap = s.snapshot(now);
    let full: Vec<TransferInfo> = s.infos(now).collect();
    assert_eq!(format!("{:?}", *snap), format!("{full:?}"));
    let new = !Arc::ptr_eq(&snap, last);
    *last = snap;
    new
}

#[test]
fn snapshots_equal_a_full_walk_and_idle_transfers_cost_nothing() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    let mut cache = s.snapshot(now);
    assert!(cache.is_empty());
    assert!(!assert_fresh(&mut s, &mut cache, now), "empty stays empty");
    let a = add(&mut s, 1, now);
    let b = add(&mut s, 2, now);
    assert!(assert_fresh(&mut s, &mut cache, now));
    // Nothing happened: the same vector.
    assert!(!assert_fresh(
        &mut s,
        &mut cache,
        now + Duration::from_secs(5)
    ));
    // Learnt peers, a dial, a connection: only `a` moves.
    s.add_peers(a, Proto::Bt, &[peer(1), peer(2)], Source::Manual, now);
    assert!(assert_fresh(&mut s, &mut cache, now));
    assert_eq!(cache[0].known, 2);
    s.handle_timeout(now);
    let d = dials(&mut s);
    s.established(
        d[0].0,
        Established::Bt {
            theirs: their_handshake(1, 1),
            preamble_sent: false,
        },
        now,
    )
    .unwrap();
    assert!(assert_fresh(&mut s, &mut cache, now));
    assert_eq!(cache[0].peers, 1);
    // A transfer with a peer is recomputed every time (its rates move).
    assert!(assert_fresh(
        &mut s,
        &mut cache,
        now + Duration::from_secs(1)
    ));
    // A holder elsewhere (a published snapshot) keeps what it saw.
    let held = cache.clone();
    s.pause(a, now);
    assert!(assert_fresh(&mut s, &mut cache, now));
    assert_eq!(cache[0].phase, Phase::Paused);
    assert_eq!(held[0].phase, Phase::Downloading);
    // Paused, no peer, nothing happening: both idle again.
    assert!(!assert_fresh(
        &mut s,
        &mut cache,
        now + Duration::from_secs(2)
    ));
    s.resume(a, now);
    assert!(assert_fresh(&mut s, &mut cache, now));
    // Removed: the ids differ, the walk starts again.
    assert!(s.remove(b, now));
    assert!(assert_fresh(&mut s, &mut cache, now));
    assert_eq!(cache.len(), 1);
    let c = add(&mut s, 3, now);
    assert!(assert_fresh(&mut s, &mut cache, now));
    assert_eq!(cache.last().map(|i| i.id), Some(c));
    // A ban touches every transfer (their books forget the address).
    s.ban(peer(2).ip(), BanReason::BadBlock { strikes: 1 });
    assert_fresh(&mut s, &mut cache, now);
}

/// A transfer added to (or removed from) a session of idle transfers
/// costs the next snapshot that transfer, not a walk over all of them:
/// between two adds every idle transfer's entry is kept.
#[test]
fn a_snapshot_after_an_add_computes_only_what_changed() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    let mut cache = s.snapshot(now);
    let ids: Vec<TransferId> = (1..=50).map(|i| add(&mut s, i, now)).collect();
    assert!(assert_fresh(&mut s, &mut cache, now));
    let made = |s: &Session| s.snap.made.get();
    let before = made(&s);
    let _ = s.snapshot(now);
    let c = add(&mut s, 51, now);
    let snap = s.snapshot(now);
    assert_eq!(made(&s) - before, 1, "one new transfer, one info made");
    assert_eq!(snap.last().map(|i| i.id), Some(c));
    // A transfer with a peer is computed again too; the rest kept.
    s.add_peers(ids[3], Proto::Bt, &[peer(1)], Source::Manual, now);
    assert!(s.remove(ids[10], now));
    let before = made(&s);
    let snap = s.snapshot(now);
    assert_eq!(made(&s) - before, 1, "the touched one only");
    assert_eq!(snap.len(), 50);
    assert_eq!(snap[3].known, 1);
    assert!(assert_fresh(
        &mut s,
        &mut cache,
        now + Duration::from_secs(1)
    ));
}

/// Every transfer's peer book reads the session's one book config (a
/// copy in each cost 112 bytes a transfer).
#[test]
fn peer_books_share_the_session_s_config() {
    let mut s = session();
    let now = Instant::now(); // test-epoch
    let a = add(&mut s, 1, now);
    let b = add(&mut s, 2, now);
    let book = |id: TransferId| {
        let t = s.transfers.get(&id).expect("added");
        t.bt.as_ref().expect("a torrent").book.config() as *const _
    };
    assert_eq!(book(a), book(b));
    assert_eq!(book(a), &*s.book_cfg as *const _);
}

/// An idle torrent sleeps (a few hundred bytes instead of its torrent and
/// picker) and what reads it sees the same; a peer wakes it, and once the
/// peer has gone and its timers have run out it sleeps again.
#[test]
fn an_idle_torrent_sleeps_and_a_peer_wakes_it() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    let a = add(&mut s, 1, now);
    dials(&mut s);
    let asleep = |s: &Session| s.transfers[&a].bt.as_ref().unwrap().is_asleep();
    assert!(asleep(&s), "nothing under way: it sleeps");
    let info = s.info(a, now).expect("known");
    assert_eq!(info.wanted, 100_000);
    assert_eq!(info.bytes_had, 0);
    assert!(matches!(s.torrent(a), Some(TorrentRef::Asleep(..))));
    assert_eq!(s.torrent(a).unwrap().had().count(), 0);
    assert_eq!(
        s.bt_route(&[1; 20]).expect("it takes peers").info_hash,
        [1; 20]
    );

    let c = s.incoming(Proto::Bt, peer(7), now).unwrap();
    assert!(asleep(&s), "a handshake alone does not wake it");
    s.established(
        c,
        Established::Bt {
            theirs: their_handshake(1, 5),
            preamble_sent: false,
        },
        now,
    )
    .unwrap();
    assert!(!asleep(&s), "a peer wakes it");
    assert_eq!(s.transfers[&a].counts.peers, 1);
    assert_eq!(s.bt_peers(a, now).len(), 1);

    s.closed(c, None, now);
    let mut at = now;
    for _ in 0..8 {
        while s.poll_event().is_some() {}
        match s.poll_timeout() {
            Some(t) if !asleep(&s) => {
                at = at.max(t);
                s.handle_timeout(at);
            }
            _ => break,
        }
    }
    assert!(
        asleep(&s),
        "its peer gone and its timers run out: asleep again"
    );
    let again = s.info(a, at).expect("known");
    assert_eq!(
        (again.wanted, again.bytes_had),
        (info.wanted, info.bytes_had)
    );
    assert!(s.bt_peers(a, at).is_empty());
}
