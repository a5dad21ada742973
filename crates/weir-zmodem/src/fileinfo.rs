//! The ZFILE data subpacket: `name NUL "size mtime mode serial files_left
//! bytes_left" NUL`, with size and the counts in decimal and mtime and mode
//! in octal (as lrzsz writes and reads it). Only the name is required.
//!
//! Every number is the sender's word, so each is bounded here, where it is
//! parsed: a modification time past [`MAX_MTIME`] or a mode with bits beyond
//! [`MODE_MASK`] is treated as absent (a time that large cannot be
//! represented as a `SystemTime` or stored by a file system, and applying
//! it used to panic the receiver).

/// The latest modification time accepted: 9999-12-31 23:59:59 UTC, in Unix
/// seconds. Later times are treated as absent.
pub const MAX_MTIME: u64 = 253_402_300_799;

/// The Unix mode bits a ZFILE may carry (file type and permission bits,
/// `S_IFMT | 07777`); a mode with other bits set is treated as absent.
pub const MODE_MASK: u32 = 0o177_777;

/// What a sender says about a file.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FileInfo {
    /// The name as sent (raw bytes; not necessarily UTF-8, not yet checked).
    pub name: Vec<u8>,
    /// Length in bytes, if given.
    pub size: Option<u64>,
    /// Modification time (Unix seconds), if given; at most [`MAX_MTIME`].
    pub mtime: Option<u64>,
    /// Unix mode bits, if given; within [`MODE_MASK`]. A receiver applies
    /// only the permission bits, under its umask.
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

    /// Parses a received block. Fields that are missing, malformed or out of
    /// bounds ([`MAX_MTIME`], [`MODE_MASK`]) are `None`; only a missing name
    /// is an error.
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
        let mtime = oct(f.next()).filter(|&t| t <= MAX_MTIME);
        let mode = oct(f.next())
            .and_then(|m| u32::try_from(m).ok())
            .filter(|&m| m & !MODE_MASK == 0);
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

    #[test]
    fn out_of_range_times_and_modes_are_absent() {
        // u64::MAX seconds: `UNIX_EPOCH + Duration` of this panicked `weir rz`.
        let b = format!("x\x003 {:o} {:o} 0 1 3\x00", u64::MAX, 0o100777);
        let f = FileInfo::parse(b.as_bytes()).unwrap();
        assert_eq!((f.size, f.mtime, f.mode), (Some(3), None, Some(0o100777)));
        let b = format!("x\x003 {:o} 0 0 1 3\x00", MAX_MTIME);
        assert_eq!(
            FileInfo::parse(b.as_bytes()).unwrap().mtime,
            Some(MAX_MTIME)
        );
        let b = format!("x\x003 {:o} 0 0 1 3\x00", MAX_MTIME + 1);
        assert_eq!(FileInfo::parse(b.as_bytes()).unwrap().mtime, None);
        // Past 32 bits, or bits outside type and permissions.
        for mode in ["77777777777", "377777", "1000000"] {
            let b = format!("x\x003 0 {mode} 0 1 3\x00");
            assert_eq!(FileInfo::parse(b.as_bytes()).unwrap().mode, None, "{mode}");
        }
        // A number too long for u64 at all.
        let f = FileInfo::parse(b"x\x00999999999999999999999999 7777777777777777777777777 0\x00")
            .unwrap();
        assert_eq!((f.size, f.mtime), (None, None));
    }

    proptest::proptest! {
        /// Whatever the fields say, what parses stays within the bounds.
        #[test]
        fn parsed_fields_are_bounded(text in "[0-9 ]{0,80}") {
            let mut b = b"n\x00".to_vec();
            b.extend_from_slice(text.as_bytes());
            let f = FileInfo::parse(&b).unwrap();
            proptest::prop_assert!(f.mtime.is_none_or(|t| t <= MAX_MTIME));
            proptest::prop_assert!(f.mode.is_none_or(|m| m & !MODE_MASK == 0));
        }


        #[test]
        fn round_trip(name in proptest::collection::vec(1u8..=255, 1..40), size in proptest::option::of(0u64..1 << 40),
                      mtime in proptest::option::of(0u64..=MAX_MTIME), mode in proptest::option::of(0u32..=MODE_MASK)) {
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
