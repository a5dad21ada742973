//! Backoff and reconnection (issue 9), measured on the dials the session
//! asks for:
//!
//! - a seeder the leecher was given (`--peer`) is down from the start, so
//!   each dial is refused one round trip later: it is dialled again after
//!   2 s, 4 s, 8 s, 16 s, 32 s (the book's base doubling per failure; each
//!   gap is the wait plus the refusal's round trip, at most one session
//!   look of 0.5 s late);
//! - it comes back up at 40 s: the next retry connects, and the download
//!   starts;
//! - it goes down again mid-download (the connection is reset) and comes
//!   back: the leecher reconnects at its next retry and finishes with
//!   byte-identical data;
//! - an address from a tracker that keeps refusing is forgotten after six
//!   failures (it is not dialled a seventh time).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use weir_sim::{
    LinkConfig, NodeConfig, Payload, Proto, Source, TorrentSpec, TransferConfig, Unreachable, World,
};

const ONE_WAY: Duration = Duration::from_millis(10);
const UP_AT: Duration = Duration::from_secs(40);
const DOWN_AGAIN: Duration = Duration::from_secs(66);
const UP_AGAIN: Duration = Duration::from_secs(80);

#[test]
fn refused_peers_are_redialled_at_growing_intervals_and_reconnected_when_back() {
    let spec = TorrentSpec::new("backoff", Payload::random(8 << 20, 256 << 10, 31));
    let mut w = World::new(31);
    w.net.link = LinkConfig::new(ONE_WAY, 1_000_000);
    let seeder = w.add_node(NodeConfig::seeder(&spec).name("seeder"));
    w.take_down(seeder);
    let seed_addr = w.node(seeder).bt_addr().expect("listens");
    let leecher = w.add_node(
        NodeConfig::new()
            .name("leecher")
            .with(TransferConfig::leech(&spec).peers([seed_addr])),
    );
    let t = w.node(leecher).transfers()[0];
    let liar = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1)), 6881);
    w.set_unreachable(liar.ip(), Unreachable::Refuse { after: 2 * ONE_WAY });
    w.add_peers(leecher, t, Proto::Bt, &[liar], Source::Tracker);
    w.at(UP_AT, move |w| w.bring_up(seeder));
    w.at(DOWN_AGAIN, move |w| w.take_down(seeder));
    w.at(UP_AGAIN, move |w| w.bring_up(seeder));
    let done = w.run_until(Duration::from_secs(300), |w| {
        w.node(leecher).completed_at().is_some()
    });
    let book = w.node(leecher).session().config().book.clone();
    let look = w.node(leecher).session().config().dial_interval;
    let node = w.node(leecher);
    let to = |a: SocketAddr| -> Vec<(Duration, Result<(), String>)> {
        node.dials()
            .iter()
            .filter(|d| d.addr == a)
            .map(|d| (d.at, d.result.clone().expect("answered").1))
            .collect()
    };
    let seeds = to(seed_addr);
    let liars = to(liar);
    let show = |v: &[(Duration, Result<(), String>)]| -> Vec<String> {
        v.iter()
            .map(|(t, r)| {
                format!(
                    "{:.3} s {}",
                    t.as_secs_f64(),
                    if r.is_ok() { "ok" } else { "failed" }
                )
            })
            .collect()
    };
    eprintln!("dials to the seeder: {:?}", show(&seeds));
    eprintln!(
        "dials to the tracker's refusing address: {:?}",
        show(&liars)
    );
    eprintln!(
        "complete at {:?}; closed: {:?}",
        node.completed_at_of(t),
        node.closed()
    );
    assert!(done, "download did not complete");
    assert!(
        node.stored().expect("real payload") == &spec.payload.to_vec()[..],
        "data differs"
    );

    // Refused while down: dialled again after base * 2^i plus the
    // refusal's round trip, at most one look late.
    let rtt = 2 * ONE_WAY;
    let refused: Vec<Duration> = seeds
        .iter()
        .take_while(|(t, _)| *t < UP_AT)
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(refused.len(), 5, "dials while down: {:?}", show(&seeds));
    assert!(seeds[..5].iter().all(|(_, r)| r.is_err()));
    for (i, pair) in refused.windows(2).enumerate() {
        let wait = book.retry_base * (1 << i);
        let gap = pair[1] - pair[0];
        assert!(
            gap >= wait + rtt && gap <= wait + rtt + look,
            "gap {i} is {gap:?}, the backoff is {wait:?}"
        );
    }
    // Back up at 40 s: the next retry (32 s after the fifth refusal)
    // connects; nothing is dialled in between.
    let (again, ok) = &seeds[5];
    let due = refused[4] + rtt + book.retry_base * 16;
    assert!(
        ok.is_ok(),
        "the dial after coming back failed: {:?}",
        show(&seeds)
    );
    assert!(
        *again >= due && *again <= due + look,
        "redialled at {again:?}, due at {due:?}"
    );
    // Reset mid-download: the connection counts as a short one (a
    // failure), the next dials back off, and one after the seeder is back
    // connects.
    let after: Vec<&(Duration, Result<(), String>)> =
        seeds.iter().filter(|(t, _)| *t > DOWN_AGAIN).collect();
    let first_ok = after
        .iter()
        .position(|(_, r)| r.is_ok())
        .expect("reconnected after the second outage");
    let (back, _) = after[first_ok];
    assert!(
        *back >= UP_AGAIN,
        "connected while down? {:?}",
        show(&seeds)
    );
    assert!(
        after[..first_ok].iter().all(|(t, _)| *t < UP_AGAIN),
        "a dial after the seeder came back failed: {:?}",
        show(&seeds)
    );
    assert!(
        *back <= UP_AGAIN + book.retry_max + look,
        "reconnected only at {back:?}"
    );
    let done_at = node.completed_at_of(t).expect("checked");
    assert!(done_at > *back, "completed before the reconnection");

    // The tracker's address: six refusals, the same growing gaps, then
    // forgotten.
    assert_eq!(
        liars.len() as u32,
        book.max_failures,
        "dials to the refusing address: {:?}",
        show(&liars)
    );
    for (i, pair) in liars.windows(2).enumerate() {
        let wait = book.retry_base * (1 << i);
        let gap = pair[1].0 - pair[0].0;
        assert!(
            gap >= wait + rtt && gap <= wait + rtt + look,
            "refusing address: gap {i} is {gap:?}, the backoff is {wait:?}"
        );
    }
    let known = node.session().info(t, w.instant()).expect("known").known;
    assert_eq!(known, 1, "only the seeder is still known");
}
