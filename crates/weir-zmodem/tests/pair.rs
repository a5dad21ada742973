//! Sender and receiver driven against each other in virtual time over an
//! in-memory line that can buffer, split and corrupt bytes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use weir_zmodem::{
    FileOffer, Receiver, ReceiverConfig, RecvError, RecvEvent, SendError, SendEvent, Sender,
    SenderConfig,
};

/// One direction of the line: bounded buffer, corruption at byte offsets.
struct Pipe {
    buf: VecDeque<u8>,
    cap: usize,
    total: u64,
    corrupt: Vec<u64>,
}

impl Pipe {
    fn new(cap: usize, corrupt: Vec<u64>) -> Self {
        Pipe {
            buf: VecDeque::new(),
            cap,
            total: 0,
            corrupt,
        }
    }

    fn push(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.cap - self.buf.len());
        for &b in &data[..n] {
            let b = if self.corrupt.contains(&self.total) {
                b ^ 0x5a
            } else {
                b
            };
            self.buf.push_back(b);
            self.total += 1;
        }
        n
    }

    fn pull(&mut self, max: usize) -> Vec<u8> {
        let n = max.min(self.buf.len());
        self.buf.drain(..n).collect()
    }
}

struct Outcome {
    files: Vec<Vec<u8>>,
    send: Result<(), SendError>,
    recv: Result<(), RecvError>,
    restarts: u64,
    skipped: Vec<usize>,
}

/// What the receiving side does with an offer.
#[derive(Clone, Copy)]
enum Policy {
    Accept,
    SkipIndex(usize),
    /// Resume: keep this many bytes of each file already "on disk".
    ResumeFrom(u32),
}

fn run(
    files: &[Vec<u8>],
    scfg: SenderConfig,
    rcfg: ReceiverConfig,
    corrupt: Vec<u64>,
    cap: usize,
    policy: Policy,
) -> Outcome {
    let t0 = Instant::now(); // test-epoch
    let mut now = t0;
    let offers = files
        .iter()
        .enumerate()
        .map(|(i, f)| FileOffer {
            name: format!("f{i}").into_bytes(),
            size: f.len() as u64,
            mtime: 0o1234,
            mode: 0o100644,
        })
        .collect();
    let mut s = Sender::new(scfg, offers, now).unwrap();
    let mut r = Receiver::new(rcfg, now);
    let mut fwd = Pipe::new(cap, corrupt);
    let mut back = Pipe::new(cap, Vec::new());
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut send = Ok(());
    let mut recv = Ok(());
    let mut skipped = Vec::new();
    let mut offered = 0usize;
    let mut steps = 0u64;
    while !(s.is_done() && r.is_done()) {
        steps += 1;
        assert!(steps < 10_000_000, "no progress");
        let mut moved = false;
        while let Some(req) = s.poll_data_request() {
            let f = &files[req.file];
            let end = (req.offset as usize + req.len).min(f.len());
            if let Err(e) = s.supply_data(now, req.file, req.offset, &f[req.offset as usize..end]) {
                send = Err(e);
            }
            moved = true;
        }
        while let Some(ev) = s.poll_event() {
            if let SendEvent::FileSkipped { file } = ev {
                skipped.push(file);
            }
        }
        let n = fwd.push(s.pending_output());
        if n > 0 {
            s.consume_output(n);
            moved = true;
        }
        let n = back.push(r.pending_output());
        if n > 0 {
            r.consume_output(n);
            moved = true;
        }
        // The receiver reads in odd-sized chunks to split frames anywhere.
        let chunk = fwd.pull(4093);
        if !chunk.is_empty() && !r.is_done() {
            if let Err(e) = r.handle_input(now, &chunk) {
                recv = Err(e);
            }
            moved = true;
        }
        while let Some(ev) = r.poll_event() {
            match ev {
                RecvEvent::FileOffered(req) => {
                    got.push(Vec::new());
                    let idx = offered;
                    offered += 1;
                    assert_eq!(req.info.name, format!("f{idx}").into_bytes());
                    match policy {
                        Policy::SkipIndex(k) if k == idx => r.skip(now),
                        Policy::ResumeFrom(keep) => {
                            let keep = (keep as usize).min(files[idx].len());
                            got[idx].extend_from_slice(&files[idx][..keep]);
                            r.accept(now, keep as u32);
                        }
                        _ => r.accept(now, 0),
                    }
                }
                RecvEvent::Data { offset, data } => {
                    let f = got.last_mut().unwrap();
                    assert_eq!(offset as usize, f.len(), "data in order");
                    f.extend_from_slice(&data);
                }
                _ => {}
            }
        }
        let chunk = back.pull(usize::MAX);
        if !chunk.is_empty() && !s.is_done() {
            if let Err(e) = s.handle_input(now, &chunk) {
                send = Err(e);
            }
            moved = true;
        }
        if !moved {
            // Idle: jump to the next timer.
            let next = [s.poll_timeout(), r.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) => now = now.max(t),
                None => {
                    if s.is_done() && !r.is_done() {
                        let _ = r.handle_eof(now);
                    } else if r.is_done() && !s.is_done() {
                        // The receiver left; the sender's timers run out.
                        now += Duration::from_secs(3600);
                    } else {
                        panic!("deadlock: no timers and nothing moving");
                    }
                }
            }
            if let Err(e) = s.handle_timeout(now) {
                send = Err(e);
            }
            if let Err(e) = r.handle_timeout(now) {
                recv = Err(e);
            }
        }
    }
    Outcome {
        files: got,
        send,
        recv,
        restarts: s.restarts(),
        skipped,
    }
}

fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn assert_ok(o: &Outcome, files: &[Vec<u8>]) {
    assert_eq!(o.send, Ok(()));
    assert_eq!(o.recv, Ok(()));
    assert_eq!(o.files.len(), files.len());
    for (i, (a, b)) in o.files.iter().zip(files).enumerate() {
        assert!(
            a == b,
            "file {i} differs ({} vs {} bytes)",
            a.len(),
            b.len()
        );
    }
}

#[test]
fn streaming_batch_with_empty_file() {
    let files = vec![data(300_000, 1), Vec::new(), data(8192 * 3, 2)];
    let o = run(
        &files,
        SenderConfig::default(),
        ReceiverConfig::default(),
        vec![],
        64 * 1024,
        Policy::Accept,
    );
    assert_ok(&o, &files);
    assert_eq!(o.restarts, 0);
}

#[test]
fn every_mode_round_trips() {
    let files = vec![data(200_001, 3), data(1, 4)];
    let modes: Vec<(SenderConfig, ReceiverConfig)> = vec![
        (
            SenderConfig {
                crc32: false,
                ..Default::default()
            },
            ReceiverConfig::default(),
        ),
        (
            SenderConfig::default(),
            ReceiverConfig {
                crc32: false,
                ..Default::default()
            },
        ),
        (
            SenderConfig {
                escape_ctl: true,
                ..Default::default()
            },
            ReceiverConfig::default(),
        ),
        (
            SenderConfig::default(),
            ReceiverConfig {
                escape_ctl: true,
                ..Default::default()
            },
        ),
        (
            SenderConfig {
                window: Some(32768),
                ..Default::default()
            },
            ReceiverConfig::default(),
        ),
        (
            SenderConfig {
                segment: Some(16384),
                ..Default::default()
            },
            ReceiverConfig::default(),
        ),
        (
            SenderConfig::default(),
            ReceiverConfig {
                buffer: 4096,
                ..Default::default()
            },
        ),
        (
            SenderConfig {
                block_size: 1024,
                ..Default::default()
            },
            ReceiverConfig::default(),
        ),
    ];
    for (i, (s, r)) in modes.into_iter().enumerate() {
        let o = run(&files, s, r, vec![], 16 * 1024, Policy::Accept);
        assert_eq!(o.send, Ok(()), "mode {i}");
        assert_ok(&o, &files);
    }
}

#[test]
fn corruption_recovers_in_every_mode() {
    let files = vec![data(1_000_000, 5)];
    for (i, s) in [
        SenderConfig::default(),
        SenderConfig {
            window: Some(32768),
            ..Default::default()
        },
        SenderConfig {
            crc32: false,
            ..Default::default()
        },
        SenderConfig {
            escape_ctl: true,
            ..Default::default()
        },
    ]
    .into_iter()
    .enumerate()
    {
        for seed in 0..4u64 {
            let hits: Vec<u64> = (0..3).map(|k| 5_000 + seed * 7919 + k * 300_001).collect();
            let o = run(
                &files,
                s.clone(),
                ReceiverConfig::default(),
                hits,
                128 * 1024,
                Policy::Accept,
            );
            assert_ok(&o, &files);
            assert!(
                o.restarts >= 1,
                "mode {i} seed {seed}: the corruption was noticed"
            );
        }
    }
}

#[test]
fn corruption_of_headers_and_trailers_recovers() {
    // Hit the first bytes (ZRQINIT area, ZFILE) and the very end (ZEOF).
    let files = vec![data(50_000, 6), data(10, 7)];
    let plain = run(
        &files,
        SenderConfig::default(),
        ReceiverConfig::default(),
        vec![],
        1 << 20,
        Policy::Accept,
    );
    assert_ok(&plain, &files);
    for at in [
        3u64, 10, 25, 40, 60, 80, 100, 50_100, 50_130, 50_150, 50_200,
    ] {
        let o = run(
            &files,
            SenderConfig::default(),
            ReceiverConfig::default(),
            vec![at],
            1 << 20,
            Policy::Accept,
        );
        assert_ok(&o, &files);
    }
}

#[test]
fn skip_and_resume() {
    let files = vec![data(40_000, 8), data(50_000, 9), data(10_000, 10)];
    let o = run(
        &files,
        SenderConfig::default(),
        ReceiverConfig::default(),
        vec![],
        64 * 1024,
        Policy::SkipIndex(1),
    );
    assert_eq!(o.send, Ok(()));
    assert_eq!(o.skipped, vec![1]);
    assert_eq!(o.files[0], files[0]);
    assert!(o.files[1].is_empty());
    assert_eq!(o.files[2], files[2]);

    let s = SenderConfig {
        resume: true,
        ..Default::default()
    };
    let o = run(
        &files,
        s,
        ReceiverConfig::default(),
        vec![],
        64 * 1024,
        Policy::ResumeFrom(12_345),
    );
    assert_ok(&o, &files);
}

#[test]
fn receiver_silence_and_sender_loss_time_out() {
    let t0 = Instant::now(); // test-epoch
    let cfg = SenderConfig {
        timeout: Duration::from_secs(1),
        retries: 2,
        ..Default::default()
    };
    let mut s = Sender::new(cfg, vec![], t0).unwrap();
    let mut now = t0;
    let mut err = None;
    for _ in 0..10 {
        now = s.poll_timeout().unwrap_or(now);
        if let Err(e) = s.handle_timeout(now) {
            err = Some(e);
            break;
        }
    }
    assert_eq!(err, Some(SendError::Timeout("ZRQINIT", 2)));

    let rcfg = ReceiverConfig {
        timeout: Duration::from_secs(1),
        retries: 2,
        ..Default::default()
    };
    let mut r = Receiver::new(rcfg, t0);
    let first = r.pending_output().to_vec();
    r.consume_output(first.len());
    let mut now = t0;
    let mut zrinits = 1;
    let mut err = None;
    for _ in 0..10 {
        now = r.poll_timeout().unwrap_or(now);
        match r.handle_timeout(now) {
            Ok(()) => {
                assert_eq!(r.pending_output(), &first[..], "ZRINIT sent again");
                let n = r.pending_output().len();
                r.consume_output(n);
                zrinits += 1;
            }
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    assert_eq!(zrinits, 3);
    assert!(matches!(err, Some(RecvError::Timeout(2, _))));
}

#[test]
fn file_over_4_gib_is_refused() {
    let t0 = Instant::now(); // test-epoch
    let big = FileOffer {
        name: b"big".to_vec(),
        size: 1 << 32,
        mtime: 0,
        mode: 0,
    };
    let e = Sender::new(SenderConfig::default(), vec![big], t0)
        .err()
        .unwrap();
    assert!(matches!(e, SendError::FileTooLarge { size, .. } if size == 1 << 32));
    assert!(e.to_string().contains("4294967295"));
    let edge = FileOffer {
        name: b"edge".to_vec(),
        size: u32::MAX as u64,
        mtime: 0,
        mode: 0,
    };
    assert!(Sender::new(SenderConfig::default(), vec![edge], t0).is_ok());
}
