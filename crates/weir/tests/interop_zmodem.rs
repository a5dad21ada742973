//! ZMODEM interop with lrzsz (`sz`/`rz`, Debian's names).
//!
//! - `weir sz` -> `rz` and `sz` -> `weir rz`, over a socketpair, over pipes
//!   and over TCP on 127.0.0.1 inside a network namespace, in streaming,
//!   windowed (`-w 32768`), CRC-16 and escape-all modes, single files and a
//!   batch of three including an empty one: files byte-identical, both
//!   programs exit 0.
//! - The error-recovery gate: through `weir linkem` corrupting 3 bytes of a
//!   64 MiB transfer (different offsets every run), 5/5 runs byte-identical
//!   for `weir sz` -> `rz`, `sz` -> `weir rz` and weir -> weir, and 3/3 per
//!   direction over an emulated 25 ms round trip.
//!
//! Without lrzsz, root or namespace support the tests skip, except under
//! env `CI`, where they fail.

mod zmodem_support;

use std::time::{Duration, Instant};

use zmodem_support::*;

/// A protocol mode: flags for weir sz, lrzsz rz, lrzsz sz and weir rz.
struct Mode {
    name: &'static str,
    weir_sz: &'static [&'static str],
    lrz: &'static [&'static str],
    lsz: &'static [&'static str],
    weir_rz: &'static [&'static str],
}

const MODES: &[Mode] = &[
    Mode {
        name: "streaming",
        weir_sz: &[],
        lrz: &[],
        lsz: &[],
        weir_rz: &[],
    },
    Mode {
        name: "window",
        weir_sz: &["-w", "32768"],
        lrz: &[],
        lsz: &["-w", "32768"],
        weir_rz: &[],
    },
    Mode {
        name: "crc16",
        weir_sz: &["-o"],
        lrz: &[],
        lsz: &["-o"],
        weir_rz: &["-o"],
    },
    Mode {
        name: "escape-tx",
        weir_sz: &["-e"],
        lrz: &[],
        lsz: &["-e"],
        weir_rz: &[],
    },
    Mode {
        name: "escape-rx",
        weir_sz: &[],
        lrz: &["-e"],
        lsz: &[],
        weir_rz: &["-e"],
    },
];

const LIMIT: Duration = Duration::from_secs(120);

fn with_quiet(flags: &[&'static str]) -> Vec<&'static str> {
    let mut v = vec!["-q"];
    v.extend_from_slice(flags);
    v
}

fn files(batch: bool) -> Vec<(String, Vec<u8>)> {
    let mut v = vec![("big.bin".to_string(), payload(3 * 1024 * 1024 + 777, 1))];
    if batch {
        v.push(("empty.bin".to_string(), Vec::new()));
        v.push(("small.bin".to_string(), payload(100_003, 2)));
    }
    v
}

/// Every mode, single file and batch, in both directions over `wire`.
fn both_directions(ns: Option<&Netns>, wire: impl Fn(usize) -> Wire) {
    let mut k = 0;
    for m in MODES {
        for batch in [false, true] {
            for weir_sends in [true, false] {
                let src = TempDir::new("zm-src").unwrap();
                let dst = TempDir::new("zm-dst").unwrap();
                let sent = files(batch);
                let names = write_files(src.path(), &sent);
                let (s, r) = if weir_sends {
                    (
                        Peer::weir(&with_quiet(m.weir_sz)),
                        Peer::lrzsz(&with_quiet(m.lrz)),
                    )
                } else {
                    (
                        Peer::lrzsz(&with_quiet(m.lsz)),
                        Peer::weir(&with_quiet(m.weir_rz)),
                    )
                };
                let o = transfer(ns, &wire(k), &s, &r, &names, src.path(), dst.path(), LIMIT);
                k += 1;
                o.assert_success();
                assert_received(dst.path(), &sent, &format!("{} ({})", o.what, m.name));
            }
        }
    }
}

#[test]
fn lrzsz_over_socketpair() {
    if !lrzsz_present() {
        return;
    }
    both_directions(None, |_| Wire::SocketPair);
}

#[test]
fn lrzsz_over_pipes() {
    if !lrzsz_present() {
        return;
    }
    both_directions(None, |_| Wire::Pipes);
}

#[test]
fn lrzsz_over_tcp() {
    if !lrzsz_present() || !netns_present() {
        return;
    }
    let ns = Netns::new("zm-tcp").unwrap();
    both_directions(Some(&ns), |k| Wire::Tcp {
        port: 20_000 + 2 * k as u16,
        link: None,
    });
}

#[test]
fn weir_to_weir_every_mode_and_wire() {
    let ns = netns_present().then(|| Netns::new("zm-ww").unwrap());
    for (i, m) in MODES.iter().enumerate() {
        let mut wires = vec![Wire::SocketPair, Wire::Pipes];
        if ns.is_some() {
            wires.push(Wire::Tcp {
                port: 21_000 + 2 * i as u16,
                link: None,
            });
        }
        for wire in wires {
            let src = TempDir::new("zm-src").unwrap();
            let dst = TempDir::new("zm-dst").unwrap();
            let sent = files(true);
            let names = write_files(src.path(), &sent);
            let s = Peer::weir(&with_quiet(m.weir_sz));
            let r = Peer::weir(&with_quiet(m.weir_rz));
            let o = transfer(
                ns.as_ref(),
                &wire,
                &s,
                &r,
                &names,
                src.path(),
                dst.path(),
                LIMIT,
            );
            o.assert_success();
            assert_received(dst.path(), &sent, &format!("{} ({})", o.what, m.name));
        }
    }
}

#[test]
fn resume_a_partial_file_both_ways() {
    if !lrzsz_present() {
        return;
    }
    for weir_sends in [true, false] {
        let src = TempDir::new("zm-src").unwrap();
        let dst = TempDir::new("zm-dst").unwrap();
        let sent = files(false);
        let names = write_files(src.path(), &sent);
        // A partial copy from an earlier, interrupted transfer.
        let keep = 1_000_000;
        std::fs::write(dst.path().join(&names[0]), &sent[0].1[..keep]).unwrap();
        let (s, r, at) = if weir_sends {
            // rz resumes at a 1 KiB boundary.
            (Peer::weir(&["-r"]), Peer::lrzsz(&["-q"]), keep & !1023)
        } else {
            (Peer::lrzsz(&["-q", "-r"]), Peer::weir(&[]), keep)
        };
        let wire = Wire::SocketPair;
        let o = transfer(None, &wire, &s, &r, &names, src.path(), dst.path(), LIMIT);
        o.assert_success();
        assert_received(dst.path(), &sent, &format!("resume: {}", o.what));
        assert!(
            o.weir_stderr.contains(&format!("resuming at {at}")),
            "{}: did not resume at {at}:\n{}",
            o.what,
            o.weir_stderr
        );
    }
}

#[test]
fn a_file_over_4_gib_is_refused_before_anything_is_sent() {
    let src = TempDir::new("zm-big").unwrap();
    let big = src.path().join("big.img");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(5 << 30).unwrap(); // sparse
    let out = weir_lab::process::run(
        std::process::Command::new(weir())
            .env("WEIR_ALLOW", "127.0.0.0/8")
            .args(["sz", "-q"])
            .arg(&big),
        Duration::from_secs(60),
    )
    .unwrap();
    assert_eq!(out.code(), Some(2), "exit code for bad input");
    assert!(out.stdout.is_empty(), "nothing was sent on the line");
    let err = out.stderr_text();
    assert!(
        err.contains("4294967295") && err.contains("32-bit"),
        "{err}"
    );
}

// ---- the error-recovery gate ---------------------------------------------

const GATE_SIZE: usize = 64 * 1024 * 1024;
const GATE_LIMIT: Duration = Duration::from_secs(240);

#[derive(Clone, Copy, Debug)]
enum Dir {
    WeirToRz,
    SzToWeir,
    WeirToWeir,
}

/// Runs `runs` corrupted 64 MiB transfers in `dir`; each must arrive
/// byte-identical with both exit codes 0, after at least one retransmission
/// (the corruption happened and was recovered from).
fn gate(dir: Dir, runs: u64, delay: Option<&str>, seed_base: u64, port_base: u16) {
    if !netns_present() {
        return;
    }
    if !matches!(dir, Dir::WeirToWeir) && !lrzsz_present() {
        return;
    }
    let ns = Netns::new("zm-gate").unwrap();
    let src = TempDir::new("zm-gate-src").unwrap();
    let data = payload(GATE_SIZE, 64);
    std::fs::write(src.path().join("gate.bin"), &data).unwrap();
    let names = vec!["gate.bin".to_string()];
    let (s, r) = match dir {
        Dir::WeirToRz => (Peer::weir(&["-v"]), Peer::lrzsz(&["-q"])),
        Dir::SzToWeir => (Peer::lrzsz(&["-q"]), Peer::weir(&["-v"])),
        Dir::WeirToWeir => (Peer::weir(&["-q"]), Peer::weir(&["-v"])),
    };
    let started = Instant::now();
    for run in 0..runs {
        let dst = TempDir::new("zm-gate-dst").unwrap();
        let seed = seed_base + run;
        let mut link: Vec<String> = vec![
            "--corrupt-random".into(),
            "3".into(),
            "--seed".into(),
            seed.to_string(),
            "--corrupt-span".into(),
            GATE_SIZE.to_string(),
        ];
        if let Some(d) = delay {
            link.extend(["--delay".to_string(), d.to_string()]);
        }
        let wire = Wire::Tcp {
            port: port_base + 2 * run as u16,
            link: Some(link),
        };
        let t = Instant::now();
        let o = transfer(
            Some(&ns),
            &wire,
            &s,
            &r,
            &names,
            src.path(),
            dst.path(),
            GATE_LIMIT,
        );
        o.assert_success();
        let got = std::fs::read(dst.path().join("gate.bin")).unwrap();
        assert!(got == data, "{dir:?} run {run} (seed {seed}): file differs");
        let re = o.retransmissions();
        assert!(
            re.is_some_and(|n| n >= 1),
            "{dir:?} run {run}: expected retransmissions after corruption, weir said {re:?}"
        );
        eprintln!(
            "gate {dir:?} delay {delay:?} run {}/{runs} seed {seed}: ok in {:.1} s, {} retransmissions",
            run + 1,
            t.elapsed().as_secs_f64(),
            re.unwrap_or(0)
        );
    }
    eprintln!(
        "gate {dir:?} delay {delay:?}: {runs}/{runs} byte-identical in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn gate_weir_sz_to_lrzsz_rz() {
    gate(Dir::WeirToRz, 5, None, 100, 30_000);
}

#[test]
fn gate_lrzsz_sz_to_weir_rz() {
    gate(Dir::SzToWeir, 5, None, 200, 31_000);
}

#[test]
fn gate_weir_to_weir() {
    gate(Dir::WeirToWeir, 5, None, 300, 32_000);
}

#[test]
fn gate_25ms_rtt_weir_sz_to_lrzsz_rz() {
    gate(Dir::WeirToRz, 3, Some("12500us"), 400, 33_000);
}

#[test]
fn gate_25ms_rtt_lrzsz_sz_to_weir_rz() {
    gate(Dir::SzToWeir, 3, Some("12500us"), 500, 34_000);
}

#[test]
fn gate_25ms_rtt_weir_to_weir() {
    gate(Dir::WeirToWeir, 3, Some("12500us"), 600, 35_000);
}
