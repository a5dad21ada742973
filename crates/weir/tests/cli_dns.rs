//! No DNS query leaves a run whose network policy does not allow every
//! address: `weir sz --tcp NAME:PORT`, `weir rz --listen NAME:PORT` and
//! `weir get --peer NAME:PORT` run in a namespace whose resolver is a trap
//! (weir_lab::DnsTrap: `/etc/resolv.conf` points at a UDP socket that
//! catches every query). With `--allow any` the same commands do query
//! (the trap works); under a loopback policy nothing arrives and each exits
//! 2 naming the policy.

use std::time::Duration;

use weir_lab::process::run;
use weir_lab::{DnsTrap, Netns, TempDir, ci};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn a_loopback_policy_resolves_no_host_name() -> anyhow::Result<()> {
    if !ci::require_root_and_netns()? {
        return Ok(());
    }
    let dir = TempDir::new("cli-dns")?;
    let file = dir.path().join("f.bin");
    std::fs::write(&file, vec![1u8; 40_000])?;
    let torrent = dir.path().join("f.torrent");
    let o = run(
        std::process::Command::new(WEIR)
            .args(["--allow", "127.0.0.0/8", "create"])
            .arg(&file)
            .arg("-o")
            .arg(&torrent),
        LIMIT,
    )?;
    assert!(o.success(), "{}", o.stderr_text());

    let ns = Netns::new("cli-dns")?;
    let trap = DnsTrap::new(&ns)?;
    let f = file.to_str().unwrap();
    let t = torrent.to_str().unwrap();
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    let cases: [&[&str]; 4] = [
        &["sz", "-q", "--tcp", "trap-host.invalid:9", f],
        &["rz", "-q", "--listen", "trap-host.invalid:0", out],
        &[
            "get",
            t,
            "-o",
            out,
            "-q",
            "--no-trackers",
            "--listen",
            "127.0.0.1:0",
            "--peer",
            "trap-host.invalid:6881",
        ],
        &[
            "get",
            "ed2k://|file|x.bin|10|31D6CFE0D16AE931B73C59D7E0C089C0|/",
            "-o",
            out,
            "-q",
            "--listen",
            "127.0.0.1:0",
            "--peer",
            "trap-host.invalid:4662",
        ],
    ];
    std::fs::create_dir_all(out)?;
    // The control: with every address allowed the name is looked up, and
    // the trap sees the query.
    let o = run(
        ns.command(WEIR)
            .args(["--allow", "any"])
            .args(cases[0])
            .env("WEIR_ED2K_HOME", dir.path()),
        LIMIT,
    )?;
    let caught = trap.queries(Duration::from_secs(2))?;
    assert!(
        caught
            .iter()
            .any(|q| q.windows(9).any(|w| w == b"trap-host")),
        "the trap caught no query under --allow any: {caught:?}\n{}",
        o.stderr_text()
    );
    assert_eq!(o.code(), Some(2), "an unresolvable name is bad input");
    for args in cases {
        let o = run(
            ns.command(WEIR)
                .args(["--allow", "127.0.0.0/8"])
                .args(args)
                .env("WEIR_ED2K_HOME", dir.path()),
            LIMIT,
        )?;
        let err = o.stderr_text();
        let q = trap.queries(Duration::from_millis(300))?;
        assert!(q.is_empty(), "{args:?} sent {} DNS queries: {err}", q.len());
        assert_eq!(o.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("trap-host.invalid") && err.contains("network policy"),
            "{args:?}: {err}"
        );
    }
    Ok(())
}
