//! weir-bt `MetadataFetcher` (BEP 9) fed by a few peers, some honest (they
//! answer each request with the true piece), some hostile (any size claim,
//! data nobody asked for, wrong or flipped pieces, rejects, requests,
//! unknown types, silence), with timeouts, closes and new peers.
//!
//! It must never accept a dictionary that does not hash to the info-hash
//! (a `Done` carries exactly the true info dictionary), never convict or
//! drop an honest peer but as unresponsive (one the fuzzer keeps waiting
//! past its request timeouts), only send requests for pieces within the size that
//! peer claimed, and, once the hostile peers are gone and an honest peer is
//! there, finish.
#![no_main]

use std::collections::{BTreeMap, VecDeque};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use sha1::{Digest, Sha1};
use weir_bt::create::TorrentBuilder;
use weir_bt::metadata::{
    FetchDrop, FetchEvent, FetcherConfig, MetadataFetcher, MetadataLimits, MetadataMsg, PIECE_LEN,
    piece_count, piece_len,
};
use weir_bt::metainfo::Metainfo;
use weir_bt::wire::{ExtHandshake, Limits, Message, UT_METADATA, decode};
use weir_fuzz::Input;

/// Info dictionaries of 1, 2 and 3 metadata pieces.
fn infos() -> &'static [Bytes; 3] {
    static INFOS: OnceLock<[Bytes; 3]> = OnceLock::new();
    INFOS.get_or_init(|| {
        [3u32, 900, 1700].map(|pieces| {
            let mut b = TorrentBuilder::single_file("a.bin", u64::from(pieces) * 16_384, 16_384);
            b.pieces((0..pieces).map(|i| [(i % 251) as u8; 20]).collect());
            let t = b.build().expect("torrent").bytes;
            Metainfo::from_bytes(&t)
                .expect("metainfo")
                .info_bytes
                .expect("info bytes")
        })
    })
}

struct Peer {
    honest: bool,
    claimed: u64,
    /// Requests received, oldest first.
    asked: VecDeque<u32>,
}

struct World {
    f: MetadataFetcher,
    info: Bytes,
    peers: BTreeMap<u32, Peer>,
    next_id: u32,
    now: Instant,
    done: bool,
}

const EXT_ID: u8 = 3;

impl World {
    fn add(&mut self, honest: bool, claimed: u64) {
        let id = self.next_id;
        self.next_id += 1;
        let mut ext = ExtHandshake::default();
        ext.m.insert(UT_METADATA.into(), EXT_ID);
        ext.metadata_size = Some(claimed);
        if self.f.add_peer(id, &ext, self.now) {
            self.peers.insert(
                id,
                Peer {
                    honest,
                    claimed,
                    asked: VecDeque::new(),
                },
            );
        }
    }

    fn piece(&self, p: u32) -> Bytes {
        let start = p as usize * PIECE_LEN;
        self.info
            .slice(start..start + piece_len(self.info.len() as u64, p))
    }

    fn send(&mut self, id: u32, msg: MetadataMsg) {
        if self.peers.contains_key(&id) {
            self.f.handle_message(id, msg, self.now);
        }
    }

    /// Moves the fetcher's frames into the peers' queues and checks events.
    fn drain(&mut self) {
        while let Some((id, frame)) = self.f.poll_send() {
            let mut buf = BytesMut::from(&frame[..]);
            let m = decode(&mut buf, &Limits::default())
                .expect("frame decodes")
                .expect("whole frame");
            assert!(buf.is_empty());
            let Message::Extended { id: ext, payload } = m else {
                panic!("fetcher sent {m:?}");
            };
            assert_eq!(ext, EXT_ID, "sent on another extended id");
            let msg = MetadataMsg::decode(&payload, &MetadataLimits::default())
                .expect("our own message decodes");
            let MetadataMsg::Request { piece } = msg else {
                panic!("fetcher sent {msg:?}");
            };
            // Frames queued before a peer left are the runtime's to drop.
            let Some(p) = self.peers.get_mut(&id) else {
                continue;
            };
            assert!(
                piece < piece_count(p.claimed),
                "piece {piece} past the {} bytes the peer claimed",
                p.claimed
            );
            p.asked.push_back(piece);
        }
        while let Some(ev) = self.f.poll_event() {
            match ev {
                FetchEvent::Drop { peer, reason } => {
                    let p = self.peers.remove(&peer).expect("drop of an unknown peer");
                    // A slow honest peer may be let go; never for a lie.
                    assert!(
                        !p.honest || matches!(reason, FetchDrop::Unresponsive { .. }),
                        "honest peer {peer} dropped: {reason}"
                    );
                    self.f.remove_peer(peer, self.now);
                }
                FetchEvent::Done => {
                    assert!(!self.done, "Done twice");
                    self.done = true;
                    let r = self.f.result().expect("Done without a result");
                    let got = r.expect("the true info dictionary is a valid torrent");
                    assert_eq!(got.info_bytes, self.info, "accepted a wrong dictionary");
                    let h: [u8; 20] = Sha1::digest(&got.info_bytes).into();
                    assert_eq!(h, got.metainfo.info_hash);
                }
            }
        }
        assert_eq!(self.done, self.f.result().is_some());
        if let Some(size) = self.f.size() {
            assert!(self.f.pieces_have() <= piece_count(size) as usize);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let sel = inp.byte();
    let info = infos()[usize::from(sel % 3)].clone();
    let size = info.len() as u64;
    let info_hash: [u8; 20] = Sha1::digest(&info).into();
    let cfg = FetcherConfig {
        max_size: 1 << 20,
        ..FetcherConfig::default()
    };
    let mut w = World {
        f: MetadataFetcher::new(info_hash, cfg),
        info,
        peers: BTreeMap::new(),
        next_id: 1,
        now: Instant::now(),
        done: false,
    };
    let mut steps = 0;
    while !inp.is_empty() && steps < 400 {
        steps += 1;
        let op = inp.byte();
        let ids: Vec<u32> = w.peers.keys().copied().collect();
        let pick = |b: u8| ids.get(usize::from(b) % ids.len().max(1)).copied();
        match op % 8 {
            0 if w.peers.len() < 6 => {
                let honest = op & 0x80 != 0;
                let claimed = match (honest, op >> 3 & 7) {
                    (true, _) | (_, 0..=3) => size,
                    (_, 4) => size + 1,
                    (_, 5) => size.saturating_sub(1),
                    _ => u64::from(inp.u16()),
                };
                w.add(honest, claimed);
            }
            1 | 2 => {
                // An honest peer answers its oldest request.
                let Some(id) = pick(inp.byte()) else { continue };
                let p = &w.peers[&id];
                if let (true, Some(&piece)) = (p.honest, p.asked.front()) {
                    w.peers.get_mut(&id).unwrap().asked.pop_front();
                    let data = w.piece(piece);
                    w.send(
                        id,
                        MetadataMsg::Data {
                            piece,
                            total_size: size,
                            data,
                        },
                    );
                }
            }
            3 | 4 => {
                // A hostile peer says something.
                let Some(id) = pick(inp.byte()) else { continue };
                let p = &w.peers[&id];
                if p.honest {
                    continue;
                }
                let claimed = p.claimed;
                let asked = p.asked.front().copied();
                let piece = if op & 0x10 != 0 {
                    asked.unwrap_or(0)
                } else {
                    u32::from(inp.byte() % 4)
                };
                let msg = match op >> 5 {
                    0 | 1 => {
                        let total = if op & 0x08 != 0 {
                            u64::from(inp.u16())
                        } else {
                            claimed
                        };
                        let n = piece_len(total, piece);
                        let mut d = if total == size && piece < piece_count(size) {
                            w.piece(piece).to_vec()
                        } else {
                            vec![0u8; n]
                        };
                        d.resize(n, 0);
                        if !d.is_empty() && op & 0x20 != 0 {
                            let i = usize::from(inp.u16()) % d.len();
                            d[i] ^= 1 << (inp.byte() % 8);
                        }
                        MetadataMsg::Data {
                            piece,
                            total_size: total,
                            data: Bytes::from(d),
                        }
                    }
                    2 => MetadataMsg::Reject { piece },
                    3 => MetadataMsg::Request { piece },
                    4 => MetadataMsg::Unknown {
                        msg_type: i64::from(inp.byte()) + 3,
                    },
                    _ => {
                        let n = usize::from(inp.byte());
                        match MetadataMsg::decode_slice(inp.take(n), &MetadataLimits::default()) {
                            Ok(m) => m,
                            Err(_) => continue,
                        }
                    }
                };
                if asked == Some(piece)
                    && matches!(msg, MetadataMsg::Data { .. } | MetadataMsg::Reject { .. })
                {
                    w.peers.get_mut(&id).unwrap().asked.pop_front();
                }
                // What the runtime hands over went through the decoder.
                let enc = Bytes::from(msg.encode());
                if let Ok(m) = MetadataMsg::decode(&enc, &MetadataLimits::default()) {
                    w.send(id, m);
                }
            }
            5 => {
                w.now += Duration::from_millis(u64::from(inp.u16()) * 10);
                w.f.handle_timeout(w.now);
            }
            6 => {
                if let Some(t) = w.f.poll_timeout() {
                    w.now = w.now.max(t);
                    w.f.handle_timeout(w.now);
                }
            }
            _ => {
                let Some(id) = pick(inp.byte()) else { continue };
                w.peers.remove(&id);
                w.f.remove_peer(id, w.now);
            }
        }
        w.drain();
    }
    if w.done {
        return;
    }
    // The hostile peers leave and an honest one arrives: the fetch ends.
    let hostile: Vec<u32> = w
        .peers
        .iter()
        .filter(|(_, p)| !p.honest)
        .map(|(id, _)| *id)
        .collect();
    for id in hostile {
        w.peers.remove(&id);
        w.f.remove_peer(id, w.now);
    }
    w.drain();
    w.add(true, size);
    w.drain();
    for _ in 0..400 {
        if w.done {
            return;
        }
        let mut answered = false;
        let ids: Vec<u32> = w.peers.keys().copied().collect();
        for id in ids {
            while let Some(piece) = w.peers.get_mut(&id).and_then(|p| p.asked.pop_front()) {
                answered = true;
                let data = w.piece(piece);
                w.send(
                    id,
                    MetadataMsg::Data {
                        piece,
                        total_size: size,
                        data,
                    },
                );
                w.drain();
            }
        }
        if !answered {
            w.now += Duration::from_secs(11);
            w.f.handle_timeout(w.now);
            w.drain();
        }
    }
    panic!("no result with only honest peers left: {:?}", w.f);
});
