//! `weir rz` as the built binary against a scripted ZMODEM sender (weir's
//! own sender core, driven by the test over the child's stdin and stdout):
//! a ZFILE whose modification time overflows a `SystemTime` (it made `weir
//! rz` panic with exit 101) and a sender's 0777 mode, which must come out
//! under the receiver's umask.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use weir_lab::{Proc, TempDir};
use weir_zmodem::{FileOffer, Sender, SenderConfig};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// Drives `s` over the child's stdin/stdout until the sender is done, for
/// at most `limit`.
fn drive(p: &mut Proc, mut s: Sender, files: &[Vec<u8>], limit: Duration) {
    let mut stdin = p.take_stdin().expect("stdin piped");
    let mut stdout = p.take_stdout().expect("stdout piped");
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + limit;
    while !s.is_done() {
        assert!(Instant::now() < deadline, "the session took over {limit:?}");
        while let Some(req) = s.poll_data_request() {
            let f = &files[req.file];
            let end = (req.offset as usize + req.len).min(f.len());
            s.supply_data(
                Instant::now(),
                req.file,
                req.offset,
                &f[req.offset as usize..end],
            )
            .unwrap();
        }
        let out = s.pending_output().to_vec();
        stdin.write_all(&out).expect("weir rz closed its stdin");
        s.consume_output(out.len());
        if s.is_done() || s.poll_data_request().is_some() {
            continue;
        }
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(b) => s.handle_input(Instant::now(), &b).unwrap(),
            Err(mpsc::RecvTimeoutError::Timeout) => s.handle_timeout(Instant::now()).unwrap(),
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("weir rz closed its stdout"),
        }
    }
}

#[test]
fn rz_survives_an_overflowing_mtime_and_applies_the_mode_under_the_umask() {
    let dir = TempDir::new("cli-rz").unwrap();
    let files = vec![vec![0x5au8; 3000], b"#!/bin/sh\necho hi\n".to_vec()];
    let offers = vec![
        FileOffer {
            name: b"far-future.bin".to_vec(),
            size: files[0].len() as u64,
            mtime: u64::MAX,
            mode: 0o100644,
        },
        FileOffer {
            name: b"open.sh".to_vec(),
            size: files[1].len() as u64,
            mtime: 1_700_000_000,
            mode: 0o100777,
        },
    ];
    // The umask is set for the child alone (this process's is shared by
    // every test thread).
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        "umask 027; exec \"$0\" --allow 127.0.0.0/8 rz -q \"$1\"",
    ])
    .arg(WEIR)
    .arg(dir.path())
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut p = Proc::spawn("weir rz", &mut cmd).unwrap();
    let stderr = p.take_stderr().unwrap();
    let err_text = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = { stderr }.read_to_string(&mut s);
        s
    });
    let s = Sender::new(SenderConfig::default(), offers, Instant::now()).unwrap();
    drive(&mut p, s, &files, Duration::from_secs(60));
    let status = match p.wait_timeout(Duration::from_secs(30)).unwrap() {
        Some((st, _)) => st,
        None => {
            p.kill_tree().unwrap();
            panic!("weir rz did not exit after the session");
        }
    };
    let err = err_text.join().unwrap();
    assert_eq!(status.code(), Some(0), "weir rz: {status}\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        std::fs::read(dir.path().join("far-future.bin")).unwrap(),
        files[0]
    );
    let mode = std::fs::metadata(dir.path().join("open.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o750, "0777 under umask 027: {mode:o}");
    let t = std::fs::metadata(dir.path().join("open.sh"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(
        t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs(),
        1_700_000_000,
        "a valid time is still applied"
    );
}

/// `weir rz` and `weir sz` on pipes whose other end says nothing: SIGINT
/// and SIGTERM stop them cleanly, telling the other side (the cancel
/// sequence, CAN x10, ends their output) and exiting 130 / 143 (a signal
/// used to end them where they stood).
#[test]
fn signals_cancel_the_session_and_exit_130_or_143() {
    let dir = TempDir::new("cli-zm-sig").unwrap();
    let file = dir.path().join("f.bin");
    std::fs::write(&file, vec![3u8; 10_000]).unwrap();
    for (what, sig, code) in [
        ("rz", weir_lab::process::Signal::SIGINT, 130),
        ("sz", weir_lab::process::Signal::SIGTERM, 143),
    ] {
        let mut cmd = Command::new(WEIR);
        cmd.args(["--allow", "127.0.0.0/8", what, "-q"]);
        if what == "rz" {
            cmd.arg(dir.path());
        } else {
            cmd.arg(&file);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut p = Proc::spawn(what, &mut cmd).unwrap();
        let _stdin = p.take_stdin(); // kept open: the line stays up
        let mut stdout = p.take_stdout().unwrap();
        // Its opening frame (ZRINIT / "rz\r" and ZRQINIT) shows the
        // session is up.
        let mut seen = Vec::new();
        while !seen.windows(4).any(|w| w == b"**\x18B") {
            let mut b = [0u8; 64];
            let n = stdout.read(&mut b).unwrap();
            assert!(n > 0 && seen.len() < 4096, "{what}: no header: {seen:?}");
            seen.extend_from_slice(&b[..n]);
        }
        let rest = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = stdout.read_to_end(&mut v);
            v
        });
        p.signal(sig).unwrap();
        let Some((st, _)) = p.wait_timeout(Duration::from_secs(30)).unwrap() else {
            p.kill_tree().unwrap();
            panic!("{what} still running 30 s after {sig}");
        };
        let mut err = String::new();
        let _ = p.take_stderr().unwrap().read_to_string(&mut err);
        assert_eq!(st.code(), Some(code), "{what}: {st}: {err}");
        assert!(err.contains("stopped by signal"), "{what}: {err}");
        let out = rest.join().unwrap();
        let cans = out.windows(10).any(|w| w == [0x18; 10]);
        assert!(cans, "{what}: the other side was not told: {out:?}");
    }
}
