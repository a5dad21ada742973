//! Ramp-up to a distant peer (`SEEDS.md` section 3): one seeder, one
//! leecher, 150 ms round trip, 50 MB/s each way, a 1 GiB synthetic payload
//! (more than 10 s of link time, so the transfer is still running at every
//! checkpoint).
//!
//! Target: 90% of the link rate, measured over 250 ms, within 2 s of the
//! first byte. Also printed: cumulative MiB at t = 1, 2, 5, 10 s against
//! what the link allows from the first byte on (the protocol's opening
//! exchange, two round trips before the first request, is not counted
//! against the pipeline).

use std::time::Duration;

use weir_sim::{LinkConfig, NodeConfig, Payload, Series, TorrentSpec, World, mib};

const RATE: u64 = 50_000_000;
const ONE_WAY: Duration = Duration::from_millis(75);
const WINDOW: Duration = Duration::from_millis(250);

/// First time the rate over the preceding `WINDOW` reaches `frac` of the
/// link, scanning every 10 ms from the first byte.
fn time_to(series: &Series, frac: f64, until: Duration) -> Option<Duration> {
    let first = series.first()?;
    let mut t = first + WINDOW;
    while t <= until {
        if series.rate(t - WINDOW, t) >= frac * RATE as f64 {
            return Some(t);
        }
        t += Duration::from_millis(10);
    }
    None
}

#[test]
fn distant_peer_reaches_link_rate_within_two_seconds() {
    let spec = TorrentSpec::new("ramp", Payload::synthetic(1 << 30, 1 << 20, 1));
    let mut w = World::new(1);
    let seeder = w.add_bt(NodeConfig::seeder(&spec).name("seeder"));
    let leecher = w.add_bt(NodeConfig::leecher(&spec).name("leecher"));
    w.connect_sym(seeder, leecher, LinkConfig::new(ONE_WAY, RATE));
    let s = Duration::from_secs;
    w.run_to(s(10));
    let got = w.node(leecher).received();
    assert!(
        w.node(leecher).completed_at().is_none(),
        "payload too small: done before 10 s"
    );
    let first = got.first().expect("no byte arrived");
    eprintln!("first block byte at {:.3} s", first.as_secs_f64());
    // SEEDS.md section 3, rtorrent patched, cumulative MiB at 150 ms RTT.
    let rtorrent = [(5, 29.3), (10, 225.1)];
    for secs in [1, 2, 5, 10] {
        let t = s(secs);
        let allowed = RATE as f64 * t.saturating_sub(first).as_secs_f64();
        let have = got.at(t);
        let reference = rtorrent
            .iter()
            .find(|(x, _)| *x == secs)
            .map_or(String::new(), |(_, m)| {
                format!("  (rtorrent patched: {m} MiB)")
            });
        eprintln!(
            "t={secs:2} s: {:7.1} MiB of {:7.1} MiB the link allows ({:5.1}%){reference}",
            mib(have),
            allowed / (1 << 20) as f64,
            100.0 * have as f64 / allowed.max(1.0),
        );
    }
    let t90 = time_to(got, 0.9, s(10)).expect("never reached 90% of the link");
    eprintln!(
        "90% of the link ({WINDOW:?} window) reached {:.2} s after the first byte",
        (t90 - first).as_secs_f64()
    );
    let check = first + s(2);
    let rate = got.rate(check - WINDOW, check);
    eprintln!(
        "rate at first byte + 2 s: {:.1} MB/s ({:.1}% of the link)",
        rate / 1e6,
        100.0 * rate / RATE as f64
    );
    assert!(
        rate >= 0.9 * RATE as f64,
        "{:.1} MB/s at first byte + 2 s",
        rate / 1e6
    );
    // Loose checks on the cumulative curve: the ramp costs at most about a
    // second of link time by t = 5 s and stays paid off.
    for (secs, frac) in [(5, 0.70), (10, 0.85)] {
        let allowed = RATE as f64 * s(secs).saturating_sub(first).as_secs_f64();
        let have = got.at(s(secs)) as f64;
        assert!(
            have >= frac * allowed,
            "t={secs} s: {:.1} MiB, under {:.0}% of the {:.1} MiB the link allows",
            have / (1 << 20) as f64,
            frac * 100.0,
            allowed / (1 << 20) as f64
        );
    }
}
