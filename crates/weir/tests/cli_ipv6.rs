//! IPv6 peers as the built binary meets them: a weir listening on the
//! unspecified address (`0.0.0.0`, as by default) is reached over IPv6 by
//! TCP and by uTP, both listeners taking `[::]` for both families, and a
//! leecher so bound dials an IPv6 peer over uTP (its UDP socket was IPv4
//! only: the SYN to `[::1]` failed unseen and the download found no peer).
//! IPv4 peers keep their plain addresses. Loopback only (`127.0.0.1` and
//! `::1`).

mod cli_support;

use std::fs;
use std::time::Duration;

use cli_support::*;

const T: Duration = Duration::from_secs(90);

#[test]
fn a_seeder_on_the_unspecified_address_serves_ipv6_and_ipv4_peers_over_tcp_and_utp() {
    let s = TempDir::new("cli-ipv6").unwrap();
    let d = s.path();
    let logs = TempDir::new("cli-ipv6-logs").unwrap();
    fs::create_dir_all(d.join("src")).unwrap();
    let data = payload(3_000_000, 61);
    fs::write(d.join("src/six.bin"), &data).unwrap();
    create(d, "src/six.bin", "six.torrent", "64KiB");
    let args = [
        "seed",
        "six.torrent",
        "src",
        "--listen",
        "0.0.0.0:0",
        "--no-trackers",
        "--no-dht",
        "-q",
    ];
    let mut seed = spawn("seeder", d, &args, logs.path());
    let at = listening(&mut seed);
    assert!(at.ip().is_unspecified() && at.is_ipv4(), "{at}");
    for (k, (ip, transport)) in [
        ("[::1]", "utp"),
        ("[::1]", "tcp"),
        ("127.0.0.1", "utp"),
        ("127.0.0.1", "tcp"),
    ]
    .into_iter()
    .enumerate()
    {
        let peer = format!("{ip}:{}", at.port());
        let out = format!("dl{k}");
        let r = run(
            d,
            &[
                "get",
                "six.torrent",
                "-o",
                &out,
                "--peer",
                &peer,
                "--transports",
                transport,
                "--no-trackers",
                "--no-dht",
                "--listen",
                "0.0.0.0:0",
                "--peer-wait",
                "30",
                "-q",
            ],
            T,
        );
        assert_eq!(r.code, Some(0), "from {peer} over {transport}: {r:?}");
        assert_eq!(
            fs::read(d.join(&out).join("six.bin")).unwrap(),
            data,
            "from {peer} over {transport}"
        );
    }
}
