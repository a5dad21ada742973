//! ZMODEM interop with lrzsz (`sz`/`rz`, Debian's names): `weir sz` -> `rz`
//! and `sz` -> `weir rz`, over a socketpair and over pipes, in streaming,
//! windowed (`-w 32768`), CRC-16 and escape-all modes, single files and a
//! batch of three including an empty one. Files must be byte-identical and
//! both programs must exit 0.

mod zmodem_support;

use std::time::Duration;

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

fn files(dir: &TempDir, batch: bool) -> Vec<(String, Vec<u8>)> {
    let mut v = vec![("big.bin".to_string(), payload(3 * 1024 * 1024 + 777, 1))];
    if batch {
        v.push(("empty.bin".to_string(), Vec::new()));
        v.push(("small.bin".to_string(), payload(100_003, 2)));
    }
    for (n, d) in &v {
        std::fs::write(dir.path().join(n), d).unwrap();
    }
    v
}

fn lrzsz_present() -> bool {
    require(have("sz") && have("rz"), "lrzsz (sz, rz)")
}

fn weir_to_rz(wire: Wire, mode: &Mode, batch: bool) {
    let src = TempDir::new("src");
    let dst = TempDir::new("dst");
    let sent = files(&src, batch);
    let mut args: Vec<&str> = vec!["sz", "-q"];
    args.extend_from_slice(mode.weir_sz);
    let names: Vec<String> = sent.iter().map(|(n, _)| n.clone()).collect();
    let mut s = weir_cmd(&args);
    s.args(&names).current_dir(src.path());
    let mut r = std::process::Command::new("rz");
    r.arg("-q").args(mode.lrz).current_dir(dst.path());
    let what = format!(
        "weir sz {:?} -> rz {:?} over {wire:?}",
        mode.weir_sz, mode.lrz
    );
    let (ss, rs) = run_pair(wire, s, r, LIMIT);
    assert!(
        ss.success() && rs.success(),
        "{what}: sender {ss}, receiver {rs}"
    );
    assert_received(dst.path(), &sent, &what);
}

fn sz_to_weir(wire: Wire, mode: &Mode, batch: bool) {
    let src = TempDir::new("src");
    let dst = TempDir::new("dst");
    let sent = files(&src, batch);
    let names: Vec<String> = sent.iter().map(|(n, _)| n.clone()).collect();
    let mut s = std::process::Command::new("sz");
    s.arg("-q")
        .args(mode.lsz)
        .args(&names)
        .current_dir(src.path());
    let mut args: Vec<&str> = vec!["rz", "-q"];
    args.extend_from_slice(mode.weir_rz);
    let mut r = weir_cmd(&args);
    r.arg(dst.path());
    let what = format!(
        "sz {:?} -> weir rz {:?} over {wire:?}",
        mode.lsz, mode.weir_rz
    );
    let (ss, rs) = run_pair(wire, s, r, LIMIT);
    assert!(
        ss.success() && rs.success(),
        "{what}: sender {ss}, receiver {rs}"
    );
    assert_received(dst.path(), &sent, &what);
}

#[test]
fn weir_sz_to_lrzsz_rz_socketpair() {
    if !lrzsz_present() {
        return;
    }
    for m in MODES {
        for batch in [false, true] {
            weir_to_rz(Wire::SocketPair, m, batch);
        }
    }
}

#[test]
fn weir_sz_to_lrzsz_rz_pipes() {
    if !lrzsz_present() {
        return;
    }
    for m in MODES {
        for batch in [false, true] {
            weir_to_rz(Wire::Pipes, m, batch);
        }
    }
}

#[test]
fn lrzsz_sz_to_weir_rz_socketpair() {
    if !lrzsz_present() {
        return;
    }
    for m in MODES {
        for batch in [false, true] {
            sz_to_weir(Wire::SocketPair, m, batch);
        }
    }
}

#[test]
fn lrzsz_sz_to_weir_rz_pipes() {
    if !lrzsz_present() {
        return;
    }
    for m in MODES {
        for batch in [false, true] {
            sz_to_weir(Wire::Pipes, m, batch);
        }
    }
}

#[test]
fn weir_to_weir_all_modes() {
    for m in MODES {
        let src = TempDir::new("src");
        let dst = TempDir::new("dst");
        let sent = files(&src, true);
        let names: Vec<String> = sent.iter().map(|(n, _)| n.clone()).collect();
        let mut args: Vec<&str> = vec!["sz", "-q"];
        args.extend_from_slice(m.weir_sz);
        let mut s = weir_cmd(&args);
        s.args(&names).current_dir(src.path());
        let mut args: Vec<&str> = vec!["rz", "-q"];
        args.extend_from_slice(m.weir_rz);
        let mut r = weir_cmd(&args);
        r.arg(dst.path());
        let (ss, rs) = run_pair(Wire::SocketPair, s, r, LIMIT);
        assert!(
            ss.success() && rs.success(),
            "{}: sender {ss}, receiver {rs}",
            m.name
        );
        assert_received(dst.path(), &sent, m.name);
    }
}
