//! weir-zmodem `Receiver` (the `rz` state machine) driven by a hostile
//! sender: frames built from the fuzzer's bytes (any header type and
//! position, ZFILE blocks, data subpackets, some corrupted), raw bytes,
//! timeouts, the end of the line, and accept/skip decisions.
//!
//! The receiver must never panic, must hand out data for a file as one
//! contiguous run from where it was accepted (so nothing is written twice
//! or skipped), must end a file at the length it handed out, must stop for
//! good after an error, and must keep its output bounded.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use weir_fuzz::Input;
use weir_zmodem::consts::frame;
use weir_zmodem::escape::Escaper;
use weir_zmodem::frame::{FrameEnd, Header, HeaderFormat, encode_header, encode_subpacket};
use weir_zmodem::{FileInfo, Receiver, ReceiverConfig, RecvEvent};

const TYPES: [u8; 14] = [
    frame::ZRQINIT,
    frame::ZSINIT,
    frame::ZFILE,
    frame::ZFILE,
    frame::ZDATA,
    frame::ZDATA,
    frame::ZDATA,
    frame::ZEOF,
    frame::ZEOF,
    frame::ZFIN,
    frame::ZSKIP,
    frame::ZNAK,
    frame::ZFREECNT,
    frame::ZABORT,
];

struct Check {
    /// Next offset data of the current file must start at.
    next: Option<u64>,
    done: bool,
    finished: bool,
}

fn drain(rx: &mut Receiver, inp: &mut Input<'_>, now: Instant, c: &mut Check) {
    while let Some(ev) = rx.poll_event() {
        assert!(!c.finished, "event after Finished: {ev:?}");
        match ev {
            RecvEvent::FileOffered(req) => {
                assert!(!req.info.name.is_empty());
                assert!(c.next.is_none(), "a new file while one is being received");
                match inp.byte() % 4 {
                    0 => rx.skip(now),
                    1 => {
                        let off = u32::from(inp.u16());
                        rx.accept(now, off);
                        c.next = Some(u64::from(off));
                    }
                    _ => {
                        rx.accept(now, 0);
                        c.next = Some(0);
                    }
                }
            }
            RecvEvent::Data { offset, data } => {
                let next = c.next.expect("data outside a file");
                assert_eq!(offset, next, "data not contiguous");
                assert!(!data.is_empty());
                c.next = Some(next + data.len() as u64);
            }
            RecvEvent::FileDone { size } => {
                assert_eq!(
                    Some(size),
                    c.next,
                    "file done at another length than received"
                );
                c.next = None;
            }
            RecvEvent::FileAbandoned { pos } => {
                assert_eq!(Some(pos), c.next);
                c.next = None;
            }
            RecvEvent::Retransmit { pos, .. } => {
                let next = c.next.expect("retransmit outside a file");
                assert!(pos >= next);
            }
            RecvEvent::Finished => {
                assert!(rx.is_finished());
                c.finished = true;
            }
        }
    }
    let n = rx.pending_output().len();
    assert!(n < 1 << 20, "{n} bytes of output pending");
    rx.consume_output(n);
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let sel = inp.byte();
    let cfg = ReceiverConfig {
        crc32: sel & 1 != 0,
        escape_ctl: sel & 2 != 0,
        buffer: if sel & 4 != 0 { 1024 } else { 0 },
        timeout: Duration::from_secs(10),
        retries: u32::from(sel >> 4),
        max_garbage: 4096,
        max_subpacket: 1024,
        flush_at: [1, 100, 4096][usize::from(sel >> 3 & 1) + usize::from(sel >> 7)],
    };
    let mut now = Instant::now();
    let mut rx = Receiver::new(cfg, now);
    let mut esc = Escaper::new(sel & 2 != 0);
    let mut fmt = HeaderFormat::Bin32;
    let mut c = Check {
        next: None,
        done: false,
        finished: false,
    };
    let mut line = Vec::new();
    let mut steps = 0;
    while !inp.is_empty() && steps < 200 {
        steps += 1;
        line.clear();
        let op = inp.byte();
        let result = match op % 8 {
            0 => {
                let n = usize::from(inp.byte() % 64);
                rx.handle_input(now, inp.take(n))
            }
            1 | 2 => {
                fmt = [HeaderFormat::Hex, HeaderFormat::Bin16, HeaderFormat::Bin32]
                    [usize::from(op >> 3) % 3];
                let t = if op & 0x80 != 0 {
                    inp.byte()
                } else {
                    TYPES[usize::from(inp.byte()) % TYPES.len()]
                };
                let pos = if op & 0x40 != 0 {
                    inp.u32()
                } else {
                    rx.position() as u32
                };
                encode_header(&Header::with_pos(t, pos), fmt, &mut esc, &mut line);
                rx.handle_input(now, &line)
            }
            3 | 4 => {
                let block;
                let body: &[u8] = if op & 0x80 != 0 {
                    let n = usize::from(inp.byte() % 16);
                    let name = inp.take(n);
                    block = {
                        let mut b = Vec::new();
                        FileInfo {
                            name: name.to_vec(),
                            size: Some(inp.u32().into()),
                            mtime: Some(inp.u64()),
                            mode: Some(inp.u32()),
                            files_left: None,
                            bytes_left: None,
                        }
                        .encode(&mut b);
                        b
                    };
                    &block
                } else {
                    let n = usize::from(inp.u16() % 1100);
                    inp.take(n)
                };
                let end = [
                    FrameEnd::Crce,
                    FrameEnd::Crcg,
                    FrameEnd::Crcq,
                    FrameEnd::Crcw,
                ][usize::from(op >> 3) % 4];
                encode_subpacket(body, end, fmt.data_crc(), &mut esc, &mut line);
                if op & 0x40 != 0 && !line.is_empty() {
                    // Line noise: one byte changed.
                    let i = usize::from(inp.u16()) % line.len();
                    line[i] ^= 1 << (inp.byte() % 8);
                }
                rx.handle_input(now, &line)
            }
            5 => {
                now = rx.poll_timeout().unwrap_or(now) + Duration::from_millis(1);
                rx.handle_timeout(now)
            }
            6 => {
                now += Duration::from_millis(u64::from(inp.byte()) * 100);
                rx.handle_timeout(now)
            }
            _ => rx.handle_eof(now),
        };
        if c.done {
            assert!(
                result.is_ok(),
                "an error after the session ended: {result:?}"
            );
        }
        if result.is_err() {
            assert!(rx.is_done(), "an error without ending: {result:?}");
            c.done = true;
        }
        drain(&mut rx, &mut inp, now, &mut c);
        if rx.is_done() {
            c.done = true;
            assert!(
                rx.poll_timeout().is_none(),
                "a timer after the session ended"
            );
        }
    }
});
