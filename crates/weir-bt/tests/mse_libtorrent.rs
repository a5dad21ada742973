//! Wire compatibility of `weir_bt::mse` with libtorrent-rasterbar, each
//! test in a network namespace it creates (only `lo`), libtorrent with
//! encryption forced (`out_enc_policy`/`in_enc_policy` = forced,
//! `allowed_enc_level` = rc4) and DHT, LSD, UPnP, NAT-PMP, uTP off.
//!
//! A small test-only tokio driver runs the sans-IO handshake over a real
//! socket, then speaks just enough BitTorrent through the RC4 streams:
//!
//! - weir dials an encryption-only libtorrent seeder, completes MSE and the
//!   BitTorrent handshake, reads its have-all/bitfield and downloads one
//!   block, checked against the payload;
//! - an encryption-only libtorrent leecher dials a weir responder (default
//!   policy, `prefer`), which serves the whole torrent; the leecher's file
//!   must be byte-identical.
//!
//! libtorrent 2.0.8 hashes a shared secret that starts with a zero byte
//! without that byte for `HASH('req3', S)` and then drops the connection
//! (measured here: 3 of 600 handshakes, each with `short_secret()` set,
//! and every other one succeeded). Such attempts are retried with new
//! keys, as the runtime will; any other failure fails the test.
//!
//! Without root, namespaces or python3-libtorrent the tests skip; with
//! `CI` set they fail instead (weir_lab::ci).

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::BytesMut;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_bt::mse::{Accepted, Crypto, Encryption, Initiator, MseConfig, Responder, Skeys};
use weir_bt::wire::{self, BlockRef, Handshake, Limits, Message};
use weir_lab::{Netns, payload};

const SIZE: u64 = 256 * 1024;

/// How one dial attempt ended.
enum Dial {
    /// The block arrived: the crypto and its length.
    Done(Crypto, usize),
    /// libtorrent closed during MSE after a secret with a leading zero.
    ShortSecret,
    /// libtorrent closed an established, encrypted connection before the
    /// block came (seen in 2 of 12 runs on an idle machine, its log giving
    /// no reason): a client dials again, and so does this test.
    Dropped(String),
}

/// [`dial_once`] with fresh keys while libtorrent's short-secret bug hits.
async fn dial_seeder(addr: SocketAddr, info_hash: [u8; 20]) -> anyhow::Result<(Crypto, usize)> {
    for attempt in 0..4u64 {
        match dial_once(addr, info_hash, 0x1234 + attempt).await? {
            Dial::Done(c, n) => return Ok((c, n)),
            Dial::ShortSecret => eprintln!("attempt {attempt}: short secret, retrying"),
            Dial::Dropped(why) => eprintln!("attempt {attempt}: {why}, retrying"),
        }
    }
    bail!("four attempts in a row ended without a block")
}

/// weir (initiator, `require`) against the encryption-only seeder.
async fn dial_once(addr: SocketAddr, info_hash: [u8; 20], seed: u64) -> anyhow::Result<Dial> {
    let sock = tokio::net::TcpSocket::new_v4()?;
    sock.bind("127.0.0.2:0".parse()?)?;
    let mut sock = sock.connect(addr).await?;
    let mut ia = BytesMut::new();
    Handshake::new(info_hash, *b"-WR0001-mse-interop1").encode(&mut ia);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut hs = Initiator::new(
        MseConfig::new(Encryption::Require),
        info_hash,
        &ia,
        &mut rng,
        Instant::now(),
    )?;
    sock.write_all(&hs.take_output()).await?;
    let mut tmp = vec![0u8; 4096];
    let mut got = 0usize;
    let est = loop {
        let n = sock.read(&mut tmp).await.unwrap_or(0);
        if n == 0 && hs.short_secret() {
            return Ok(Dial::ShortSecret);
        }
        if n == 0 {
            bail!("libtorrent closed during the MSE handshake after sending {got} bytes ({hs:?})");
        }
        got += n;
        let mut out = Vec::new();
        let r = hs.handle_input(&tmp[..n], &mut out)?;
        sock.write_all(&out).await?;
        if let Some(e) = r {
            break e;
        }
    };
    let crypto = est.crypto;
    let mut c = Conn {
        sock,
        cipher: est.cipher,
        buf: BytesMut::from(&est.payload[..]),
    };
    let theirs = c.handshake().await?;
    if theirs.info_hash != info_hash {
        bail!("libtorrent answered for another torrent");
    }
    let pieces = (SIZE / PIECE) as u32;
    let limits = Limits::new(pieces);
    let mut has_all = false;
    let mut unchoked = false;
    let want = BlockRef {
        index: 3,
        begin: 0,
        length: 16 * 1024,
    };
    loop {
        let Some(m) = c.recv(&limits).await? else {
            return Ok(Dial::Dropped(format!(
                "libtorrent closed the connection (has_all {has_all}, unchoked {unchoked})"
            )));
        };
        match m {
            Message::HaveAll => has_all = true,
            Message::Bitfield(b) => {
                has_all = b.iter().all(|&x| x == 0xff);
                if !has_all {
                    bail!("bitfield from a seeder is not full: {b:02x?}");
                }
            }
            Message::Unchoke => {
                unchoked = true;
                c.send(&Message::Request(want)).await?;
            }
            Message::Piece { index, begin, data } => {
                if (index, begin) != (want.index, want.begin) {
                    bail!("unexpected block {index}/{begin}");
                }
                let expect = expected_block(u64::from(index) * PIECE, data.len());
                if data[..] != expect[..] {
                    bail!("block data differs from the payload");
                }
                return Ok(Dial::Done(crypto, data.len()));
            }
            _ => {}
        }
        if has_all && !unchoked {
            c.send(&Message::Interested).await?;
        }
    }
}

#[test]
fn weir_dials_an_encryption_only_libtorrent_seeder() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let s = setup("mse-lt-seed", SIZE)?;
    let ns = Netns::new("mse-seed")?;
    let addr: SocketAddr = "127.0.0.1:6881".parse()?;
    let ih = s.info_hash;
    // libtorrent 2.0.8's forced-RC4 seeder sometimes exits under a
    // connection that was serving (1 run in 15-30 here; the port then
    // refuses): a seeder that died is started again, at most three times.
    let mut runs = 0;
    let (crypto, got) = loop {
        runs += 1;
        let (mut seed, flag) = start_lt(&ns, &s, "seed", &s.data, addr, None, &["--forced-enc"])?;
        wait_flag(&mut seed, &flag, Duration::from_secs(60))?;
        ns.wait_port(addr, Duration::from_secs(20))?;
        let r = ns.run_in(|| -> anyhow::Result<(Crypto, usize)> {
            let rt = runtime()?;
            rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(30), dial_seeder(addr, ih))
                    .await
                    .context("no block from libtorrent within 30 s")?
            })
        });
        match r {
            Ok(done) => break done,
            Err(e) => {
                if let (Some((status, _)), true) = (seed.try_wait()?, runs < 3) {
                    eprintln!("libtorrent seeder exited ({status}) during run {runs}: {e:#}");
                    std::fs::remove_file(&flag)?;
                    continue;
                }
                let tail = seed.log_tail(20);
                return Err(e.context(format!("libtorrent seeder log:\n{tail}")));
            }
        }
    };
    eprintln!("weir -> libtorrent (forced rc4): {crypto:?}, block of {got} bytes verified");
    assert_eq!(crypto, Crypto::Rc4);
    assert_eq!(got, 16 * 1024);
    Ok(())
}

/// The weir responder: accepts one connection, completes MSE (policy
/// `prefer`), then serves every block libtorrent asks for until it closes.
/// Returns the crypto used and the blocks served.
async fn serve_leecher(
    listener: tokio::net::TcpListener,
    info_hash: [u8; 20],
    data: Vec<u8>,
) -> anyhow::Result<(Crypto, u32)> {
    let skeys = Skeys::from_info_hashes([&[0xab; 20], &info_hash]);
    let mut rng = fastrand::Rng::with_seed(0x4321);
    let mut tmp = vec![0u8; 4096];
    let mut attempts = 0;
    let (sock, est) = 'accept: loop {
        attempts += 1;
        if attempts > 4 {
            bail!("four short secrets in a row");
        }
        let (mut sock, _) = listener.accept().await?;
        let mut hs = Responder::new(MseConfig::default(), &mut rng, Instant::now());
        loop {
            let n = sock.read(&mut tmp).await?;
            if n == 0 {
                bail!("libtorrent closed during the MSE handshake");
            }
            let mut out = Vec::new();
            let r = match hs.handle_input(&tmp[..n], &skeys, &mut out) {
                Err(weir_bt::mse::MseError::UnknownInfoHash) if hs.short_secret() => {
                    eprintln!("attempt {attempts}: short secret, awaiting libtorrent's retry");
                    continue 'accept;
                }
                r => r?,
            };
            sock.write_all(&out).await?;
            match r {
                Some(Accepted::Encrypted(e)) => break 'accept (sock, *e),
                Some(Accepted::Plaintext(_)) => bail!("libtorrent (forced) sent plaintext"),
                None => {}
            }
        }
    };
    if est.info_hash != info_hash {
        bail!("responder found the wrong torrent");
    }
    let crypto = est.crypto;
    let mut c = Conn {
        sock,
        cipher: est.cipher,
        buf: BytesMut::from(&est.payload[..]),
    };
    let theirs = c.handshake().await?;
    if theirs.info_hash != info_hash {
        bail!("libtorrent's handshake names another torrent");
    }
    // No extension bits: libtorrent then expects a plain bitfield.
    let mine = Handshake {
        reserved: [0; 8],
        info_hash,
        peer_id: *b"-WR0001-mse-interop2",
    };
    let mut out = BytesMut::new();
    mine.encode(&mut out);
    let pieces = (SIZE / PIECE) as u32;
    let mut bits = vec![0xffu8; pieces.div_ceil(8) as usize];
    let spare = bits.len() as u32 * 8 - pieces;
    if let Some(last) = bits.last_mut() {
        *last &= 0xffu8 << spare;
    }
    wire::encode(&Message::Bitfield(bits.into()), &mut out);
    c.write(out.to_vec()).await?;
    let limits = Limits::new(pieces);
    let mut served = 0u32;
    while let Some(m) = c.recv(&limits).await? {
        match m {
            Message::Interested => c.send(&Message::Unchoke).await?,
            Message::Request(r) => {
                let start = (u64::from(r.index) * PIECE + u64::from(r.begin)) as usize;
                let end = start + r.length as usize;
                if end > data.len() {
                    bail!("request past the end: {r:?}");
                }
                let block = bytes::Bytes::copy_from_slice(&data[start..end]);
                c.send(&Message::Piece {
                    index: r.index,
                    begin: r.begin,
                    data: block,
                })
                .await?;
                served += 1;
            }
            _ => {}
        }
    }
    Ok((crypto, served))
}

#[test]
fn encryption_only_libtorrent_leecher_downloads_from_a_weir_responder() -> anyhow::Result<()> {
    if !ready()? {
        return Ok(());
    }
    let s = setup("mse-lt-leech", SIZE)?;
    let ns = Netns::new("mse-leech")?;
    let out = s.dir.subdir("lt-out")?;
    let data = std::fs::read(s.data.join("payload.bin"))?;
    let ih = s.info_hash;
    let listen: SocketAddr = "127.0.0.1:6890".parse()?;
    let rt = runtime()?;
    let listener = ns.run_in(|| {
        let _g = rt.enter();
        let l = std::net::TcpListener::bind(listen)?;
        l.set_nonblocking(true)?;
        tokio::net::TcpListener::from_std(l)
    })?;
    let (mut leech, flag) = start_lt(
        &ns,
        &s,
        "leech",
        &out,
        "127.0.0.2:6891".parse()?,
        Some("127.0.0.1:6890"),
        &["--forced-enc"],
    )?;
    let served = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), serve_leecher(listener, ih, data))
            .await
            .context("libtorrent did not finish within 60 s")?
    });
    let (crypto, blocks) = served.map_err(|e| {
        let tail = leech.log_tail(20);
        e.context(format!("libtorrent leecher log:\n{tail}"))
    })?;
    wait_flag(&mut leech, &flag, Duration::from_secs(10))?;
    let status = leech.wait_timeout(Duration::from_secs(10))?;
    eprintln!("libtorrent (forced rc4) -> weir: {crypto:?}, {blocks} blocks served");
    assert!(status.is_some_and(|(st, _)| st.success()));
    assert_eq!(crypto, Crypto::Rc4);
    assert!(
        (SIZE / (16 * 1024)) as u32 <= blocks && blocks <= 2 * (SIZE / (16 * 1024)) as u32,
        "{blocks}"
    );
    payload::files_equal(&out.join("payload.bin"), &s.data.join("payload.bin"))
}
