//! uTP through `weir linkem`'s UDP mode on 127.0.0.1: a BitTorrent-style
//! download between two weir-utp endpoints over an emulated 50 ms round
//! trip, 20 MB/s, 0.5% loss each way. Checks that the emulator carries
//! uTP (delay seen in the RTT, rate never exceeded, losses recovered) and
//! that the bytes arrive intact.

mod driver;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use weir_core::policy::NetPolicy;
use weir_runtime::linkem::{UdpLinkConfig, UdpStats, serve_udp_with};
use weir_runtime::net::PolicedUdp;
use weir_utp::{Config, Endpoint};

const SIZE: u64 = 6 << 20;
const PIECE: u64 = 256 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn utp_over_the_udp_link_emulator() -> anyhow::Result<()> {
    let policy = NetPolicy::loopback();
    let seed_sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
    let seed_addr = seed_sock.local_addr()?;
    let l = PolicedUdp::bind(&policy, "127.0.0.1:0".parse()?).await?;
    let em_addr: SocketAddr = l.local_addr()?;
    let stats = Arc::new(UdpStats::default());
    let cfg = UdpLinkConfig {
        delay: Duration::from_millis(25),
        rate: Some(20_000_000),
        queue: 1 << 20,
        loss: 0.005,
        seed: 4,
    };
    tokio::spawn(serve_udp_with(l, seed_addr, cfg, policy, stats.clone()));

    let data: Vec<u8> = (0..SIZE as usize).map(|i| (i * 31 % 251) as u8).collect();
    let info_hash = [7u8; 20];
    let done = Arc::new(AtomicBool::new(false));
    let done2 = done.clone();
    let seed_data = data.clone();
    let seed = tokio::spawn(async move {
        let mut ep = Endpoint::new(Config::default(), 21);
        let mut app = driver::Seed {
            info_hash,
            piece_len: PIECE,
            data: seed_data,
            s: driver::Stream::default(),
            their_handshake: None,
            served: 0,
            error: None,
            until: move || done2.load(Ordering::Relaxed),
        };
        driver::run(&seed_sock, &mut ep, &mut app, Duration::from_secs(120)).await?;
        Ok::<_, anyhow::Error>(app.served)
    });
    let leech_sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
    let mut ep = Endpoint::new(Config::default(), 22);
    let mut app = driver::Leech::new(info_hash, PIECE, SIZE, em_addr);
    let t0 = Instant::now();
    app.start(&mut ep, t0)?;
    let r = driver::run(&leech_sock, &mut ep, &mut app, Duration::from_secs(120)).await;
    let secs = t0.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let st = ep.conn_stats(app.s.conn.unwrap());
    eprintln!(
        "6 MiB through linkem --udp (50 ms RTT, 20 MB/s, 0.5% loss): {secs:.2} s = {:.1} MB/s; \
         {stats}; leech {st:?}",
        SIZE as f64 / secs / 1e6
    );
    r?;
    let served = seed.await??;
    assert_eq!(app.error, None);
    assert_eq!(app.received, SIZE);
    assert!(app.data == data, "bytes differ");
    assert!(served >= SIZE);
    let st = st.unwrap();
    let srtt = st.srtt.unwrap();
    assert!(
        srtt >= Duration::from_millis(50),
        "RTT {srtt:?} below the emulated 50 ms"
    );
    let lost = stats.fwd.lost.load(Ordering::Relaxed) + stats.rev.lost.load(Ordering::Relaxed);
    assert!(lost > 0, "the emulator lost nothing: {stats}");
    // 6 MiB at most at 20 MB/s plus a round trip: never faster.
    assert!(
        secs >= SIZE as f64 / 20e6,
        "faster than the emulated link: {secs:.2} s"
    );
    Ok(())
}
