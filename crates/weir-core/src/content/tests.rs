use std::net::{IpAddr, Ipv4Addr};

use sha1::{Digest as _, Sha1};

use super::*;
use crate::storage::{Digest, PieceVerifier};

const BLOCK: u32 = 16_384;

/// In-memory storage answering the content's operations like the real one:
/// hash-as-written pieces, reads, checks.
struct Mem {
    data: Vec<u8>,
    verifier: PieceVerifier,
    geo: Geometry,
    writes: Vec<(u32, u32, usize)>,
}

impl Mem {
    fn new(geo: Geometry, good: &[u8]) -> Self {
        let digests: Vec<Digest> = (0..geo.piece_count())
            .map(|p| {
                let s = geo.piece_offset(p) as usize;
                let e = s + geo.piece_size(p) as usize;
                Digest::Sha1(Sha1::digest(&good[s..e]).into())
            })
            .collect();
        Self {
            data: vec![0; good.len()],
            verifier: PieceVerifier::new(geo, digests.into()),
            geo,
            writes: Vec::new(),
        }
    }

    /// Runs every event's storage op, returning the rest of the events.
    fn drain(&mut self, c: &mut Content) -> Vec<ContentEvent> {
        let mut rest = Vec::new();
        while let Some(ev) = c.poll_event() {
            match ev {
                ContentEvent::Storage(op) => {
                    if let Some(answer) = self.run(op) {
                        assert!(c.handle_storage(answer).is_none());
                    }
                }
                other => rest.push(other),
            }
        }
        rest
    }

    fn run(&mut self, op: StorageOp) -> Option<StorageEvent> {
        match op {
            StorageOp::Write { piece, begin, data } => {
                let mut at = (self.geo.piece_offset(piece) + u64::from(begin)) as usize;
                let n: usize = data.iter().map(|d| d.len()).sum();
                self.writes.push((piece, begin, n));
                for d in &data {
                    self.data[at..at + d.len()].copy_from_slice(d);
                    at += d.len();
                }
                let verdict = self.verifier.write(piece, begin, &data).expect("in order");
                verdict.map(|ok| StorageEvent::PieceDone { piece, ok })
            }
            StorageOp::Read {
                id,
                piece,
                begin,
                len,
            } => {
                let at = (self.geo.piece_offset(piece) + u64::from(begin)) as usize;
                Some(StorageEvent::ReadDone {
                    id,
                    data: Ok(Bytes::copy_from_slice(&self.data[at..at + len as usize])),
                })
            }
            StorageOp::Check { piece } => {
                let s = self.geo.piece_offset(piece) as usize;
                let e = s + self.geo.piece_size(piece) as usize;
                let ok = self.verifier.check(piece, &self.data[s..e]);
                Some(StorageEvent::PieceDone { piece, ok })
            }
            StorageOp::Abandon { piece } => {
                self.verifier.abandon(piece);
                None
            }
        }
    }
}

fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

fn sender(n: u32) -> Sender {
    Sender {
        conn: n,
        ip: IpAddr::V4(Ipv4Addr::new(127, 0, 0, n as u8)),
    }
}

fn block_of(good: &[u8], geo: &Geometry, s: BlockSpan) -> Vec<Bytes> {
    let at = (geo.piece_offset(s.piece) + u64::from(s.begin)) as usize;
    vec![Bytes::copy_from_slice(&good[at..at + s.len as usize])]
}

fn fresh(geo: Geometry, cfg: ContentConfig) -> Content {
    let n = geo.piece_count();
    Content::new(geo, cfg, &Bitfield::new(n), &Bitfield::new(n))
}

#[test]
fn one_sender_fills_every_piece_and_completes_once() {
    let good = payload(5 * 2 * BLOCK as usize + 100);
    let geo = Geometry::new(good.len() as u64, 2 * BLOCK, BLOCK).unwrap();
    let mut mem = Mem::new(geo, &good);
    let mut c = fresh(geo, ContentConfig::default());
    let evs = mem.drain(&mut c);
    assert!(matches!(evs[..], [ContentEvent::CheckDone]), "{evs:?}");
    c.peer_joined(PeerHas::All);
    let mut verified = Vec::new();
    let mut completes = 0;
    loop {
        let mut spans = Vec::new();
        c.pick(1, PeerHas::All, 4, &mut spans);
        if spans.is_empty() {
            break;
        }
        for s in spans {
            let acc = c.received(sender(1), s, block_of(&good, &geo, s));
            assert_eq!(acc, Accepted::New { cancel: vec![] });
        }
        for ev in mem.drain(&mut c) {
            match ev {
                ContentEvent::PieceVerified(p) => verified.push(p),
                ContentEvent::Complete => completes += 1,
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    assert_eq!(mem.data, good);
    verified.sort_unstable();
    assert_eq!(verified, (0..geo.piece_count()).collect::<Vec<_>>());
    assert_eq!(completes, 1);
    assert!(c.is_complete());
    assert_eq!(c.unverified(), 0);
    // Runs, not blocks: each 32 KiB piece went out in one write.
    assert_eq!(mem.writes.len(), geo.piece_count() as usize);
}

#[test]
fn a_liar_among_two_senders_is_proven_and_the_honest_one_is_not() {
    let good = payload(4 * BLOCK as usize);
    let geo = Geometry::new(good.len() as u64, 4 * BLOCK, BLOCK).unwrap();
    let mut mem = Mem::new(geo, &good);
    let mut c = fresh(geo, ContentConfig::default());
    mem.drain(&mut c);
    c.peer_joined(PeerHas::All);
    c.peer_joined(PeerHas::All);
    let mut a = Vec::new();
    c.pick(1, PeerHas::All, 2, &mut a);
    let mut b = Vec::new();
    c.pick(2, PeerHas::All, 2, &mut b);
    assert_eq!((a.len(), b.len()), (2, 2));
    // Peer 2 answers first (its blocks wait for the gap), with one bad block.
    for s in &b {
        let mut d = block_of(&good, &geo, *s);
        if s.begin == 3 * BLOCK {
            let mut v = d[0].to_vec();
            v[7] ^= 0xff;
            d = vec![Bytes::from(v)];
        }
        c.received(sender(2), *s, d);
    }
    assert_eq!(c.held(), 2 * u64::from(BLOCK));
    for s in &a {
        c.received(sender(1), *s, block_of(&good, &geo, *s));
    }
    let evs = mem.drain(&mut c);
    assert!(
        evs.is_empty(),
        "no verdict events before the good copy: {evs:?}"
    );
    assert_eq!(c.stats().hash_failures, 1);
    assert!(!c.had().get(0));
    // Fetched again, from peer 1 alone this time.
    let mut again = Vec::new();
    c.pick(1, PeerHas::All, 8, &mut again);
    assert_eq!(again.len(), 4);
    for s in again {
        c.received(sender(1), s, block_of(&good, &geo, s));
    }
    let evs = mem.drain(&mut c);
    let bad: Vec<(Sender, bool)> = evs
        .iter()
        .filter_map(|e| match e {
            ContentEvent::BadData { sender, proven } => Some((*sender, *proven)),
            _ => None,
        })
        .collect();
    assert_eq!(bad, [(sender(2), true)]);
    assert!(
        evs.iter()
            .any(|e| matches!(e, ContentEvent::PieceVerified(0)))
    );
    assert!(evs.iter().any(|e| matches!(e, ContentEvent::Complete)));
    assert_eq!(mem.data, good);
}

#[test]
fn a_sole_sender_of_a_bad_piece_gets_one_unproven_strike() {
    let good = payload(2 * BLOCK as usize);
    let geo = Geometry::new(good.len() as u64, 2 * BLOCK, BLOCK).unwrap();
    let mut mem = Mem::new(geo, &good);
    let mut c = fresh(geo, ContentConfig::default());
    mem.drain(&mut c);
    let mut s = Vec::new();
    c.pick(1, PeerHas::All, 2, &mut s);
    for span in s {
        c.received(
            sender(1),
            span,
            vec![Bytes::from(vec![0u8; span.len as usize])],
        );
    }
    let evs = mem.drain(&mut c);
    assert!(
        matches!(evs[..], [ContentEvent::BadData { sender: s, proven: false }] if s == sender(1)),
        "{evs:?}"
    );
    let mut again = Vec::new();
    assert_eq!(c.pick(3, PeerHas::All, 8, &mut again), 2);
}

#[test]
fn startup_check_keeps_eight_in_flight_and_reports_once() {
    let good = payload(20 * BLOCK as usize);
    let geo = Geometry::new(good.len() as u64, BLOCK, BLOCK).unwrap();
    let mut mem = Mem::new(geo, &good);
    // Half the data is on disk already.
    mem.data[..10 * BLOCK as usize].copy_from_slice(&good[..10 * BLOCK as usize]);
    let check = Bitfield::full(geo.piece_count());
    let mut c = Content::new(geo, ContentConfig::default(), &Bitfield::new(20), &check);
    let mut ops = Vec::new();
    while let Some(ev) = c.poll_event() {
        ops.push(ev);
    }
    assert_eq!(ops.len(), 8);
    assert!(c.is_checking());
    let mut spans = Vec::new();
    assert_eq!(
        c.pick(1, PeerHas::All, 4, &mut spans),
        0,
        "no picks while checking"
    );
    for ev in ops {
        let ContentEvent::Storage(op) = ev else {
            panic!("{ev:?}")
        };
        let a = mem.run(op).unwrap();
        c.handle_storage(a);
    }
    let evs = mem.drain(&mut c);
    assert_eq!(
        evs.iter()
            .filter(|e| matches!(e, ContentEvent::CheckDone))
            .count(),
        1
    );
    let found = evs
        .iter()
        .filter(|e| matches!(e, ContentEvent::PieceFound(p) if *p < 10))
        .count();
    assert_eq!(found, 10);
    assert!(!evs.iter().any(|e| matches!(e, ContentEvent::Complete)));
    assert_eq!(c.had().count(), 10);
    assert!(!c.is_checking());
}

#[test]
fn unverified_bound_stops_picking_until_pieces_verify() {
    let good = payload(8 * BLOCK as usize);
    let geo = Geometry::new(good.len() as u64, BLOCK, BLOCK).unwrap();
    let mut mem = Mem::new(geo, &good);
    let cfg = ContentConfig {
        max_unverified: 2 * u64::from(BLOCK),
        ..ContentConfig::default()
    };
    let mut c = fresh(geo, cfg);
    mem.drain(&mut c);
    let mut spans = Vec::new();
    c.pick(1, PeerHas::All, 8, &mut spans);
    for s in spans.iter().take(2) {
        c.received(sender(1), *s, block_of(&good, &geo, *s));
    }
    // Written, not yet verified: the writes are still queued as events.
    assert_eq!(c.unverified(), 2 * u64::from(BLOCK));
    let mut more = Vec::new();
    assert_eq!(c.pick(1, PeerHas::All, 8, &mut more), 0);
    mem.drain(&mut c);
    assert_eq!(c.unverified(), 0);
    assert!(c.can_pick());
}

#[test]
fn secondary_units_are_checked_once_their_pieces_pass_and_gate_completion() {
    let good = payload(6 * BLOCK as usize);
    let geo = Geometry::new(good.len() as u64, BLOCK, BLOCK).unwrap();
    let mut mem = Mem::new(geo, &good);
    let mut c = fresh(geo, ContentConfig::default());
    mem.drain(&mut c);
    // Units of 1.5 blocks over bytes 1 block .. 5 blocks.
    let grid = grid::UnitGrid::new(u64::from(BLOCK), 4 * u64::from(BLOCK), 24_576).unwrap();
    let scheme = c.add_scheme(grid);
    // Before the digests are known, nothing is checked.
    let mut first = Vec::new();
    c.pick(1, PeerHas::All, 1, &mut first);
    c.received(sender(1), first[0], block_of(&good, &geo, first[0]));
    let evs = mem.drain(&mut c);
    assert!(
        !evs.iter()
            .any(|e| matches!(e, ContentEvent::CheckUnit { .. }))
    );
    c.scheme_known(scheme);
    let mut spans = Vec::new();
    c.pick(1, PeerHas::All, 6, &mut spans);
    for s in &spans {
        c.received(sender(1), *s, block_of(&good, &geo, *s));
    }
    // Every piece passed: the units over them are asked for, and the
    // whole is not complete until they are checked.
    let mut units: Vec<u32> = mem
        .drain(&mut c)
        .into_iter()
        .filter_map(|e| match e {
            ContentEvent::CheckUnit { unit, .. } => Some(unit),
            ContentEvent::Complete => panic!("complete before the units"),
            _ => None,
        })
        .collect();
    assert!(!c.is_complete());
    while let Some(ev) = c.poll_event() {
        if let ContentEvent::CheckUnit { unit, .. } = ev {
            units.push(unit);
        }
    }
    units.sort_unstable();
    assert_eq!(units, [0, 1, 2]);
    c.unit_done(scheme, 0, true);
    c.unit_done(scheme, 1, false);
    c.unit_done(scheme, 1, true); // not asked again: ignored
    assert!(!c.is_complete());
    c.unit_done(scheme, 2, true);
    let evs: Vec<_> = std::iter::from_fn(|| c.poll_event()).collect();
    assert!(
        matches!(
            evs[..],
            [
                ContentEvent::UnitVerified { unit: 0, .. },
                ContentEvent::UnitFailed { unit: 1, .. },
                ContentEvent::UnitVerified { unit: 2, .. },
                ContentEvent::Complete
            ]
        ),
        "{evs:?}"
    );
    assert_eq!(c.scheme_verified(scheme).unwrap().count(), 2);
    assert_eq!(c.stats().unit_failures, 1);
}

#[test]
fn deferred_failures_wait_for_the_owner_and_restored_blocks_are_kept() {
    let good = payload(4 * BLOCK as usize);
    let geo = Geometry::new(good.len() as u64, 4 * BLOCK, BLOCK).unwrap();
    let mut mem = Mem::new(geo, &good);
    let cfg = ContentConfig {
        on_fail: FailPolicy::Defer,
        ..ContentConfig::default()
    };
    let mut c = fresh(geo, cfg);
    mem.drain(&mut c);
    let mut spans = Vec::new();
    c.pick(1, PeerHas::All, 4, &mut spans);
    for s in &spans {
        let mut d = block_of(&good, &geo, *s);
        if s.begin == BLOCK {
            d = vec![Bytes::from(vec![9u8; BLOCK as usize])];
        }
        c.received(sender(1), *s, d);
    }
    let evs = mem.drain(&mut c);
    let [ContentEvent::PieceFailed { piece: 0, from }] = &evs[..] else {
        panic!("{evs:?}")
    };
    assert_eq!(from.len(), 4);
    // Nothing is picked until the owner decides.
    let mut none = Vec::new();
    assert_eq!(c.pick(2, PeerHas::All, 4, &mut none), 0);
    // The owner keeps blocks 0, 2, 3 (say AICH vouched for them) and wants
    // block 1 again.
    c.refetch(0);
    for s in spans.iter().filter(|s| s.begin != BLOCK) {
        c.restore(*s, block_of(&good, &geo, *s).remove(0));
    }
    let mut again = Vec::new();
    c.pick(2, PeerHas::All, 4, &mut again);
    assert_eq!(
        again,
        [BlockSpan {
            piece: 0,
            begin: BLOCK,
            len: BLOCK
        }]
    );
    c.received(sender(2), again[0], block_of(&good, &geo, again[0]));
    let evs = mem.drain(&mut c);
    assert!(
        evs.iter()
            .any(|e| matches!(e, ContentEvent::PieceVerified(0)))
    );
    assert_eq!(mem.data, good);
}

#[test]
fn a_late_check_runs_when_storage_is_ready() {
    let good = payload(4 * BLOCK as usize);
    let geo = Geometry::new(good.len() as u64, BLOCK, BLOCK).unwrap();
    let mut mem = Mem::new(geo, &good);
    mem.data[..BLOCK as usize].copy_from_slice(&good[..BLOCK as usize]);
    let mut c = fresh(geo, ContentConfig::default());
    assert!(matches!(mem.drain(&mut c)[..], [ContentEvent::CheckDone]));
    c.start_check(&Bitfield::full(4));
    assert!(c.is_checking());
    let evs = mem.drain(&mut c);
    assert!(
        matches!(
            evs[..],
            [ContentEvent::PieceFound(0), ContentEvent::CheckDone]
        ),
        "{evs:?}"
    );
    assert_eq!(c.had().iter_ones().collect::<Vec<_>>(), [0]);
}

#[test]
fn a_scheme_whose_digests_never_come_does_not_block_completion() {
    let good = payload(4 * BLOCK as usize);
    let geo = Geometry::new(good.len() as u64, BLOCK, BLOCK).unwrap();
    let mut mem = Mem::new(geo, &good);
    let mut c = fresh(geo, ContentConfig::default());
    mem.drain(&mut c);
    c.add_scheme(grid::UnitGrid::new(0, 4 * u64::from(BLOCK), 20_000).unwrap());
    let mut spans = Vec::new();
    c.pick(1, PeerHas::All, 4, &mut spans);
    for s in &spans {
        c.received(sender(1), *s, block_of(&good, &geo, *s));
    }
    let evs = mem.drain(&mut c);
    assert!(
        evs.iter().any(|e| matches!(e, ContentEvent::Complete)),
        "{evs:?}"
    );
    assert!(
        !evs.iter()
            .any(|e| matches!(e, ContentEvent::CheckUnit { .. }))
    );
}

/// A quiet content made again from its `Quiet` and config is the same:
/// pieces had, skipped, priorities, order, counts and sizes; it announces
/// nothing again. A content with a check running or a piece held is not
/// quiet.
#[test]
fn a_quiet_content_wakes_as_it_was() {
    let geo = Geometry::new(10 * 32_768 + 5, 32_768, 16_384).unwrap();
    let n = geo.piece_count();
    let mut wanted = Bitfield::full(n);
    wanted.clear(4);
    let mut prio = vec![Priority::Normal; n as usize];
    prio[7] = Priority::High;
    let mut had = Bitfield::new(n);
    had.set(1);
    had.set(10);
    let cfg = ContentConfig {
        wanted: Some(wanted),
        priorities: Some(prio.into()),
        ..ContentConfig::default()
    };
    let mut c = Content::new(geo, cfg, &had, &Bitfield::new(n));
    c.set_order(Order::Sequential);
    while c.poll_event().is_some() {}
    assert!(c.is_quiet());
    let (bytes_left, bytes_wanted) = (c.bytes_left(), c.bytes_wanted());
    let (q, cfg) = c.into_quiet();
    assert_eq!(
        (q.bytes_left(), q.bytes_wanted()),
        (bytes_left, bytes_wanted)
    );
    assert_eq!(q.had(), &had);
    assert!(!q.is_complete());
    let mut w = q.wake(geo, cfg);
    assert!(w.poll_event().is_none(), "nothing announced again");
    assert_eq!(
        (w.bytes_left(), w.bytes_wanted()),
        (bytes_left, bytes_wanted)
    );
    assert_eq!(w.had(), &had);
    assert!(w.is_skipped(4) && !w.is_skipped(3));
    assert_eq!(w.picker().priority_of(7), Priority::High);
    assert_eq!(w.picker().order(), Order::Sequential);

    let checking = Content::new(
        geo,
        ContentConfig::default(),
        &Bitfield::new(n),
        &Bitfield::full(n),
    );
    assert!(!checking.is_quiet());
}
