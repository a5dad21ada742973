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
