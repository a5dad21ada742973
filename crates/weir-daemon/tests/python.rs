//! The `transmission-rpc` Python library (PyPI; scripts/test.sh installs it)
//! against the server with the fake backend, in a lo-only namespace.

mod common;

use std::time::Duration;

use common::{Harness, make_torrent, run_bounded};

#[test]
fn transmission_rpc_library() -> anyhow::Result<()> {
    let Some(h) = Harness::start("rpc-python")? else {
        return Ok(());
    };
    let mut probe = std::process::Command::new("python3");
    probe.args(["-c", "import transmission_rpc"]);
    let ok = run_bounded(probe, h.dir.path(), Duration::from_secs(30))?
        .status
        .success();
    if !ok {
        weir_lab::ci::unavailable("the transmission-rpc Python library is not installed")?;
        return Ok(());
    }
    let (torrent, info) = make_torrent(h.dir.path(), "py.bin", &[("", 700_000)])?;
    let data = h.downloads().join("py.bin");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/trpc_check.py");
    let mut c = h.ns.command("python3");
    c.arg(script)
        .arg(h.addr.ip().to_string())
        .arg(h.addr.port().to_string())
        .arg(&torrent)
        .arg(info.info_hash_hex())
        .arg("py.bin")
        .arg(&data);
    let out = run_bounded(c, h.dir.path(), Duration::from_secs(60))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().last() == Some("OK"),
        "python failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // What the library did, seen from the backend.
    assert_eq!(h.backend.len(), 1, "only the magnet is left");
    let magnet = h.backend.view(2).expect("the magnet transfer");
    assert_eq!(&*magnet.name, "from python");
    assert!(!data.exists());
    Ok(())
}
