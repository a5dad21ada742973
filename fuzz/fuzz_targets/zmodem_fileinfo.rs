//! weir-zmodem `FileInfo::parse` (the ZFILE block: name, size, octal mtime
//! and mode, counts). What parses encodes (`FileInfo::encode`) to a block
//! that parses to the same name and values (missing fields written as
//! their defaults), and that is stable from then on.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_zmodem::FileInfo;
use weir_zmodem::fileinfo::FileInfoError;

fuzz_target!(|data: &[u8]| {
    match FileInfo::parse(data) {
        Ok(f) => {
            assert!(!f.name.is_empty() && !f.name.contains(&0));
            let mut b = Vec::new();
            f.encode(&mut b);
            let g = FileInfo::parse(&b).expect("an encoded block parses");
            let want = FileInfo {
                name: f.name.clone(),
                size: Some(f.size.unwrap_or(0)),
                mtime: Some(f.mtime.unwrap_or(0)),
                mode: Some(f.mode.unwrap_or(0)),
                files_left: Some(f.files_left.unwrap_or(1)),
                bytes_left: Some(f.bytes_left.unwrap_or(f.size.unwrap_or(0))),
            };
            assert_eq!(g, want);
            let mut b2 = Vec::new();
            g.encode(&mut b2);
            assert_eq!(b2, b);
        }
        Err(FileInfoError::NoName) => assert!(data.first().is_none_or(|&b| b == 0)),
    }
});
