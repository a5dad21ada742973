//! The fetcher against servers in memory: honest peers, liars, silent
//! peers, size disagreements, floods.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use sha1::{Digest, Sha1};
use weir_bencode::OwnedValue;

use super::*;
use crate::torrent::ConnId;
use crate::wire::{self, ExtHandshake, Limits, Message, UT_METADATA};

fn epoch() -> Instant {
    Instant::now() // test-epoch
}

/// A valid info dictionary of about `pieces * 20` bytes.
fn info_dict(pieces: usize) -> Vec<u8> {
    let mut d = OwnedValue::dict();
    d.insert("length", OwnedValue::Int(pieces as i64 * 16384));
    d.insert("name", OwnedValue::bytes("file.bin"));
    d.insert("piece length", OwnedValue::Int(16384));
    let mut p = vec![0u8; pieces * 20];
    fastrand::Rng::with_seed(pieces as u64).fill(&mut p);
    d.insert("pieces", OwnedValue::Bytes(p));
    d.to_vec()
}

fn ext(size: u64, id: u8) -> ExtHandshake {
    let mut e = ExtHandshake {
        metadata_size: Some(size),
        ..Default::default()
    };
    e.m.insert(UT_METADATA.into(), id);
    e
}

/// How a simulated peer behaves.
#[derive(Clone, Debug)]
enum Behaviour {
    /// Serves `info` (possibly corrupted copy of the real one).
    Serve(Vec<u8>),
    /// Never answers.
    Silent,
    /// Rejects everything.
    Reject,
}

struct World {
    f: MetadataFetcher,
    peers: BTreeMap<ConnId, (Behaviour, MetadataServer)>,
    now: Instant,
    /// Requests each peer received.
    asked: BTreeMap<ConnId, u32>,
    events: Vec<FetchEvent>,
}

impl World {
    fn new(info_hash: [u8; 20], cfg: FetcherConfig) -> World {
        World {
            f: MetadataFetcher::new(info_hash, cfg),
            peers: BTreeMap::new(),
            now: epoch(),
            asked: BTreeMap::new(),
            events: Vec::new(),
        }
    }

    fn join(&mut self, id: ConnId, claim: u64, b: Behaviour) -> bool {
        let info = match &b {
            Behaviour::Serve(i) => Some(Bytes::from(i.clone())),
            _ => None,
        };
        let mut srv = MetadataServer::new(ServerConfig::default(), info);
        // The server side sees us as connection 0 with our LOCAL_ID.
        srv.add_peer(0, &ext(0, LOCAL_ID), self.now);
        self.peers.insert(id, (b, srv));
        let ok = self.f.add_peer(id, &ext(claim, 7), self.now);
        self.pump();
        ok
    }

    /// Delivers frames both ways until nothing moves.
    fn pump(&mut self) {
        let lim = MetadataLimits::default();
        loop {
            let mut moved = false;
            while let Some((peer, frame)) = self.f.poll_send() {
                moved = true;
                let msg = decode_frame(&frame, 7);
                *self.asked.entry(peer).or_default() += 1;
                let Some((b, srv)) = self.peers.get_mut(&peer) else {
                    continue;
                };
                match b {
                    Behaviour::Silent => {}
                    Behaviour::Reject => {
                        if let MetadataMsg::Request { piece } = msg {
                            self.f
                                .handle_message(peer, MetadataMsg::Reject { piece }, self.now);
                        }
                    }
                    Behaviour::Serve(_) => {
                        srv.handle_message(0, &msg, self.now);
                        while let Some((_, reply)) = srv.poll_send() {
                            let m =
                                MetadataMsg::decode(&ext_payload(&reply, LOCAL_ID), &lim).unwrap();
                            self.f.handle_message(peer, m, self.now);
                        }
                    }
                }
            }
            while let Some(e) = self.f.poll_event() {
                moved = true;
                if let FetchEvent::Drop { peer, .. } = &e {
                    self.peers.remove(peer);
                }
                self.events.push(e);
            }
            if !moved {
                break;
            }
        }
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
        self.f.handle_timeout(self.now);
        self.pump();
    }

    fn dropped(&self) -> Vec<(ConnId, FetchDrop)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                FetchEvent::Drop { peer, reason } => Some((*peer, reason.clone())),
                FetchEvent::Done => None,
            })
            .collect()
    }
}

fn ext_payload(frame: &Bytes, want_id: u8) -> Bytes {
    let mut b = BytesMut::from(&frame[..]);
    match wire::decode(&mut b, &Limits::default()).unwrap() {
        Some(Message::Extended { id, payload }) => {
            assert_eq!(id, want_id);
            payload
        }
        other => panic!("not an extended frame: {other:?}"),
    }
}

fn decode_frame(frame: &Bytes, want_id: u8) -> MetadataMsg {
    MetadataMsg::decode(&ext_payload(frame, want_id), &MetadataLimits::default()).unwrap()
}

fn hash(b: &[u8]) -> [u8; 20] {
    Sha1::digest(b).into()
}

/// `info` with one byte of piece `piece` flipped (the last piece may be
/// only a few bytes long).
fn corrupt(info: &[u8], piece: usize) -> Vec<u8> {
    let mut bad = info.to_vec();
    let len = piece_len(info.len() as u64, piece as u32);
    bad[piece * PIECE_LEN + 100 % len] ^= 0x55;
    bad
}

#[test]
fn honest_peers_share_the_work_and_the_result_parses() {
    let info = info_dict(3000); // ~60 KiB: 4 pieces
    let ih = hash(&info);
    let size = info.len() as u64;
    assert_eq!(piece_count(size), 4);
    // One request in flight per peer, so both peers must be used.
    let cfg = FetcherConfig {
        trackers: vec!["udp://t.example:1".into(), "http://u.example/a".into()],
        max_in_flight: 1,
        ..Default::default()
    };
    let mut w = World::new(ih, cfg);
    // Two peers join before any answer is processed: both get asked.
    w.f.add_peer(1, &ext(size, 7), w.now);
    w.f.add_peer(2, &ext(size, 7), w.now);
    for id in [1, 2] {
        let mut srv = MetadataServer::new(ServerConfig::default(), Some(info.clone().into()));
        srv.add_peer(0, &ext(0, LOCAL_ID), w.now);
        w.peers.insert(id, (Behaviour::Serve(info.clone()), srv));
    }
    w.pump();
    let r = w.f.result().expect("done").expect("valid");
    assert_eq!(r.metainfo.info_hash, ih);
    assert_eq!(&r.info_bytes[..], &info[..]);
    assert_eq!(r.metainfo.info.piece_count(), 3000);
    assert_eq!(r.metainfo.announce.as_deref(), Some("udp://t.example:1"));
    assert_eq!(r.metainfo.announce_list.len(), 2);
    let again = crate::metainfo::Metainfo::from_bytes(&r.torrent_file).unwrap();
    assert_eq!(again.info_hash, ih);
    assert_eq!(w.f.stats().pieces, 4);
    assert_eq!(w.f.stats().hash_failures, 0);
    assert!(w.asked[&1] >= 1 && w.asked[&2] >= 1, "{:?}", w.asked);
    assert!(w.asked.values().sum::<u32>() <= 8, "{:?}", w.asked);
    assert_eq!(w.events, vec![FetchEvent::Done]);
    assert!(w.f.poll_timeout().is_none());

    // With the default pipeline the first peer is asked for everything and
    // a second one duplicates what is in flight (at most two requesters).
    let mut w = World::new(ih, FetcherConfig::default());
    w.f.add_peer(1, &ext(size, 7), w.now);
    w.f.add_peer(2, &ext(size, 7), w.now);
    let mut to: BTreeMap<ConnId, Vec<u32>> = BTreeMap::new();
    while let Some((p, f)) = w.f.poll_send() {
        if let MetadataMsg::Request { piece } = decode_frame(&f, 7) {
            to.entry(p).or_default().push(piece);
        }
    }
    assert_eq!(to[&1], [0, 1, 2, 3]);
    assert_eq!(to[&2], [0, 1, 2, 3]);
}

#[test]
fn a_liar_among_honest_peers_is_found_dropped_and_counted() {
    let info = info_dict(3000);
    let ih = hash(&info);
    let size = info.len() as u64;
    // One request in flight per peer: the copy is mixed from all three.
    let cfg = FetcherConfig {
        max_in_flight: 1,
        ..Default::default()
    };
    let mut w = World::new(ih, cfg);
    w.f.add_peer(1, &ext(size, 7), w.now);
    w.f.add_peer(2, &ext(size, 7), w.now);
    w.f.add_peer(3, &ext(size, 7), w.now);
    for (id, data) in [(1, info.clone()), (2, corrupt(&info, 1)), (3, info.clone())] {
        let mut srv = MetadataServer::new(ServerConfig::default(), Some(data.clone().into()));
        srv.add_peer(0, &ext(0, LOCAL_ID), w.now);
        w.peers.insert(id, (Behaviour::Serve(data), srv));
    }
    w.pump();
    let r = w.f.result().expect("done").expect("valid");
    assert_eq!(&r.info_bytes[..], &info[..]);
    let s = w.f.stats();
    assert_eq!(s.hash_failures, 1, "{s:?}");
    assert_eq!(s.liars, 1, "{s:?}");
    assert_eq!(w.dropped(), vec![(2, FetchDrop::BadData)]);
}

#[test]
fn a_lone_liar_is_dropped_and_a_later_honest_peer_completes() {
    let info = info_dict(1000); // 2 pieces
    let ih = hash(&info);
    let size = info.len() as u64;
    let mut w = World::new(ih, FetcherConfig::default());
    assert!(w.join(1, size, Behaviour::Serve(corrupt(&info, 0))));
    assert!(w.f.result().is_none());
    assert_eq!(w.dropped(), vec![(1, FetchDrop::BadData)]);
    assert_eq!(w.f.stats().liars, 1);
    assert!(w.join(2, size, Behaviour::Serve(info.clone())));
    assert!(w.f.result().unwrap().is_ok());
    assert_eq!(w.f.stats().hash_failures, 1);
}

#[test]
fn two_liars_and_one_honest_peer() {
    let info = info_dict(6000); // 8 pieces
    let ih = hash(&info);
    let size = info.len() as u64;
    let mut w = World::new(ih, FetcherConfig::default());
    let datas = [corrupt(&info, 0), corrupt(&info, 7), info.clone()];
    for (i, d) in datas.iter().enumerate() {
        w.f.add_peer(i as ConnId + 1, &ext(size, 7), w.now);
        let mut srv = MetadataServer::new(ServerConfig::default(), Some(d.clone().into()));
        srv.add_peer(0, &ext(0, LOCAL_ID), w.now);
        w.peers
            .insert(i as ConnId + 1, (Behaviour::Serve(d.clone()), srv));
    }
    w.pump();
    assert_eq!(&w.f.result().unwrap().unwrap().info_bytes[..], &info[..]);
    let mut d = w.dropped();
    d.sort_by_key(|x| x.0);
    assert_eq!(d, vec![(1, FetchDrop::BadData), (2, FetchDrop::BadData)]);
    assert_eq!(w.f.stats().liars, 2);
}

#[test]
fn the_majority_size_wins_and_a_lying_total_size_drops_its_peer() {
    let info = info_dict(3000);
    let ih = hash(&info);
    let size = info.len() as u64;
    let mut w = World::new(ih, FetcherConfig::default());
    // A peer claiming another size first, then two agreeing peers.
    w.f.add_peer(9, &ext(size + 1000, 7), w.now);
    assert_eq!(w.f.size(), Some(size + 1000));
    w.f.add_peer(1, &ext(size, 7), w.now);
    w.f.add_peer(2, &ext(size, 7), w.now);
    assert_eq!(w.f.size(), Some(size), "switched before anything arrived");
    while w.f.poll_send().is_some() {}
    // Peer 1 answers with a total_size that differs from its claim.
    let p0 = Bytes::from(info[..PIECE_LEN].to_vec());
    w.f.handle_message(
        1,
        MetadataMsg::Data {
            piece: 0,
            total_size: size + 1,
            data: p0,
        },
        w.now,
    );
    assert_eq!(
        w.f.poll_event(),
        Some(FetchEvent::Drop {
            peer: 1,
            reason: FetchDrop::SizeMismatch {
                claimed: size,
                got: size + 1
            }
        })
    );
}

#[test]
fn oversized_and_extensionless_peers_are_not_used() {
    let mut f = MetadataFetcher::new([1; 20], FetcherConfig::default());
    let now = epoch();
    assert!(!f.add_peer(1, &ext(DEFAULT_MAX_SIZE + 1, 3), now));
    assert!(!f.add_peer(2, &ext(0, 3), now));
    assert!(!f.add_peer(3, &ext(1000, 0), now));
    assert!(!f.add_peer(4, &ExtHandshake::default(), now));
    assert_eq!(f.stats().oversized, 2);
    assert!(f.poll_send().is_none());
    assert!(f.add_peer(5, &ext(DEFAULT_MAX_SIZE, 3), now));
    assert!(!f.add_peer(5, &ext(1000, 3), now), "once per connection");
    // The peer limit.
    let cfg = FetcherConfig {
        max_peers: 2,
        ..Default::default()
    };
    let mut f = MetadataFetcher::new([1; 20], cfg);
    assert!(f.add_peer(1, &ext(100, 3), now) && f.add_peer(2, &ext(100, 3), now));
    assert!(!f.add_peer(3, &ext(100, 3), now));
}

#[test]
fn silent_and_rejecting_peers_are_routed_around() {
    let info = info_dict(3000);
    let ih = hash(&info);
    let size = info.len() as u64;
    let mut w = World::new(ih, FetcherConfig::default());
    assert!(w.join(1, size, Behaviour::Silent));
    assert!(w.join(2, size, Behaviour::Reject));
    assert!(w.f.result().is_none());
    let first_deadline = w.f.poll_timeout().unwrap();
    assert!(first_deadline <= w.now + Duration::from_secs(10));
    assert!(w.join(3, size, Behaviour::Serve(info.clone())));
    // The honest peer already holds what it was given; the rest follows
    // once the silent peer's requests time out.
    for _ in 0..10 {
        if w.f.result().is_some() {
            break;
        }
        w.advance(Duration::from_secs(5));
    }
    assert!(w.f.result().unwrap().is_ok());
    let s = w.f.stats();
    assert!(s.rejects >= 1, "{s:?}");
    assert!(w.dropped().is_empty(), "nobody lied");
}

#[test]
fn a_peer_whose_requests_keep_timing_out_is_dropped_once_as_unresponsive() {
    let info = info_dict(3000);
    let ih = hash(&info);
    let size = info.len() as u64;
    let mut w = World::new(ih, FetcherConfig::default());
    // The only peer never answers: once its requests have failed
    // max_failures times the runtime is told to let it go (it would
    // otherwise hold its dial slot until the whole fetch times out).
    assert!(w.join(1, size, Behaviour::Silent));
    for _ in 0..40 {
        w.advance(Duration::from_secs(5));
    }
    assert_eq!(
        w.dropped(),
        vec![(1, FetchDrop::Unresponsive { failures: 4 })]
    );
    assert!(w.f.result().is_none());
    // Its place goes to a peer that serves, and the fetch completes.
    w.f.remove_peer(1, w.now);
    assert!(w.join(2, size, Behaviour::Serve(info)));
    assert!(w.f.result().unwrap().is_ok());
}

#[test]
fn unsolicited_data_floods_drop_the_peer() {
    let info = info_dict(3000);
    let ih = hash(&info);
    let size = info.len() as u64;
    let cfg = FetcherConfig {
        max_in_flight: 1,
        ..Default::default()
    };
    let mut f = MetadataFetcher::new(ih, cfg);
    let now = epoch();
    f.add_peer(1, &ext(size, 3), now);
    while f.poll_send().is_some() {}
    let data = Bytes::from(info[PIECE_LEN * 3..].to_vec());
    for i in 0..=8 {
        assert!(f.poll_event().is_none(), "dropped after {i}");
        f.handle_message(
            1,
            MetadataMsg::Data {
                piece: 3,
                total_size: size,
                data: data.clone(),
            },
            now,
        );
    }
    assert_eq!(
        f.poll_event(),
        Some(FetchEvent::Drop {
            peer: 1,
            reason: FetchDrop::Unsolicited
        })
    );
    assert_eq!(f.stats().unsolicited, 9);
}

#[test]
fn a_verified_dictionary_that_is_no_torrent_is_a_typed_error() {
    let info = b"d4:name1:xe".to_vec();
    let ih = hash(&info);
    let mut w = World::new(ih, FetcherConfig::default());
    w.join(1, info.len() as u64, Behaviour::Serve(info));
    assert!(matches!(
        w.f.result(),
        Some(Err(FetchError::InvalidInfo(_)))
    ));
}

#[test]
fn server_rejects_without_metadata_and_past_the_end_and_rate_limits() {
    let now = epoch();
    let mut s = MetadataServer::new(ServerConfig::default(), None);
    assert_eq!(s.metadata_size(), None);
    s.add_peer(4, &ext(0, 9), now);
    s.handle_message(4, &MetadataMsg::Request { piece: 0 }, now);
    let (peer, f) = s.poll_send().unwrap();
    assert_eq!(peer, 4);
    assert_eq!(decode_frame(&f, 9), MetadataMsg::Reject { piece: 0 });

    let info = info_dict(1000);
    s.set_metadata(info.clone().into());
    assert_eq!(s.metadata_size(), Some(info.len() as u64));
    s.handle_message(4, &MetadataMsg::Request { piece: 1 }, now);
    s.handle_message(4, &MetadataMsg::Request { piece: 2 }, now);
    match decode_frame(&s.poll_send().unwrap().1, 9) {
        MetadataMsg::Data {
            piece: 1,
            total_size,
            data,
        } => {
            assert_eq!(total_size, info.len() as u64);
            assert_eq!(&data[..], &info[PIECE_LEN..]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        decode_frame(&s.poll_send().unwrap().1, 9),
        MetadataMsg::Reject { piece: 2 }
    );
    // A peer we were not told about, or that disabled ut_metadata: nothing.
    s.handle_message(5, &MetadataMsg::Request { piece: 0 }, now);
    assert!(s.poll_send().is_none());
    // Rate: a burst of 64 (one used above), then rejects until time passes.
    let mut served = 0;
    for _ in 0..200 {
        s.handle_message(4, &MetadataMsg::Request { piece: 0 }, now);
        if let MetadataMsg::Data { .. } = decode_frame(&s.poll_send().unwrap().1, 9) {
            served += 1;
        }
    }
    assert_eq!(served, 63);
    assert_eq!(s.stats().rate_limited, 137);
    let later = now + Duration::from_secs(1);
    let mut served = 0;
    for _ in 0..40 {
        s.handle_message(4, &MetadataMsg::Request { piece: 0 }, later);
        if let MetadataMsg::Data { .. } = decode_frame(&s.poll_send().unwrap().1, 9) {
            served += 1;
        }
    }
    assert_eq!(served, 16, "16 pieces a second");
    // Queue bound: replies not drained.
    let mut s = MetadataServer::new(ServerConfig::default(), Some(info.into()));
    s.add_peer(1, &ext(0, 9), now);
    for _ in 0..100 {
        s.handle_message(1, &MetadataMsg::Request { piece: 0 }, now);
    }
    let n = std::iter::from_fn(|| s.poll_send()).count();
    assert_eq!(n, 100);
    assert_eq!(s.stats().served, 64);
    s.remove_peer(1);
    s.handle_message(1, &MetadataMsg::Request { piece: 0 }, now);
    assert!(s.poll_send().is_none());
}

mod prop {
    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Kind {
        Honest,
        Liar(usize),
        Silent,
        Reject,
    }

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![
            3 => Just(Kind::Honest),
            2 => (0usize..8).prop_map(Kind::Liar),
            1 => Just(Kind::Silent),
            1 => Just(Kind::Reject),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// With at least one honest peer the right dictionary always comes
        /// out, and no honest peer is ever dropped.
        #[test]
        fn never_trust_never_blame_the_innocent(
            kinds in proptest::collection::vec(kind(), 1..6),
            honest_last in any::<bool>(),
            in_flight in 1u32..6,
            pieces in 500usize..7000,
        ) {
            let info = info_dict(pieces);
            let ih = hash(&info);
            let size = info.len() as u64;
            let count = piece_count(size) as usize;
            let cfg = FetcherConfig { max_in_flight: in_flight, ..Default::default() };
            let mut w = World::new(ih, cfg);
            let mut all = kinds.clone();
            if honest_last { all.push(Kind::Honest) } else { all.insert(0, Kind::Honest) }
            let mut honest = Vec::new();
            for (i, k) in all.iter().enumerate() {
                let id = i as ConnId + 1;
                let b = match k {
                    Kind::Honest => { honest.push(id); Behaviour::Serve(info.clone()) }
                    Kind::Liar(p) => Behaviour::Serve(corrupt(&info, p % count)),
                    Kind::Silent => Behaviour::Silent,
                    Kind::Reject => Behaviour::Reject,
                };
                w.join(id, size, b);
            }
            for _ in 0..40 {
                if w.f.result().is_some() { break; }
                w.advance(Duration::from_secs(5));
            }
            let r = w.f.result().expect("finished").expect("valid");
            prop_assert_eq!(&r.info_bytes[..], &info[..]);
            for (peer, why) in w.dropped() {
                prop_assert!(!honest.contains(&peer), "honest {} dropped: {:?}", peer, why);
                // A silent peer may be let go for its timeouts; any other
                // drop is for data that failed the hash.
                let silent = matches!(all[peer as usize - 1], Kind::Silent);
                if !(silent && matches!(why, FetchDrop::Unresponsive { .. })) {
                    prop_assert_eq!(why, FetchDrop::BadData);
                }
            }
            prop_assert!(w.f.stats().liars <= all.len() as u64);
        }
    }
}

/// An idle torrent holds no server: the bytes alone until a peer that
/// speaks ut_metadata arrives, then a server that answers it, then the
/// bytes alone again once that peer has gone with nothing left queued.
/// Requests while idle, and peers without ut_metadata, make nothing.
#[test]
fn a_lazy_server_exists_only_while_a_peer_can_ask() {
    let now = epoch();
    let info = Bytes::from(info_dict(2000));
    let mut s = LazyServer::new(Some(info.clone()));
    assert!(!s.is_serving());
    assert_eq!(s.metadata_size(), Some(info.len() as u64));
    s.handle_message(1, &MetadataMsg::Request { piece: 0 }, now);
    assert!(s.poll_send().is_none(), "idle: nothing asked it");
    let mut plain = ExtHandshake::default();
    plain.m.insert("ut_pex".into(), 3);
    s.add_peer(2, &plain, now);
    assert!(
        !s.is_serving(),
        "a peer without ut_metadata makes no server"
    );
    for round in 0..2 {
        s.add_peer(1, &ext(0, 9), now);
        assert!(s.is_serving(), "round {round}");
        s.handle_message(1, &MetadataMsg::Request { piece: 0 }, now);
        let (conn, frame) = s.poll_send().expect("an answer");
        assert_eq!(conn, 1);
        assert!(
            frame.len() > 16 << 10,
            "a whole 16 KiB piece: {}",
            frame.len()
        );
        assert!(s.is_serving(), "still serving peer 1");
        s.remove_peer(1);
        assert!(!s.is_serving(), "round {round}: idle once the peer went");
        assert_eq!(s.metadata_size(), Some(info.len() as u64), "the bytes kept");
    }
    // A peer that goes with an answer queued takes it along.
    s.add_peer(1, &ext(0, 9), now);
    s.handle_message(1, &MetadataMsg::Request { piece: 1 }, now);
    s.remove_peer(1);
    assert!(!s.is_serving());
    assert!(s.poll_send().is_none());
}
