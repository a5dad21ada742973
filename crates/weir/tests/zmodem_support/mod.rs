//! Harness for the ZMODEM interop tests: payloads, two programs wired to
//! each other over a socketpair, two pipes, or TCP inside a network
//! namespace (optionally through `weir linkem`), bounded waits, captured
//! stderr. Real programs are found, processes accounted and namespaces made
//! with `weir-lab`.

#![allow(dead_code)]

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

pub(crate) use weir_lab::netns::Netns;
pub(crate) use weir_lab::process::Proc;
pub(crate) use weir_lab::tmpdir::TempDir;

/// The weir binary under test.
pub(crate) fn weir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_weir"))
}

/// lrzsz's `sz` and `rz` are installed (under CI their absence fails).
pub(crate) fn lrzsz_present() -> bool {
    weir_lab::ci::require_program("sz").unwrap() && weir_lab::ci::require_program("rz").unwrap()
}

/// Root and namespaces are available (under CI their absence fails).
pub(crate) fn netns_present() -> bool {
    weir_lab::ci::require_root_and_netns().unwrap()
}

/// Deterministic bytes that exercise the escaper: every byte value, runs of
/// ZDLE/XON/XOFF and their high-bit forms, `@` before CR, header look-alikes,
/// then pseudo-random bytes.
pub(crate) fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 64);
    v.extend(0u8..=255);
    v.extend_from_slice(
        b"@\r@\x8d\xc0\r\x18\x18\x18\x18\x18\x11\x13\x91\x93\x10\x90\x98**\x18B**\x18C",
    );
    let mut rest = vec![0u8; len.saturating_sub(v.len())];
    weir_lab::payload::fill(&mut rest, 0, seed);
    v.extend_from_slice(&rest);
    v.truncate(len);
    v
}

/// One side of a transfer: weir or lrzsz, with its protocol flags.
#[derive(Clone, Debug)]
pub(crate) enum Peer {
    /// `weir sz` / `weir rz` with these flags.
    Weir(Vec<String>),
    /// lrzsz `sz` / `rz` with these flags.
    Lrzsz(Vec<String>),
}

impl Peer {
    pub(crate) fn weir(flags: &[&str]) -> Peer {
        Peer::Weir(flags.iter().map(|s| s.to_string()).collect())
    }

    pub(crate) fn lrzsz(flags: &[&str]) -> Peer {
        Peer::Lrzsz(flags.iter().map(|s| s.to_string()).collect())
    }

    fn name(&self) -> String {
        match self {
            Peer::Weir(f) => format!("weir {}", f.join(" ")),
            Peer::Lrzsz(f) => format!("lrzsz {}", f.join(" ")),
        }
    }
}

/// How the two sides are connected.
#[derive(Clone, Debug)]
pub(crate) enum Wire {
    /// One socketpair: each side's stdin and stdout are its end.
    SocketPair,
    /// Two pipes, one per direction.
    Pipes,
    /// TCP on 127.0.0.1 in `ns`: weir uses `--tcp`/`--listen`, lrzsz gets
    /// a connected socket on stdin/stdout. With `link`, the sender connects
    /// through `weir linkem` started with these extra arguments.
    Tcp {
        port: u16,
        link: Option<Vec<String>>,
    },
}

/// What a session did.
pub(crate) struct Outcome {
    pub(crate) sender: ExitStatus,
    pub(crate) receiver: ExitStatus,
    /// stderr of the weir processes (sender then receiver), for the
    /// retransmission counts they print with -v.
    pub(crate) weir_stderr: String,
    pub(crate) what: String,
}

impl Outcome {
    /// Panics unless both programs exited 0.
    pub(crate) fn assert_success(&self) {
        assert!(
            self.sender.success() && self.receiver.success(),
            "{}: sender {}, receiver {}\n{}",
            self.what,
            self.sender,
            self.receiver,
            self.weir_stderr
        );
    }

    /// The retransmission count a weir side printed with -v.
    pub(crate) fn retransmissions(&self) -> Option<u64> {
        self.weir_stderr.lines().find_map(|l| {
            let l = l.strip_suffix(" retransmissions")?;
            l.rsplit(", ").next()?.parse().ok()
        })
    }
}

/// Captures a child's stderr: echoes it to ours and keeps a copy.
struct Captured {
    text: Arc<Mutex<String>>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Captured {
    fn start(
        reader: impl Read + Send + 'static,
        ready: Option<(&str, std::sync::mpsc::Sender<String>)>,
    ) -> Captured {
        let text = Arc::new(Mutex::new(String::new()));
        let t = Arc::clone(&text);
        let ready = ready.map(|(p, tx)| (p.to_string(), tx));
        let handle = thread::spawn(move || {
            let mut ready = ready;
            for line in BufReader::new(reader).lines() {
                let Ok(line) = line else { break };
                if let Some((prefix, tx)) = &ready {
                    if let Some(rest) = line.strip_prefix(prefix.as_str()) {
                        let _ = tx.send(rest.trim().to_string());
                        ready = None;
                    }
                }
                let _ = writeln!(io::stderr(), "{line}");
                let mut t = t.lock().unwrap();
                t.push_str(&line);
                t.push('\n');
            }
        });
        Captured {
            text,
            handle: Some(handle),
        }
    }

    fn finish(mut self) -> String {
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.text.lock().unwrap().clone()
    }
}

/// A weir command (in `ns` when given) under the loopback-only policy.
fn weir_command(ns: Option<&Netns>, args: &[String]) -> Command {
    let mut c = match ns {
        Some(ns) => ns.command(weir()),
        None => Command::new(weir()),
    };
    c.env("WEIR_ALLOW", "127.0.0.0/8")
        .args(["--allow", "127.0.0.0/8"])
        .args(args);
    c
}

fn lrzsz_command(ns: Option<&Netns>, prog: &str, args: &[String]) -> Command {
    let mut c = match ns {
        Some(ns) => ns.command(prog),
        None => Command::new(prog),
    };
    c.args(args);
    c
}

fn stdio_pair(fd: OwnedFd) -> (Stdio, Stdio) {
    let dup = fd.try_clone().expect("dup");
    (Stdio::from(fd), Stdio::from(dup))
}

/// Runs one transfer of `files` (names in `src`) from `sender` to
/// `receiver` into `dst`, both bounded by `limit`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn transfer(
    ns: Option<&Netns>,
    wire: &Wire,
    sender: &Peer,
    receiver: &Peer,
    files: &[String],
    src: &Path,
    dst: &Path,
    limit: Duration,
) -> Outcome {
    let what = format!("{} -> {} over {wire:?}", sender.name(), receiver.name());
    let dst_s = dst.to_string_lossy().into_owned();
    // Build both commands without their line.
    let mut s_cmd = match sender {
        Peer::Weir(f) => {
            let mut a = vec!["sz".to_string()];
            a.extend(f.iter().cloned());
            weir_command(ns, &a)
        }
        Peer::Lrzsz(f) => lrzsz_command(ns, "sz", f),
    };
    s_cmd.current_dir(src);
    let mut r_cmd = match receiver {
        Peer::Weir(f) => {
            let mut a = vec!["rz".to_string()];
            a.extend(f.iter().cloned());
            weir_command(ns, &a)
        }
        Peer::Lrzsz(f) => lrzsz_command(ns, "rz", f),
    };
    r_cmd.current_dir(dst);
    let (sender_p, receiver_p, mut others, caps) = match wire {
        Wire::SocketPair => {
            let (a, b) = UnixStream::pair().unwrap();
            let ((s_in, s_out), (r_in, r_out)) =
                (stdio_pair(OwnedFd::from(a)), stdio_pair(OwnedFd::from(b)));
            s_cmd.args(files).stdin(s_in).stdout(s_out);
            if matches!(receiver, Peer::Weir(_)) {
                r_cmd.arg(&dst_s);
            }
            r_cmd.stdin(r_in).stdout(r_out);
            let (sp, sc) = spawn_captured("sender", s_cmd, matches!(sender, Peer::Weir(_)), None);
            let (rp, rc) =
                spawn_captured("receiver", r_cmd, matches!(receiver, Peer::Weir(_)), None);
            (sp, rp, Vec::new(), vec![sc, rc])
        }
        Wire::Pipes => {
            // Two pipes: the sender's stdin and stdout, handed to the
            // receiver the other way round.
            s_cmd
                .args(files)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped());
            let (mut sp, sc) =
                spawn_captured("sender", s_cmd, matches!(sender, Peer::Weir(_)), None);
            let to_sender = sp.take_stdin().expect("sender stdin pipe");
            let from_sender = sp.take_stdout().expect("sender stdout pipe");
            if matches!(receiver, Peer::Weir(_)) {
                r_cmd.arg(&dst_s);
            }
            r_cmd
                .stdin(Stdio::from(from_sender))
                .stdout(Stdio::from(to_sender));
            let (rp, rc) =
                spawn_captured("receiver", r_cmd, matches!(receiver, Peer::Weir(_)), None);
            (sp, rp, Vec::new(), vec![sc, rc])
        }
        Wire::Tcp { port, link } => {
            let ns = ns.expect("TCP runs inside a namespace");
            let r_addr: SocketAddr = ([127, 0, 0, 1], *port).into();
            // 1. The receiver, listening at r_addr.
            let (rx_proc, rx_cap, rz_thread) = match receiver {
                Peer::Weir(_) => {
                    r_cmd
                        .args(["--listen", &r_addr.to_string(), &dst_s])
                        .stdin(Stdio::null())
                        .stdout(Stdio::null());
                    let (tx, rx) = std::sync::mpsc::channel();
                    let (p, c) =
                        spawn_captured("receiver", r_cmd, true, Some(("weir: listening on", tx)));
                    rx.recv_timeout(Duration::from_secs(30))
                        .expect("weir rz listening");
                    (Some(p), c, None)
                }
                Peer::Lrzsz(f) => {
                    let l = ns
                        .run_in(|| TcpListener::bind(r_addr))
                        .expect("bind in namespace");
                    let nodelay = f.iter().any(|a| a == "-w");
                    let t = thread::spawn(move || {
                        let (s, _) = l.accept().expect("accept");
                        s.set_nodelay(nodelay).unwrap();
                        let (i, o) = stdio_pair(OwnedFd::from(s));
                        r_cmd.stdin(i).stdout(o);
                        Proc::spawn("rz", &mut r_cmd).expect("spawn rz")
                    });
                    (None, None, Some(t))
                }
            };
            // 2. The link emulator, when asked for.
            let mut others = Vec::new();
            let target = match link {
                None => r_addr,
                Some(extra) => {
                    let l_addr: SocketAddr = ([127, 0, 0, 1], port + 1).into();
                    let mut a: Vec<String> = vec![
                        "linkem".into(),
                        "--listen".into(),
                        l_addr.to_string(),
                        "--connect".into(),
                        r_addr.to_string(),
                    ];
                    a.extend(extra.iter().cloned());
                    let mut c = weir_command(Some(ns), &a);
                    c.stdin(Stdio::null())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::inherit());
                    let mut p = Proc::spawn("linkem", &mut c).expect("spawn linkem");
                    let out = p.take_stdout().expect("linkem stdout");
                    let mut line = String::new();
                    BufReader::new(out)
                        .read_line(&mut line)
                        .expect("linkem ready line");
                    assert!(
                        line.starts_with("linkem listening on"),
                        "linkem said {line:?}"
                    );
                    others.push(p);
                    l_addr
                }
            };
            // 3. The sender, connecting to the target.
            let (sp, sc) = match sender {
                Peer::Weir(_) => {
                    s_cmd
                        .args(["--tcp", &target.to_string()])
                        .args(files)
                        .stdin(Stdio::null())
                        .stdout(Stdio::null());
                    spawn_captured("sender", s_cmd, true, None)
                }
                Peer::Lrzsz(f) => {
                    let s = ns
                        .run_in(|| TcpStream::connect(target))
                        .expect("connect in namespace");
                    s.set_nodelay(f.iter().any(|a| a == "-w")).unwrap();
                    let (i, o) = stdio_pair(OwnedFd::from(s));
                    s_cmd.args(files).stdin(i).stdout(o);
                    spawn_captured("sender", s_cmd, false, None)
                }
            };
            let rp = match (rx_proc, rz_thread) {
                (Some(p), _) => p,
                (None, Some(t)) => t.join().expect("rz accept thread"),
                _ => unreachable!(),
            };
            let mut caps = vec![sc];
            caps.push(rx_cap);
            (sp, rp, others, caps)
        }
    };
    let (mut sp, mut rp) = (sender_p, receiver_p);
    let s_status = wait_or_kill(&mut sp, limit, &what);
    let r_status = wait_or_kill(&mut rp, limit, &what);
    for p in &mut others {
        let _ = p.kill_tree();
    }
    let weir_stderr: String = caps.into_iter().flatten().map(Captured::finish).collect();
    Outcome {
        sender: s_status,
        receiver: r_status,
        weir_stderr,
        what,
    }
}

fn wait_or_kill(p: &mut Proc, limit: Duration, what: &str) -> ExitStatus {
    match p.wait_timeout(limit).expect("wait") {
        Some((st, _)) => st,
        None => {
            let _ = p.kill_tree();
            panic!("{what}: {} still running after {limit:?}", p.name());
        }
    }
}

/// Spawns `cmd`; a weir side's stderr is captured (and echoed), lrzsz's
/// is inherited.
fn spawn_captured(
    name: &str,
    mut cmd: Command,
    capture: bool,
    ready: Option<(&str, std::sync::mpsc::Sender<String>)>,
) -> (Proc, Option<Captured>) {
    if !capture {
        cmd.stderr(Stdio::inherit());
        return (Proc::spawn(name, &mut cmd).expect("spawn"), None);
    }
    // A socketpair carries the child's stderr (a pipe would need Rust 1.87).
    let (r, w) = UnixStream::pair().expect("socketpair");
    cmd.stderr(Stdio::from(OwnedFd::from(w)));
    let p = Proc::spawn(name, &mut cmd).expect("spawn");
    drop(cmd);
    (p, Some(Captured::start(r, ready)))
}

/// Writes `files` into `dir`; returns their names.
pub(crate) fn write_files(dir: &Path, files: &[(String, Vec<u8>)]) -> Vec<String> {
    for (n, d) in files {
        std::fs::write(dir.join(n), d).unwrap();
    }
    files.iter().map(|(n, _)| n.clone()).collect()
}

/// Asserts that every file of `sent` is in `dir` with identical bytes.
pub(crate) fn assert_received(dir: &Path, sent: &[(String, Vec<u8>)], what: &str) {
    for (name, data) in sent {
        let got = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{what}: {name}: {e}"));
        assert!(
            got == *data,
            "{what}: {name} differs ({} bytes received, {} sent)",
            got.len(),
            data.len()
        );
    }
}
