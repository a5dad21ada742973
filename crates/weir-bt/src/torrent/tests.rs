//! Torrents wired to each other in memory: whole transfers, bad data,
//! hostile peers. (Timing behaviour is tested in `weir-sim`.)

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use sha1::{Digest as _, Sha1};
use weir_core::bitfield::Bitfield;
use weir_core::storage::{PieceVerifier, StorageEvent, StorageOp};

use super::*;
use crate::metainfo::{FileEntry, Info, Metainfo};
use crate::wire::{self, Limits};

const PIECE: u32 = 64 * 1024;

fn meta(data: &[u8]) -> Metainfo {
    Metainfo {
        info_bytes: None,
        info_hash: [7; 20],
        info: Info {
            name: "t".into(),
            piece_length: PIECE,
            pieces: data
                .chunks(PIECE as usize)
                .map(|c| Sha1::digest(c).into())
                .collect(),
            files: vec![FileEntry {
                path: vec!["t".into()],
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
    }
}

struct Node {
    t: Torrent,
    store: Vec<u8>,
    verifier: PieceVerifier,
    /// Flip this byte of everything this node uploads.
    corrupt_uploads: bool,
    /// conn -> (other node, other's conn id)
    links: BTreeMap<ConnId, (usize, ConnId)>,
    inbox: BTreeMap<ConnId, BytesMut>,
    closed: Vec<(ConnId, CloseReason)>,
    banned: Vec<std::net::IpAddr>,
    complete: bool,
    /// Cancel messages this node received.
    cancels_received: usize,
    /// Pieces it verified, in order.
    verified: Vec<u32>,
}

struct Swarm {
    nodes: Vec<Node>,
    now: Instant,
    data: Vec<u8>,
}

impl Swarm {
    fn new(data: Vec<u8>) -> Self {
        Self {
            nodes: Vec::new(),
            now: Instant::now(), // test-epoch
            data,
        }
    }

    fn add(&mut self, seed: bool) -> usize {
        let m = meta(&self.data);
        let n = m.info.piece_count();
        let had = if seed {
            Bitfield::full(n)
        } else {
            Bitfield::new(n)
        };
        let mut cfg = TorrentConfig::new([self.nodes.len() as u8; 20]);
        cfg.seed = self.nodes.len() as u64;
        let t = Torrent::new(&m, cfg, &had, &Bitfield::new(n));
        let geo = *t.geometry();
        self.nodes.push(Node {
            t,
            store: if seed {
                self.data.clone()
            } else {
                vec![0; self.data.len()]
            },
            verifier: PieceVerifier::new(geo, Torrent::digests(&m)),
            corrupt_uploads: false,
            links: BTreeMap::new(),
            inbox: BTreeMap::new(),
            closed: Vec::new(),
            banned: Vec::new(),
            complete: seed,
            cancels_received: 0,
            verified: Vec::new(),
        });
        self.nodes.len() - 1
    }

    fn connect(&mut self, a: usize, b: usize) {
        let ca = self.nodes[a].links.len() as ConnId + 1;
        let cb = self.nodes[b].links.len() as ConnId + 1;
        self.nodes[a].links.insert(ca, (b, cb));
        self.nodes[b].links.insert(cb, (a, ca));
        let ha = self.nodes[a].t.handshake();
        let hb = self.nodes[b].t.handshake();
        let addr = |i: usize| SocketAddr::from(([127, 0, 0, i as u8 + 1], 6881));
        let now = self.now;
        self.nodes[a].t.add_peer(ca, addr(b), &hb, now);
        self.nodes[b].t.add_peer(cb, addr(a), &ha, now);
    }

    /// Runs until nothing moves; returns the number of rounds.
    fn run(&mut self) -> usize {
        let mut rounds = 0;
        loop {
            rounds += 1;
            assert!(rounds < 100_000, "no quiescence");
            let mut moved = false;
            for i in 0..self.nodes.len() {
                moved |= self.step(i);
            }
            if !moved {
                self.now += Duration::from_millis(300);
                let now = self.now;
                let mut any = false;
                for n in &mut self.nodes {
                    if n.t.poll_timeout().is_some_and(|t| t <= now) {
                        n.t.handle_timeout(now);
                        any = true;
                    }
                }
                if !any || rounds > 50_000 {
                    return rounds;
                }
                if self.nodes.iter().all(|n| n.complete) {
                    return rounds;
                }
            }
        }
    }

    fn step(&mut self, i: usize) -> bool {
        let now = self.now;
        let mut moved = false;
        let mut storage_done = VecDeque::new();
        while let Some(ev) = self.nodes[i].t.poll_event() {
            moved = true;
            match ev {
                Event::Send { conn, data, .. } => {
                    let Some(&(j, cj)) = self.nodes[i].links.get(&conn) else {
                        continue;
                    };
                    let buf = self.nodes[j].inbox.entry(cj).or_default();
                    for d in data {
                        buf.extend_from_slice(&d);
                    }
                    let n: usize = buf.len();
                    self.nodes[i].t.on_sent(conn, n as u64, now);
                }
                Event::Storage(op) => storage_done.extend(self.storage(i, op)),
                Event::Close { conn, reason } => {
                    self.nodes[i].closed.push((conn, reason));
                    if let Some((j, cj)) = self.nodes[i].links.remove(&conn) {
                        self.nodes[j].links.remove(&cj);
                        self.nodes[j].t.remove_peer(cj, now);
                    }
                    self.nodes[i].t.remove_peer(conn, now);
                }
                Event::Ban { ip, .. } => self.nodes[i].banned.push(ip),
                Event::Complete => self.nodes[i].complete = true,
                Event::PieceVerified(p) => self.nodes[i].verified.push(p),
                Event::CheckDone | Event::Content(_) | Event::PexPeers(_) | Event::DhtNode(_) => {}
                Event::Fatal(e) => panic!("fatal: {e}"),
            }
        }
        for ev in storage_done {
            self.nodes[i].t.handle_storage(ev, now);
        }
        // Deliver what arrived.
        let limits = Limits::new(self.nodes[i].t.geometry().piece_count());
        let conns: Vec<ConnId> = self.nodes[i].inbox.keys().copied().collect();
        for c in conns {
            let mut buf = self.nodes[i].inbox.remove(&c).unwrap_or_default();
            loop {
                match wire::decode(&mut buf, &limits) {
                    Ok(Some(m)) => {
                        moved = true;
                        if matches!(m, Message::Cancel(_)) {
                            self.nodes[i].cancels_received += 1;
                        }
                        self.nodes[i].t.handle_message(c, m, now);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        self.nodes[i].t.peer_error(c, e.to_string(), now);
                        break;
                    }
                }
            }
            if !buf.is_empty() {
                self.nodes[i].inbox.insert(c, buf);
            }
        }
        moved
    }

    fn storage(&mut self, i: usize, op: StorageOp) -> Option<StorageEvent> {
        let n = &mut self.nodes[i];
        let geo = *n.t.geometry();
        match op {
            StorageOp::Write { piece, begin, data } => {
                let mut at = (geo.piece_offset(piece) + u64::from(begin)) as usize;
                for d in &data {
                    n.store[at..at + d.len()].copy_from_slice(d);
                    at += d.len();
                }
                let ok = n.verifier.write(piece, begin, &data).expect("in order")?;
                Some(StorageEvent::PieceDone { piece, ok })
            }
            StorageOp::Abandon { piece } => {
                n.verifier.abandon(piece);
                None
            }
            StorageOp::Read {
                id,
                piece,
                begin,
                len,
            } => {
                let at = (geo.piece_offset(piece) + u64::from(begin)) as usize;
                let mut v = n.store[at..at + len as usize].to_vec();
                if n.corrupt_uploads {
                    v[0] ^= 0x55;
                }
                Some(StorageEvent::ReadDone {
                    id,
                    data: Ok(Bytes::from(v)),
                })
            }
            StorageOp::Check { piece } => {
                let at = geo.piece_offset(piece) as usize;
                let len = geo.piece_size(piece) as usize;
                let ok = n.verifier.check(piece, &n.store[at..at + len]);
                Some(StorageEvent::PieceDone { piece, ok })
            }
        }
    }
}

fn payload(len: usize) -> Vec<u8> {
    let mut x = 0x1234_5678_9abc_def0u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn leecher_downloads_everything_from_a_seed() {
    let mut s = Swarm::new(payload(10 * PIECE as usize + 12_345));
    let seed = s.add(true);
    let leech = s.add(false);
    s.connect(seed, leech);
    s.run();
    assert!(s.nodes[leech].complete);
    assert!(s.nodes[leech].t.is_complete());
    assert_eq!(s.nodes[leech].store, s.data);
    let st = s.nodes[seed].t.stats(s.now);
    assert_eq!(st.uploaded, s.data.len() as u64);
    // Two seeds have nothing to say to each other.
    assert!(
        s.nodes[leech]
            .closed
            .iter()
            .any(|(_, r)| matches!(r, CloseReason::PeerIsSeed | CloseReason::BothSeeds))
    );
}

/// Pieces of high priority are fetched before the others and low ones
/// after (the configured priorities reach the picker), and everything is
/// still fetched.
#[test]
fn a_leecher_fetches_high_priority_pieces_first_and_low_ones_last() {
    use weir_core::picker::Priority;
    let mut s = Swarm::new(payload(12 * PIECE as usize));
    let seed = s.add(true);
    let leech = s.add(false);
    let m = meta(&s.data);
    let n = m.info.piece_count();
    let mut prio = vec![Priority::Normal; n as usize];
    prio[9] = Priority::High;
    prio[10] = Priority::High;
    prio[0] = Priority::Low;
    prio[1] = Priority::Low;
    let mut cfg = TorrentConfig::new([1; 20]);
    cfg.seed = 1;
    cfg.priorities = Some(prio.into());
    s.nodes[leech].t = Torrent::new(&m, cfg, &Bitfield::new(n), &Bitfield::new(n));
    s.connect(seed, leech);
    s.run();
    assert_eq!(s.nodes[leech].store, s.data);
    let order = &s.nodes[leech].verified;
    assert_eq!(order.len(), n as usize, "{order:?}");
    let mut first: Vec<u32> = order[..2].to_vec();
    first.sort_unstable();
    assert_eq!(first, [9, 10], "{order:?}");
    let mut last: Vec<u32> = order[order.len() - 2..].to_vec();
    last.sort_unstable();
    assert_eq!(last, [0, 1], "{order:?}");
}

#[test]
fn peer_stats_list_each_connected_peer() {
    let mut s = Swarm::new(payload(4 * PIECE as usize));
    let seed = s.add(true);
    let leech = s.add(false);
    assert!(s.nodes[leech].t.peer_stats(s.now).is_empty());
    s.connect(seed, leech);
    // Handshake-level facts before any message: nothing had, both choke.
    let before = s.nodes[leech].t.peer_stats(s.now);
    assert_eq!(before.len(), 1);
    assert_eq!(before[0].addr, SocketAddr::from(([127, 0, 0, 1], 6881)));
    assert_eq!(before[0].peer_id, [0; 20]);
    assert_eq!(before[0].pieces, 4);
    assert_eq!(before[0].pieces_had, 0);
    assert!(before[0].peer_choking && before[0].am_choking);
    // Step until the seed has sent a block (the leech completes, then
    // closes: two seeds have nothing to say to each other).
    let mut seen = None;
    for _ in 0..1000 {
        s.step(seed);
        s.step(leech);
        let up = s.nodes[seed].t.peer_stats(s.now);
        if up.first().is_some_and(|p| p.upload_rate > 0.0) {
            seen = Some((up, s.nodes[leech].t.peer_stats(s.now)));
            break;
        }
    }
    let (up, down) = seen.expect("the seed never sent");
    assert_eq!(up[0].addr, SocketAddr::from(([127, 0, 0, 2], 6881)));
    assert!(up[0].peer_interested && !up[0].am_choking, "{up:?}");
    assert_eq!(down.len(), 1);
    assert_eq!(down[0].pieces_had, 4, "the seed's bitfield: {down:?}");
    assert!(down[0].am_interested && !down[0].peer_choking, "{down:?}");
}

#[test]
fn three_leechers_share_and_finish() {
    let mut s = Swarm::new(payload(96 * PIECE as usize));
    let seed = s.add(true);
    let l: Vec<usize> = (0..3).map(|_| s.add(false)).collect();
    for &x in &l {
        s.connect(seed, x);
    }
    s.connect(l[0], l[1]);
    s.connect(l[1], l[2]);
    s.connect(l[0], l[2]);
    s.run();
    for &x in &l {
        assert!(s.nodes[x].complete, "leecher {x}");
        assert_eq!(s.nodes[x].store, s.data);
    }
    // The leechers uploaded to each other too.
    let shared: u64 = l.iter().map(|&x| s.nodes[x].t.stats(s.now).uploaded).sum();
    assert!(shared > 0);
}

#[test]
fn bad_data_is_fetched_again_and_its_sender_banned() {
    let mut s = Swarm::new(payload(8 * PIECE as usize));
    let liar = s.add(true);
    s.nodes[liar].corrupt_uploads = true;
    let honest = s.add(true);
    let leech = s.add(false);
    s.connect(liar, leech);
    s.run();
    // Only the liar: pieces fail, and after two strikes it is banned.
    let st = s.nodes[leech].t.stats(s.now);
    assert!(st.hash_failures >= 2, "{st:?}");
    assert_eq!(st.banned, 1);
    assert_eq!(
        s.nodes[leech].banned,
        vec![std::net::IpAddr::from([127, 0, 0, 1])]
    );
    assert!(!s.nodes[leech].complete);
    // The honest seed then delivers every piece, the failed ones included.
    s.connect(honest, leech);
    s.run();
    assert!(s.nodes[leech].complete);
    assert_eq!(s.nodes[leech].store, s.data);
}

#[test]
fn a_liar_sharing_pieces_with_an_honest_seed_is_the_only_one_banned() {
    let mut s = Swarm::new(payload(64 * PIECE as usize));
    let liar = s.add(true);
    s.nodes[liar].corrupt_uploads = true;
    let honest = s.add(true);
    let leech = s.add(false);
    s.connect(liar, leech);
    s.connect(honest, leech);
    s.run();
    assert!(s.nodes[leech].t.stats(s.now).hash_failures > 0);
    assert!(s.nodes[leech].complete);
    assert_eq!(s.nodes[leech].store, s.data);
    assert_eq!(
        s.nodes[leech].banned,
        vec![std::net::IpAddr::from([127, 0, 0, 1])],
        "only the liar (node 0) is banned"
    );
}

#[test]
fn protocol_violations_disconnect_and_count() {
    let data = payload(4 * PIECE as usize);
    let cases: Vec<(&str, Vec<Message>)> = vec![
        (
            "bitfield of 2 bytes for 4 pieces",
            vec![Message::Bitfield(Bytes::from_static(&[0x80, 0]))],
        ),
        (
            "blocks we did not ask for",
            (0..=UNREQUESTED_ALLOWANCE)
                .map(|i| Message::Piece {
                    index: 0,
                    begin: 3 + i,
                    data: Bytes::from_static(b"xyz"),
                })
                .collect(),
        ),
        (
            "outside the piece",
            vec![Message::Request(BlockRef {
                index: 3,
                begin: PIECE - 10,
                length: 16_384,
            })],
        ),
    ];
    for (want, msgs) in cases {
        let mut s = Swarm::new(data.clone());
        let seed = s.add(true);
        let leech = s.add(false);
        s.connect(seed, leech);
        let now = s.now;
        for m in msgs {
            s.nodes[seed].t.handle_message(1, m, now);
        }
        s.step(seed);
        let st = s.nodes[seed].t.stats(now);
        assert_eq!(st.protocol_errors, 1, "{want}");
        assert!(
            s.nodes[seed]
                .closed
                .iter()
                .any(|(_, r)| matches!(r, CloseReason::Protocol(why) if why.contains(want))),
            "{want}: {:?}",
            s.nodes[seed].closed
        );
    }
}

#[test]
fn endgame_with_two_seeds_cancels_duplicates() {
    let mut s = Swarm::new(payload(3 * PIECE as usize));
    let a = s.add(true);
    let b = s.add(true);
    let leech = s.add(false);
    s.connect(a, leech);
    s.connect(b, leech);
    s.run();
    assert!(s.nodes[leech].complete);
    assert_eq!(s.nodes[leech].store, s.data);
    // Endgame asked some blocks of both seeds (at most ENDGAME_DEPTH in
    // flight per peer); each block the first one delivered was cancelled
    // at the other, and a duplicate that crossed its cancel (here every
    // one: delivery is instant) is dropped, not written twice.
    let cancels = s.nodes[a].cancels_received + s.nodes[b].cancels_received;
    let dups = s.nodes[leech].t.stats(s.now).duplicate_blocks as usize;
    assert!(
        (1..=2 * ENDGAME_DEPTH).contains(&cancels),
        "{cancels} cancels"
    );
    assert!(dups <= cancels, "{dups} duplicates for {cancels} cancels");
    assert_eq!(
        s.nodes[leech].t.stats(s.now).downloaded,
        s.data.len() as u64 + dups as u64 * u64::from(wire::BLOCK_LEN)
    );
}

#[test]
fn resume_and_check_start_from_what_is_stored() {
    let data = payload(6 * PIECE as usize);
    let m = meta(&data);
    let n = m.info.piece_count();
    let mut check = Bitfield::full(n);
    check.clear(5);
    let mut had = Bitfield::new(n);
    had.set(0);
    let mut t = Torrent::new(&m, TorrentConfig::new([1; 20]), &had, &check);
    assert!(t.is_checking());
    let mut checks = Vec::new();
    while let Some(ev) = t.poll_event() {
        if let Event::Storage(StorageOp::Check { piece }) = ev {
            checks.push(piece);
        }
    }
    // Piece 0 is known from resume; 5 is not to be checked.
    assert_eq!(checks, [1, 2, 3, 4]);
    let now = Instant::now(); // test-epoch
    for p in checks {
        t.handle_storage(
            StorageEvent::PieceDone {
                piece: p,
                ok: p != 3,
            },
            now,
        );
    }
    assert!(!t.is_checking());
    assert_eq!(t.had().iter_ones().collect::<Vec<_>>(), [0, 1, 2, 4]);
    assert!(std::iter::from_fn(|| t.poll_event()).any(|e| matches!(e, Event::CheckDone)));
}

/// A torrent with no connection gives back its event queues' buffers once
/// they are drained (an idle daemon torrent kept a few hundred bytes of
/// them for good), and works the same after.
#[test]
fn an_idle_torrent_drained_of_events_keeps_no_queue_buffers() {
    let data = payload(6 * PIECE as usize);
    let m = meta(&data);
    let n = m.info.piece_count();
    let mut t = Torrent::new(
        &m,
        TorrentConfig::new([1; 20]),
        &Bitfield::new(n),
        &Bitfield::full(n),
    );
    let mut checks = Vec::new();
    while let Some(ev) = t.poll_event() {
        if let Event::Storage(StorageOp::Check { piece }) = ev {
            checks.push(piece);
        }
    }
    assert_eq!(checks.len(), n as usize);
    assert_eq!(t.events.capacity(), 0);
    let now = Instant::now(); // test-epoch
    for p in checks {
        t.handle_storage(StorageEvent::PieceDone { piece: p, ok: true }, now);
    }
    let evs: Vec<Event> = std::iter::from_fn(|| t.poll_event()).collect();
    assert!(evs.iter().any(|e| matches!(e, Event::CheckDone)));
    assert_eq!(t.events.capacity(), 0);
    assert!(t.is_complete());
}

#[test]
fn a_dialling_leecher_says_interested_with_its_handshake_and_a_seed_unchokes_at_once() {
    let data = payload(4 * PIECE as usize);
    let m = meta(&data);
    let n = m.info.piece_count();
    let now = Instant::now(); // test-epoch
    let mut leech = Torrent::new(
        &m,
        TorrentConfig::new([1; 20]),
        &Bitfield::new(n),
        &Bitfield::new(n),
    );
    let mut want = BytesMut::new();
    wire::encode(&Message::Interested, &mut want);
    assert_eq!(leech.preamble(), want.freeze());
    let mut seed = Torrent::new(
        &m,
        TorrentConfig::new([2; 20]),
        &Bitfield::full(n),
        &Bitfield::new(n),
    );
    assert!(seed.preamble().is_empty(), "a seed has nothing to ask");
    let addr = SocketAddr::from(([127, 0, 0, 9], 1));
    // The seed's first words to a new peer include an unchoke.
    seed.add_peer(1, addr, &leech.handshake(), now);
    let mut sent = BytesMut::new();
    while let Some(ev) = seed.poll_event() {
        if let Event::Send { data, .. } = ev {
            data.iter().for_each(|d| sent.extend_from_slice(d));
        }
    }
    let limits = Limits::new(n);
    let mut msgs = Vec::new();
    while let Some(m) = wire::decode(&mut sent, &limits).unwrap() {
        msgs.push(m);
    }
    assert!(msgs.contains(&Message::Unchoke), "{msgs:?}");
    // The leecher that sent the preamble does not repeat have-none/interested.
    leech.add_peer_after(1, addr, &seed.handshake(), true, now);
    let mut sent = BytesMut::new();
    while let Some(ev) = leech.poll_event() {
        if let Event::Send { data, .. } = ev {
            data.iter().for_each(|d| sent.extend_from_slice(d));
        }
    }
    let mut msgs = Vec::new();
    while let Some(m) = wire::decode(&mut sent, &limits).unwrap() {
        msgs.push(m);
    }
    assert!(
        !msgs
            .iter()
            .any(|m| matches!(m, Message::HaveNone | Message::Interested)),
        "{msgs:?}"
    );
}

mod hostile;

/// Every message `t` queued for its connections, decoded.
fn sent_messages(t: &mut Torrent, n: u32) -> Vec<Message> {
    let mut sent = BytesMut::new();
    while let Some(ev) = t.poll_event() {
        if let Event::Send { data, .. } = ev {
            data.iter().for_each(|d| sent.extend_from_slice(d));
        }
    }
    let limits = Limits::new(n);
    std::iter::from_fn(|| wire::decode(&mut sent, &limits).unwrap()).collect()
}

#[test]
fn dht_ports_are_exchanged_with_peers_that_run_a_dht_and_taken_once_per_connection() {
    let data = payload(4 * PIECE as usize);
    let m = meta(&data);
    let n = m.info.piece_count();
    let now = Instant::now(); // test-epoch
    let torrent = |id: u8, dht: Option<u16>| {
        let mut c = TorrentConfig::new([id; 20]);
        c.dht_port = dht;
        Torrent::new(&m, c, &Bitfield::full(n), &Bitfield::new(n))
    };
    let with = torrent(1, Some(6881));
    let without = torrent(2, None);
    assert!(with.handshake().supports_dht());
    assert!(!without.handshake().supports_dht());

    // A node with a DHT tells a DHT peer its port, after the bitfield.
    let mut a = torrent(3, Some(7000));
    let peer = SocketAddr::from(([127, 0, 0, 9], 51413));
    a.add_peer(1, peer, &with.handshake(), now);
    let msgs = sent_messages(&mut a, n);
    let at = msgs.iter().position(|m| *m == Message::Port(7000));
    assert!(at.is_some(), "{msgs:?}");
    assert!(
        msgs[..at.unwrap()]
            .iter()
            .any(|m| matches!(m, Message::HaveAll | Message::Bitfield(_))),
        "bitfield first: {msgs:?}"
    );
    // ...but not a peer without one.
    a.add_peer(
        2,
        SocketAddr::from(([127, 0, 0, 10], 1)),
        &without.handshake(),
        now,
    );
    assert!(
        !sent_messages(&mut a, n)
            .iter()
            .any(|m| matches!(m, Message::Port(_))),
    );

    // The peer's port becomes one DHT node at its address; repeats and
    // port 0 are ignored.
    a.handle_message(1, Message::Port(0), now);
    a.handle_message(1, Message::Port(6881), now);
    for p in 1..100 {
        a.handle_message(1, Message::Port(p), now);
    }
    let nodes: Vec<_> = std::iter::from_fn(|| a.poll_event())
        .filter_map(|e| match e {
            Event::DhtNode(s) => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(nodes, [SocketAddr::from(([127, 0, 0, 9], 6881))]);

    // Without a DHT of our own (or for a private torrent, where the
    // session leaves `dht_port` unset), a peer's port is ignored and ours
    // is never sent.
    let mut b = torrent(4, None);
    b.add_peer(1, peer, &with.handshake(), now);
    assert!(
        !sent_messages(&mut b, n)
            .iter()
            .any(|m| matches!(m, Message::Port(_))),
    );
    b.handle_message(1, Message::Port(6881), now);
    assert!(!std::iter::from_fn(|| b.poll_event()).any(|e| matches!(e, Event::DhtNode(_))));
}

/// Every torrent's default config names weir with one shared string.
#[test]
fn default_configs_share_one_client_name() {
    let a = TorrentConfig::new([1; 20]);
    let b = TorrentConfig::new([2; 20]);
    assert!(std::sync::Arc::ptr_eq(&a.client_name, &b.client_name));
    assert!(a.client_name.starts_with("weir "));
}

/// Counters of a torrent with no peer, for comparing (no rate; an empty
/// sum of rates is -0.0).
fn idle_stats(mut s: Stats) -> String {
    assert!(s.download_rate == 0.0 && s.upload_rate == 0.0 && s.peers == 0);
    s.download_rate = 0.0;
    s.upload_rate = 0.0;
    format!("{s:?}")
}

/// Drops every link of node `i` on both sides and drains both.
fn disconnect_all(s: &mut Swarm, i: usize) {
    let now = s.now;
    let links: Vec<(ConnId, (usize, ConnId))> =
        std::mem::take(&mut s.nodes[i].links).into_iter().collect();
    for (c, (j, cj)) in links {
        s.nodes[j].links.remove(&cj);
        s.nodes[j].t.remove_peer(cj, now);
        s.nodes[i].t.remove_peer(c, now);
    }
    for n in 0..s.nodes.len() {
        s.step(n);
    }
}

/// A torrent that slept wakes as it was: the same counters, pieces had,
/// deselected pieces, priorities and banned addresses, nothing announced
/// again, and it goes on fetching what it still wants. It cannot sleep
/// while a peer is connected or a check runs.
#[test]
fn a_torrent_that_slept_wakes_as_it_was() {
    use weir_core::picker::Priority;
    let mut s = Swarm::new(payload(12 * PIECE as usize));
    let seed = s.add(true);
    let leech = s.add(false);
    let m = meta(&s.data);
    let n = m.info.piece_count();
    // Piece 11 deselected, 9 first, 0 last; pieces 2 and 3 resumed.
    let mut wanted = Bitfield::full(n);
    wanted.clear(11);
    let mut prio = vec![Priority::Normal; n as usize];
    prio[9] = Priority::High;
    prio[0] = Priority::Low;
    let mut had = Bitfield::new(n);
    for p in [2, 3] {
        had.set(p);
        let at = (p * PIECE) as usize;
        let chunk = s.data[at..at + PIECE as usize].to_vec();
        s.nodes[leech].store[at..at + PIECE as usize].copy_from_slice(&chunk);
    }
    let mut cfg = TorrentConfig::new([1; 20]);
    cfg.seed = 1;
    cfg.wanted = Some(wanted);
    cfg.priorities = Some(prio.into());
    s.nodes[leech].t = Torrent::new(&m, cfg, &had, &Bitfield::new(n));
    while s.nodes[leech].t.poll_event().is_some() {}

    // Asleep from the start, woken, then fetching from the seed.
    let before = idle_stats(s.nodes[leech].t.stats(s.now));
    let t = std::mem::replace(
        &mut s.nodes[leech].t,
        Torrent::new(&m, TorrentConfig::new([9; 20]), &had, &had),
    );
    assert!(t.can_sleep());
    let d = t.sleep(&mut SharedConfigs::default());
    assert_eq!(idle_stats(d.stats(&m)), before);
    assert_eq!(d.had(), &had);
    assert!(d.deselected(&m, 11 * u64::from(PIECE), 1));
    assert!(!d.deselected(&m, 10 * u64::from(PIECE), 1));
    s.nodes[leech].t = d.wake(&m);
    assert!(
        s.nodes[leech].t.poll_event().is_none(),
        "nothing announced again"
    );
    assert_eq!(idle_stats(s.nodes[leech].t.stats(s.now)), before);
    s.connect(seed, leech);
    assert!(!s.nodes[leech].t.can_sleep(), "a peer is connected");
    s.run();
    let order = s.nodes[leech].verified.clone();
    assert_eq!(order.first(), Some(&9), "priorities kept: {order:?}");
    assert_eq!(order.last(), Some(&0), "priorities kept: {order:?}");
    assert!(
        !order.contains(&11) && !order.contains(&2) && !order.contains(&3),
        "{order:?}"
    );
    assert!(s.nodes[leech].t.is_complete());
    let want = (11 * PIECE) as usize;
    assert_eq!(s.nodes[leech].store[..want], s.data[..want]);

    // Complete, its peer gone: it sleeps and wakes with its counters and
    // bans, and announces no completion again.
    disconnect_all(&mut s, leech);
    let t = &mut s.nodes[leech].t;
    // Its timers run out once more with no peer, then stop.
    let mut now = s.now;
    for _ in 0..4 {
        if let Some(at) = t.poll_timeout() {
            assert!(!t.can_sleep(), "a timer is pending");
            now = at;
            t.handle_timeout(now);
        }
    }
    assert_eq!(t.poll_timeout(), None);
    t.banned.insert([10, 0, 0, 1].into());
    let before = idle_stats(t.stats(now));
    assert!(t.stats(now).downloaded > 0);
    let t = std::mem::replace(t, Torrent::new(&m, TorrentConfig::new([9; 20]), &had, &had));
    assert!(t.can_sleep());
    let d = t.sleep(&mut SharedConfigs::default());
    assert!(d.is_complete());
    assert_eq!(idle_stats(d.stats(&m)), before);
    let mut t = d.wake(&m);
    assert!(t.poll_event().is_none(), "no second completion");
    assert_eq!(idle_stats(t.stats(now)), before);
    assert!(t.banned.contains(&[10, 0, 0, 1].into()));
    assert!(t.is_complete() && t.deselected(11 * u64::from(PIECE), 1));

    // A torrent checking its data does not sleep.
    let checking = Torrent::new(
        &m,
        TorrentConfig::new([2; 20]),
        &Bitfield::new(n),
        &Bitfield::full(n),
    );
    assert!(!checking.can_sleep());
}

/// Sleeping torrents with the same session settings share one config;
/// one whose settings differ (no DHT port, as a private torrent) keeps its
/// own; each wakes with exactly the config it slept with, its own fields
/// (order, seed, download, wanted pieces, priorities) included.
#[test]
fn sleeping_torrents_share_their_session_settings() {
    use weir_core::picker::Priority;
    let data = vec![7u8; 3 * PIECE as usize];
    let m = meta(&data);
    let n = 3;
    let mut shared = SharedConfigs::default();
    let mut configs = Vec::new();
    let mut sleepers = Vec::new();
    for i in 0..3u64 {
        let mut cfg = TorrentConfig::new([1; 20]);
        cfg.dht_port = (i != 2).then_some(6881);
        cfg.seed = i;
        cfg.order = if i == 1 {
            Order::Sequential
        } else {
            Order::RarestFirst
        };
        cfg.download = i != 0;
        let mut wanted = Bitfield::full(n);
        wanted.clear(i as u32);
        cfg.wanted = Some(wanted);
        let mut prio = vec![Priority::Normal; n as usize];
        prio[i as usize] = Priority::High;
        cfg.priorities = Some(prio.into());
        let mut t = Torrent::new(&m, cfg.clone(), &Bitfield::new(n), &Bitfield::new(n));
        while t.poll_event().is_some() {}
        assert!(t.can_sleep());
        configs.push(cfg);
        sleepers.push(t.sleep(&mut shared));
    }
    assert!(Arc::ptr_eq(
        &sleepers[0].cfg.shared,
        &sleepers[1].cfg.shared
    ));
    assert!(!Arc::ptr_eq(
        &sleepers[0].cfg.shared,
        &sleepers[2].cfg.shared
    ));
    for (d, cfg) in sleepers.iter().zip(&configs) {
        assert_eq!(&d.cfg.config(), cfg);
    }
    // Woken (the wanted pieces and priorities go into its content) and
    // asleep again: the same.
    for (d, cfg) in sleepers.into_iter().zip(&configs) {
        let t = d.wake(&m);
        assert_eq!(
            t.deselected(0, 1),
            cfg.wanted.as_ref().is_some_and(|w| !w.get(0))
        );
        assert_eq!(&t.sleep(&mut shared).cfg.config(), cfg);
    }
}
