//! uTP over simulated links in virtual time: throughput against the link
//! rate on a long fat path, loss recovery, and LEDBAT yielding to a
//! TCP-like (Reno) flow on the same bottleneck. Figures are printed and
//! checked with both bounds.

mod common;

use std::time::Duration;

use common::*;
use weir_utp::sim::{LinkSpec, Sim};
use weir_utp::{Config, Endpoint};

const MB: f64 = 1e6;

struct Run {
    app: Bulk,
    sim: Sim,
    t0: std::time::Instant,
}

impl Run {
    /// MB/s received between virtual times `from` and `to` (seconds).
    fn rate(&self, from: f64, to: f64) -> f64 {
        let at = |s: f64| self.app.received_at(self.t0 + Duration::from_secs_f64(s));
        (at(to) - at(from)) as f64 / (to - from) / MB
    }
}

/// A (sender, node 0) -> B (receiver, node 1) over `fwd`, ACKs over `back`,
/// `total` bytes, optionally a Reno flow A -> B during `reno`.
fn run(
    cfg: Config,
    fwd: LinkSpec,
    back: LinkSpec,
    total: usize,
    secs: f64,
    reno: Option<(f64, f64)>,
) -> (Run, Option<usize>) {
    let t0 = std::time::Instant::now();
    let mut sim = Sim::new(t0, 7);
    let a = sim.add_node(Endpoint::new(cfg.clone(), 1), addr("10.0.0.1:1"));
    let b = sim.add_node(Endpoint::new(cfg, 2), addr("10.0.0.2:2"));
    sim.set_link(a, b, fwd);
    sim.set_link(b, a, back);
    let r = reno.map(|(s, e)| {
        sim.add_reno(
            a,
            b,
            Duration::from_secs_f64(s),
            Some(Duration::from_secs_f64(e)),
        )
    });
    let mut app = Bulk::new(total, 3);
    app.close_when_done = false;
    let now = sim.now();
    let peer = sim.addr(b);
    app.conn = Some(sim.endpoint(a).connect(peer, now).unwrap());
    sim.flush(a);
    sim.run_until(Duration::from_secs_f64(secs), |node, ep, ev, now| {
        app.on_event(a, node, ep, ev, now)
    });
    assert_eq!(app.mismatch, None, "data corrupted");
    (Run { app, sim, t0 }, r)
}

#[test]
fn fills_a_50_mbs_link_at_150_ms_rtt() {
    let rate = 50_000_000;
    let bdp = (rate as f64 * 0.150) as usize;
    let fwd = LinkSpec::new(Duration::from_millis(75), rate, 2 * bdp);
    let back = LinkSpec::new(Duration::from_millis(75), rate, 2 * bdp);
    let (mut r, _) = run(Config::default(), fwd, back, 400_000_000, 6.0, None);
    let marks: Vec<String> = [0.5, 1.0, 2.0, 3.0, 4.0, 6.0]
        .iter()
        .map(|&t| {
            format!(
                "{t} s: {:.1} MB",
                r.app.received_at(r.t0 + Duration::from_secs_f64(t)) as f64 / MB
            )
        })
        .collect();
    let steady = r.rate(3.0, 6.0);
    let st = r.sim.endpoint(0).conn_stats(r.app.conn.unwrap()).unwrap();
    eprintln!(
        "50 MB/s, 150 ms RTT: {}; steady (3-6 s) {steady:.1} MB/s = {:.0}% of the link; \
         cwnd {} B, srtt {:?}, queuing {:?}, {} loss events, {} timeouts, link {:?}",
        marks.join(", "),
        steady / 50.0 * 100.0,
        st.cwnd,
        st.srtt,
        st.queuing_delay,
        st.loss_events,
        st.timeouts,
        r.sim.link_stats(0, 1)
    );
    assert!(
        steady >= 45.0,
        "steady rate {steady:.1} MB/s is below 90% of 50 MB/s"
    );
    assert!(steady <= 50.5, "faster than the link: {steady:.1} MB/s");
    // Ramp: most of the link within the first 2 seconds.
    let ramp = r.rate(1.5, 2.5);
    assert!(
        ramp >= 35.0,
        "ramp-up too slow: {ramp:.1} MB/s in 1.5-2.5 s"
    );
}

/// What `weir bench transports` measures through the UDP link emulator,
/// in virtual time: 150 ms round trip, 50 MB/s, a 4 MiB tail-drop queue,
/// weir peers on loopback (64 KiB datagrams allowed, probed).
#[test]
fn a_long_fat_path_with_large_datagrams_ramps_within_two_seconds() {
    let rate = 50_000_000;
    let mut fwd = LinkSpec::new(Duration::from_millis(75), rate, 4 << 20);
    fwd.mtu = 65_535;
    let mut back = LinkSpec::new(Duration::from_millis(75), rate, 4 << 20);
    back.mtu = 65_535;
    let cfg = Config {
        max_packet_size: 65_000,
        ..Config::default()
    };
    let (mut r, _) = run(cfg, fwd, back, 600_000_000, 10.0, None);
    let at = |t: f64| r.app.received_at(r.t0 + Duration::from_secs_f64(t)) as f64 / MB;
    let (at1, at2, at10) = (at(1.0), at(2.0), at(10.0));
    let st = r.sim.endpoint(0).conn_stats(r.app.conn.unwrap()).unwrap();
    eprintln!(
        "50 MB/s, 150 ms RTT, 64 KiB datagrams: {at1:.1} MB at 1 s, {at2:.1} at 2 s, {at10:.1} at \
         10 s ({:.0}% of the link); packet {} B after {} probe(s), peer window {} B, cwnd {} B, \
         {} loss events, {} timeouts",
        at10 / 500.0 * 100.0,
        st.packet_size,
        st.mtu_probes,
        st.peer_window,
        st.cwnd,
        st.loss_events,
        st.timeouts
    );
    // The caller's ceiling passes, so one probe finds it.
    assert_eq!(st.packet_size, 65_000, "{st:?}");
    assert_eq!(st.mtu_probes, 1, "{st:?}");
    // The receiver's window grew past its 4 MiB start: the path holds
    // 7.5 MB in flight, which 4 MiB would have capped at 28 MB/s.
    assert!(st.peer_window > 8 << 20, "{st:?}");
    // Ten 64 KiB packets to begin slow start with, not ten of 1400 bytes:
    // a 7.5 MB window in a handful of round trips. (With 1400-byte
    // packets until the probes, and 4 MiB windows, this path had 5.7 MB by
    // 2 s and 75% of the link by 10 s.)
    assert!(at2 >= 40.0, "{at2:.1} MB by 2 s");
    assert!(at10 >= 0.85 * 500.0, "{at10:.1} MB by 10 s");
    assert!(at10 <= 500.0, "faster than the link: {at10:.1} MB");
}

#[test]
fn one_percent_loss_still_moves_data() {
    let rate = 10_000_000;
    let mut fwd = LinkSpec::new(Duration::from_millis(10), rate, 1 << 20);
    fwd.loss = 0.01;
    let mut back = LinkSpec::new(Duration::from_millis(10), rate, 1 << 20);
    back.loss = 0.01;
    let (mut r, _) = run(Config::default(), fwd, back, 100_000_000, 10.0, None);
    let got = r.rate(2.0, 10.0);
    let st = r.sim.endpoint(0).conn_stats(r.app.conn.unwrap()).unwrap();
    eprintln!(
        "10 MB/s, 20 ms RTT, 1% loss each way: {got:.2} MB/s ({:.0}% of the link) in 2-10 s; \
         {} fast retransmits, {} loss events, {} timeouts, cwnd {} B",
        got / 10.0 * 100.0,
        st.fast_retransmits,
        st.loss_events,
        st.timeouts,
        st.cwnd
    );
    assert!(st.fast_retransmits > 100, "{st:?}");
    assert!(got >= 0.5, "1% loss stalls the transfer: {got:.2} MB/s");
    assert!(got <= 10.1, "faster than the link: {got:.2} MB/s");
}

#[test]
fn ledbat_yields_to_a_tcp_flow_on_the_bottleneck() {
    // 10 MB/s bottleneck, 40 ms RTT, a queue of 300 ms: Reno fills it far
    // past LEDBAT's 100 ms target.
    let rate = 10_000_000;
    let fwd = LinkSpec::new(Duration::from_millis(20), rate, 3_000_000);
    let back = LinkSpec::new(Duration::from_millis(20), rate, 3_000_000);
    let (r, reno) = run(
        Config::default(),
        fwd,
        back,
        400_000_000,
        24.0,
        Some((8.0, 24.0)),
    );
    let reno = r.sim.reno(reno.unwrap()).clone();
    let alone = r.rate(3.0, 8.0);
    let shared = r.rate(14.0, 24.0);
    // The Reno flow's rate over the same window, from its delivered count
    // at the end (it runs 8-24 s; its ramp is over by 14 s).
    let reno_rate = reno.delivered as f64 / 16.0 / MB;
    eprintln!(
        "10 MB/s, 40 ms RTT, 300 ms queue: uTP alone {alone:.2} MB/s; with Reno uTP {shared:.2} MB/s \
         ({:.0}% of the link), Reno {reno_rate:.2} MB/s average over its 16 s ({} losses)",
        shared / 10.0 * 100.0,
        reno.losses
    );
    assert!((8.5..=10.1).contains(&alone), "uTP alone: {alone:.2} MB/s");
    assert!(
        shared <= 2.0,
        "uTP does not yield: {shared:.2} MB/s next to Reno"
    );
    assert!(shared >= 0.01, "uTP starved to nothing: {shared:.3} MB/s");
    assert!(
        (7.0..=10.1).contains(&reno_rate),
        "Reno gets {reno_rate:.2} MB/s"
    );
}
