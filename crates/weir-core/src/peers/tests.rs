use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

use proptest::prelude::*;

use super::*;

fn t0() -> Instant {
    Instant::now() // test-epoch
}

fn a(i: u32) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(0x7f00_0000 + i), 6881))
}

fn book(cfg: BookConfig) -> PeerBook {
    PeerBook::new(cfg, NetPolicy::loopback(), 7)
}

#[test]
fn a_huge_answer_adds_at_most_max_per_answer_and_the_book_stays_capped() {
    let now = t0();
    let mut b = book(BookConfig::default());
    // One 1 MiB tracker answer: ~174k compact addresses.
    let n = b.add_answer((1..=174_000).map(a), Source::Tracker, now);
    assert_eq!(n, 200);
    assert_eq!(b.counts().known, 200);
    // Many answers: the tracker's quota holds, and the book's cap.
    for k in 0..50u32 {
        b.add_answer(
            (0..1000).map(|i| a(1_000_000 + k * 1000 + i)),
            Source::Tracker,
            now,
        );
    }
    assert_eq!(b.count_from(Source::Tracker), 1000);
    for k in 0..20u32 {
        b.add_answer(
            (0..1000).map(|i| a(5_000_000 + k * 1000 + i)),
            Source::Server,
            now,
        );
    }
    assert_eq!(b.count_from(Source::Server), 1000);
    assert_eq!(b.counts().known, 2000);
    // A third source finds the book full; it evicts the worst idle entries
    // of others, never manual ones.
    for i in 0..10 {
        assert_eq!(b.add(a(9_000_000 + i), Source::Manual, now), Added::New);
    }
    assert_eq!(b.counts().known, 2000);
    assert_eq!(b.count_from(Source::Manual), 10);
}

#[test]
fn failed_entries_are_pruned_before_fresh_ones() {
    let now = t0();
    let cfg = BookConfig {
        max_known: 3,
        max_per_source: 3,
        ..BookConfig::default()
    };
    let mut b = book(cfg);
    for i in 1..=3 {
        b.add(a(i), Source::Tracker, now);
    }
    // Dial all; the second fails twice.
    assert_eq!(b.next_dials(now, 10, true).len(), 3);
    b.dial_failed(a(2), now);
    b.dial_failed(a(1), now);
    b.dial_failed(a(3), now);
    let later = now + Duration::from_secs(10);
    assert_eq!(b.next_dials(later, 10, true).len(), 3);
    b.dial_failed(a(2), later);
    b.dial_failed(a(1), later);
    b.connected(a(3), later);
    // a(2) and a(1) have two failures each; a(1) is older... both are
    // worse than nothing. The newcomer evicts one with most failures,
    // the oldest of those: a(1).
    assert_eq!(b.add(a(4), Source::Tracker, later), Added::New);
    assert_eq!(b.state(a(1)), None);
    assert_eq!(b.state(a(2)), Some(PeerState::Idle));
    assert_eq!(b.state(a(3)), Some(PeerState::Connected));
    // Connected and dialling entries are never evicted.
    let mut c = book(BookConfig {
        max_known: 1,
        ..BookConfig::default()
    });
    c.add(a(1), Source::Tracker, now);
    c.next_dials(now, 1, true);
    assert_eq!(c.add(a(2), Source::Tracker, now), Added::Full);
    assert_eq!(c.state(a(1)), Some(PeerState::Dialing));
}

#[test]
fn backoff_doubles_and_an_address_is_forgotten_after_max_failures() {
    let mut now = t0();
    let mut b = book(BookConfig::default());
    b.add(a(1), Source::Tracker, now);
    let mut waits = Vec::new();
    for _ in 0..5 {
        assert_eq!(b.next_dials(now, 1, true), vec![a(1)]);
        b.dial_failed(a(1), now);
        let due = b.next_due(true).unwrap();
        waits.push(due - now);
        // Not due a moment before.
        assert!(
            b.next_dials(due - Duration::from_millis(1), 1, true)
                .is_empty()
        );
        now = due;
    }
    let secs: Vec<u64> = waits.iter().map(Duration::as_secs).collect();
    assert_eq!(secs, [2, 4, 8, 16, 32]);
    assert_eq!(b.next_dials(now, 1, true), vec![a(1)]);
    b.dial_failed(a(1), now);
    assert_eq!(b.state(a(1)), None, "forgotten after 6 failures");
    // A manual peer is backed off, never forgotten.
    b.add(a(2), Source::Manual, now);
    for _ in 0..20 {
        now = b.next_due(true).unwrap();
        assert_eq!(b.next_dials(now, 1, true), vec![a(2)]);
        b.dial_failed(a(2), now);
    }
    assert_eq!(b.state(a(2)), Some(PeerState::Idle));
    assert_eq!(b.next_due(true).unwrap() - now, Duration::from_secs(120));
}

#[test]
fn short_connections_count_as_failures_long_ones_reset_them() {
    let now = t0();
    let mut b = book(BookConfig::default());
    b.add(a(1), Source::Tracker, now);
    b.next_dials(now, 1, true);
    b.connected(a(1), now);
    assert_eq!(b.counts().connected, 1);
    b.disconnected(a(1), now + Duration::from_secs(1));
    assert_eq!(b.failures(a(1)), Some(1));
    assert_eq!(b.counts().connected, 0);
    let t = now + Duration::from_secs(10);
    b.next_dials(t, 1, true);
    b.connected(a(1), t);
    b.disconnected(a(1), t + Duration::from_secs(300));
    assert_eq!(b.failures(a(1)), Some(0));
    assert_eq!(
        b.next_due(true).unwrap(),
        t + Duration::from_secs(305),
        "reconnect after 5 s"
    );
}

#[test]
fn bans_survive_reconnects_and_cover_v4_mapped_addresses() {
    let now = t0();
    let mut b = book(BookConfig::default());
    b.add(a(1), Source::Tracker, now);
    b.next_dials(now, 1, true);
    b.connected(a(1), now);
    // A book holds no ban list until its first ban.
    assert!(b.bans.is_none() && b.ban_count() == 0);
    assert!(b.ban(a(1).ip()));
    assert_eq!(b.ban_count(), 1);
    assert!(!b.ban(a(1).ip()));
    // Still connected (the runtime closes it); once gone it cannot return.
    b.disconnected(a(1), now + Duration::from_secs(100));
    assert!(
        b.next_dials(now + Duration::from_secs(1000), 10, true)
            .is_empty()
    );
    assert_eq!(b.add(a(1), Source::Tracker, now), Added::Banned);
    let other_port = SocketAddr::new(a(1).ip(), 7000);
    assert_eq!(b.add(other_port, Source::Pex, now), Added::Banned);
    let mapped = SocketAddr::new(IpAddr::V6(Ipv4Addr::from(0x7f00_0001).to_ipv6_mapped()), 1);
    assert!(b.is_banned(mapped.ip()));
    assert_eq!(b.add(mapped, Source::Manual, now), Added::Banned);
    // Banning an address forgets its idle entries.
    b.add(a(2), Source::Tracker, now);
    b.ban(a(2).ip());
    assert_eq!(b.state(a(2)), None);
}

#[test]
fn the_ban_list_is_bounded_oldest_first() {
    let mut bans = Bans::new(3);
    for i in 1..=4 {
        bans.insert(a(i).ip());
    }
    assert_eq!(bans.len(), 3);
    assert!(!bans.contains(a(1).ip()));
    assert!(bans.contains(a(4).ip()));
}

#[test]
fn the_policy_is_applied() {
    let mut b = book(BookConfig::default());
    let out = SocketAddr::from(([192, 0, 2, 1], 1));
    assert_eq!(b.add(out, Source::Tracker, t0()), Added::Outside);
    let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 1);
    assert_eq!(b.add(v6, Source::Tracker, t0()), Added::New);
}

#[test]
fn callbacks_are_bounded_dialled_first_even_when_seeding_and_once() {
    let now = t0();
    let mut b = book(BookConfig::default());
    b.add(a(1), Source::Server, now);
    // 2,000 callbacks from a server: 16 are kept.
    let mut added = 0;
    for i in 0..2000 {
        if b.add(a(100 + i), Source::Callback, now) == Added::New {
            added += 1;
        }
    }
    assert_eq!(added, 16);
    assert_eq!(b.counts().asked, 16);
    // Not seeking: only callbacks are dialled, within the room given.
    let d = b.next_dials(now, 5, false);
    assert_eq!(d.len(), 5);
    assert!(!d.contains(&a(1)));
    // A failed callback is forgotten, not retried.
    b.dial_failed(d[0], now);
    assert_eq!(b.state(d[0]), None);
    // A connected callback is forgotten when it ends.
    b.connected(d[1], now);
    b.disconnected(d[1], now + Duration::from_secs(1000));
    assert_eq!(b.state(d[1]), None);
    // A callback for a known address dials it first.
    let mut c = book(BookConfig::default());
    for i in 1..=10 {
        c.add(a(i), Source::Server, now);
    }
    assert_eq!(c.add(a(7), Source::Callback, now), Added::Known);
    assert_eq!(c.next_dials(now, 1, true), vec![a(7)]);
}

#[test]
fn a_callback_asked_again_while_connected_survives_the_disconnect() {
    // The eD2k wedge workaround: the connection made for a callback wedges
    // too, and the core asks to connect again before closing it.
    let now = t0();
    let mut b = book(BookConfig::default());
    assert_eq!(b.add(a(1), Source::Callback, now), Added::New);
    assert_eq!(b.next_dials(now, 1, false), vec![a(1)]);
    b.connected(a(1), now);
    assert_eq!(b.counts().asked, 0);
    assert_eq!(b.add(a(1), Source::Callback, now), Added::Known);
    let later = now + Duration::from_secs(5);
    b.disconnected(a(1), later);
    assert_eq!(b.next_dials(later, 1, false), vec![a(1)]);
    b.connected(a(1), later);
    b.disconnected(a(1), later + Duration::from_secs(1));
    assert_eq!(b.state(a(1)), None, "answered once, then forgotten");
    assert_eq!(b.counts().asked, 0);
}

#[test]
fn limits_count_pending_dials_and_handshakes() {
    let l = ConnLimits {
        max_peers: 5,
        max_half_open: 3,
        max_handshakes: 2,
    };
    let c = |peers, dialing, handshaking| ConnCounts {
        peers,
        dialing,
        handshaking,
    };
    assert_eq!(l.dial_room(&c(0, 0, 0)), 3);
    assert_eq!(l.dial_room(&c(0, 3, 0)), 0, "half-open limit");
    assert_eq!(l.dial_room(&c(3, 1, 0)), 1, "pending dials count as peers");
    assert_eq!(l.dial_room(&c(5, 0, 0)), 0);
    assert_eq!(l.admit_incoming(&c(0, 0, 0)), Admit::Accept);
    assert_eq!(l.admit_incoming(&c(0, 0, 2)), Admit::ReplaceOldest);
    assert_eq!(l.admit_incoming(&c(5, 0, 0)), Admit::Refuse);
    assert!(l.admit_peer(&c(4, 3, 2)));
    assert!(!l.admit_peer(&c(5, 0, 0)));
}

#[test]
fn dial_choice_is_seeded_and_prefers_fewer_failures() {
    let now = t0();
    let pick = |seed| {
        let mut b = PeerBook::new(BookConfig::default(), NetPolicy::loopback(), seed);
        for i in 1..=50 {
            b.add(a(i), Source::Tracker, now);
        }
        b.next_dials(now, 5, true)
    };
    assert_eq!(pick(1), pick(1));
    assert_ne!(pick(1), pick(2));
    let mut b = book(BookConfig::default());
    for i in 1..=3 {
        b.add(a(i), Source::Tracker, now);
    }
    let first = b.next_dials(now, 3, true);
    for x in &first {
        b.dial_failed(*x, now);
    }
    // A failure reported for an address not being dialled is ignored.
    b.dial_failed(first[0], now);
    assert_eq!(b.failures(first[0]), Some(1));
    let later = now + Duration::from_secs(60);
    assert_eq!(b.next_dials(later, 1, true).len(), 1);
    // The one dialled again fails again: it goes last.
    let again = b.next_dials(later, 0, true);
    assert!(again.is_empty());
    let second = b
        .peers
        .iter()
        .find(|(_, e)| e.state == PeerState::Dialing)
        .map(|(a, _)| *a)
        .unwrap();
    b.dial_failed(second, later);
    let much_later = later + Duration::from_secs(600);
    let order = b.next_dials(much_later, 3, true);
    assert_eq!(order.len(), 3);
    assert_eq!(order.last(), Some(&second));
}

#[test]
fn a_runtime_started_dial_is_tracked() {
    let now = t0();
    let mut b = book(BookConfig::default());
    assert!(b.dial_started(a(1), Source::Callback, now));
    assert!(
        !b.dial_started(a(1), Source::Callback, now),
        "already dialling"
    );
    assert_eq!(b.counts().dialing, 1);
    assert!(b.next_dials(now, 5, false).is_empty());
    b.connected(a(1), now);
    assert_eq!(b.counts().dialing, 0);
    assert_eq!(b.counts().connected, 1);
}

#[derive(Clone, Debug)]
enum Op {
    Add(u32, usize),
    Answer(u32, u32, usize),
    Dial(usize, bool),
    Fail(u32),
    Connect(u32),
    Disconnect(u32),
    Ban(u32),
    Remove(u32),
    Wait(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..64, 0usize..Source::ALL.len()).prop_map(|(i, s)| Op::Add(i, s)),
        (0u32..64, 0u32..300, 0usize..Source::ALL.len()).prop_map(|(i, n, s)| Op::Answer(i, n, s)),
        (0usize..8, any::<bool>()).prop_map(|(r, s)| Op::Dial(r, s)),
        (0u32..64).prop_map(Op::Fail),
        (0u32..64).prop_map(Op::Connect),
        (0u32..64).prop_map(Op::Disconnect),
        (0u32..64).prop_map(Op::Ban),
        (0u32..64).prop_map(Op::Remove),
        (0u64..200).prop_map(Op::Wait),
    ]
}

proptest! {
    /// Whatever happens, the caps, quotas and counters hold; banned,
    /// dialling and connected addresses are never handed out to dial.
    #[test]
    fn bounds_and_counts_hold(ops in proptest::collection::vec(op(), 1..300), seed in 0u64..100) {
        let cfg = BookConfig {
            max_known: 40,
            max_per_source: 20,
            max_per_answer: 10,
            max_callbacks: 4,
            max_bans: 8,
            ..BookConfig::default()
        };
        let mut b = PeerBook::new(cfg.clone(), NetPolicy::loopback(), seed);
        let mut now = t0();
        let mut dialing = std::collections::BTreeSet::new();
        for op in ops {
            match op {
                Op::Add(i, s) => { b.add(a(i), Source::ALL[s], now); }
                Op::Answer(i, n, s) => {
                    let got = b.add_answer((i..i + n).map(a), Source::ALL[s], now);
                    prop_assert!(got <= cfg.max_per_answer);
                }
                Op::Dial(room, seeking) => {
                    let before = b.counts();
                    let d = b.next_dials(now, room, seeking);
                    prop_assert!(d.len() <= room);
                    for x in &d {
                        prop_assert!(!b.is_banned(x.ip()));
                        prop_assert!(dialing.insert(*x), "handed out twice: {x}");
                    }
                    prop_assert_eq!(b.counts().dialing, before.dialing + d.len());
                }
                Op::Fail(i) => { dialing.remove(&a(i)); b.dial_failed(a(i), now); }
                Op::Connect(i) => { dialing.remove(&a(i)); b.connected(a(i), now); }
                Op::Disconnect(i) => { dialing.remove(&a(i)); b.disconnected(a(i), now); }
                Op::Ban(i) => { b.ban(a(i).ip()); }
                Op::Remove(i) => { b.remove(a(i)); }
                Op::Wait(s) => now += Duration::from_secs(s),
            }
            let c = b.counts();
            prop_assert!(c.known <= cfg.max_known);
            prop_assert!(c.asked <= cfg.max_callbacks);
            prop_assert!(b.ban_count() <= cfg.max_bans);
            let mut per = [0usize; Source::ALL.len()];
            let (mut d, mut k, mut asked) = (0, 0, 0);
            for e in b.peers.values() {
                per[e.source.index()] += 1;
                match e.state {
                    PeerState::Dialing => d += 1,
                    PeerState::Connected => k += 1,
                    PeerState::Idle => {}
                }
                asked += usize::from(e.asked);
            }
            prop_assert_eq!(d, c.dialing);
            prop_assert_eq!(k, c.connected);
            prop_assert_eq!(asked, c.asked);
            for s in Source::ALL {
                prop_assert_eq!(per[s.index()], b.count_from(s));
                prop_assert!(per[s.index()] <= cfg.quota(s));
            }
        }
    }
}

#[test]
fn a_seed_dials_peers_the_user_gave_and_no_others() {
    let now = t0();
    let mut b = book(BookConfig::default());
    b.add(a(1), Source::Tracker, now);
    b.add(a(2), Source::Manual, now);
    b.add(a(3), Source::Pex, now);
    assert_eq!(b.next_due(false), Some(now));
    assert_eq!(b.next_dials(now, 5, false), vec![a(2)]);
    assert!(b.next_dials(now, 5, false).is_empty());
    // Seeking: the others too.
    let mut d = b.next_dials(now, 5, true);
    d.sort();
    assert_eq!(d, vec![a(1), a(3)]);
}
