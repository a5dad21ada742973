//! One client against one hand-driven peer that breaks the rules: talk
//! before the hello, no hello at all, uploads ended and restarted while
//! reads are out, endless range requests.

use super::*;

const T0_PEER: &str = "10.0.0.2:50000";

fn packets(evs: &[Event]) -> Vec<M> {
    let mut got = BytesMut::new();
    for e in evs {
        if let Event::Send { data, .. } = e {
            data.iter().for_each(|d| got.extend_from_slice(d));
        }
    }
    let mut dec = Decoder::new(Limits::CLIENT);
    let mut out = Vec::new();
    while let Some(p) = dec.decode(&mut got).unwrap() {
        out.push(M::decode(&p, &Default::default()).unwrap());
    }
    out
}

fn reads(evs: &[Event]) -> Vec<(u64, u32, u32, u32)> {
    evs.iter()
        .filter_map(|e| match e {
            Event::Storage {
                op:
                    StorageOp::Read {
                        id,
                        piece,
                        begin,
                        len,
                    },
                ..
            } => Some((*id, *piece, *begin, *len)),
            _ => None,
        })
        .collect()
}

fn drain(c: &mut Client) -> Vec<Event> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

#[test]
fn nothing_but_a_hello_is_answered_before_the_hello() {
    let mut c = Client::new(ClientConfig::new(Md4Hash([1; 16])));
    let now = Instant::now(); // test-epoch
    c.add_conn(1, T0_PEER.parse().unwrap(), None, false, now);
    drain(&mut c);
    // 30 MiB of 6-byte PUBLICIP_REQ took weir to 1 GiB: the first one
    // ends the connection, unanswered.
    feed(&mut c, &M::PublicIpReq);
    feed(&mut c, &M::PublicIpReq);
    let evs = drain(&mut c);
    assert!(
        closed(&evs).is_some_and(|r| r.contains("before the hello")),
        "{:?}",
        closed(&evs)
    );
    assert!(
        !packets(&evs)
            .iter()
            .any(|m| matches!(m, M::PublicIpAnswer { .. })),
        "answered before the hello"
    );
    assert_eq!(c.stats(now).protocol_errors, 1);
}

#[test]
fn a_connection_without_a_hello_is_closed_after_the_hello_timeout() {
    let mut cfg = ClientConfig::new(Md4Hash([1; 16]));
    cfg.hello_timeout = Duration::from_secs(15);
    let mut c = Client::new(cfg);
    let t0 = Instant::now(); // test-epoch
    c.add_conn(1, T0_PEER.parse().unwrap(), None, false, t0);
    drain(&mut c);
    let mut closed_at = None;
    let mut t = t0;
    while t < t0 + Duration::from_secs(60) && closed_at.is_none() {
        t += Duration::from_millis(250);
        c.handle_timeout(t);
        if let Some(r) = closed(&drain(&mut c)) {
            assert!(r.contains("no hello"), "{r}");
            closed_at = Some(t - t0);
        }
    }
    let at = closed_at.expect("an idle connection without a hello was kept");
    assert!(
        (Duration::from_secs(15)..Duration::from_secs(16)).contains(&at),
        "{at:?}"
    );
}

/// A client sharing 2 parts, a peer past its hello with a slot.
fn uploader() -> (Client, FileHashes, Vec<u8>) {
    let data = noise(2 * PARTSIZE as usize, 9);
    let h = hashes(&data);
    let mut c = Client::new(ClientConfig::new(Md4Hash([1; 16])));
    c.add_shared("f.bin".into(), &h).unwrap();
    let now = Instant::now(); // test-epoch
    c.add_conn(1, T0_PEER.parse().unwrap(), None, false, now);
    let own = crate::client::OwnHello::weir("peer", 0, false);
    feed(&mut c, &M::Hello(own.hello(Md4Hash([2; 16]), 1, 4662)));
    feed(&mut c, &M::StartUploadReq { file: h.file_hash });
    let evs = drain(&mut c);
    assert!(packets(&evs).contains(&M::AcceptUploadReq));
    (c, h, data)
}

fn ask(c: &mut Client, h: &FileHashes, first_block: u64, blocks: u64) {
    let b = EMBLOCKSIZE;
    let mut i = first_block;
    while i < first_block + blocks {
        let r = |k: u64| (k * b, (k + 1) * b);
        feed(
            c,
            &M::RequestParts {
                file: h.file_hash,
                ranges: [r(i), r(i + 1), r(i + 2)],
            },
        );
        i += 3;
    }
}

#[test]
fn ending_an_upload_while_reads_are_out_does_not_starve_the_peer_later() {
    let (mut c, h, data) = uploader();
    let watermark = ClientConfig::new(Md4Hash([0; 16])).upload_watermark;
    let max_read = u64::from(ClientConfig::new(Md4Hash([0; 16])).max_read);
    // 60 blocks (10.8 MB) asked: reads up to the watermark go out.
    ask(&mut c, &h, 0, 60);
    let out = reads(&drain(&mut c));
    let bytes: u64 = out.iter().map(|r| u64::from(r.3)).sum();
    assert!(
        bytes >= watermark && bytes <= watermark + max_read,
        "{bytes} bytes of reads"
    );
    // The peer ends the upload while they are out; they complete.
    feed(&mut c, &M::CancelTransfer);
    let now = Instant::now(); // test-epoch
    for (id, piece, begin, len) in out {
        let at = piece as usize * PARTSIZE as usize + begin as usize;
        c.handle_storage(
            0,
            StorageEvent::ReadDone {
                id,
                data: Ok(Bytes::copy_from_slice(&data[at..at + len as usize])),
            },
            now,
        );
    }
    let evs = drain(&mut c);
    assert!(
        !packets(&evs)
            .iter()
            .any(|m| matches!(m, M::SendingPart { .. })),
        "sent data of an ended upload"
    );
    // A new upload session: its requests are read again.
    feed(&mut c, &M::StartUploadReq { file: h.file_hash });
    ask(&mut c, &h, 60, 3);
    let evs = drain(&mut c);
    assert!(packets(&evs).contains(&M::AcceptUploadReq));
    let again: u64 = reads(&evs).iter().map(|r| u64::from(r.3)).sum();
    assert_eq!(again, 3 * EMBLOCKSIZE, "the peer is never served again");
}

#[test]
fn ending_and_restarting_uploads_cannot_pile_up_reads() {
    let (mut c, h, _) = uploader();
    let watermark = ClientConfig::new(Md4Hash([0; 16])).upload_watermark;
    let max_read = u64::from(ClientConfig::new(Md4Hash([0; 16])).max_read);
    // Request, end, restart, request again... with no read completing:
    // the reads in flight stay within the watermark.
    let mut out = 0u64;
    for round in 0..20u64 {
        feed(&mut c, &M::StartUploadReq { file: h.file_hash });
        ask(&mut c, &h, (round * 9) % 90, 9);
        out += reads(&drain(&mut c))
            .iter()
            .map(|r| u64::from(r.3))
            .sum::<u64>();
        feed(&mut c, &M::CancelTransfer);
        drain(&mut c);
    }
    assert!(
        out <= watermark + max_read,
        "{out} bytes of reads in flight"
    );
}

#[test]
fn endless_range_requests_drop_the_peer() {
    let (mut c, h, _) = uploader();
    // Distinct small ranges, never read (no storage answers): the queue
    // of ranges owed is bounded.
    let mut packets_sent = 0u64;
    let mut closed_why = None;
    while closed_why.is_none() && packets_sent < 10_000 {
        let s = packets_sent * 3000;
        feed(
            &mut c,
            &M::RequestParts {
                file: h.file_hash,
                ranges: [(s, s + 1000), (s + 1000, s + 2000), (s + 2000, s + 3000)],
            },
        );
        packets_sent += 1;
        closed_why = closed(&drain(&mut c));
    }
    let why = closed_why.expect("never dropped");
    assert!(why.contains("ranges requested"), "{why}");
    // Ranges up to the watermark were read; behind them the queue held
    // at most the bound.
    let cfg = ClientConfig::new(Md4Hash([0; 16]));
    let read = (cfg.upload_watermark + u64::from(cfg.max_read)) / 1000;
    let ranges = packets_sent * 3;
    assert!(
        (MAX_QUEUED_RANGES as u64..=MAX_QUEUED_RANGES as u64 + read + 3).contains(&ranges),
        "{ranges} ranges"
    );
}
