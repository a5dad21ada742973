//! In-process uTP throughput: two endpoints passing datagrams through
//! memory in batches (as a runtime with recvmmsg/sendmmsg would), one
//! connection, one direction, real clock.
//!
//! ```text
//! cargo run --release -p weir-utp --example mem_bench -- [MiB] [max_packet_size]
//! ```
//!
//! Prints MB/s of wall time and of CPU time (this process's user + system
//! time from /proc, both endpoints on one thread: on a shared machine the
//! CPU figure is the one that means something), datagrams each way and the
//! final packet size.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use weir_utp::{Config, Endpoint, Event, StreamError};

/// User + system CPU seconds of this process (Linux /proc; 0 elsewhere).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) end with ')'.
    let rest = stat.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (1-based): 11 and 12 here.
    (ticks(11) + ticks(12)) / 100.0
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1024);
    let max_packet: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1400);
    let total = mib << 20;
    let cfg = Config {
        max_packet_size: max_packet,
        ..Config::default()
    };
    let a_addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let b_addr: SocketAddr = "127.0.0.1:2".parse().unwrap();
    let mut a = Endpoint::new(cfg.clone(), 1);
    let mut b = Endpoint::new(cfg, 2);
    let chunk = vec![0x5au8; 1 << 20];
    let mut rbuf = vec![0u8; 1 << 20];
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    let ha = a.connect(b_addr, start).unwrap();
    let mut hb = None;
    let (mut written, mut read) = (0usize, 0usize);
    let (mut a_to_b, mut b_to_a) = (0u64, 0u64);
    let mut batch = Vec::with_capacity(64);
    let mut closed = false;
    while read < total {
        let now = Instant::now();
        if now - start > Duration::from_secs(600) {
            panic!("stuck at {read} of {total}");
        }
        while written < total {
            let n = (total - written).min(chunk.len());
            match a.write(ha, &chunk[..n], now) {
                Ok(0) => break,
                Ok(k) => written += k,
                Err(e) => panic!("write: {e}"),
            }
        }
        if written == total && !closed {
            a.close(ha, now).unwrap();
            closed = true;
        }
        a.handle_timeout(now);
        b.handle_timeout(now);
        // One batch each way per round, as a runtime's recvmmsg would see.
        batch.clear();
        while batch.len() < 64 {
            match a.poll_transmit(now) {
                Some(t) => batch.push(t.data),
                None => break,
            }
        }
        a_to_b += batch.len() as u64;
        for d in &batch {
            let _ = b.handle_datagram(a_addr, d, now);
        }
        while let Some(ev) = b.poll_event() {
            if let Event::Incoming(h) = ev {
                hb = Some(h);
            }
        }
        if let Some(h) = hb {
            loop {
                match b.read(h, &mut rbuf, now) {
                    Ok(0) => break,
                    Ok(n) => read += n,
                    Err(StreamError::WouldBlock) => break,
                    Err(e) => panic!("read: {e}"),
                }
            }
        }
        batch.clear();
        while batch.len() < 64 {
            match b.poll_transmit(now) {
                Some(t) => batch.push(t.data),
                None => break,
            }
        }
        b_to_a += batch.len() as u64;
        for d in &batch {
            let _ = a.handle_datagram(b_addr, d, now);
        }
        while a.poll_event().is_some() {}
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let st = a.conn_stats(ha).unwrap();
    println!(
        "{mib} MiB in {secs:.3} s wall = {:.0} MB/s; {cpu:.2} CPU s = {:.0} MB/s per core; \
         datagrams A->B {a_to_b}, B->A {b_to_a}; packet size {} B, {} MTU probes, \
         {} retransmitted, cwnd {} B",
        total as f64 / secs / 1e6,
        total as f64 / cpu.max(0.01) / 1e6,
        st.packet_size,
        st.mtu_probes,
        st.packets_retransmitted,
        st.cwnd
    );
}
