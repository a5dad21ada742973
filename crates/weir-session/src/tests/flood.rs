//! A seeder whose peer slots a thousand hostile peers try to hold, and one
//! honest leecher arriving after them: it is let in, unchoked and served
//! within a bounded virtual time. The hostile peers are of three kinds:
//! the bench's (`weir bench hostile`, 1000-peers: interested, 256 requests
//! at once, never reading), interested peers that never ask for anything
//! and read nothing, and peers that connect and say nothing at all. Each
//! one's connection takes the first 64 KiB sent to it (its receive
//! buffer) and nothing after.

use std::collections::{BTreeMap, BTreeSet};

use bytes::BytesMut;
use weir_bt::wire::{self, BlockRef, Message};
use weir_core::storage::{StorageEvent, StorageOp};

use super::*;

const HOSTILE: u32 = 1000;
/// What a hostile peer's connection takes before it stops.
const RCVBUF: u64 = 64 << 10;
const MAX_PEERS: usize = 50;

fn seeder(now: Instant) -> (Session, TransferId) {
    let mut cfg = SessionConfig::new(
        NetPolicy::loopback(),
        *b"-WR0100-aaaaaaaaaaaa",
        Md4Hash([1; 16]),
    );
    cfg.global.max_peers = MAX_PEERS;
    cfg.per_transfer.max_peers = MAX_PEERS;
    let mut s = Session::new(cfg);
    let m = meta(1);
    let n = m.info.piece_count();
    let id = s
        .add_torrent(
            AddTorrent {
                meta: m,
                had: Bitfield::full(n),
                check: Bitfield::new(n),
                partial: Vec::new(),
                peers: vec![],
                paused: false,
                seed: true,
                download: false,
                wanted: None,
                priorities: None,
            },
            now,
        )
        .unwrap();
    (s, id)
}

/// The hostile peer `i`'s first messages.
fn hostile_messages(i: u32, pieces: u32, piece_len: u32) -> Vec<Message> {
    match i % 3 {
        0 => {
            let blocks = piece_len.div_ceil(wire::BLOCK_LEN);
            let mut v = vec![Message::Interested];
            v.extend((0..256u32).map(|k| {
                let n = i * 256 + k;
                Message::Request(BlockRef {
                    index: (n / blocks) % pieces,
                    begin: (n % blocks) * wire::BLOCK_LEN,
                    length: wire::BLOCK_LEN,
                })
            }));
            v
        }
        1 => vec![Message::Interested],
        _ => Vec::new(),
    }
}

#[test]
fn an_honest_leecher_is_served_among_a_thousand_hostile_peers() {
    let t0 = Instant::now(); // test-epoch
    let (mut s, id) = seeder(t0);
    let m = meta(1);
    let (pieces, piece_len) = (m.info.piece_count(), m.info.piece_length);
    let total = m.info.total_length();
    let limits = wire::Limits::new(pieces);
    // Every block of the torrent, what the honest leecher asks for.
    let mut wanted: Vec<BlockRef> = Vec::new();
    for index in 0..pieces {
        let len = (total - u64::from(index) * u64::from(piece_len)).min(u64::from(piece_len));
        let mut begin = 0;
        while u64::from(begin) < len {
            let length = (len - u64::from(begin)).min(u64::from(wire::BLOCK_LEN)) as u32;
            wanted.push(BlockRef {
                index,
                begin,
                length,
            });
            begin += length;
        }
    }
    // It comes once the flood is in (the bench's leecher starts with it;
    // here every kind of hostile peer has filled the slots first).
    let arrive = t0 + Duration::from_millis(1000);
    let mut hostiles: BTreeMap<ConnId, u64> = BTreeMap::new();
    let mut honest: Option<ConnId> = None;
    let mut inbox = BytesMut::new();
    let mut unchoked_at: Option<Instant> = None;
    let mut got = 0u64;
    let mut done_at: Option<Instant> = None;
    let mut closed: BTreeSet<ConnId> = BTreeSet::new();
    let mut next_hostile = 0u32;
    let step = Duration::from_millis(5);
    let mut now = t0;
    while now < t0 + Duration::from_secs(10) && done_at.is_none() {
        // Hostile peers arrive in the first 200 ms, one each 0.2 ms.
        while next_hostile < HOSTILE
            && t0 + Duration::from_micros(200 * u64::from(next_hostile)) <= now
        {
            let i = next_hostile;
            next_hostile += 1;
            let Ok(c) = s.incoming(Proto::Bt, peer(1000 + i), now) else {
                continue;
            };
            let shake = Established::Bt {
                theirs: Handshake::new(
                    [1; 20],
                    [
                        (i % 250) as u8 + 2,
                        (i / 250) as u8 + 2,
                        0xee,
                        0xee,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                    ],
                ),
                preamble_sent: false,
            };
            if s.established(c, shake, now).is_ok() {
                hostiles.insert(c, 0);
                let msgs = hostile_messages(i, pieces, piece_len);
                if !msgs.is_empty() {
                    s.bt_messages(c, msgs, now);
                }
            }
        }
        if honest.is_none() && now >= arrive {
            let c = s
                .incoming(Proto::Bt, peer(1), now)
                .expect("the honest leecher's connection is accepted");
            s.established(
                c,
                Established::Bt {
                    theirs: their_handshake(1, 1),
                    preamble_sent: false,
                },
                now,
            )
            .expect("the honest leecher becomes a peer");
            s.bt_messages(c, vec![Message::Interested], now);
            honest = Some(c);
        }
        if s.poll_timeout().is_some_and(|t| t <= now) {
            s.handle_timeout(now);
        }
        // Everything the session asks for, until it asks for nothing.
        while let Some(ev) = s.poll_event() {
            match ev {
                SessionEvent::Send { conn, data, .. } => {
                    let n: u64 = data.iter().map(|d| d.len() as u64).sum();
                    if Some(conn) == honest {
                        data.iter().for_each(|d| inbox.extend_from_slice(d));
                        s.sent(conn, n, now);
                        let mut requests = Vec::new();
                        while let Some(msg) = wire::decode(&mut inbox, &limits).unwrap() {
                            match msg {
                                Message::Unchoke if unchoked_at.is_none() => {
                                    unchoked_at = Some(now);
                                    requests.extend(wanted.iter().map(|b| Message::Request(*b)));
                                }
                                Message::Piece { data, .. } => {
                                    got += data.len() as u64;
                                    if got >= total {
                                        done_at = Some(now);
                                    }
                                }
                                _ => {}
                            }
                        }
                        if !requests.is_empty() {
                            s.bt_messages(conn, requests, now);
                        }
                    } else if let Some(taken) = hostiles.get_mut(&conn) {
                        let n = n.min(RCVBUF.saturating_sub(*taken));
                        *taken += n;
                        if n > 0 {
                            s.sent(conn, n, now);
                        }
                    }
                }
                SessionEvent::Storage {
                    transfer,
                    op: StorageOp::Read { id, len, .. },
                } => s.storage(
                    transfer,
                    StorageEvent::ReadDone {
                        id,
                        data: Ok(vec![1u8; len as usize].into()),
                    },
                    now,
                ),
                SessionEvent::Close { conn, .. } => {
                    assert_ne!(Some(conn), honest, "the honest leecher was closed");
                    closed.insert(conn);
                    hostiles.remove(&conn);
                    s.closed(conn, None, now);
                }
                _ => {}
            }
        }
        let c = s.transfer_counts(id).unwrap();
        assert!(c.peers <= MAX_PEERS + 1, "{c:?}");
        now += step;
    }
    let unchoked_at = unchoked_at.expect("the honest leecher was never unchoked");
    let waited = unchoked_at - arrive;
    // Its wait: slot holders that take nothing give their slots to peers
    // that wait after half a second each, never-tried peers first (the
    // interested idlers that came first get their try before it: a few
    // rounds of eight slots). Without that it waits for ever.
    assert!(
        waited <= Duration::from_secs(2),
        "unchoked {waited:?} after it came"
    );
    let done_at = done_at.expect("the honest leecher never got the whole file");
    assert!(
        done_at - unchoked_at <= Duration::from_millis(100),
        "{:?}",
        done_at - unchoked_at
    );
    // The flood was there: peer slots full of hostile peers when it came.
    assert!(!closed.is_empty());
    assert!(
        hostiles.len() + 1 >= 8,
        "{} hostile peers left",
        hostiles.len()
    );
}
