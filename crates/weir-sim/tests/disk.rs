//! Storage backpressure: a leecher whose disk writes 25 MB/s (plus 1 ms per
//! operation) on a 100 MB/s link. The core stops requesting while too much
//! handed-over data waits for verification, so the transfer runs at the
//! disk's pace and completes (no stall, no unbounded buffering); with an
//! instant disk the same transfer is link-bound.

use std::time::Duration;

use weir_sim::{Disk, LinkConfig, NodeConfig, Payload, TorrentSpec, World};

const LEN: u64 = 128 << 20;

fn finish(disk: Disk) -> Duration {
    let spec = TorrentSpec::new("disk", Payload::synthetic(LEN, 1 << 20, 14));
    let mut w = World::new(14);
    let seeder = w.add_bt(NodeConfig::seeder(&spec));
    let leecher = w.add_bt(NodeConfig::leecher(&spec).disk(disk));
    w.connect_sym(
        seeder,
        leecher,
        LinkConfig::new(Duration::from_millis(10), 100_000_000),
    );
    let done = w.run_until(Duration::from_secs(60), |w| {
        w.node(leecher).completed_at().is_some()
    });
    assert!(done, "{disk:?}: did not complete");
    w.node(leecher).completed_at().expect("checked")
}

#[test]
fn slow_disk_paces_the_transfer() {
    let fast = finish(Disk::INSTANT);
    let disk = Disk {
        per_op: Duration::from_millis(1),
        rate: 25_000_000,
    };
    let slow = finish(disk);
    // The core hands storage runs of 256 KiB: one operation each.
    let data_time = LEN as f64 / 25e6;
    let disk_bound = data_time + (LEN / (256 << 10)) as f64 * 0.001;
    eprintln!(
        "instant disk: {:.2} s; 25 MB/s disk: {:.2} s (the disk alone needs {disk_bound:.2} s)",
        fast.as_secs_f64(),
        slow.as_secs_f64()
    );
    assert!(
        fast.as_secs_f64() < LEN as f64 / 100e6 * 1.3,
        "link-bound run took {fast:?}"
    );
    // Disk-bound: at least the disk's time, and not much more (the network
    // keeps the disk busy).
    assert!(
        slow.as_secs_f64() >= data_time,
        "faster than the disk: {slow:?}"
    );
    assert!(
        slow.as_secs_f64() <= disk_bound * 1.1,
        "disk left idle: {slow:?} vs {disk_bound:.2} s"
    );
}
