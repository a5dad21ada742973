//! weir-ed2k `link::FileLink::parse` (`ed2k://|file|...|/` links) and the
//! hash text parsers `Md4Hash::from_hex`, `AichHash::from_base32`.
//!
//! A link that parses has a safe single-component name and prints
//! (`to_link`) to a link that parses to the same value; a hash that parses
//! prints back to the same text (up to case).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_core::safepath::{self, Platform};
use weir_ed2k::link::FileLink;
use weir_ed2k::{AichHash, MAX_FILE_SIZE, Md4Hash};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(l) = FileLink::parse(s) {
        for p in [Platform::Unix, Platform::current()] {
            assert!(
                safepath::component(&l.name, p).is_ok(),
                "unsafe name {:?}",
                l.name
            );
        }
        assert!((1..=MAX_FILE_SIZE).contains(&l.size));
        assert!(l.sources.iter().all(|s| s.port != 0));
        let text = l.to_link();
        assert_eq!(FileLink::parse(&text).as_ref(), Ok(&l), "{text}");
        assert_eq!(l.to_string(), text);
    }
    if let Ok(h) = Md4Hash::from_hex(s) {
        assert!(h.to_hex().eq_ignore_ascii_case(s));
    }
    if let Ok(h) = AichHash::from_base32(s) {
        assert!(h.to_base32().eq_ignore_ascii_case(s));
    }
});
