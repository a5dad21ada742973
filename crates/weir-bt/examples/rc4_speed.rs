//! RC4 throughput: weir's `mse::Rc4` against the RustCrypto `rc4` crate.
//!
//! `cargo run --release -p weir-bt --example rc4_speed -- [weir|crate] [MiB]`
//! encrypts MiB (default 1024) in place in 256 KiB buffers and prints MB/s
//! of wall time; run it under `/usr/bin/time` for CPU time on a loaded
//! machine, or under `valgrind --tool=callgrind` (with a small MiB) for
//! instructions per byte.

use std::time::Instant;

use rc4::{KeyInit, StreamCipher};

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "weir".into());
    let mib: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let key = [0x5au8; 20];
    let mut buf = vec![0u8; 256 * 1024];
    let rounds = mib * 4;
    let t = Instant::now();
    match which.as_str() {
        "weir" => {
            let mut c = weir_bt::mse::Rc4::new(&key).expect("20-byte key");
            for _ in 0..rounds {
                c.apply_keystream(&mut buf);
            }
        }
        "crate" => {
            let mut c = rc4::Rc4::new_from_slice(&key).expect("20-byte key");
            for _ in 0..rounds {
                c.apply_keystream(&mut buf);
            }
        }
        other => {
            eprintln!("unknown implementation {other:?}: expected weir or crate");
            std::process::exit(2);
        }
    }
    let s = t.elapsed().as_secs_f64();
    let bytes = (rounds * buf.len() as u64) as f64;
    println!(
        "{which}: {mib} MiB in {s:.3} s, {:.0} MB/s (check byte {})",
        bytes / s / 1e6,
        buf[123]
    );
}
