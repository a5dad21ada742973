//! The simulated network's dial model, measured on a session's dials (all
//! links 10 ms one way): a BitTorrent dial is established after two round
//! trips (TCP, then the handshakes), an eD2k one after one; a host that
//! does not listen on the port refuses one round trip later; a listener
//! without the torrent refuses after reading the handshake; an absent
//! address refuses when told to, or stays silent until the connect
//! timeout; a hung listener lets the handshake time out.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use weir_sim::{
    DialRecord, Ed2kSpec, LinkConfig, NodeConfig, Payload, Proto, Refused, Source, TorrentSpec,
    TransferConfig, Unreachable, World,
};

const ONE_WAY: Duration = Duration::from_millis(10);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[test]
fn dials_take_their_round_trips_and_fail_the_way_tcp_does() {
    let t = TorrentSpec::new("net", Payload::random(1 << 20, 64 << 10, 71));
    let other = TorrentSpec::new("net-other", Payload::random(1 << 20, 64 << 10, 72));
    let e = Ed2kSpec::new("net.bin", Payload::random(1 << 20, 1 << 20, 73));
    let mut w = World::new(71);
    w.net.link = LinkConfig::new(ONE_WAY, 0);
    let seeder = w.add_node(
        NodeConfig::seeder(&t)
            .name("seeder")
            .with(TransferConfig::ed2k_share(&e)),
    );
    let stranger = w.add_node(NodeConfig::seeder(&other).name("stranger"));
    let closed = w.add_node(NodeConfig::seeder(&t).name("closed").listen_bt(None));
    let hung = w.add_node(NodeConfig::seeder(&t).name("hung"));
    w.freeze(hung);
    let refusing = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 7, 0, 1)), 6881);
    let silent = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 7, 0, 2)), 6881);
    w.set_unreachable(
        refusing.ip(),
        Unreachable::Refuse {
            after: Duration::from_millis(300),
        },
    );
    w.set_unreachable(silent.ip(), Unreachable::Silent);
    let addr_of: Vec<SocketAddr> = (0..w.node_count()).map(|n| w.node(n).addr()).collect();
    let bt = |n: usize| addr_of[n];
    let ed2k_seeder = w.node(seeder).ed2k_addr().expect("listens");
    let peers = [
        bt(seeder),
        bt(stranger),
        bt(closed),
        bt(hung),
        refusing,
        silent,
    ];
    let leecher = w.add_node(
        NodeConfig::new()
            .name("leecher")
            .with(TransferConfig::leech(&t))
            .with(TransferConfig::ed2k_get(&e).peers([ed2k_seeder])),
    );
    let tt = w.node(leecher).transfers()[0];
    w.add_peers(leecher, tt, Proto::Bt, &peers, Source::Manual);
    w.run_to(Duration::from_secs(16));
    let node = w.node(leecher);
    let first = |a: SocketAddr, p: Proto| -> &DialRecord {
        node.dials()
            .iter()
            .find(|d| d.addr == a && d.proto == p)
            .unwrap_or_else(|| panic!("{a} never dialled"))
    };
    let took = |d: &DialRecord| -> (f64, Result<(), String>) {
        let (at, r) = d.result.clone().expect("answered");
        (ms(at - d.at), r)
    };
    let rtt = ms(2 * ONE_WAY);
    let cases = [
        (
            "BitTorrent seeder",
            first(bt(seeder), Proto::Bt),
            2.0 * rtt,
            None,
        ),
        ("eD2k seeder", first(ed2k_seeder, Proto::Ed2k), rtt, None),
        (
            "listener without the torrent",
            first(bt(stranger), Proto::Bt),
            2.0 * rtt,
            Some("connection closed during the handshake"),
        ),
        (
            "host not listening",
            first(bt(closed), Proto::Bt),
            rtt,
            Some("connection refused"),
        ),
        (
            "hung listener",
            first(bt(hung), Proto::Bt),
            15_000.0,
            Some("handshake timed out"),
        ),
        (
            "absent, refusing",
            first(refusing, Proto::Bt),
            300.0,
            Some("connection refused"),
        ),
        (
            "absent, silent",
            first(silent, Proto::Bt),
            15_000.0,
            Some("connect timed out"),
        ),
    ];
    for (what, d, want_ms, want_err) in cases {
        let (got_ms, r) = took(d);
        eprintln!("{what}: {got_ms:.3} ms, {r:?}");
        assert!(
            (got_ms - want_ms).abs() < 0.01,
            "{what}: took {got_ms:.3} ms, expected {want_ms} ms"
        );
        match want_err {
            None => assert_eq!(r, Ok(()), "{what}"),
            Some(e) => assert_eq!(r, Err(e.to_string()), "{what}"),
        }
    }
    // The stranger's session saw the connection and refused its handshake.
    let a = &w.node(stranger).arrivals()[0];
    assert_eq!(a.result, Err(Refused::UnknownTorrent));
    // The hung one never accepted (its kernel did).
    assert!(w.node(hung).arrivals().is_empty());
    assert!(
        w.node(leecher).completed_at().is_some(),
        "downloads did not complete"
    );
}
