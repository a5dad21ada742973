//! The kill -9 suite at CI size (`weir bench killsuite` runs it at 1 GiB):
//! a download from a local seeder through a rate-capped link emulator,
//! killed with SIGKILL at 20 seeded-random moments and restarted each time,
//! ends byte-identical having pulled at most the file plus 1 MiB per kill
//! (the link counts what it delivered; the bench's goal, 1.02x, is at 1 GiB),
//! for BitTorrent and for eD2k, and for
//! `weir daemon` (given the torrent once over RPC, restarted on the same
//! `--state` after each kill).
//!
//! What a kill costs is what was in flight: the packet arriving (eD2k: a
//! weir seeder sends 180 KiB per packet), data read and not yet written.
//! That is an amount per kill (~50-430 kB here, more on a loaded machine),
//! so the bound is per kill. Sizes: 128 MiB for BitTorrent, 256 MiB for
//! eD2k and the daemon (a restart also costs the announce and the dial).
//! The suites run one at a time.
//!
//! It fails if resume after a kill breaks: every restart would fetch again
//! what the killed runs had (at 20 kills, many MiB per kill); and if
//! partly written pieces stopped being continued (an eD2k part is 9.28 MB).

use std::path::PathBuf;
use std::time::Duration;

use weir_bench::killsuite::{KillSuite, Protocol, run_suite};

/// One suite at a time: they measure what is in flight, so they should not
/// compete for the CPU with each other.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn suite(protocol: Protocol, size: u64, seed: u64) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let s = KillSuite {
        weir: PathBuf::from(env!("CARGO_BIN_EXE_weir")),
        protocol,
        size,
        kills: 20,
        rate: 16_000_000,
        seed,
        limit: Duration::from_secs(600),
    };
    let o = run_suite(&s).expect("kill suite");
    eprintln!(
        "{}: {} of {} runs killed, pulled {} B = {:.4}x, {:.1} s, lifetimes {:?}",
        protocol.name(),
        o.killed,
        o.runs,
        o.pulled,
        o.ratio(),
        o.elapsed.as_secs_f64(),
        o.lifetimes
    );
    eprintln!(
        "{}: {:.0} kB lost per kill",
        protocol.name(),
        (o.pulled as f64 - o.size as f64) / 1e3 / o.killed.max(1) as f64
    );
    assert!(o.identical, "the download is not byte-identical");
    // Most kills must land before the end, or the suite tests nothing.
    assert!(
        o.killed >= 15,
        "only {} kills before the download ended",
        o.killed
    );
    // At least the file (linkem saw it all go through).
    assert!(o.pulled >= o.size, "pulled {} of {}", o.pulled, o.size);
    // At most what was in flight at each kill. The 1.02x goal is the
    // bench's, at 1 GiB (1.0040x for eD2k, 1.0109x for BitTorrent there);
    // at CI size the same in-flight bytes are a larger share, and they
    // grow with load: a loaded CI machine reads its sockets later, so more
    // waits in the kernel's receive buffer when the kill lands (eD2k lost
    // 346 and 430 kB per kill on two loaded runs, 1.026x and 1.032x of
    // 256 MiB). So the bound here is per kill: 1 MiB, more than any kill
    // cost on record and far under what a broken resume costs (a restart
    // from zero refetches everything; a part not continued, up to 9.28 MB).
    let excess = o.pulled - o.size;
    let bound = o.killed as u64 * PER_KILL;
    assert!(
        excess <= bound,
        "pulled {:.4}x the file: {} B over it, more than {} kills x {} B in flight",
        o.ratio(),
        excess,
        o.killed,
        PER_KILL
    );
}

/// The most a kill may cost at CI size: what can be in flight when it
/// lands (the packet being read, the socket's receive buffer, reads not
/// yet written).
const PER_KILL: u64 = 1 << 20;

#[test]
fn bittorrent_survives_20_kills() {
    suite(Protocol::Bt, 128 << 20, 0x6b1);
}

#[test]
fn ed2k_survives_20_kills() {
    suite(Protocol::Ed2k, 256 << 20, 0x6b2);
}

#[test]
fn the_daemon_survives_20_kills() {
    suite(Protocol::Daemon, 256 << 20, 0x6b3);
}
