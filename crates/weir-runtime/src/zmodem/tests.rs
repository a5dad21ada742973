//! The receive driver against a scripted sender over a socketpair: unsafe
//! names, oversized offers, a cut transfer keeping its partial file, and
//! resuming it.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Instant;

use bytes::BytesMut;
use weir_zmodem::consts::{CAN, frame, zconv};
use weir_zmodem::crc::CrcKind;
use weir_zmodem::decode::{Decoder, Item};
use weir_zmodem::escape::Escaper;
use weir_zmodem::frame::{FrameEnd, Header, HeaderFormat, encode_header, encode_subpacket};
use weir_zmodem::{FileInfo, FileOffer, Sender, SenderConfig};

use super::*;

fn temp_dir(tag: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("weir-rt-zm-{}-{tag}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
        .collect()
}

/// Runs `receive_files` into `dir` on one end of a socketpair (in a
/// thread); returns the other end and the join handle.
fn receiver(
    dir: &Path,
    resume: bool,
) -> (
    UnixStream,
    thread::JoinHandle<Result<RecvReport, ZmodemError>>,
) {
    let (a, b) = UnixStream::pair().unwrap();
    let fd = OwnedFd::from(b);
    let line = Line::from_fds(fd.try_clone().unwrap(), fd);
    let opts = RecvOptions {
        dir: dir.to_path_buf(),
        resume,
        ..RecvOptions::default()
    };
    let h = thread::spawn(move || receive_files(line, &opts, &mut |_| {}));
    (a, h)
}

/// Drives a sender core over `sock` until it is done, or until `stop_after`
/// bytes of file data were framed (then cancels with CAN*5 and closes).
fn drive(sock: &mut UnixStream, mut s: Sender, files: &[Vec<u8>], stop_after: Option<u64>) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut framed = 0u64;
    loop {
        while let Some(req) = s.poll_data_request() {
            let f = &files[req.file];
            let end = (req.offset as usize + req.len).min(f.len());
            s.supply_data(
                Instant::now(),
                req.file,
                req.offset,
                &f[req.offset as usize..end],
            )
            .unwrap();
            framed += (end - req.offset as usize) as u64;
        }
        let out = s.pending_output().to_vec();
        sock.write_all(&out).unwrap();
        s.consume_output(out.len());
        if stop_after.is_some_and(|n| framed >= n) {
            sock.write_all(&[CAN; 5]).unwrap();
            return;
        }
        if s.is_done() {
            return;
        }
        if s.poll_data_request().is_some() {
            // Written out; the sender wants more data before any answer.
            continue;
        }
        let n = sock.read(&mut buf).unwrap();
        assert!(n > 0, "receiver closed the line early");
        s.handle_input(Instant::now(), &buf[..n]).unwrap();
    }
}

fn offers(names: &[&str], files: &[Vec<u8>]) -> Vec<FileOffer> {
    names
        .iter()
        .zip(files)
        .map(|(n, f)| FileOffer {
            name: n.as_bytes().to_vec(),
            size: f.len() as u64,
            mtime: 1_700_000_000,
            mode: 0o100644,
        })
        .collect()
}

#[test]
fn names_never_leave_the_directory() {
    let base = temp_dir("names");
    let dir = base.join("inbox");
    std::fs::create_dir_all(&dir).unwrap();
    let names = [
        "../evil.txt",
        "/tmp/weir-absolute.txt",
        "sub/dir/ok.txt",
        "a/../b.txt",
        "good.txt",
    ];
    let files: Vec<Vec<u8>> = (0..names.len()).map(|i| data(5000 + i, i as u8)).collect();
    let (mut sock, h) = receiver(&dir, false);
    let s = Sender::new(
        SenderConfig::default(),
        offers(&names, &files),
        Instant::now(),
    )
    .unwrap();
    drive(&mut sock, s, &files, None);
    let report = h.join().unwrap().unwrap();
    assert_eq!(report.refused, 3, "`..` and absolute names refused");
    assert_eq!(report.received.len(), 2);
    assert_eq!(std::fs::read(dir.join("ok.txt")).unwrap(), files[2]);
    assert_eq!(std::fs::read(dir.join("good.txt")).unwrap(), files[4]);
    assert!(!base.join("evil.txt").exists());
    assert!(!Path::new("/tmp/weir-absolute.txt").exists());
    assert!(!dir.join("b.txt").exists() && !base.join("b.txt").exists());
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["good.txt", "ok.txt"]);
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn existing_files_are_not_overwritten_unless_asked() {
    let dir = temp_dir("exists");
    std::fs::write(dir.join("keep.txt"), b"mine").unwrap();
    let files = vec![data(3000, 1)];
    let (mut sock, h) = receiver(&dir, false);
    let s = Sender::new(
        SenderConfig::default(),
        offers(&["keep.txt"], &files),
        Instant::now(),
    )
    .unwrap();
    drive(&mut sock, s, &files, None);
    let report = h.join().unwrap().unwrap();
    assert_eq!((report.skipped, report.received.len()), (1, 0));
    assert_eq!(std::fs::read(dir.join("keep.txt")).unwrap(), b"mine");
    // The sender may ask to replace it (sz -y).
    let (mut sock, h) = receiver(&dir, false);
    let cfg = SenderConfig {
        overwrite: true,
        ..SenderConfig::default()
    };
    let s = Sender::new(cfg, offers(&["keep.txt"], &files), Instant::now()).unwrap();
    drive(&mut sock, s, &files, None);
    assert_eq!(h.join().unwrap().unwrap().received.len(), 1);
    assert_eq!(std::fs::read(dir.join("keep.txt")).unwrap(), files[0]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reads frames from `sock` until a header of type `t` arrives.
fn expect_header(sock: &mut UnixStream, dec: &mut Decoder, t: u8) -> Header {
    let mut buf = [0u8; 4096];
    let mut scratch = BytesMut::new();
    loop {
        let n = sock.read(&mut buf).unwrap();
        assert!(n > 0, "line closed while waiting for {}", frame::name(t));
        let mut rest = &buf[..n];
        while !rest.is_empty() {
            let (used, item) = dec.decode(rest, &mut scratch);
            rest = &rest[used..];
            if let Some(Item::Header(h, _)) = item {
                if h.frame_type == t {
                    return h;
                }
            }
        }
    }
}

#[test]
fn an_offer_over_4_gib_is_refused() {
    let dir = temp_dir("big");
    let (mut sock, h) = receiver(&dir, false);
    let mut dec = Decoder::new(false, 8192);
    expect_header(&mut sock, &mut dec, frame::ZRINIT);
    let mut esc = Escaper::new(false);
    let mut w = Vec::new();
    let info = FileInfo {
        name: b"huge.iso".to_vec(),
        size: Some(5 << 30),
        ..FileInfo::default()
    };
    let mut block = Vec::new();
    info.encode(&mut block);
    encode_header(
        &Header::with_flags(frame::ZFILE, zconv::ZCBIN, 0, 0, 0),
        HeaderFormat::Bin32,
        &mut esc,
        &mut w,
    );
    encode_subpacket(&block, FrameEnd::Crcw, CrcKind::Crc32, &mut esc, &mut w);
    sock.write_all(&w).unwrap();
    expect_header(&mut sock, &mut dec, frame::ZSKIP);
    let mut w = Vec::new();
    encode_header(
        &Header::with_pos(frame::ZFIN, 0),
        HeaderFormat::Hex,
        &mut esc,
        &mut w,
    );
    sock.write_all(&w).unwrap();
    expect_header(&mut sock, &mut dec, frame::ZFIN);
    sock.write_all(b"OO").unwrap();
    let report = h.join().unwrap().unwrap();
    assert_eq!((report.refused, report.received.len()), (1, 0));
    assert!(!dir.join("huge.iso").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_cut_transfer_keeps_its_checked_prefix_and_resumes() {
    let dir = temp_dir("partial");
    let files = vec![data(1 << 20, 7)];
    let (mut sock, h) = receiver(&dir, false);
    let s = Sender::new(
        SenderConfig::default(),
        offers(&["part.bin"], &files),
        Instant::now(),
    )
    .unwrap();
    drive(&mut sock, s, &files, Some(200_000));
    drop(sock);
    let err = h.join().unwrap().unwrap_err();
    assert!(
        matches!(err, ZmodemError::Recv(weir_zmodem::RecvError::Cancelled)),
        "{err}"
    );
    let partial = std::fs::read(dir.join("part.bin")).unwrap();
    assert!(!partial.is_empty() && partial.len() < files[0].len());
    assert_eq!(
        partial[..],
        files[0][..partial.len()],
        "only checked data is kept"
    );

    // The sender asks to resume (sz -r): only the rest travels.
    let (mut sock, h) = receiver(&dir, false);
    let cfg = SenderConfig {
        resume: true,
        ..SenderConfig::default()
    };
    let s = Sender::new(cfg, offers(&["part.bin"], &files), Instant::now()).unwrap();
    drive(&mut sock, s, &files, None);
    let report = h.join().unwrap().unwrap();
    assert_eq!(report.bytes, (files[0].len() - partial.len()) as u64);
    assert_eq!(std::fs::read(dir.join("part.bin")).unwrap(), files[0]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// This process's umask, read without changing it (Linux `/proc`).
fn umask() -> u32 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("Umask:")).unwrap();
    u32::from_str_radix(line["Umask:".len()..].trim(), 8).unwrap()
}

#[test]
fn wire_times_that_overflow_are_ignored_and_modes_obey_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("mtime");
    let files = vec![data(5000, 3), data(70, 4)];
    let (mut sock, h) = receiver(&dir, false);
    let mut list = offers(&["far.bin", "wide.sh"], &files);
    // u64::MAX seconds made `UNIX_EPOCH + Duration` panic the receiver.
    list[0].mtime = u64::MAX;
    list[1].mode = 0o104777; // setuid and every permission bit
    let s = Sender::new(SenderConfig::default(), list, Instant::now()).unwrap();
    drive(&mut sock, s, &files, None);
    let report = h.join().expect("the receiver must not panic").unwrap();
    assert_eq!(report.received.len(), 2);
    assert_eq!(std::fs::read(dir.join("far.bin")).unwrap(), files[0]);
    let far = std::fs::metadata(dir.join("far.bin")).unwrap();
    let age = far.modified().unwrap().elapsed().unwrap_or_default();
    assert!(age.as_secs() < 3600, "the bad time is not applied: {far:?}");
    let mode = std::fs::metadata(dir.join("wide.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o777 & !umask(), "{mode:o}");
    // A sender's narrow mode is applied as is (under the umask).
    let (mut sock, h) = receiver(&dir, false);
    let mut list = offers(&["ro.txt"], &files[1..]);
    list[0].mode = 0o100400;
    let s = Sender::new(SenderConfig::default(), list, Instant::now()).unwrap();
    drive(&mut sock, s, &files[1..], None);
    h.join().unwrap().unwrap();
    let mode = std::fs::metadata(dir.join("ro.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o400 & !umask(), "{mode:o}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_sender_that_sends_more_than_it_announced_is_cut_off() {
    let dir = temp_dir("oversize");
    let (mut sock, h) = receiver(&dir, false);
    let mut dec = Decoder::new(false, 8192);
    expect_header(&mut sock, &mut dec, frame::ZRINIT);
    let mut esc = Escaper::new(false);
    let mut w = Vec::new();
    let info = FileInfo {
        name: b"small.txt".to_vec(),
        size: Some(10),
        ..FileInfo::default()
    };
    let mut block = Vec::new();
    info.encode(&mut block);
    encode_header(
        &Header::with_flags(frame::ZFILE, zconv::ZCBIN, 0, 0, 0),
        HeaderFormat::Bin32,
        &mut esc,
        &mut w,
    );
    encode_subpacket(&block, FrameEnd::Crcw, CrcKind::Crc32, &mut esc, &mut w);
    sock.write_all(&w).unwrap();
    expect_header(&mut sock, &mut dec, frame::ZRPOS);
    // 10 announced, 1 MiB streamed.
    let mut w = Vec::new();
    encode_header(
        &Header::with_pos(frame::ZDATA, 0),
        HeaderFormat::Bin32,
        &mut esc,
        &mut w,
    );
    let chunk = data(8192, 9);
    for _ in 0..128 {
        encode_subpacket(&chunk, FrameEnd::Crcg, CrcKind::Crc32, &mut esc, &mut w);
    }
    // The receiver may cancel and close before all of it is written.
    let _ = sock.write_all(&w);
    let err = h.join().unwrap().unwrap_err();
    assert!(
        matches!(err, ZmodemError::Oversize { announced: 10, .. }),
        "{err}"
    );
    assert_eq!(std::fs::read(dir.join("small.txt")).unwrap(), chunk[..10]);
    let _ = std::fs::remove_dir_all(&dir);
}
