//! The web page in Debian's Chromium, driven by playwright-core (npm,
//! `webtest/`): lists 1,000 transfers, adds a .torrent by upload, pauses
//! and removes, sets the global caps. Chromium runs in a lo-only namespace
//! and the script aborts any request not for the server.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Harness, make_torrent, run_bounded};
use weir_daemon::backend::{SpeedLimit, TransferState};

const ROWS: usize = 1000;

#[test]
fn web_page_in_chromium() -> anyhow::Result<()> {
    let webtest = Path::new(env!("CARGO_MANIFEST_DIR")).join("webtest");
    for (what, ok) in [
        ("node", weir_lab::ci::find_program("node").is_some()),
        ("/usr/bin/chromium", Path::new("/usr/bin/chromium").exists()),
        (
            "playwright-core (npm ci in crates/weir-daemon/webtest)",
            webtest.join("node_modules/playwright-core").exists(),
        ),
    ] {
        if !ok {
            weir_lab::ci::unavailable(&format!("{what} is not installed"))?;
            return Ok(());
        }
    }
    let Some(h) = Harness::start("rpc-browser")? else {
        return Ok(());
    };
    h.backend.insert_synthetic(ROWS);
    let (torrent, _) = make_torrent(h.dir.path(), "uploaded.bin", &[("", 400_000)])?;
    let profile = h.dir.subdir("chromium-profile")?;
    let mut c = h.ns.command("node");
    c.arg(webtest.join("page.mjs"))
        .current_dir(&webtest)
        .env("WEIR_URL", format!("http://{}/", h.addr))
        .env("WEIR_TORRENT", &torrent)
        .env("WEIR_TORRENT_NAME", "uploaded.bin")
        .env("WEIR_EXPECT_ROWS", ROWS.to_string())
        .env("WEIR_PROFILE", &profile)
        .env("HOME", h.dir.path());
    let out = run_bounded(c, h.dir.path(), Duration::from_secs(180))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().last() == Some("OK"),
        "the page test failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{stdout}");
    // What the clicks did, seen from the backend.
    assert!(h.backend.view(1).is_none(), "1 removed");
    assert_eq!(h.backend.view(2).unwrap().state, TransferState::Stopped);
    assert_eq!(h.backend.len(), ROWS - 1);
    assert!(!h.downloads().join("uploaded.bin").exists(), "data deleted");
    let s = h.backend.settings();
    assert_eq!(
        s.speed_limit_down,
        SpeedLimit {
            kbps: 123,
            enabled: true
        }
    );
    assert_eq!(
        s.speed_limit_up,
        SpeedLimit {
            kbps: 45,
            enabled: true
        }
    );
    Ok(())
}
