//! A smoke run of `weir bench magnet` (the bench itself is not run in CI):
//! one fetch each by weir and by libtorrent of a 4 MiB magnet link from a
//! libtorrent seeder found through a libtorrent DHT node, in a namespace
//! holding only `lo`. Checks that every milestone is read from both
//! leechers, in order, and that a verdict is computed from them. (Whether
//! weir meets the goals is the bench's report, not this test's.)
//!
//! Without root, namespaces or python3-libtorrent it skips, unless `CI`
//! is set: then it fails.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use weir_bench::magnet::{Options, measure, verdict};
use weir_lab::ci;

const PYTHON: &str = "/usr/bin/python3";

fn ready() -> anyhow::Result<bool> {
    if !ci::require_root_and_netns()? || !ci::require_program(PYTHON)? {
        return Ok(false);
    }
    let ok = Command::new(PYTHON)
        .args(["-c", "import libtorrent"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        ci::unavailable("python3-libtorrent is not installed")?;
    }
    Ok(ok)
}

#[test]
fn one_fetch_each_is_timed_to_metadata_first_piece_and_completion() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let t0 = Instant::now();
    let o = Options {
        weir_exe: PathBuf::from(env!("CARGO_BIN_EXE_weir")),
        size: 4 << 20,
        piece: 256 << 10,
        runs: 1,
        timeout: Duration::from_secs(20),
    };
    let m = measure(&o)?;
    eprintln!("{:.1} s: {m:#?}", t0.elapsed().as_secs_f64());
    assert!(m.failures.is_empty(), "{:?}", m.failures);
    assert_eq!((m.weir.len(), m.lt.len()), (1, 1));
    for r in m.weir.iter().chain(&m.lt) {
        assert_eq!(r.problem(), None, "{r:?}");
        assert!(r.complete < 20.0, "{r:?}");
    }
    // libtorrent's start-up is timed; weir has none to report.
    assert!(m.lt[0].ready > 0.0 && m.lt[0].ready <= m.lt[0].metadata);
    assert!(m.weir[0].ready.is_nan());
    let v = verdict(&m.weir, &m.lt).expect("both fetched");
    assert!(
        v.metadata_ratio.is_finite() && v.metadata_ratio > 0.0,
        "{v:?}"
    );
    assert!(
        v.complete_ratio.is_finite() && v.complete_ratio > 0.0,
        "{v:?}"
    );
    Ok(())
}
