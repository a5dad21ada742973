//! `weir get` / `weir seed` exit codes and messages as the built binary:
//! bad input exits 2 naming the problem, a finished download exits 0, a
//! complete download run again starts complete from its resume journal
//! (nothing fetched, no peer needed); no way to find peers is said at once
//! and ends in exit 2; Ctrl-C and SIGTERM stop cleanly with 130 and 143; a
//! taken `--listen` port is refused once, the default one moves; log lines
//! carry colour codes only on a terminal. Every run has a time limit.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use weir_lab::process::{Output, Proc, Signal, run};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");
const LIMIT: Duration = Duration::from_secs(60);

fn weir_cmd(args: &[&str], cwd: &Path) -> Command {
    let mut c = Command::new(WEIR);
    c.args(args)
        .current_dir(cwd)
        .env("WEIR_ALLOW", "loopback")
        .env("WEIR_ED2K_HOME", cwd.join(".ed2k-home"));
    c
}

fn weir(args: &[&str], cwd: &Path) -> Output {
    run(&mut weir_cmd(args, cwd), LIMIT).expect("run weir")
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("weir-cli-get-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn stderr(o: &Output) -> String {
    o.stderr_text()
}

/// A 100 kB file and a torrent of it with no tracker (`ok.torrent`) and
/// one with a tracker that answers nothing (`tracked.torrent`), in `d`.
fn torrent(d: &Path) -> PathBuf {
    fs::write(d.join("f.bin"), vec![7u8; 100_000]).unwrap();
    let t = d.join("ok.torrent");
    let o = weir(&["create", "f.bin", "-o", t.to_str().unwrap()], d);
    assert!(o.success(), "{}", stderr(&o));
    let o = weir(
        &[
            "create",
            "f.bin",
            "-o",
            "tracked.torrent",
            "-t",
            "http://127.0.0.1:1/announce",
        ],
        d,
    );
    assert!(o.success(), "{}", stderr(&o));
    t
}

/// Whether `text` holds an SGR (colour) escape sequence, `ESC [ ... m`.
fn has_colour(text: &str) -> bool {
    text.split('\x1b').skip(1).any(|rest| {
        rest.strip_prefix('[').is_some_and(|r| {
            let end = r.find(|c: char| !(c.is_ascii_digit() || c == ';'));
            end.is_some_and(|i| r[i..].starts_with('m'))
        })
    })
}

/// Waits until `p`'s stderr log holds `what`.
fn wait_stderr(p: &mut Proc, what: &str, limit: Duration) -> String {
    let log = p.stderr_log().unwrap().to_path_buf();
    let deadline = Instant::now() + limit;
    loop {
        let text = fs::read_to_string(&log).unwrap_or_default();
        if text.contains(what) {
            return text;
        }
        if Instant::now() > deadline || !p.is_running() {
            panic!("{}", p.failure(&format!("no {what:?} on stderr")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bad_input_exits_2_naming_the_problem() {
    let s = Scratch::new("bad");
    let d = &s.0;
    fs::write(d.join("junk.torrent"), b"d4:infoi3ee").unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["get", "missing.torrent"],
            "cannot read missing.torrent",
        ),
        (
            vec!["get", "junk.torrent"],
            "junk.torrent is not a usable torrent",
        ),
        (
            vec!["seed", "junk.torrent", "."],
            "junk.torrent is not a usable torrent",
        ),
        (
            vec!["--allow", "10.0.0.0/99", "get", "junk.torrent"],
            "--allow",
        ),
    ];
    for (args, want) in cases {
        let o = weir(&args, d);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
    // A rate that is not one.
    torrent(d);
    let o = weir(
        &["get", "ok.torrent", "--max-down", "fast", "--no-trackers"],
        d,
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--max-down"), "{}", stderr(&o));
}

#[test]
fn a_complete_download_restarts_complete_from_resume_data() {
    let s = Scratch::new("resume");
    let d = &s.0;
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 31 + i / 7) as u8).collect();
    fs::create_dir_all(d.join("src")).unwrap();
    fs::write(d.join("src/f.bin"), &data).unwrap();
    let o = weir(&["create", "src/f.bin", "-o", "f.torrent"], d);
    assert!(o.status.success(), "{}", stderr(&o));
    // Seeding the source checks it (no resume journal yet) and completes at
    // once; `get` into the same directory then has nothing to fetch.
    let o = weir(
        &[
            "get",
            "f.torrent",
            "-o",
            "src",
            "--no-trackers",
            "--listen",
            "127.0.0.1:0",
            "-q",
        ],
        d,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The check left a journal: this run trusts it and fetches nothing
    // (there is no peer to fetch from).
    let journal = fs::read_dir(d.join("src"))
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| e.file_name().to_string_lossy().starts_with(".weir-resume-"));
    assert!(journal, "no resume journal written");
    let o = weir(
        &[
            "get",
            "f.torrent",
            "-o",
            "src",
            "--no-trackers",
            "--listen",
            "127.0.0.1:0",
            "-q",
        ],
        d,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(fs::read(d.join("src/f.bin")).unwrap(), data);
}

#[test]
fn colour_codes_are_recognised() {
    assert!(has_colour("a \x1b[2m2026\x1b[0m \x1b[32m INFO\x1b[0m"));
    assert!(!has_colour("bar \r\x1b[2K\x1b[1A done"));
}

#[test]
fn no_way_to_find_peers_is_said_at_once_and_ends_in_exit_2() {
    let s = Scratch::new("nopeers");
    let d = &s.0;
    torrent(d);
    let cases: [(&[&str], &str); 3] = [
        (&["get", "ok.torrent", "-o", "out"], "lists no tracker"),
        (
            &["get", "tracked.torrent", "-o", "out", "--no-trackers"],
            "--no-trackers was given",
        ),
        (
            &[
                "get",
                "ed2k://|file|x.bin|1000|31D6CFE0D16AE931B73C59D7E0C089C0|/",
                "-o",
                "out",
            ],
            "the link names no source",
        ),
    ];
    for (args, why) in cases {
        let mut a = args.to_vec();
        a.extend(["--listen", "127.0.0.1:0", "--peer-wait", "2", "-q"]);
        let t = Instant::now();
        let o = weir(&a, d);
        let err = stderr(&o);
        assert_eq!(o.code(), Some(2), "{args:?}: {err}");
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{args:?}: {:?}",
            t.elapsed()
        );
        assert!(
            err.contains("no way to find peers") && err.contains(why),
            "{args:?}: said at once what is wrong: {err}"
        );
        assert!(
            err.contains("no peer connected in 2 s") && err.contains("give --peer HOST:PORT"),
            "{args:?}: and what to do: {err}"
        );
    }
}

#[test]
fn sigint_and_sigterm_stop_cleanly_with_130_and_143() {
    let s = Scratch::new("signals");
    let d = &s.0;
    torrent(d);
    for (sig, code) in [(Signal::SIGINT, 130), (Signal::SIGTERM, 143)] {
        let mut cmd = weir_cmd(
            &[
                "get",
                "ok.torrent",
                "-o",
                "out",
                "--no-trackers",
                "--listen",
                "127.0.0.1:0",
                "--peer-wait",
                "0",
            ],
            d,
        );
        let mut p = Proc::spawn_logged("weir get", &mut cmd, d).unwrap();
        // Running and waiting for a peer: past start-up.
        wait_stderr(&mut p, "no way to find peers", LIMIT);
        p.signal(sig).unwrap();
        let Some((st, _)) = p.wait_timeout(LIMIT).unwrap() else {
            panic!("{}", p.failure(&format!("still running after {sig}")));
        };
        let err = fs::read_to_string(p.stderr_log().unwrap()).unwrap();
        assert_eq!(st.code(), Some(code), "{sig}: {st}\n{err}");
        assert!(
            err.contains("stopping") && err.contains("stopped at 0.0%"),
            "{sig}: a clean stop: {err}"
        );
    }
}

#[test]
fn an_explicit_listen_port_in_use_is_refused_saying_why_once() {
    let s = Scratch::new("inuse");
    let d = &s.0;
    torrent(d);
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    for args in [
        vec!["get", "ok.torrent", "--no-trackers", "--listen", &addr],
        vec!["seed", "--ed2k", "f.bin", "--listen", &addr],
        vec!["ed2k-server", "--listen", &addr],
        vec!["linkem", "--listen", &addr, "--connect", "127.0.0.1:9"],
    ] {
        let o = weir(&args, d);
        let err = stderr(&o);
        assert_eq!(o.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&format!("--listen {addr}")) && err.contains("choose another"),
            "{args:?}: {err}"
        );
        assert_eq!(
            err.matches("in use").count(),
            1,
            "{args:?}: said once: {err}"
        );
    }
}

#[test]
fn the_default_port_moves_to_a_free_one_and_says_so() -> anyhow::Result<()> {
    if !weir_lab::ci::require_root_and_netns()? {
        return Ok(());
    }
    let s = Scratch::new("defport");
    let d = &s.0;
    torrent(d);
    // In a namespace of its own, 6881 is this test's to take.
    let ns = weir_lab::Netns::new("defport")?;
    let _held = ns.run_in(|| std::net::TcpListener::bind("0.0.0.0:6881"))?;
    let mut cmd = ns.command(WEIR);
    cmd.args(["get", "ok.torrent", "-o", "out", "--peer-wait", "1"])
        .current_dir(d)
        .env("WEIR_ALLOW", "loopback");
    let o = run(&mut cmd, LIMIT)?;
    let err = o.stderr_text();
    assert!(
        err.contains("port 6881 is in use; listening on port 6882 instead"),
        "{err}"
    );
    assert!(err.contains("listening on 0.0.0.0:6882"), "{err}");
    // It ran (and gave up on peers), it did not fail on the port.
    assert_eq!(o.code(), Some(2), "{err}");
    assert!(err.contains("no peer connected"), "{err}");
    Ok(())
}

#[test]
fn log_lines_are_coloured_only_on_a_terminal() {
    let s = Scratch::new("colour");
    let d = &s.0;
    torrent(d);
    let args = [
        "get",
        "ok.torrent",
        "-o",
        "out",
        "--listen",
        "127.0.0.1:0",
        "--peer-wait",
        "1",
    ];
    // A pipe: plain text.
    let o = weir(&args, d);
    let err = stderr(&o);
    assert!(err.contains("listening on 127.0.0.1:"), "{err}");
    assert!(!err.contains('\x1b'), "escape codes on a pipe: {err:?}");
    // A terminal (script(1) gives weir a pty): colour, unless NO_COLOR.
    if !weir_lab::ci::require_program("script").unwrap() {
        return;
    }
    let line = format!("{WEIR} {} 2>&1", args.join(" "));
    for (no_color, want) in [(None, true), (Some("1"), false)] {
        let mut c = Command::new("script");
        c.args(["-qec", &line, "/dev/null"])
            .current_dir(d)
            .env("WEIR_ALLOW", "loopback")
            .env("TERM", "xterm")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null());
        if let Some(v) = no_color {
            c.env("NO_COLOR", v);
        }
        let o = run(&mut c, LIMIT).unwrap();
        let text = o.stdout_text();
        assert!(text.contains("listening on 127.0.0.1:"), "{text}");
        assert_eq!(has_colour(&text), want, "NO_COLOR={no_color:?}: {text:?}");
    }
}
