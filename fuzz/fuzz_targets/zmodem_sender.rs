//! weir-zmodem `Sender` (the `sz` state machine) driven by a hostile
//! receiver: ZRINIT with any flags and buffer size, ZRPOS/ZACK at any
//! position, ZSKIP, ZNAK, ZFIN, ZCHALLENGE, ..., in hex or binary, raw
//! bytes, timeouts, and file data supplied short, long or not at all.
//!
//! The sender must never panic, must only ask for data inside the file it
//! is sending, must stop for good after an error, and must keep its output
//! bounded.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use weir_fuzz::Input;
use weir_zmodem::consts::frame;
use weir_zmodem::escape::Escaper;
use weir_zmodem::frame::{Header, HeaderFormat, encode_header};
use weir_zmodem::{FileOffer, SendEvent, Sender, SenderConfig};

const TYPES: [u8; 12] = [
    frame::ZRINIT,
    frame::ZRINIT,
    frame::ZRPOS,
    frame::ZRPOS,
    frame::ZACK,
    frame::ZACK,
    frame::ZSKIP,
    frame::ZNAK,
    frame::ZFIN,
    frame::ZCHALLENGE,
    frame::ZFERR,
    frame::ZDATA,
];

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let sel = inp.byte();
    let files: Vec<FileOffer> = (0..1 + sel % 3)
        .map(|i| FileOffer {
            name: format!("f{i}").into_bytes(),
            size: u64::from(inp.u16()),
            mtime: inp.u64(),
            mode: inp.u32(),
        })
        .collect();
    let cfg = SenderConfig {
        block_size: 32 << (inp.byte() % 9),
        window: (sel & 4 != 0).then(|| u32::from(inp.u16())),
        segment: (sel & 8 != 0).then(|| u32::from(inp.u16())),
        stream_window: (sel & 16 != 0).then(|| u32::from(inp.u16())),
        stream_window_stale_ok: None,
        crc32: sel & 32 != 0,
        escape_ctl: sel & 64 != 0,
        resume: sel & 128 != 0,
        overwrite: false,
        timeout: Duration::from_secs(10),
        retries: 3,
        low_water: 4096,
        chunk: 1 + usize::from(inp.u16()),
    };
    let sizes: Vec<u64> = files.iter().map(|f| f.size).collect();
    let mut now = Instant::now();
    let mut tx = Sender::new(cfg, files, now).expect("small files");
    let mut esc = Escaper::new(false);
    let mut line = Vec::new();
    let mut done = false;
    let mut finished = false;
    let mut steps = 0;
    while !inp.is_empty() && steps < 300 {
        steps += 1;
        line.clear();
        let op = inp.byte();
        let result = match op % 6 {
            0 => {
                let n = usize::from(inp.byte() % 32);
                tx.handle_input(now, inp.take(n))
            }
            1 | 2 => {
                let fmt = [HeaderFormat::Hex, HeaderFormat::Bin16, HeaderFormat::Bin32]
                    [usize::from(op >> 3) % 3];
                let t = if op & 0x80 != 0 {
                    inp.byte()
                } else {
                    TYPES[usize::from(inp.byte()) % TYPES.len()]
                };
                let (file, pos, size) = tx.position();
                assert!(
                    pos <= size && file <= sizes.len(),
                    "position {:?} of {sizes:?}",
                    tx.position()
                );
                let d = match op >> 6 & 1 {
                    0 => (pos as u32)
                        .wrapping_add(u32::from(inp.byte()))
                        .wrapping_sub(128)
                        .to_le_bytes(),
                    _ => inp.u32().to_le_bytes(),
                };
                encode_header(
                    &Header {
                        frame_type: t,
                        data: d,
                    },
                    fmt,
                    &mut esc,
                    &mut line,
                );
                tx.handle_input(now, &line)
            }
            3 => {
                now = tx.poll_timeout().unwrap_or(now) + Duration::from_millis(1);
                tx.handle_timeout(now)
            }
            _ => match tx.poll_data_request() {
                Some(req) => {
                    assert!(req.file < sizes.len());
                    assert!(req.len > 0);
                    assert!(
                        req.offset + req.len as u64 <= sizes[req.file],
                        "{req:?} past the end"
                    );
                    let n = match inp.byte() % 4 {
                        0 => 0,
                        1 => req.len / 2,
                        2 => req.len + 100,
                        _ => req.len,
                    };
                    tx.supply_data(now, req.file, req.offset, &vec![0x18; n])
                }
                None => Ok(()),
            },
        };
        if done {
            assert!(
                result.is_ok(),
                "an error after the session ended: {result:?}"
            );
        }
        if result.is_err() {
            assert!(tx.is_done());
            done = true;
        }
        while let Some(ev) = tx.poll_event() {
            assert!(!finished, "event after Finished: {ev:?}");
            match ev {
                SendEvent::FileStarted { file, offset } => assert!(offset <= sizes[file]),
                SendEvent::FileDone { file, size } => assert_eq!(size, sizes[file]),
                SendEvent::FileSkipped { file } | SendEvent::Retransmit { file, .. } => {
                    assert!(file < sizes.len())
                }
                SendEvent::Finished => finished = true,
                SendEvent::ReceiverReady { .. } => {}
            }
        }
        let n = tx.pending_output().len();
        assert!(n < 1 << 20, "{n} bytes of output pending");
        tx.consume_output(n);
        if tx.is_done() {
            done = true;
            assert!(
                tx.poll_timeout().is_none(),
                "a timer after the session ended"
            );
        }
    }
});
