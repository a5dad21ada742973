use std::io::Write;

use super::*;

fn temp_file(name: &str, bytes: &[u8]) -> (std::path::PathBuf, File) {
    let dir = std::env::temp_dir().join(format!("weir-mapped-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("f.bin");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    f.write_all(bytes).unwrap();
    (path, f)
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 4096) as u8).collect()
}

#[test]
fn a_map_reads_the_bytes_at_any_offset() {
    let data = pattern(3 * 4096 + 123);
    let (path, f) = temp_file("offsets", &data);
    for (off, len) in [
        (0, data.len()),
        (1, 5000),
        (4095, 2),
        (4096, 4096),
        (8000, 4000),
    ] {
        let m = Guarded::map(&f, off as u64, len).unwrap();
        assert_eq!(m.bytes(), &data[off..off + len], "{off} {len}");
        assert!(!m.faulted());
    }
    assert!(Guarded::map(&f, 0, 0).is_err(), "an empty map is refused");
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// The file shrinks while it is mapped: reading the pages past its new end
/// does not kill the process; they read as zeros and the map says so.
#[test]
fn a_file_truncated_under_its_map_faults_without_killing() {
    let data = pattern(16 * 4096);
    let (path, f) = temp_file("truncated", &data);
    let m = Guarded::map(&f, 0, data.len()).unwrap();
    f.set_len(5 * 4096 + 10).unwrap();
    let got = m.bytes().to_vec();
    assert!(m.faulted(), "pages past the end must mark the map");
    assert_eq!(got[..5 * 4096], data[..5 * 4096]);
    assert!(got[6 * 4096..].iter().all(|&b| b == 0));
    // Another map of the same file, made after, is not marked.
    let m2 = Guarded::map(&f, 0, 4096).unwrap();
    assert_eq!(m2.bytes(), &data[..4096]);
    assert!(!m2.faulted());
    drop(m);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// Several threads fault in their own maps at once: each map is marked,
/// none kills the process, maps that did not fault are not marked.
#[test]
fn faults_in_many_threads_are_each_their_own() {
    let data = pattern(8 * 4096);
    std::thread::scope(|s| {
        for t in 0..6 {
            let data = &data;
            s.spawn(move || {
                let (path, f) = temp_file(&format!("threads-{t}"), data);
                let keep = Guarded::map(&f, 0, 4096).unwrap();
                let m = Guarded::map(&f, 0, data.len()).unwrap();
                if t % 2 == 0 {
                    f.set_len(4096).unwrap();
                }
                let sum: u64 = m.bytes().iter().map(|&b| u64::from(b)).sum();
                std::hint::black_box(sum);
                assert_eq!(m.faulted(), t % 2 == 0, "thread {t}");
                assert!(!keep.faulted(), "thread {t}: a map that did not fault");
                drop((m, keep));
                std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
            });
        }
    });
}

/// A `SIGBUS` outside every registered map still ends the process with
/// `SIGBUS` (the handler does not swallow faults that are not its own):
/// run in a child process, which this test re-runs itself as.
#[test]
fn a_sigbus_outside_registered_maps_still_kills() {
    use std::os::unix::process::ExitStatusExt;
    if std::env::var_os("WEIR_MAPPED_CHILD").is_some() {
        let data = pattern(4 * 4096);
        let (_path, f) = temp_file("child", &data);
        // Install the handler (a registered map), then fault in a map made
        // without this module.
        let _guarded = Guarded::map(&f, 0, 4096).unwrap();
        // SAFETY: a fresh read-only map of an open file; it is read past
        // the file's end on purpose, which must kill this child process.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                data.len(),
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(raw, libc::MAP_FAILED);
        f.set_len(0).unwrap();
        // SAFETY: see above: this read raises SIGBUS.
        let b = unsafe { std::ptr::read_volatile((raw as *const u8).add(3 * 4096)) };
        println!("read {b} past the end and lived");
        std::process::exit(0);
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "storage::mapped::tests::a_sigbus_outside_registered_maps_still_kills",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("WEIR_MAPPED_CHILD", "1")
        .output()
        .unwrap();
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGBUS),
        "{:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
