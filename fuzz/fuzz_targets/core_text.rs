//! weir-core text and bit parsers: `NetPolicy::parse` (`--allow`),
//! `safepath::component` (every name from a torrent, a link or a ZFILE),
//! `Bitfield::from_bytes`.
//!
//! A parsed policy prints to a spec that parses to the same policy; a
//! component that is accepted is a single safe name (no separator, NUL,
//! `.` or `..`; on Windows no `:`, control character, reserved device name
//! or trailing dot/space) and accepting it again changes nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_core::bitfield::Bitfield;
use weir_core::policy::NetPolicy;
use weir_core::safepath::{self, Platform};

fuzz_target!(|data: &[u8]| {
    if let Some((&sel, rest)) = data.split_first() {
        let len = u32::from(sel) * 3;
        if let Ok(b) = Bitfield::from_bytes(rest, len) {
            assert_eq!(b.len(), len);
            assert_eq!(b.count(), rest.iter().map(|x| x.count_ones()).sum::<u32>());
            assert_eq!(b.as_bytes(), rest);
        }
        if let Ok(b) = Bitfield::from_lsb_bytes(rest, len) {
            assert_eq!(b.to_lsb_bytes(), rest);
            assert_eq!(b.iter_ones().count() as u32, b.count());
        }
    }
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(p) = NetPolicy::parse(s) {
        let again = NetPolicy::parse(&p.to_string()).expect("a printed policy parses");
        assert_eq!(again, p);
    }
    for platform in [Platform::Unix, Platform::Windows] {
        if let Ok(c) = safepath::component(s, platform) {
            assert!(!c.is_empty() && c != "." && c != "..");
            assert!(!c.contains(['/', '\\', '\0']), "{c:?}");
            if platform == Platform::Windows {
                assert!(
                    !c.contains(':') && !c.chars().any(|ch| (ch as u32) < 0x20),
                    "{c:?}"
                );
                assert!(!c.ends_with(['.', ' ']), "{c:?}");
            }
            assert_eq!(
                safepath::component(&c, platform).as_deref(),
                Ok(&*c),
                "not stable"
            );
        }
    }
});
