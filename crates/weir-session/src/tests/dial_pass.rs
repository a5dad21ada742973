//! Dial passes in a session of many transfers: a transfer that asks for
//! one (added, resumed, given peers) is visited alone, so a burst of adds
//! costs one visit each, not a walk over every transfer per add; and what
//! it asked for is dialled at once all the same.

use super::*;

/// A distinct one-piece torrent for each `i`.
fn meta_n(i: u32) -> Arc<Metainfo> {
    let mut hash = [0xd1; 20];
    hash[..4].copy_from_slice(&i.to_le_bytes());
    meta_of(format!("n{i}"), hash, &i.to_le_bytes().repeat(1000))
}

/// Adds and checks (nothing on disk) transfer `i`, then runs the timers as
/// the runtime does after each input.
fn add_checked(s: &mut Session, i: u32, now: Instant) -> TransferId {
    let id = add_meta(s, meta_n(i), None, now);
    s.handle_timeout(now);
    id
}

#[test]
fn a_burst_of_adds_visits_each_transfer_once() {
    const N: u32 = 400;
    let now = Instant::now(); // test-epoch
    let mut s = session();
    for i in 0..N {
        add_checked(&mut s, i, now);
    }
    // A walk over every transfer per add would be N (N + 1) / 2 = 80,200.
    assert!(
        s.dial_visits <= 2 * u64::from(N),
        "{} visits for {N} adds",
        s.dial_visits
    );
    assert!(dials(&mut s).is_empty());
}

#[test]
fn a_transfer_asking_among_many_is_dialled_at_once() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    let ids: Vec<TransferId> = (0..300).map(|i| add_checked(&mut s, i, now)).collect();
    let before = s.dial_visits;
    // Peers for one transfer in the middle: dialled at the next timeout,
    // which is due now, visiting that transfer alone.
    let later = now + Duration::from_millis(5);
    assert_eq!(
        s.add_peers(
            ids[150],
            Proto::Bt,
            &[peer(1), peer(2)],
            Source::Tracker,
            later
        ),
        2
    );
    assert!(s.poll_timeout().is_some_and(|t| t <= later));
    s.handle_timeout(later);
    let mut got: Vec<SocketAddr> = dials(&mut s).into_iter().map(|(_, a)| a).collect();
    got.sort();
    assert_eq!(got, vec![peer(1), peer(2)]);
    assert_eq!(s.dial_visits - before, 1);
    // A transfer added with a peer is dialled the same way.
    add_with_peers(&mut s, meta_n(1000), None, vec![peer(3)], later);
    s.handle_timeout(later);
    assert_eq!(
        dials(&mut s)
            .into_iter()
            .map(|(_, a)| a)
            .collect::<Vec<_>>(),
        vec![peer(3)]
    );
}

/// Dials and establishes transfer `id`'s peer `p`; returns its connection.
fn connect(s: &mut Session, id: TransferId, p: SocketAddr, tag: u8, now: Instant) -> ConnId {
    s.add_peers(id, Proto::Bt, &[p], Source::Manual, now);
    s.handle_timeout(now);
    let d = dials(s);
    assert_eq!(d.iter().map(|(_, a)| *a).collect::<Vec<_>>(), vec![p]);
    s.established(
        d[0].0,
        Established::Bt {
            theirs: their_handshake(tag, 9),
            preamble_sent: false,
        },
        now,
    )
    .unwrap();
    d[0].0
}

#[test]
fn a_close_among_many_visits_its_own_transfer_and_redials_its_peer() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    for i in 0..300 {
        add_checked(&mut s, i, now);
    }
    let a = add(&mut s, 1, now);
    s.handle_timeout(now);
    let conn = connect(&mut s, a, peer(1), 1, now);
    // Time passes; the passes due run.
    let later = now + Duration::from_secs(1);
    while s.poll_timeout().is_some_and(|t| t <= later) {
        s.handle_timeout(later);
    }
    while s.poll_event().is_some() {}
    let before = s.dial_visits;
    // The connection ends: the freed slot and the peer's redial concern
    // this transfer alone (a walk over all would be 301 visits).
    s.closed(conn, None, later);
    assert!(
        s.dial_visits - before <= 2,
        "{} visits for one close",
        s.dial_visits - before
    );
    // And the peer is dialled again once its reconnect delay is out.
    let mut t = later;
    let redial = loop {
        t += Duration::from_millis(100);
        assert!(t - later < Duration::from_secs(60), "never dialled again");
        if s.poll_timeout().is_some_and(|due| due <= t) {
            s.handle_timeout(t);
        }
        if let Some((_, addr)) = dials(&mut s).first() {
            break (*addr, t);
        }
    };
    assert_eq!(redial.0, peer(1));
}

#[test]
fn a_slot_freed_at_the_session_limit_goes_to_a_waiting_transfer_at_once() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    s.cfg.global.max_peers = 1;
    for i in 0..50 {
        add_checked(&mut s, i, now);
    }
    let a = add(&mut s, 1, now);
    let b = add(&mut s, 2, now);
    s.handle_timeout(now);
    let conn = connect(&mut s, a, peer(1), 1, now);
    // Transfer b has a peer and no room in the session for it.
    s.add_peers(b, Proto::Bt, &[peer(2)], Source::Manual, now);
    s.handle_timeout(now);
    assert!(dials(&mut s).is_empty());
    // a's connection ends: b's peer is dialled in the same call, not
    // at a later pass.
    s.closed(conn, None, now + Duration::from_millis(1));
    assert_eq!(
        dials(&mut s)
            .into_iter()
            .map(|(_, a)| a)
            .collect::<Vec<_>>(),
        vec![peer(2)]
    );
}

#[test]
fn accepted_connections_that_never_become_peers_cost_no_dial_pass() {
    let now = Instant::now(); // test-epoch
    let mut s = session();
    for i in 0..300 {
        add_checked(&mut s, i, now);
    }
    let later = now + Duration::from_secs(1);
    while s.poll_timeout().is_some_and(|t| t <= later) {
        s.handle_timeout(later);
    }
    let before = s.dial_visits;
    // A flood of connections that close during their handshake, and one
    // whose handshake names no torrent of ours: they held no dial room, so
    // none buys a walk over the 300 transfers (each cost 300 visits).
    for i in 0..50 {
        let conn = s.incoming(Proto::Bt, peer(100 + i), later).unwrap();
        s.closed(conn, Some("bad handshake".into()), later);
    }
    let conn = s.incoming(Proto::Bt, peer(200), later).unwrap();
    assert!(
        s.established(
            conn,
            Established::Bt {
                theirs: their_handshake(250, 9),
                preamble_sent: false,
            },
            later,
        )
        .is_err()
    );
    assert_eq!(s.dial_visits - before, 0);
}
