//! Unit tests of the scenario's pure parts.

use super::*;

#[test]
fn flood_names_round_trip_and_aim() {
    for f in Flood::ALL {
        assert_eq!(Flood::parse(f.name()), Some(f));
    }
    assert_eq!(Flood::parse(" half-open "), Some(Flood::HalfOpen));
    assert_eq!(Flood::parse("nope"), None);
    assert_eq!(Flood::ManyPeers.max_added_mib(), MAX_ADDED_MANY_MIB);
    assert_eq!(Flood::NeverReads.max_added_mib(), MAX_ADDED_ONE_MIB);
    assert_eq!(Flood::Tracker.target(), Target::BtGet);
    assert_eq!(Flood::ServerSources.target(), Target::Ed2kServer);
    assert_eq!(Flood::Callbacks.target(), Target::Ed2kSeed);
}

#[test]
fn links_and_listen_lines() {
    let (base, addr) = split_link(
        "ed2k://|file|payload.bin|100|0123456789ABCDEF0123456789ABCDEF|sources,127.0.0.1:4662|/",
    )
    .unwrap();
    assert_eq!(
        base,
        "ed2k://|file|payload.bin|100|0123456789ABCDEF0123456789ABCDEF|/"
    );
    assert_eq!(addr, "127.0.0.1:4662".parse().unwrap());
    assert!(split_link("ed2k://|file|x|1|00|/").is_err());
    let a = listening_addr("2026-12-01T20:00:00Z INFO BitTorrent: listening on 127.0.0.1:6881")
        .unwrap();
    assert_eq!(a, "127.0.0.1:6881".parse().unwrap());
    assert!(listening_addr("listening on nowhere").is_err());
}

fn run(peak: f64, rate: f64) -> Measured {
    Measured::new(
        RssSummary {
            before: 10.0,
            peak,
            after: 12.0,
        },
        16 << 20,
        if rate > 0.0 {
            Ok(Duration::from_secs_f64((16 << 20) as f64 / rate))
        } else {
            Err("did not finish".into())
        },
    )
}

#[test]
fn verdicts_use_the_baseline_of_the_same_target() {
    let row = |flood, target, runs| RowRuns {
        flood,
        target,
        runs,
        failures: Vec::new(),
    };
    let rows = vec![
        row(
            None,
            Target::BtSeed,
            vec![run(20.0, 16e6), run(22.0, 15e6), run(21.0, 16e6)],
        ),
        row(None, Target::Ed2kSeed, vec![run(40.0, 10e6)]),
        row(
            Some(Flood::BtChokedRequests),
            Target::BtSeed,
            vec![run(23.0, 15e6), run(30.0, 15e6), run(24.0, 14e6)],
        ),
        row(
            Some(Flood::Ed2kBeforeHello),
            Target::Ed2kSeed,
            vec![run(41.0, 0.0)],
        ),
    ];
    let v = verdicts(&rows);
    assert_eq!(v.len(), 2);
    let (f, bt) = &v[0];
    assert_eq!(*f, Flood::BtChokedRequests);
    // Medians: peak 24 over 21; rate 15 over 16 MB/s.
    assert!((bt.added_mib - 3.0).abs() < 1e-9, "{bt:?}");
    assert!(bt.memory_met());
    assert!((bt.rate_kept.unwrap() - 15.0 / 16.0).abs() < 1e-3, "{bt:?}");
    let (_, ed) = &v[1];
    assert!((ed.added_mib - 1.0).abs() < 1e-9);
    // The leecher did not finish: 0% kept, not met.
    assert_eq!(ed.rate_kept, Some(0.0));
    assert_eq!(ed.rate_met(), Some(false));
    assert_eq!(
        rows[3].runs[0].leecher_failed.as_deref(),
        Some("did not finish")
    );
}
