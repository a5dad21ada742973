//! A smoke run of `weir bench hostile` (the bench itself is not run in
//! CI): one flood (BitTorrent requests while choked, fast extension) and
//! its baseline against the real `weir seed`, on an 8 MiB file with the
//! honest leecher capped at 8 MB/s. Checks that every part measures:
//! resident sizes read, the leecher's rate near its cap, the flood sending
//! and being dropped, and a verdict computed from the figures. (Whether
//! weir meets the goals is the bench's report, not this test's.)

use std::path::PathBuf;
use std::time::{Duration, Instant};

use weir_bench::hostile::{Flood, Options, Target, measure, verdicts};

#[test]
fn one_flood_and_its_baseline_are_measured() {
    let mut o = Options::new(PathBuf::from(env!("CARGO_BIN_EXE_weir")));
    o.size = 8 << 20;
    o.rate = 8_000_000;
    o.settle = Duration::from_millis(500);
    let t0 = Instant::now();
    let rows = measure(&o, &[Flood::BtChokedRequests], 1).expect("measured");
    eprintln!("{:.1} s: {rows:#?}", t0.elapsed().as_secs_f64());
    assert_eq!(rows.len(), 2, "the baseline and the flood");
    assert_eq!((rows[0].flood, rows[0].target), (None, Target::BtSeed));
    assert_eq!(rows[1].flood, Some(Flood::BtChokedRequests));
    for r in &rows {
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!(r.runs.len(), 1);
        let m = &r.runs[0];
        assert_eq!(m.leecher_failed, None);
        // A weir process is a few MiB at least, and not hundreds here.
        assert!((1.0..100.0).contains(&m.rss.before), "{m:?}");
        assert!(m.rss.peak >= m.rss.before && m.rss.peak < 400.0, "{m:?}");
        assert!((1.0..400.0).contains(&m.rss.after), "{m:?}");
        // Capped at 8 MB/s: near it, never far above.
        assert!((2e6..=9e6).contains(&m.rate), "{:.2} MB/s", m.rate / 1e6);
    }
    let (sent, conns, dropped, _) = rows[1].runs[0].flood;
    assert!(sent >= 1 << 20, "the flood sent {sent} bytes");
    assert!(
        conns >= 1 && dropped <= conns,
        "{conns} conns, {dropped} dropped"
    );
    let v = verdicts(&rows);
    assert_eq!(v.len(), 1);
    let (f, v) = &v[0];
    assert_eq!(*f, Flood::BtChokedRequests);
    let want = rows[1].runs[0].rss.peak - rows[0].runs[0].rss.peak;
    assert!((v.added_mib - want).abs() < 1e-9, "{v:?}");
    let kept = v.rate_kept.expect("rates measured");
    assert!((0.2..=1.5).contains(&kept), "{v:?}");
    assert!(t0.elapsed() < Duration::from_secs(60));
}
