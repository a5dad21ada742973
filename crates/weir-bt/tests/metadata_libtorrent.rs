//! Wire compatibility of `weir_bt::metadata` (BEP 9) and `weir_bt::magnet`
//! with libtorrent-rasterbar, in a namespace each test creates:
//!
//! - weir's `MetadataFetcher` fetches a 40 KiB info dictionary (3 metadata
//!   pieces) from a libtorrent seeder with ut_metadata, and the result is
//!   the torrent's own info dictionary;
//! - a libtorrent leecher given only a magnet link made by
//!   `Magnet::to_uri` (info-hash, name, `x.pe` pointing at weir) gets the
//!   metadata from weir's `MetadataServer`.
//!
//! Skips without root/namespaces/python3-libtorrent unless `CI` is set.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::{Bytes, BytesMut};
use common::*;
use tokio::io::AsyncWriteExt;
use weir_bt::magnet::{Magnet, PeerAddr};
use weir_bt::metadata::{
    self, FetcherConfig, MetadataFetcher, MetadataLimits, MetadataMsg, MetadataServer, ServerConfig,
};
use weir_bt::metainfo::Metainfo;
use weir_bt::wire::{self, ExtHandshake, Handshake, Limits, Message, UT_METADATA};
use weir_lab::Netns;

/// 32 MiB in 16 KiB pieces: 2,048 piece hashes, a 40 KiB info dictionary.
const SIZE: u64 = 32 << 20;

fn our_ext(metadata_size: Option<u64>) -> Bytes {
    let mut e = ExtHandshake {
        metadata_size,
        v: Some("weir-test".into()),
        ..Default::default()
    };
    e.m.insert(UT_METADATA.into(), metadata::LOCAL_ID);
    Bytes::from(e.encode())
}

/// The torrent file's info dictionary, exactly as in the file.
fn raw_info(torrent: &[u8]) -> anyhow::Result<Vec<u8>> {
    let v = weir_bencode::decode(torrent)?;
    let info = v
        .as_dict()
        .and_then(|d| d.get(b"info"))
        .and_then(|i| i.raw())
        .context("no info dictionary")?;
    Ok(info.to_vec())
}

async fn fetch(addr: SocketAddr, info_hash: [u8; 20]) -> anyhow::Result<MetadataFetcher> {
    let sock = tokio::net::TcpSocket::new_v4()?;
    sock.bind("127.0.0.2:0".parse()?)?;
    let sock = sock.connect(addr).await?;
    let mut c = Conn {
        sock,
        cipher: None,
        buf: BytesMut::new(),
    };
    let mut out = BytesMut::new();
    Handshake::new(info_hash, *b"-WR0001-md-interop01").encode(&mut out);
    wire::encode(
        &Message::Extended {
            id: 0,
            payload: our_ext(None),
        },
        &mut out,
    );
    // We advertise the fast extension: say we have nothing (BEP 6), as a
    // fetching magnet client does.
    wire::encode(&Message::HaveNone, &mut out);
    c.write(out.to_vec()).await?;
    let theirs = c.handshake().await?;
    if !theirs.supports_extended() {
        bail!("libtorrent does not advertise the extension protocol");
    }
    let mut f = MetadataFetcher::new(info_hash, FetcherConfig::default());
    let limits = Limits::new(0);
    let mlim = MetadataLimits::default();
    loop {
        let Some(m) = c.recv(&limits).await? else {
            bail!("libtorrent closed the connection: {f:?}");
        };
        let now = Instant::now();
        match m {
            Message::Extended { id: 0, payload } => {
                let ext = ExtHandshake::decode(&payload)?;
                if !f.add_peer(1, &ext, now) {
                    bail!("libtorrent's handshake offers no metadata: {ext:?}");
                }
            }
            Message::Extended { id, payload } if id == metadata::LOCAL_ID => {
                f.handle_message(1, MetadataMsg::decode(&payload, &mlim)?, now);
            }
            _ => {}
        }
        while let Some((_, frame)) = f.poll_send() {
            c.sock.write_all(&frame).await?;
        }
        if let Some(e) = f.poll_event() {
            if e != metadata::FetchEvent::Done {
                bail!("fetcher: {e:?}");
            }
        }
        if f.result().is_some() {
            return Ok(f);
        }
    }
}

#[test]
fn weir_fetches_metadata_from_a_libtorrent_seeder() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let s = setup("md-lt-seed", SIZE)?;
    let ns = Netns::new("md-seed")?;
    let (mut seed, flag) = start_lt(
        &ns,
        &s,
        "seed",
        &s.data,
        "127.0.0.1:6881".parse()?,
        None,
        &["--ut-metadata"],
    )?;
    wait_flag(&mut seed, &flag, Duration::from_secs(60))?;
    let addr: SocketAddr = "127.0.0.1:6881".parse()?;
    ns.wait_port(addr, Duration::from_secs(20))?;
    let ih = s.info_hash;
    let started = Instant::now();
    let f = ns
        .run_in(|| -> anyhow::Result<MetadataFetcher> {
            runtime()?.block_on(async {
                tokio::time::timeout(Duration::from_secs(30), async {
                    // libtorrent once closed the connection after one of
                    // the three pieces (seen in CI, cause not in its log):
                    // a second connection, as a client redials; a second
                    // close fails.
                    match fetch(addr, ih).await {
                        Err(e) if e.to_string().contains("closed the connection") => {
                            eprintln!("{e:#}; dialling libtorrent again");
                            fetch(addr, ih).await
                        }
                        other => other,
                    }
                })
                .await
                .context("no metadata from libtorrent within 30 s")?
            })
        })
        .map_err(|e| e.context(format!("libtorrent log:\n{}", seed.log_tail(20))))?;
    let took = started.elapsed();
    let torrent = std::fs::read(&s.torrent)?;
    let want = raw_info(&torrent)?;
    let stats = f.stats();
    let got = f
        .result()
        .context("no result")?
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!(
        "ut_metadata from libtorrent: {} bytes in {} pieces, {took:?}, {stats:?}",
        got.info_bytes.len(),
        metadata::piece_count(got.info_bytes.len() as u64)
    );
    assert_eq!(&got.info_bytes[..], &want[..]);
    assert_eq!(got.metainfo.info_hash, ih);
    assert_eq!(got.metainfo.info, Metainfo::from_bytes(&torrent)?.info);
    assert_eq!(metadata::piece_count(want.len() as u64), 3);
    assert_eq!(stats.pieces, 3);
    assert_eq!(stats.hash_failures, 0);
    Ok(())
}

/// Serves the metadata to one libtorrent connection until it closes.
async fn serve(
    listener: tokio::net::TcpListener,
    info_hash: [u8; 20],
    info: Bytes,
) -> anyhow::Result<u64> {
    let (sock, _) = listener.accept().await?;
    let mut c = Conn {
        sock,
        cipher: None,
        buf: BytesMut::new(),
    };
    let theirs = c.handshake().await?;
    if theirs.info_hash != info_hash || !theirs.supports_extended() {
        bail!("unexpected handshake {theirs:?}");
    }
    let mut srv = MetadataServer::new(ServerConfig::default(), Some(info));
    let mut out = BytesMut::new();
    Handshake::new(info_hash, *b"-WR0001-md-interop02").encode(&mut out);
    wire::encode(
        &Message::Extended {
            id: 0,
            payload: our_ext(srv.metadata_size()),
        },
        &mut out,
    );
    c.write(out.to_vec()).await?;
    let limits = Limits::new(0);
    let mlim = MetadataLimits::default();
    while let Some(m) = c.recv(&limits).await? {
        let now = Instant::now();
        match m {
            Message::Extended { id: 0, payload } => {
                srv.add_peer(1, &ExtHandshake::decode(&payload)?, now);
            }
            Message::Extended { id, payload } if id == metadata::LOCAL_ID => {
                srv.handle_message(1, &MetadataMsg::decode(&payload, &mlim)?, now);
            }
            _ => {}
        }
        while let Some((_, frame)) = srv.poll_send() {
            c.sock.write_all(&frame).await?;
        }
    }
    Ok(srv.stats().served)
}

#[test]
fn libtorrent_gets_metadata_for_a_weir_magnet_from_weir() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let s = setup("md-weir-seed", SIZE)?;
    let ns = Netns::new("md-magnet")?;
    let torrent = std::fs::read(&s.torrent)?;
    let info = Bytes::from(raw_info(&torrent)?);
    let listen: SocketAddr = "127.0.0.1:6892".parse()?;
    let mut magnet = Magnet::new(s.info_hash);
    magnet.name = Some("payload.bin".into());
    magnet.peers.push(PeerAddr::Ip(listen));
    let uri = magnet.to_uri();
    assert_eq!(Magnet::parse(&uri)?, magnet);
    let rt = runtime()?;
    let listener = ns.run_in(|| {
        let _g = rt.enter();
        let l = std::net::TcpListener::bind(listen)?;
        l.set_nonblocking(true)?;
        tokio::net::TcpListener::from_std(l)
    })?;
    let out = s.dir.subdir("lt-out")?;
    let (mut lt, flag) = start_lt(
        &ns,
        &s,
        "magnet",
        &out,
        "127.0.0.2:6893".parse()?,
        None,
        &["--ut-metadata", "--magnet", &uri],
    )?;
    let ih = s.info_hash;
    let served = rt
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(30), serve(listener, ih, info))
                .await
                .context("libtorrent did not finish within 30 s")?
        })
        .map_err(|e| e.context(format!("libtorrent log:\n{}", lt.log_tail(20))))?;
    wait_flag(&mut lt, &flag, Duration::from_secs(10))?;
    let status = lt.wait_timeout(Duration::from_secs(10))?;
    let stdout = std::fs::read_to_string(lt.stdout_log().context("no stdout log")?)?;
    eprintln!("libtorrent <- weir ut_metadata: {served} pieces served; {stdout}");
    assert!(status.is_some_and(|(st, _)| st.success()));
    let hex: String = ih.iter().map(|b| format!("{b:02x}")).collect();
    assert!(stdout.contains(&format!("metadata {hex} 2048")), "{stdout}");
    assert!((3..=6).contains(&served), "{served}");
    Ok(())
}
