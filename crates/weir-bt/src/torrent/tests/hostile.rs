//! One torrent against one hand-driven peer that breaks the rules: blocks
//! nobody asked for, requests it may not make, cancels that would
//! multiply disk reads, and the upload accounting through chokes.

use super::*;

/// A torrent and what it asked the runtime to do.
struct One {
    t: Torrent,
    now: Instant,
    /// Messages sent to the peer.
    sent: Vec<Message>,
    /// Storage reads not completed yet: (id, piece, begin, len).
    reads: Vec<(u64, u32, u32, u32)>,
    writes: usize,
    closed: Option<String>,
    /// The peer's connection takes nothing: sends are never reported
    /// written.
    reads_nothing: bool,
}

const C: ConnId = 1;

impl One {
    fn new(data: &[u8], seed: bool, tweak: impl FnOnce(&mut TorrentConfig)) -> Self {
        let m = meta(data);
        let n = m.info.piece_count();
        let had = if seed {
            Bitfield::full(n)
        } else {
            Bitfield::new(n)
        };
        let mut cfg = TorrentConfig::new([1; 20]);
        tweak(&mut cfg);
        Self {
            t: Torrent::new(&m, cfg, &had, &Bitfield::new(n)),
            now: Instant::now(), // test-epoch
            sent: Vec::new(),
            reads: Vec::new(),
            writes: 0,
            closed: None,
            reads_nothing: false,
        }
    }

    fn connect(&mut self, fast: bool) {
        let mut h = Handshake::new([7; 20], [2; 20]);
        if !fast {
            h.reserved[7] &= !0x04;
        }
        let addr = SocketAddr::from(([127, 0, 0, 2], 6881));
        self.t.add_peer(C, addr, &h, self.now);
        self.drain();
    }

    fn msg(&mut self, m: Message) {
        self.t.handle_message(C, m, self.now);
        self.drain();
    }

    fn drain(&mut self) {
        let limits = Limits::new(self.t.geometry().piece_count());
        while let Some(ev) = self.t.poll_event() {
            match ev {
                Event::Send { data, .. } => {
                    let mut b = BytesMut::new();
                    data.iter().for_each(|d| b.extend_from_slice(d));
                    while let Some(m) = wire::decode(&mut b, &limits).unwrap() {
                        self.sent.push(m);
                    }
                    let n: usize = data.iter().map(Bytes::len).sum();
                    if !self.reads_nothing {
                        self.t.on_sent(C, n as u64, self.now);
                    }
                }
                Event::Storage(StorageOp::Read {
                    id,
                    piece,
                    begin,
                    len,
                }) => self.reads.push((id, piece, begin, len)),
                Event::Storage(StorageOp::Write { .. }) => self.writes += 1,
                Event::Close { reason, .. } => {
                    self.closed.get_or_insert(reason.to_string());
                    self.t.remove_peer(C, self.now);
                }
                _ => {}
            }
        }
    }

    /// Completes every read in flight with zeros.
    fn complete_reads(&mut self) {
        for (id, _, _, len) in std::mem::take(&mut self.reads) {
            self.t.handle_storage(
                StorageEvent::ReadDone {
                    id,
                    data: Ok(Bytes::from(vec![0; len as usize])),
                },
                self.now,
            );
            self.drain();
        }
    }

    fn read_bytes(&self) -> u64 {
        self.reads.iter().map(|r| u64::from(r.3)).sum()
    }

    fn count(&self, f: impl Fn(&Message) -> bool) -> usize {
        self.sent.iter().filter(|m| f(m)).count()
    }
}

fn req(index: u32, begin: u32) -> BlockRef {
    BlockRef {
        index,
        begin,
        length: wire::BLOCK_LEN,
    }
}

/// 80 pieces of 64 KiB: 320 blocks, 5 MiB.
fn data() -> Vec<u8> {
    payload(80 * PIECE as usize)
}

#[test]
fn blocks_nobody_asked_for_are_dropped_and_their_sender_disconnected() {
    let data = data();
    let mut o = One::new(&data, false, |_| {});
    o.connect(true);
    // A seed that never unchokes us pushes every block but the first of
    // each piece: none of it may be kept (no piece could ever complete).
    o.msg(Message::HaveAll);
    let mut pushed = 0;
    'push: for piece in 0..80u32 {
        for b in 1..4u32 {
            let at = (piece * PIECE + b * wire::BLOCK_LEN) as usize;
            o.msg(Message::Piece {
                index: piece,
                begin: b * wire::BLOCK_LEN,
                data: Bytes::copy_from_slice(&data[at..at + wire::BLOCK_LEN as usize]),
            });
            pushed += 1;
            if o.closed.is_some() {
                break 'push;
            }
        }
    }
    let reason = o.closed.clone().expect("the pusher is disconnected");
    assert!(reason.contains("did not ask for"), "{reason}");
    assert_eq!(pushed, UNREQUESTED_ALLOWANCE as usize + 1);
    let st = o.t.stats(o.now);
    assert_eq!(st.unrequested_blocks, UNREQUESTED_ALLOWANCE + 1);
    assert_eq!(st.protocol_errors, 1);
    assert_eq!(
        st.downloaded, 0,
        "dropped data is not counted as downloaded"
    );
    assert!(
        o.t.content.assembling() == 0,
        "unrequested blocks were kept"
    );
    assert_eq!(o.writes, 0);
}

#[test]
fn a_block_that_crossed_our_choke_is_kept() {
    let data = data();
    let mut o = One::new(&data, false, |_| {});
    // Without the fast extension a choke drops our requests silently; a
    // block already on its way is no violation.
    o.connect(false);
    o.msg(Message::Bitfield(Bytes::copy_from_slice(
        Bitfield::full(80).as_bytes(),
    )));
    o.msg(Message::Unchoke);
    let asked: Vec<BlockRef> = o
        .sent
        .iter()
        .filter_map(|m| match m {
            Message::Request(r) => Some(*r),
            _ => None,
        })
        .collect();
    assert!(!asked.is_empty());
    o.msg(Message::Choke);
    let r = asked[0];
    let at = (r.index * PIECE + r.begin) as usize;
    o.msg(Message::Piece {
        index: r.index,
        begin: r.begin,
        data: Bytes::copy_from_slice(&data[at..at + r.length as usize]),
    });
    assert_eq!(o.closed, None);
    let st = o.t.stats(o.now);
    assert_eq!(st.unrequested_blocks, 0);
    assert_eq!(st.downloaded, u64::from(r.length));
    assert!(o.t.content.is_assembling(r.index));
}

#[test]
fn requests_while_choked_are_bounded_by_reqq() {
    let data = data();
    let mut o = One::new(&data, true, |c| {
        c.upload_slots = 0;
        // Below the allowance of a peer never unchoked, which is tested
        // on its own below.
        c.max_peer_requests = 16;
    });
    o.connect(true);
    o.msg(Message::Interested);
    // Never unchoked: every request earns a reject, up to reqq of them.
    for i in 0..10_000u32 {
        o.msg(Message::Request(req(
            i % 80,
            (i / 80 % 4) * wire::BLOCK_LEN,
        )));
        if o.closed.is_some() {
            break;
        }
    }
    let reason = o
        .closed
        .clone()
        .expect("a request flood while choked is a violation");
    assert!(reason.contains("cannot serve"), "{reason}");
    let rejects = o.count(|m| matches!(m, Message::Reject(_)));
    assert_eq!(rejects, 16);
    assert!(o.reads.is_empty());
}

#[test]
fn more_than_a_few_dozen_requests_before_any_unchoke_are_a_violation() {
    let data = data();
    for fast in [true, false] {
        let mut o = One::new(&data, true, |c| c.upload_slots = 0);
        o.connect(fast);
        o.msg(Message::Interested);
        let mut sent = 0;
        for i in 0..256u32 {
            o.msg(Message::Request(req(i % 80, 0)));
            sent += 1;
            if o.closed.is_some() {
                break;
            }
        }
        let reason = o.closed.clone().expect("dropped");
        assert!(reason.contains("before it was ever unchoked"), "{reason}");
        assert_eq!(sent, upload::PREMATURE_REQUESTS + 1);
        assert_eq!(o.t.stats(o.now).protocol_errors, 1);
        assert!(o.reads.is_empty());
    }
    // Once unchoked and choked again, requests that crossed the choke are
    // no violation (up to reqq).
    let mut o = One::new(&data, true, |c| c.upload_slots = 1);
    o.connect(true);
    o.msg(Message::Interested);
    let now = o.now;
    o.t.choke(C, now);
    o.drain();
    for i in 0..(upload::PREMATURE_REQUESTS * 2) {
        o.msg(Message::Request(req(i % 80, 0)));
    }
    assert!(o.closed.is_none(), "{:?}", o.closed);
}

#[test]
fn more_requests_queued_than_reqq_are_a_violation() {
    let data = data();
    let mut o = One::new(&data, true, |c| {
        c.max_peer_requests = 64;
        c.upload_watermark = 32 * 1024;
    });
    o.connect(true);
    o.msg(Message::Interested);
    for i in 0..200u32 {
        o.msg(Message::Request(req(i / 4, (i % 4) * wire::BLOCK_LEN)));
        if o.closed.is_some() {
            break;
        }
    }
    let reason = o
        .closed
        .clone()
        .expect("more than reqq queued is a violation");
    assert!(reason.contains("reqq"), "{reason}");
    // 32 KiB of reads in flight (two 16 KiB blocks, read together), 64
    // queued, the next one broke the rule.
    assert_eq!(o.read_bytes(), 32 * 1024);
}

#[test]
fn a_choke_releases_the_reads_it_dropped_so_the_peer_is_served_again() {
    let data = data();
    let mut o = One::new(&data, true, |_| {});
    o.connect(true);
    o.msg(Message::Interested);
    assert!(o.count(|m| matches!(m, Message::Unchoke)) == 1);
    // More than the watermark asked: reads up to it go out.
    for i in 0..300u32 {
        o.msg(Message::Request(req(i / 4, (i % 4) * wire::BLOCK_LEN)));
    }
    // (A new peer's window: it has taken nothing yet.)
    let wm = TorrentConfig::new([0; 20]).min_upload_window;
    assert_eq!(o.read_bytes(), wm);
    // Choked (it lost interest) while the reads are out; they complete.
    o.msg(Message::NotInterested);
    o.complete_reads();
    assert_eq!(o.count(|m| matches!(m, Message::Piece { .. })), 0);
    // Interested again: unchoked, and its new requests are read.
    o.msg(Message::Interested);
    assert_eq!(o.count(|m| matches!(m, Message::Unchoke)), 2);
    for i in 0..4u32 {
        o.msg(Message::Request(req(79, i * wire::BLOCK_LEN)));
    }
    assert_eq!(
        o.read_bytes(),
        4 * u64::from(wire::BLOCK_LEN),
        "never served again"
    );
    o.complete_reads();
    assert_eq!(o.count(|m| matches!(m, Message::Piece { .. })), 4);
    assert_eq!(o.t.peers[&C].upload_queued, 0);
}

#[test]
fn request_cancel_pairs_cannot_push_reads_past_the_watermark() {
    let data = data();
    let mut o = One::new(&data, true, |_| {});
    o.connect(true);
    o.msg(Message::Interested);
    // Each request is read at once; its cancel arrives while the read is
    // out. Reads in flight must stay within the watermark.
    for i in 0..2_000u32 {
        let r = req(i / 4 % 80, (i % 4) * wire::BLOCK_LEN);
        o.msg(Message::Request(r));
        o.msg(Message::Cancel(r));
    }
    let wm = TorrentConfig::new([0; 20]).min_upload_window;
    assert!(
        o.read_bytes() <= wm,
        "{} bytes of reads in flight",
        o.read_bytes()
    );
    assert!(o.read_bytes() >= wm / 2, "{}", o.read_bytes());
    assert_eq!(o.closed, None);
    o.complete_reads();
    assert_eq!(o.count(|m| matches!(m, Message::Piece { .. })), 0);
    assert_eq!(o.t.peers[&C].upload_queued, 0);
}

#[test]
fn a_peer_that_reads_nothing_holds_the_minimum_window_and_one_that_reads_is_served_on() {
    let cfg = TorrentConfig::new([0; 20]);
    let block = u64::from(wire::BLOCK_LEN);
    for reads_nothing in [true, false] {
        let data = data();
        let mut o = One::new(&data, true, |_| {});
        o.reads_nothing = reads_nothing;
        o.connect(true);
        o.msg(Message::Interested);
        // It asks for every block (320, 5 MiB).
        for i in 0..320u32 {
            o.msg(Message::Request(req(i / 4, (i % 4) * wire::BLOCK_LEN)));
        }
        // A new peer has taken nothing: the minimum window.
        assert_eq!(o.read_bytes(), cfg.min_upload_window);
        o.complete_reads();
        let queued = o.t.peers[&C].upload_queued;
        if reads_nothing {
            // Its blocks wait for the socket: nothing more is read, and
            // what it holds stays within the minimum window.
            assert_eq!(o.read_bytes(), 0);
            assert!(queued <= cfg.min_upload_window + block, "{queued}");
        } else {
            // It took what was sent: the next reads went out (within a
            // block of its window).
            let r = o.read_bytes();
            assert!(
                (cfg.min_upload_window..=cfg.min_upload_window + block).contains(&r),
                "{r}"
            );
        }
        assert_eq!(o.closed, None);
    }
}

#[test]
fn the_upload_window_follows_the_rate_a_peer_takes_bytes() {
    use super::super::upload::{UPLOAD_WINDOW_TIME, upload_window};
    let cfg = TorrentConfig::new([0; 20]);
    assert_eq!(upload_window(&cfg, 0.0), cfg.min_upload_window);
    // 4 MB/s: 2 MB in flight.
    let mid = upload_window(&cfg, 4e6);
    assert_eq!(mid, (4e6 * UPLOAD_WINDOW_TIME) as u64);
    assert!(mid > cfg.min_upload_window && mid < cfg.upload_watermark);
    // A fast peer (the bench's 16 MB/s leecher and faster): the watermark.
    assert_eq!(upload_window(&cfg, 16e6), cfg.upload_watermark);
    assert_eq!(upload_window(&cfg, 1e9), cfg.upload_watermark);
}

#[test]
fn a_peer_that_cancels_most_of_what_is_read_for_it_is_dropped() {
    let data = data();
    let mut o = One::new(&data, true, |_| {});
    o.connect(true);
    o.msg(Message::Interested);
    // Reads complete between pairs: without a bound each pair costs a
    // disk read forever.
    let mut pairs = 0u32;
    while o.closed.is_none() && pairs < 10_000 {
        let r = req(pairs / 4 % 80, (pairs % 4) * wire::BLOCK_LEN);
        o.msg(Message::Request(r));
        o.msg(Message::Cancel(r));
        o.complete_reads();
        pairs += 1;
    }
    let reason = o.closed.clone().expect("dropped");
    assert!(reason.contains("cancelled"), "{reason}");
    assert_eq!(pairs, 1025);
}
