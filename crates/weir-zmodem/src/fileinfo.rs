//! The ZFILE data subpacket: `name NUL "size mtime mode serial files_left
//! bytes_left" NUL`, with size and the counts in decimal and mtime and mode
//! in octal (as lrzsz writes and reads it). Only the name is required.

/// What a sender says about a file.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FileInfo {
    /// The name as sent (raw bytes; not necessarily UTF-8, not yet checked).
    pub name: Vec<u8>,
    /// Length in bytes, if given.
    pub size: Option<u64>,
    /// Modification time (Unix seconds), if given.
    pub mtime: Option<u64>,
    /// Unix mode bits, if given.
    pub mode: Option<u32>,
    /// Files left in the batch including this one, if given.
    pub files_left: Option<u32>,
    /// Bytes left in the batch including this file, if given.
    pub bytes_left: Option<u64>,
}

/// A ZFILE block that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FileInfoError {
    /// The block has no file name.
    #[error("ZFILE block without a file name")]
    NoName,
}

impl FileInfo {
    /// Appends the block to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.name);
        out.push(0);
        let info = format!(
            "{} {:o} {:o} 0 {} {}",
            self.size.unwrap_or(0),
            self.mtime.unwrap_or(0),
            self.mode.unwrap_or(0),
            self.files_left.unwrap_or(1),
            self.bytes_left.unwrap_or(self.size.unwrap_or(0)),
        );
        out.extend_from_slice(info.as_bytes());
        out.push(0);
    }

    /// Parses a received block. Fields that are missing or malformed are
    /// `None`; only a missing name is an error.
    pub fn parse(block: &[u8]) -> Result<FileInfo, FileInfoError> {
        let name_end = block.iter().position(|&b| b == 0).unwrap_or(block.len());
        let name = block[..name_end].to_vec();
        if name.is_empty() {
            return Err(FileInfoError::NoName);
        }
        let rest = block.get(name_end + 1..).unwrap_or(&[]);
        let rest = &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())];
        let text = String::from_utf8_lossy(rest);
        let mut f = text.split_ascii_whitespace();
        let dec = |s: Option<&str>| s.and_then(|s| s.parse::<u64>().ok());
        let oct = |s: Option<&str>| s.and_then(|s| u64::from_str_radix(s, 8).ok());
        let size = dec(f.next());
        let mtime = oct(f.next());
        let mode = oct(f.next()).and_then(|m| u32::try_from(m).ok());
        let _serial = f.next();
        let files_left = dec(f.next()).and_then(|n| u32::try_from(n).ok());
        let bytes_left = dec(f.next());
        Ok(FileInfo {
            name,
            size,
            mtime,
            mode,
            files_left,
            bytes_left,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lrzsz_block_parses() {
        // What `sz` sends for a 3-byte file: size, octal mtime and mode.
        let b = b"a.txt\x003 14750457123 100644 0 1 3\x00";
        let f = FileInfo::parse(b).unwrap();
        assert_eq!(f.name, b"a.txt");
        assert_eq!(f.size, Some(3));
        assert_eq!(f.mtime, Some(0o14750457123));
        assert_eq!(f.mode, Some(0o100644));
        assert_eq!(f.files_left, Some(1));
        assert_eq!(f.bytes_left, Some(3));
    }

    #[test]
    fn name_only_and_garbage_fields() {
        let f = FileInfo::parse(b"x\0").unwrap();
        assert_eq!((f.size, f.mtime, f.mode), (None, None, None));
        let f = FileInfo::parse(b"x\0-5 9z").unwrap();
        assert_eq!((f.size, f.mtime), (None, None));
        assert_eq!(FileInfo::parse(b"\x00123"), Err(FileInfoError::NoName));
        assert_eq!(FileInfo::parse(b""), Err(FileInfoError::NoName));
    }

    proptest::proptest! {
        #[test]
        fn round_trip(name in proptest::collection::vec(1u8..=255, 1..40), size in proptest::option::of(0u64..1 << 40),
                      mtime in proptest::option::of(0u64..1 << 40), mode in proptest::option::of(0u32..0o177777)) {
            let f = FileInfo { name, size, mtime, mode, files_left: Some(2), bytes_left: Some(99) };
            let mut b = Vec::new();
            f.encode(&mut b);
            let g = FileInfo::parse(&b).unwrap();
            proptest::prop_assert_eq!(g.name, f.name);
            proptest::prop_assert_eq!(g.size, Some(f.size.unwrap_or(0)));
            proptest::prop_assert_eq!(g.mtime, Some(f.mtime.unwrap_or(0)));
            proptest::prop_assert_eq!(g.mode, Some(f.mode.unwrap_or(0)));
            proptest::prop_assert_eq!(g.files_left, Some(2));
        }
    }
}
