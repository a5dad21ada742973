//! Link-time layout of the `weir` binary.
//!
//! A daemon holding 1,000 idle transfers had 7.4 MiB of its 10.5 MiB of
//! code resident although the code it runs is about 1.7 MiB: the kernel maps
//! the 64 KiB around every page a process faults on ("fault-around"), and the
//! functions a daemon runs were spread over the whole `.text`. Two linker
//! options fix that without touching the code:
//!
//! - `--symbol-ordering-file=link-order.txt` places the functions a daemon
//!   runs (start, adds over RPC, `torrent-get`, stop; recorded by
//!   `scripts/link-order.sh` under callgrind) together at the front of
//!   `.text`. Names the build no longer has are ignored, so a stale list only
//!   loses the effect for the functions that changed; the script refreshes it.
//! - `-z pack-relative-relocs` stores the position-independent executable's
//!   relative relocations as DT_RELR (4 KiB instead of 386 KiB that the loader
//!   read at every start), when the host's glibc is 2.36 or later.
//!
//! Both are given only where the linker is known to be LLD: rustc >= 1.90
//! links `x86_64-unknown-linux-gnu` with its bundled LLD unless the flags
//! name another linker. `WEIR_LINK_ORDER=0` turns both off.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=link-order.txt");
    println!("cargo:rerun-if-env-changed=WEIR_LINK_ORDER");
    if std::env::var("WEIR_LINK_ORDER").as_deref() == Ok("0") || !bundled_lld() {
        return;
    }
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={dir}/link-order.txt");
    println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    if glibc_has_relr() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether the C library this binary is linked against (the build host's:
/// only when building for the host) loads DT_RELR relocations: glibc 2.36
/// and later. An older one would refuse to start the binary.
fn glibc_has_relr() -> bool {
    if std::env::var("HOST").ok() != std::env::var("TARGET").ok() {
        return false;
    }
    let Ok(out) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    // "glibc 2.36"
    second_word_version(&out.stdout) >= (2, 36)
}

/// Whether this build links with rustc's bundled LLD: the target is
/// `x86_64-unknown-linux-gnu`, rustc is 1.90 or newer, and no flag picks
/// another linker.
fn bundled_lld() -> bool {
    if std::env::var("TARGET").as_deref() != Ok("x86_64-unknown-linux-gnu") {
        return false;
    }
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if flags.contains("linker") || flags.contains("fuse-ld") {
        return false;
    }
    if std::env::vars().any(|(k, _)| k.starts_with("CARGO_TARGET_") && k.ends_with("_LINKER")) {
        return false;
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("-V").output() else {
        return false;
    };
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    second_word_version(&out.stdout) >= (1, 90)
}

/// `(major, minor)` of the version that is the second word of `text`
/// (`(0, 0)` when there is none).
fn second_word_version(text: &[u8]) -> (u32, u32) {
    let text = String::from_utf8_lossy(text);
    let mut parts = text.split_whitespace().nth(1).unwrap_or("").split('.');
    let mut next = || parts.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    (next(), next())
}
