//! Names from torrents and from the wire become paths that can never escape
//! the download directory.
//!
//! The rule, per path component:
//! - **rejected** everywhere: the empty name, `.`, `..`, a NUL byte, and a
//!   separator (`/` or `\`) inside a component. These are how a hostile name
//!   climbs out of a directory; a name that contains one is an error that
//!   says which rule it broke.
//! - **rejected** on Windows: a drive prefix or any `:` (drive-relative paths
//!   and alternate data streams) and control characters.
//! - **sanitised** on Windows: reserved device names (`CON`, `NUL`, `COM1`,
//!   `LPT1`, ... with or without an extension) get a trailing `_`, and trailing
//!   dots and spaces are removed, because Windows would silently alias them.
//!   On Unix these names are ordinary and are kept as given.
//!
//! Absolute paths are rejected by construction: a component cannot contain a
//! separator, and a whole-path helper refuses a leading `/` or `\`.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

/// Which file system's rules to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Platform {
    /// Linux, macOS, BSD: only `/` and NUL are special.
    Unix,
    /// Windows: drive letters, reserved device names, `:` and trailing dots.
    Windows,
}

impl Platform {
    /// The platform weir was built for.
    pub fn current() -> Self {
        if cfg!(windows) {
            Platform::Windows
        } else {
            Platform::Unix
        }
    }
}

/// A name that cannot be used as given, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unsafe file name {name:?}: {reason}")]
pub struct UnsafeName {
    /// The name as received (lossily printable).
    pub name: String,
    /// Which rule it broke.
    pub reason: &'static str,
}

fn unsafe_name(name: &str, reason: &'static str) -> UnsafeName {
    UnsafeName {
        name: name.to_string(),
        reason,
    }
}

const RESERVED: [&str; 22] = [
    "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8",
    "COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9",
];

/// Checks one path component and returns it, sanitised where the rules say
/// so (see the module docs).
pub fn component(name: &str, platform: Platform) -> Result<Cow<'_, str>, UnsafeName> {
    if name.is_empty() {
        return Err(unsafe_name(name, "empty path component"));
    }
    if name == "." || name == ".." {
        return Err(unsafe_name(name, "`.` or `..` component"));
    }
    if name.contains('\0') {
        return Err(unsafe_name(name, "contains a NUL byte"));
    }
    if name.contains('/') || name.contains('\\') {
        return Err(unsafe_name(name, "path separator inside a component"));
    }
    if platform == Platform::Unix {
        return Ok(Cow::Borrowed(name));
    }
    if name.contains(':') {
        return Err(unsafe_name(
            name,
            "`:` (drive prefix or stream name) on Windows",
        ));
    }
    if name.chars().any(|c| (c as u32) < 0x20) {
        return Err(unsafe_name(name, "control character on Windows"));
    }
    let trimmed = name.trim_end_matches(['.', ' ']);
    if trimmed.is_empty() {
        return Err(unsafe_name(name, "only dots and spaces"));
    }
    let stem = trimmed.split('.').next().unwrap_or(trimmed).trim_end();
    let reserved = RESERVED.iter().any(|r| r.eq_ignore_ascii_case(stem));
    if reserved {
        let (head, tail) = trimmed.split_at(stem.len());
        return Ok(Cow::Owned(format!("{head}_{tail}")));
    }
    if trimmed.len() != name.len() {
        return Ok(Cow::Owned(trimmed.to_string()));
    }
    Ok(Cow::Borrowed(name))
}

/// Joins already-split components (as in a torrent's `path` list) under
/// `base`, checking each one. The result is always inside `base`.
pub fn join<S: AsRef<str>>(
    base: &Path,
    components: &[S],
    platform: Platform,
) -> Result<PathBuf, UnsafeName> {
    if components.is_empty() {
        return Err(unsafe_name("", "empty path"));
    }
    let mut out = base.to_path_buf();
    for c in components {
        out.push(component(c.as_ref(), platform)?.as_ref());
    }
    Ok(out)
}

/// Splits a wire name that may hold a relative path with `/` separators
/// (ZMODEM, some eD2k names) into checked components. Leading `/` or `\`,
/// drive prefixes and `..` anywhere are rejected; empty and `.` segments
/// from doubled separators are dropped.
pub fn relative_components(name: &str, platform: Platform) -> Result<Vec<String>, UnsafeName> {
    if name.starts_with('/') || name.starts_with('\\') {
        return Err(unsafe_name(name, "absolute path"));
    }
    let b = name.as_bytes();
    if b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' {
        return Err(unsafe_name(name, "drive prefix"));
    }
    let mut out = Vec::new();
    for seg in name.split(['/', '\\']) {
        if seg.is_empty() || seg == "." {
            continue;
        }
        out.push(component(seg, platform)?.into_owned());
    }
    if out.is_empty() {
        return Err(unsafe_name(name, "no file name"));
    }
    Ok(out)
}

/// The last component of a wire name, checked: what a receiver that does
/// not keep sender directories (lrzsz `rz` without `-p`) stores.
pub fn file_name(name: &str, platform: Platform) -> Result<String, UnsafeName> {
    let last = name.rsplit(['/', '\\']).next().unwrap_or(name);
    Ok(component(last, platform)?.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_rejected_with_reason() {
        for (name, reason) in [
            ("..", "`.` or `..` component"),
            (".", "`.` or `..` component"),
            ("", "empty path component"),
            ("a\0b", "contains a NUL byte"),
            ("a/b", "path separator inside a component"),
            ("..\\x", "path separator inside a component"),
        ] {
            for p in [Platform::Unix, Platform::Windows] {
                let e = component(name, p).unwrap_err();
                assert_eq!(e.reason, reason, "{name:?} on {p:?}");
            }
        }
    }

    #[test]
    fn windows_rules() {
        assert!(component("C:evil", Platform::Windows).is_err());
        assert!(component("file.txt:stream", Platform::Windows).is_err());
        assert_eq!(component("CON", Platform::Windows).unwrap(), "CON_");
        assert_eq!(component("aux.c", Platform::Windows).unwrap(), "aux_.c");
        assert_eq!(
            component("lpt1.tar.gz", Platform::Windows).unwrap(),
            "lpt1_.tar.gz"
        );
        assert_eq!(component("name. . ", Platform::Windows).unwrap(), "name");
        assert_eq!(component("console", Platform::Windows).unwrap(), "console");
        // On Unix the same names are ordinary.
        assert_eq!(component("aux.c", Platform::Unix).unwrap(), "aux.c");
        assert_eq!(
            component("Artist: Title", Platform::Unix).unwrap(),
            "Artist: Title"
        );
    }

    #[test]
    fn join_stays_inside_base() {
        let base = Path::new("/dl");
        let p = join(base, &["dir", "sub", "f.bin"], Platform::Unix).unwrap();
        assert_eq!(p, Path::new("/dl/dir/sub/f.bin"));
        assert!(join(base, &["dir", "..", "..", "etc"], Platform::Unix).is_err());
        assert!(join(base, &["/etc/passwd"], Platform::Unix).is_err());
        assert!(join::<&str>(base, &[], Platform::Unix).is_err());
    }

    #[test]
    fn wire_names() {
        assert_eq!(
            relative_components("a//b/./c.txt", Platform::Unix).unwrap(),
            ["a", "b", "c.txt"]
        );
        assert!(relative_components("/etc/passwd", Platform::Unix).is_err());
        assert!(relative_components("a/../../x", Platform::Unix).is_err());
        assert!(relative_components("C:\\x", Platform::Unix).is_err());
        assert!(relative_components("///", Platform::Unix).is_err());
        assert_eq!(file_name("/etc/passwd", Platform::Unix).unwrap(), "passwd");
        assert!(file_name("x/..", Platform::Unix).is_err());
    }

    proptest::proptest! {
        #[test]
        fn joined_paths_never_escape(parts in proptest::collection::vec(".{0,12}", 1..5)) {
            let base = Path::new("/base");
            for p in [Platform::Unix, Platform::Windows] {
                if let Ok(path) = join(base, &parts, p) {
                    proptest::prop_assert!(path.starts_with(base));
                    for c in path.strip_prefix(base).unwrap().components() {
                        proptest::prop_assert!(matches!(c, std::path::Component::Normal(_)));
                    }
                }
            }
        }
    }
}
