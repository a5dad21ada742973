//! Clients wired to each other in memory: whole transfers, bad data,
//! hostile peers, the wire rules aMule depends on. (Timing behaviour is
//! for `weir-sim` and the benches.)

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use weir_core::bitfield::Bitfield;
use weir_core::storage::{PieceVerifier, StorageEvent, StorageOp};

use super::*;
use crate::client::{ClientMessage as M, emule_op, op};
use crate::hash::Ed2kHasher;
use crate::packet::{Decoder, Limits, Protocol};
use crate::{EMBLOCKSIZE, PARTSIZE};

/// Deterministic incompressible bytes.
fn noise(size: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(size + 8);
    while v.len() < size {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        v.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    v.truncate(size);
    v
}

/// Compressible bytes (text-like).
fn text(size: usize) -> Vec<u8> {
    let line = b"the quick brown fox jumps over the lazy dog 0123456789\n";
    line.iter().copied().cycle().take(size).collect()
}

fn hashes(data: &[u8]) -> FileHashes {
    let mut h = Ed2kHasher::new();
    h.update(data);
    h.finish()
}

fn link(h: &FileHashes, with_parts: bool, with_aich: bool) -> FileLink {
    FileLink {
        name: "f.bin".into(),
        size: h.size,
        hash: h.file_hash,
        aich: if with_aich {
            h.aich.as_ref().map(|a| a.root())
        } else {
            None
        },
        part_hashes: (with_parts && !h.hashset.is_empty()).then(|| h.hashset.clone()),
        sources: vec![],
    }
}

struct Node {
    c: Client,
    /// file -> bytes in storage
    store: BTreeMap<FileId, Vec<u8>>,
    verifiers: BTreeMap<FileId, PieceVerifier>,
    /// Flip a byte in every uploaded block that starts in this range.
    corrupt: Option<(u64, u64)>,
    ip: Ipv4Addr,
    links: BTreeMap<ConnId, (usize, ConnId)>,
    inbox: BTreeMap<ConnId, BytesMut>,
    storage_events: Vec<(FileId, StorageEvent)>,
    closed: Vec<(ConnId, CloseReason)>,
    banned: Vec<IpAddr>,
    complete: Vec<FileId>,
    /// Every packet this node sent: (protocol, opcode, payload).
    sent: Vec<(Protocol, u8, Bytes)>,
    max_asked: usize,
    next_conn: ConnId,
}

struct Swarm {
    nodes: Vec<Node>,
    now: Instant,
}

impl Swarm {
    fn new() -> Self {
        Self {
            nodes: Vec::new(),
            now: Instant::now(), // test-epoch
        }
    }

    fn node(&mut self, tweak: impl FnOnce(&mut ClientConfig)) -> usize {
        let i = self.nodes.len();
        let mut hash = [i as u8 + 1; 16];
        hash[5] = 14;
        hash[14] = 111;
        let mut cfg = ClientConfig::new(Md4Hash(hash));
        cfg.listen_port = 4662;
        cfg.seed = i as u64 + 1;
        tweak(&mut cfg);
        self.nodes.push(Node {
            c: Client::new(cfg),
            store: BTreeMap::new(),
            verifiers: BTreeMap::new(),
            corrupt: None,
            ip: Ipv4Addr::new(10, 0, 0, i as u8 + 1),
            links: BTreeMap::new(),
            inbox: BTreeMap::new(),
            storage_events: Vec::new(),
            closed: Vec::new(),
            banned: Vec::new(),
            complete: Vec::new(),
            sent: Vec::new(),
            max_asked: 0,
            next_conn: 1,
        });
        i
    }

    fn seeder(&mut self, data: &[u8], h: &FileHashes) -> usize {
        let n = self.node(|_| {});
        let f = self.nodes[n].c.add_shared("f.bin".into(), h).unwrap();
        self.nodes[n].store.insert(f, data.to_vec());
        n
    }

    fn leecher(&mut self, l: &FileLink, tweak: impl FnOnce(&mut ClientConfig)) -> (usize, FileId) {
        let n = self.node(tweak);
        let parts = crate::part_count(l.size) as u32;
        let f = self.nodes[n]
            .c
            .add_download(l, &Bitfield::new(parts), &Bitfield::new(parts))
            .unwrap();
        self.nodes[n].store.insert(f, vec![0; l.size as usize]);
        (n, f)
    }

    /// `a` dials `b`.
    fn connect(&mut self, a: usize, b: usize) {
        let ca = self.nodes[a].next_conn;
        self.nodes[a].next_conn += 1;
        let cb = self.nodes[b].next_conn;
        self.nodes[b].next_conn += 1;
        self.nodes[a].links.insert(ca, (b, cb));
        self.nodes[b].links.insert(cb, (a, ca));
        let (ipa, ipb) = (self.nodes[a].ip, self.nodes[b].ip);
        let now = self.now;
        self.nodes[b]
            .c
            .add_conn(cb, SocketAddr::from((ipa, 50_000)), Some(ipb), false, now);
        self.nodes[a]
            .c
            .add_conn(ca, SocketAddr::from((ipb, 4662)), Some(ipa), true, now);
    }

    fn handle_events(&mut self, i: usize) -> bool {
        let mut moved = false;
        while let Some(ev) = self.nodes[i].c.poll_event() {
            moved = true;
            match ev {
                Event::Send { conn, data, .. } => {
                    let Some(&(j, cj)) = self.nodes[i].links.get(&conn) else {
                        continue;
                    };
                    let mut all = BytesMut::new();
                    for d in data {
                        all.extend_from_slice(&d);
                    }
                    // Record what was sent, packet by packet.
                    let mut probe = all.clone();
                    let mut dec = Decoder::new(Limits::CLIENT);
                    while let Ok(Some(p)) = dec.decode(&mut probe) {
                        self.nodes[i].sent.push((p.protocol, p.opcode, p.payload));
                    }
                    self.nodes[j]
                        .inbox
                        .entry(cj)
                        .or_default()
                        .extend_from_slice(&all);
                    let now = self.now;
                    self.nodes[i].c.on_sent(conn, all.len() as u64, now);
                }
                Event::Storage { file, op } => self.storage(i, file, op),
                Event::DigestsKnown { file } => {
                    let n = &mut self.nodes[i];
                    let geo = n.c.geometry(file).unwrap();
                    let d = n.c.digests(file).unwrap();
                    n.verifiers.insert(file, PieceVerifier::new(geo, d));
                }
                Event::Close { conn, reason } => {
                    self.nodes[i].closed.push((conn, reason));
                    if let Some((j, cj)) = self.nodes[i].links.remove(&conn) {
                        self.nodes[j].links.remove(&cj);
                        let now = self.now;
                        self.nodes[j].c.remove_conn(cj, now);
                    }
                    let now = self.now;
                    self.nodes[i].c.remove_conn(conn, now);
                }
                Event::Ban { ip, .. } => self.nodes[i].banned.push(ip),
                Event::Complete { file } => self.nodes[i].complete.push(file),
                Event::PartVerified { .. } | Event::Connect { .. } => {}
                Event::Fatal { error, .. } => panic!("fatal: {error}"),
            }
        }
        moved
    }

    fn storage(&mut self, i: usize, file: FileId, op: StorageOp) {
        let n = &mut self.nodes[i];
        let geo = n.c.geometry(file).unwrap();
        let store = n.store.get_mut(&file).unwrap();
        match op {
            StorageOp::Write { piece, begin, data } => {
                let v = n.verifiers.get_mut(&file).expect("digests before writes");
                let mut at = (geo.piece_offset(piece) + u64::from(begin)) as usize;
                for d in &data {
                    store[at..at + d.len()].copy_from_slice(d);
                    at += d.len();
                }
                if let Some(ok) = v.write(piece, begin, &data).expect("in-order writes") {
                    n.storage_events
                        .push((file, StorageEvent::PieceDone { piece, ok }));
                }
            }
            StorageOp::Read {
                id,
                piece,
                begin,
                len,
            } => {
                let at = (geo.piece_offset(piece) + u64::from(begin)) as usize;
                let mut d = store[at..at + len as usize].to_vec();
                if let Some((lo, hi)) = n.corrupt {
                    let at = at as u64;
                    if at < hi && lo < at + u64::from(len) {
                        let flip = lo.max(at) - at;
                        d[flip as usize] ^= 0xff;
                    }
                }
                n.storage_events.push((
                    file,
                    StorageEvent::ReadDone {
                        id,
                        data: Ok(d.into()),
                    },
                ));
            }
            StorageOp::Check { piece } => {
                let v = n.verifiers.get(&file).unwrap();
                let at = geo.piece_offset(piece) as usize;
                let ok = v.check(piece, &store[at..at + geo.piece_size(piece) as usize]);
                n.storage_events
                    .push((file, StorageEvent::PieceDone { piece, ok }));
            }
            StorageOp::Abandon { .. } => {}
        }
    }

    /// Runs until nothing moves (timers included).
    fn run(&mut self) {
        for _ in 0..200_000 {
            let mut moved = false;
            for i in 0..self.nodes.len() {
                moved |= self.handle_events(i);
            }
            for i in 0..self.nodes.len() {
                let evs = std::mem::take(&mut self.nodes[i].storage_events);
                for (f, e) in evs {
                    moved = true;
                    let now = self.now;
                    self.nodes[i].c.handle_storage(f, e, now);
                }
                let inbox = std::mem::take(&mut self.nodes[i].inbox);
                for (conn, mut buf) in inbox {
                    let mut dec = Decoder::new(Limits::CLIENT);
                    while let Some(p) = dec.decode(&mut buf).expect("framing") {
                        moved = true;
                        let now = self.now;
                        self.nodes[i].c.handle_packet(conn, p, now);
                    }
                    assert!(buf.is_empty(), "whole packets only");
                }
                let asked = self.nodes[i]
                    .c
                    .conns
                    .values()
                    .filter_map(|c| c.down.as_ref())
                    .map(|d| d.pending.iter().filter(|p| p.asked).count())
                    .max()
                    .unwrap_or(0);
                self.nodes[i].max_asked = self.nodes[i].max_asked.max(asked);
            }
            if !moved {
                // Quiet: let time pass to the next timer (bounded).
                let next = self.nodes.iter().filter_map(|n| n.c.poll_timeout()).min();
                match next {
                    Some(t) if t <= self.now + Duration::from_secs(300) => {
                        self.now = self.now.max(t);
                        for i in 0..self.nodes.len() {
                            let now = self.now;
                            self.nodes[i].c.handle_timeout(now);
                        }
                    }
                    _ => return,
                }
            }
            self.now += Duration::from_micros(200);
        }
        panic!("no quiescence");
    }

    /// What a node saw, for failure messages.
    fn why(&self, i: usize) -> String {
        let n = &self.nodes[i];
        format!(
            "node {i}: closed {:?}, banned {:?}, {:?}, sent ops {:?}",
            n.closed,
            n.banned,
            n.c.stats(self.now),
            n.sent.iter().map(|p| p.1).collect::<Vec<_>>()
        )
    }

    fn sent_ops(&self, i: usize, p: Protocol, op: u8) -> Vec<Bytes> {
        self.nodes[i]
            .sent
            .iter()
            .filter(|(pp, o, _)| *pp == p && *o == op)
            .map(|(_, _, b)| b.clone())
            .collect()
    }
}

fn download(size: usize, with_parts: bool) {
    let data = noise(size, size as u64);
    let h = hashes(&data);
    let mut s = Swarm::new();
    let seed = s.seeder(&data, &h);
    let (l, f) = s.leecher(&link(&h, with_parts, true), |_| {});
    s.connect(l, seed);
    s.run();
    assert_eq!(
        s.nodes[l].complete,
        vec![f],
        "size {size}: closed {:?} / {:?}, {:?}, sent {:?}",
        s.nodes[l].closed,
        s.nodes[seed].closed,
        s.nodes[l].c.stats(s.now),
        s.nodes[l].sent.iter().map(|p| p.1).collect::<Vec<_>>()
    );
    assert!(s.nodes[l].store[&f] == data, "size {size}: data differs");
    assert!(s.nodes[l].c.is_complete(f));
    // The hashset was asked only when needed.
    let asked = s.sent_ops(l, Protocol::Edonkey, op::HASHSETREQUEST).len();
    let needed = !with_parts && crate::hashset_len(size as u64) > 0;
    assert_eq!(asked, usize::from(needed), "size {size}");
}

#[test]
fn downloads_around_part_boundaries() {
    for size in [
        1,
        EMBLOCKSIZE as usize,
        EMBLOCKSIZE as usize + 1,
        PARTSIZE as usize - 1,
        PARTSIZE as usize,
        PARTSIZE as usize + 1,
    ] {
        download(size, false);
    }
}

#[test]
fn exact_multiple_of_the_part_size() {
    // Two data parts, three hashes (the last is the empty part's), three
    // parts in the part status.
    download(2 * PARTSIZE as usize, false);
    download(2 * PARTSIZE as usize, true);
}

#[test]
fn empty_file_is_complete_at_once() {
    let mut c = Client::new(ClientConfig::new(Md4Hash([1; 16])));
    let l = FileLink {
        name: "e".into(),
        size: 0,
        hash: Md4Hash::EMPTY,
        aich: None,
        part_hashes: None,
        sources: vec![],
    };
    let f = c
        .add_download(&l, &Bitfield::new(0), &Bitfield::new(0))
        .unwrap();
    assert!(c.is_complete(f));
    let evs: Vec<Event> = std::iter::from_fn(|| c.poll_event()).collect();
    assert!(evs.iter().any(|e| matches!(e, Event::Complete { .. })));
}

#[test]
fn pending_list_is_deeper_than_three_and_packets_carry_three_ranges() {
    let data = noise(3 * PARTSIZE as usize, 5);
    let h = hashes(&data);
    let mut s = Swarm::new();
    let seed = s.seeder(&data, &h);
    let (l, f) = s.leecher(&link(&h, true, true), |_| {});
    s.connect(l, seed);
    s.run();
    assert_eq!(s.nodes[l].complete, vec![f]);
    let reqs = s.sent_ops(l, Protocol::Edonkey, op::REQUESTPARTS);
    assert!(reqs.len() > 3);
    for r in &reqs {
        // <hash 16><start x3><end x3>, u32 each: always three ranges.
        assert_eq!(r.len(), 16 + 24);
    }
    // More than one packet's worth was in flight at once.
    assert!(
        s.nodes[l].max_asked > 3,
        "max asked {}",
        s.nodes[l].max_asked
    );
    // Every block was asked exactly once.
    let mut starts: Vec<u32> = Vec::new();
    for r in &reqs {
        for k in 0..3 {
            let st = u32::from_le_bytes(r[16 + 4 * k..20 + 4 * k].try_into().unwrap());
            let en = u32::from_le_bytes(r[28 + 4 * k..32 + 4 * k].try_into().unwrap());
            if st < en {
                starts.push(st);
            }
        }
    }
    let n = starts.len();
    starts.sort_unstable();
    starts.dedup();
    assert_eq!(starts.len(), n, "a block was asked twice");
    assert_eq!(n, 3 * 53);
    // Uploads went as whole blocks, one packet each, plain (random data).
    let parts = s.sent_ops(seed, Protocol::Edonkey, op::SENDINGPART);
    assert_eq!(parts.len(), 3 * 53);
    assert!(
        s.sent_ops(seed, Protocol::Emule, emule_op::COMPRESSEDPART)
            .is_empty()
    );
}

#[test]
fn compressible_data_is_packed_and_inflated() {
    let data = text(PARTSIZE as usize + 300_000);
    let h = hashes(&data);
    let mut s = Swarm::new();
    let seed = s.seeder(&data, &h);
    let (l, f) = s.leecher(&link(&h, false, true), |_| {});
    s.connect(l, seed);
    s.run();
    assert_eq!(
        s.nodes[l].complete,
        vec![f],
        "{}\n{}",
        s.why(l),
        s.why(seed)
    );
    assert!(s.nodes[l].store[&f] == data);
    let packed = s.sent_ops(seed, Protocol::Emule, emule_op::COMPRESSEDPART);
    let wire: usize = packed.iter().map(|p| p.len()).sum();
    assert!(!packed.is_empty());
    assert!(wire < data.len() / 4, "{wire} bytes on the wire");
    // A leecher that does not accept packed data gets it plain.
    let mut s = Swarm::new();
    let seed = s.seeder(&data, &h);
    let (l, f) = s.leecher(&link(&h, false, true), |c| c.accept_compressed = false);
    s.connect(l, seed);
    s.run();
    assert_eq!(s.nodes[l].complete, vec![f]);
    assert!(
        s.sent_ops(seed, Protocol::Emule, emule_op::COMPRESSEDPART)
            .is_empty()
    );
}

fn bad_part(with_aich: bool) -> (Swarm, usize, usize, usize, FileId, Vec<u8>) {
    let data = noise(2 * PARTSIZE as usize + 50_000, 9);
    let mut h = hashes(&data);
    if !with_aich {
        h.aich = None;
    }
    let mut s = Swarm::new();
    let good = s.seeder(&data, &h);
    let bad = s.seeder(&data, &h);
    // The liar corrupts every block it sends of part 1.
    s.nodes[bad].corrupt = Some((PARTSIZE, 2 * PARTSIZE));
    let (l, f) = s.leecher(&link(&h, false, with_aich), |_| {});
    s.connect(l, good);
    s.connect(l, bad);
    s.run();
    (s, good, bad, l, f, data)
}

#[test]
fn bad_part_is_repaired_with_aich_and_the_liar_banned() {
    let (s, good, bad, l, f, data) = bad_part(true);
    assert_eq!(s.nodes[l].complete, vec![f], "{}", s.why(l));
    assert!(s.nodes[l].store[&f] == data, "data differs");
    assert_eq!(s.nodes[l].banned, vec![IpAddr::V4(s.nodes[bad].ip)]);
    let st = s.nodes[l].c.stats(s.now);
    assert!(st.hash_failures >= 1);
    assert!(st.aich_repairs >= 1);
    // AICH recovery data was asked of a peer, and answered.
    assert!(
        !s.sent_ops(l, Protocol::Emule, emule_op::AICHREQUEST)
            .is_empty()
    );
    let _ = good;
}

#[test]
fn bad_part_without_aich_is_fetched_again_and_the_liar_banned() {
    let (s, good, bad, l, f, data) = bad_part(false);
    assert_eq!(s.nodes[l].complete, vec![f], "{}", s.why(l));
    assert!(s.nodes[l].store[&f] == data, "data differs");
    assert_eq!(s.nodes[l].banned, vec![IpAddr::V4(s.nodes[bad].ip)]);
    assert!(!s.nodes[l].banned.contains(&IpAddr::V4(s.nodes[good].ip)));
    assert!(
        s.sent_ops(l, Protocol::Emule, emule_op::AICHREQUEST)
            .is_empty()
    );
}

#[test]
fn lone_liar_is_banned_and_the_download_stops_cleanly() {
    let data = noise(PARTSIZE as usize + 1000, 3);
    let mut h = hashes(&data);
    h.aich = None;
    let mut s = Swarm::new();
    let bad = s.seeder(&data, &h);
    s.nodes[bad].corrupt = Some((0, PARTSIZE));
    let (l, f) = s.leecher(&link(&h, false, false), |_| {});
    s.connect(l, bad);
    s.run();
    assert!(s.nodes[l].complete.is_empty());
    assert!(!s.nodes[l].c.is_complete(f));
    assert_eq!(s.nodes[l].banned, vec![IpAddr::V4(s.nodes[bad].ip)]);
    assert!(s.nodes[l].c.is_banned(IpAddr::V4(s.nodes[bad].ip)));
}

#[test]
fn upload_slots_and_queue() {
    let data = noise(PARTSIZE as usize / 2, 4);
    let h = hashes(&data);
    let mut s = Swarm::new();
    let seed = s.node(|c| c.upload_slots = 1);
    let fid = s.nodes[seed].c.add_shared("f.bin".into(), &h).unwrap();
    s.nodes[seed].store.insert(fid, data.clone());
    let (a, fa) = s.leecher(&link(&h, false, true), |_| {});
    let (b, fb) = s.leecher(&link(&h, false, true), |_| {});
    s.connect(a, seed);
    s.connect(b, seed);
    s.run();
    assert_eq!(s.nodes[a].complete, vec![fa]);
    assert_eq!(s.nodes[b].complete, vec![fb]);
    // One of them waited on the queue, then got the slot.
    let ranks = s.sent_ops(seed, Protocol::Emule, emule_op::QUEUERANKING);
    assert_eq!(ranks.len(), 1);
    assert_eq!(
        s.sent_ops(seed, Protocol::Edonkey, op::ACCEPTUPLOADREQ)
            .len(),
        2
    );
}

/// A leecher client and the conn it has to a scripted peer, past the hello
/// and file request, with a slot granted: the peer's packets are fed by
/// hand.
fn scripted_leecher(
    size: u64,
    peer_misc: impl FnOnce(&mut crate::client::OwnHello),
) -> (Client, FileId, Vec<Event>) {
    let data = noise(size as usize, 77);
    let h = hashes(&data);
    let mut c = Client::new(ClientConfig::new(Md4Hash([1; 16])));
    let n = crate::part_count(size) as u32;
    let f = c
        .add_download(&link(&h, true, false), &Bitfield::new(n), &Bitfield::new(n))
        .unwrap();
    let now = Instant::now(); // test-epoch
    c.add_conn(1, "10.0.0.2:4662".parse().unwrap(), None, true, now);
    let mut own = crate::client::OwnHello::weir("peer", 0, true);
    peer_misc(&mut own);
    let feed = |c: &mut Client, m: M| {
        let mut b = BytesMut::new();
        m.encode(&mut b);
        let p = Decoder::new(Limits::CLIENT)
            .decode(&mut b)
            .unwrap()
            .unwrap();
        c.handle_packet(1, p, now);
    };
    feed(
        &mut c,
        M::HelloAnswer(own.hello(Md4Hash([2; 16]), 0x0200_000A, 4662)),
    );
    feed(
        &mut c,
        M::MultiPacketAnswer {
            file: h.file_hash,
            entries: vec![crate::client::MultiAnswer::FileStatus(
                crate::client::PartStatus::complete(),
            )],
        },
    );
    feed(&mut c, M::AcceptUploadReq);
    let evs = std::iter::from_fn(|| c.poll_event()).collect();
    (c, f, evs)
}

fn feed(c: &mut Client, m: &M) {
    let mut b = BytesMut::new();
    m.encode(&mut b);
    let p = Decoder::new(Limits::CLIENT)
        .decode(&mut b)
        .unwrap()
        .unwrap();
    c.handle_packet(1, p, Instant::now()); // test-epoch
}

fn closed(evs: &[Event]) -> Option<String> {
    close_reason(evs).map(ToString::to_string)
}

fn close_reason(evs: &[Event]) -> Option<&CloseReason> {
    evs.iter().find_map(|e| match e {
        Event::Close { reason, .. } => Some(reason),
        _ => None,
    })
}

#[test]
fn zip_bomb_in_a_packed_part_closes_the_connection() {
    let (mut c, f, evs) = scripted_leecher(PARTSIZE + 1, |_| {});
    assert!(closed(&evs).is_none());
    let hash = c.file_hash(f).unwrap();
    // 64 MiB of zeros packed into ~64 KiB, announced for the first block.
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut z, &vec![0u8; 64 << 20]).unwrap();
    let bomb = z.finish().unwrap();
    feed(
        &mut c,
        &M::CompressedPart {
            file: hash,
            start: 0,
            packed_len: bomb.len() as u32,
            data: bomb.into(),
            wide: false,
        },
    );
    let evs: Vec<Event> = std::iter::from_fn(|| c.poll_event()).collect();
    let why = closed(&evs).expect("closed");
    assert!(
        why.contains("zip bomb") || why.contains("more than"),
        "{why}"
    );
    assert_eq!(c.stats(Instant::now()).protocol_errors, 1); // test-epoch
}

#[test]
fn part_data_with_a_gap_closes_the_connection() {
    let (mut c, f, _) = scripted_leecher(PARTSIZE + 1, |_| {});
    let hash = c.file_hash(f).unwrap();
    // The first block is asked; data in its middle, not at its start.
    feed(
        &mut c,
        &M::SendingPart {
            file: hash,
            start: 1000,
            end: 2000,
            data: Bytes::from(vec![0; 1000]),
            wide: false,
        },
    );
    let evs: Vec<Event> = std::iter::from_fn(|| c.poll_event()).collect();
    assert!(closed(&evs).expect("closed").contains("gap"));
}

#[test]
fn bad_part_status_and_bad_hashset_are_refused() {
    let data = noise(PARTSIZE as usize + 1, 1);
    let h = hashes(&data);
    let now = Instant::now(); // test-epoch
    let mk = || {
        let mut c = Client::new(ClientConfig::new(Md4Hash([1; 16])));
        let f = c
            .add_download(
                &link(&h, false, false),
                &Bitfield::new(2),
                &Bitfield::new(2),
            )
            .unwrap();
        c.add_conn(1, "10.0.0.2:4662".parse().unwrap(), None, true, now);
        feed(
            &mut c,
            &M::HelloAnswer(crate::client::OwnHello::weir("p", 0, true).hello(
                Md4Hash([2; 16]),
                1,
                1,
            )),
        );
        (c, f)
    };
    // A part status with the wrong part count.
    let (mut c, _) = mk();
    feed(
        &mut c,
        &M::FileStatus {
            file: h.file_hash,
            status: crate::client::PartStatus::from_fn(7, |_| true),
        },
    );
    let evs: Vec<Event> = std::iter::from_fn(|| c.poll_event()).collect();
    assert!(closed(&evs).expect("closed").contains("part status"));
    // A hashset that does not hash to the file hash: the peer is banned.
    let (mut c, f) = mk();
    feed(
        &mut c,
        &M::HashSetAnswer {
            file: h.file_hash,
            hashes: vec![Md4Hash([9; 16]); 2],
        },
    );
    let evs: Vec<Event> = std::iter::from_fn(|| c.poll_event()).collect();
    assert!(evs.iter().any(|e| matches!(e, Event::Ban { .. })));
    assert!(c.digests(f).is_none());
}

#[test]
fn uploader_serves_each_range_once_and_refuses_bad_ranges() {
    let data = noise(PARTSIZE as usize + 5000, 2);
    let h = hashes(&data);
    let now = Instant::now(); // test-epoch
    let mut c = Client::new(ClientConfig::new(Md4Hash([1; 16])));
    let f = c.add_shared("f.bin".into(), &h).unwrap();
    c.add_conn(1, "10.0.0.2:50000".parse().unwrap(), None, false, now);
    let own = crate::client::OwnHello::weir("amule-like", 0, false);
    feed(&mut c, &M::Hello(own.hello(Md4Hash([2; 16]), 1, 4662)));
    feed(&mut c, &M::StartUploadReq { file: h.file_hash });
    let b = EMBLOCKSIZE;
    // aMule repeats its pending ranges: [A,B,C], then [B,C,D].
    feed(
        &mut c,
        &M::RequestParts {
            file: h.file_hash,
            ranges: [(0, b), (b, 2 * b), (2 * b, 3 * b)],
        },
    );
    feed(
        &mut c,
        &M::RequestParts {
            file: h.file_hash,
            ranges: [(b, 2 * b), (2 * b, 3 * b), (3 * b, 4 * b)],
        },
    );
    let mut reads = Vec::new();
    let mut evs: Vec<Event> = std::iter::from_fn(|| c.poll_event()).collect();
    for e in &evs {
        if let Event::Storage {
            op:
                StorageOp::Read {
                    id,
                    piece,
                    begin,
                    len,
                },
            ..
        } = e
        {
            reads.push((*id, *piece, *begin, *len));
        }
    }
    let total: u32 = reads.iter().map(|r| r.3).sum();
    assert_eq!(u64::from(total), 4 * b, "{reads:?}");
    for (id, piece, begin, len) in reads {
        let at = piece as usize * PARTSIZE as usize + begin as usize;
        c.handle_storage(
            f,
            StorageEvent::ReadDone {
                id,
                data: Ok(Bytes::copy_from_slice(&data[at..at + len as usize])),
            },
            now,
        );
    }
    evs.extend(std::iter::from_fn(|| c.poll_event()));
    let mut got = BytesMut::new();
    for e in &evs {
        if let Event::Send { data, .. } = e {
            for d in data {
                got.extend_from_slice(d);
            }
        }
    }
    let mut dec = Decoder::new(Limits::CLIENT);
    let mut starts = Vec::new();
    while let Some(p) = dec.decode(&mut got).unwrap() {
        if let M::SendingPart { start, data: d, .. } = M::decode(&p, &Default::default()).unwrap() {
            assert_eq!(&d[..], &data[start as usize..start as usize + d.len()]);
            starts.push(start);
        }
    }
    assert_eq!(starts, [0, b, 2 * b, 3 * b]);
    // A range past the end of the file drops the peer.
    feed(
        &mut c,
        &M::RequestParts {
            file: h.file_hash,
            ranges: [(h.size - 10, h.size + 10), (0, 0), (0, 0)],
        },
    );
    let evs: Vec<Event> = std::iter::from_fn(|| c.poll_event()).collect();
    assert!(closed(&evs).is_some());
}

/// An uploader whose downloader stops reading (aMule 2.3.3's wedged
/// socket): nudged once, then reconnected to, where the slot and the last
/// requested blocks wait for it.
#[test]
fn wedged_downloader_is_nudged_then_reconnected() {
    let data = noise(PARTSIZE as usize, 8);
    let h = hashes(&data);
    let t0 = Instant::now(); // test-epoch
    let mut c = Client::new(ClientConfig::new(Md4Hash([1; 16])));
    let f = c.add_shared("f.bin".into(), &h).unwrap();
    let peer_hash = Md4Hash([2; 16]);
    let hello = crate::client::OwnHello::weir("amule-like", 0, false).hello(peer_hash, 1, 4662);
    let at = |c: &mut Client, conn: ConnId, m: &M, now: Instant| {
        let mut b = BytesMut::new();
        m.encode(&mut b);
        let p = Decoder::new(Limits::CLIENT)
            .decode(&mut b)
            .unwrap()
            .unwrap();
        c.handle_packet(conn, p, now);
    };
    // Serve every read at once and report every write as done.
    let drain = |c: &mut Client, now: Instant| -> Vec<Event> {
        let mut out = Vec::new();
        while let Some(e) = c.poll_event() {
            match e {
                Event::Storage {
                    op: StorageOp::Read { id, begin, len, .. },
                    ..
                } => {
                    let d = Bytes::copy_from_slice(&data[begin as usize..(begin + len) as usize]);
                    c.handle_storage(f, StorageEvent::ReadDone { id, data: Ok(d) }, now);
                }
                Event::Send { conn, data: d, .. } => {
                    let n: usize = d.iter().map(|b| b.len()).sum();
                    c.on_sent(conn, n as u64, now);
                    out.push(Event::Send {
                        conn,
                        data: d,
                        payload: 0,
                    });
                }
                e => out.push(e),
            }
        }
        out
    };
    c.add_conn(1, "10.0.0.2:50000".parse().unwrap(), None, false, t0);
    at(&mut c, 1, &M::Hello(hello.clone()), t0);
    at(&mut c, 1, &M::StartUploadReq { file: h.file_hash }, t0);
    let b = EMBLOCKSIZE;
    let last = [(0, b), (b, 2 * b), (2 * b, 3 * b)];
    at(
        &mut c,
        1,
        &M::RequestParts {
            file: h.file_hash,
            ranges: last,
        },
        t0,
    );
    drain(&mut c, t0);
    let opcodes = |evs: &[Event]| -> Vec<u8> {
        let mut v = Vec::new();
        for e in evs {
            if let Event::Send { data, .. } = e {
                let mut all = BytesMut::new();
                for d in data {
                    all.extend_from_slice(d);
                }
                let mut dec = Decoder::new(Limits::CLIENT);
                while let Ok(Some(p)) = dec.decode(&mut all) {
                    v.push(p.opcode);
                }
            }
        }
        v
    };
    // Silence: one nudge, no more until it is answered or times out.
    let mut now = t0 + Duration::from_secs(2);
    c.handle_timeout(now);
    let evs = drain(&mut c, now);
    assert_eq!(opcodes(&evs), [emule_op::PUBLICIP_REQ]);
    now += Duration::from_millis(500);
    c.handle_timeout(now);
    assert!(opcodes(&drain(&mut c, now)).is_empty());
    // Nothing comes back: reconnect.
    now += Duration::from_secs(3);
    c.handle_timeout(now);
    let evs = drain(&mut c, now);
    let addr = evs.iter().find_map(|e| match e {
        Event::Connect { addr } => Some(*addr),
        _ => None,
    });
    assert_eq!(addr, Some("10.0.0.2:4662".parse().unwrap()));
    assert_eq!(close_reason(&evs), Some(&CloseReason::StoppedReading));
    c.remove_conn(1, now);
    // The new connection: hello answer, then the slot and the blocks.
    c.add_conn(2, "10.0.0.2:4662".parse().unwrap(), None, true, now);
    drain(&mut c, now);
    at(&mut c, 2, &M::HelloAnswer(hello), now);
    let evs = drain(&mut c, now);
    let ops = opcodes(&evs);
    assert_eq!(ops[0], op::ACCEPTUPLOADREQ);
    assert_eq!(ops.iter().filter(|o| **o == op::SENDINGPART).count(), 3);
    // A peer that answers the nudge is left alone.
    c.add_conn(3, "10.0.0.3:50000".parse().unwrap(), None, false, now);
    let other = crate::client::OwnHello::weir("live", 0, false).hello(Md4Hash([3; 16]), 1, 4662);
    at(&mut c, 3, &M::Hello(other), now);
    at(&mut c, 3, &M::StartUploadReq { file: h.file_hash }, now);
    drain(&mut c, now);
    now += Duration::from_secs(2);
    c.handle_timeout(now);
    drain(&mut c, now);
    at(
        &mut c,
        3,
        &M::PublicIpAnswer {
            ip: Ipv4Addr::new(10, 0, 0, 1),
        },
        now,
    );
    now += Duration::from_secs(4);
    c.handle_timeout(now);
    let evs = drain(&mut c, now);
    let live: SocketAddr = "10.0.0.3:4662".parse().unwrap();
    assert!(
        !evs.iter()
            .any(|e| matches!(e, Event::Connect { addr } if *addr == live)
                || matches!(e, Event::Close { conn: 3, .. }))
    );
}

mod hostile;
