//! `ed2k://` file links.
//!
//! ```text
//! ed2k://|file|NAME|SIZE|HASH|[h=AICH|][p=HASH:HASH...|]/[|sources,IP:PORT,...|/]
//! ```
//!
//! Parsing follows aMule's `CED2KFileLink` (`ED2KLink.cpp`): fields are
//! separated by `|`, the name is percent-decoded (UTF-8, else Latin-1), the
//! size is decimal and between 1 and [`MAX_FILE_SIZE`], the hash is 32 hex
//! digits, and the optional fields after the hash may come in any order
//! (also after the `/`). weir is stricter than aMule where aMule would act
//! on garbage: a name that could leave the download directory is an error
//! (aMule silently rewrites `/`), and a `p=` list must have the right
//! number of hashes and hash to the file hash.
//!
//! Formatting follows aMule's `CreateED2kLink`: upper-case hex, the AICH
//! master hash after `h=`, spaces as `%20`; weir also escapes `%`, `|`,
//! control characters and other white space (as UTF-8) so that every link
//! it prints parses back.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddrV4};

use weir_core::safepath::{self, Platform, UnsafeName};

use crate::hash::file_hash_from_hashset;
use crate::{AichHash, MAX_FILE_SIZE, Md4Hash, ParseHashError, hashset_len};

/// What is wrong with a link.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// It does not start with `ed2k://|`.
    #[error("not an ed2k link (expected `ed2k://|file|NAME|SIZE|HASH|/`)")]
    NotEd2k,
    /// An ed2k link, but not a file link (server, serverlist, ...).
    #[error("ed2k link of type {0:?}, only `file` links can be downloaded")]
    NotAFileLink(String),
    /// A mandatory field is missing.
    #[error("ed2k link has no {0} field")]
    Missing(&'static str),
    /// The size is not a decimal number.
    #[error("ed2k link size {0:?} is not a number")]
    BadSize(String),
    /// The size is 0 or above the eD2k maximum.
    #[error("ed2k link size {0} is outside 1..={max}", max = MAX_FILE_SIZE)]
    SizeOutOfRange(u64),
    /// The file hash is not 32 hex digits.
    #[error("ed2k link file hash: {0}")]
    BadHash(ParseHashError),
    /// The name is empty.
    #[error("ed2k link has an empty file name")]
    EmptyName,
    /// The name could leave the download directory.
    #[error("ed2k link file name: {0}")]
    UnsafeName(UnsafeName),
    /// The `h=` field is not a base32 AICH hash.
    #[error("ed2k link AICH hash (h=): {0}")]
    BadAich(ParseHashError),
    /// The `p=` field is malformed or does not match the file.
    #[error("ed2k link part hashes (p=): {0}")]
    BadPartHashes(String),
    /// A `sources,` entry is malformed.
    #[error("ed2k link source {0:?}: expected IP:PORT")]
    BadSource(String),
}

/// A source address given in a link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceHost {
    /// A dotted IPv4 address.
    Ip(Ipv4Addr),
    /// A host name (needs resolving; weir never resolves on its own).
    Name(String),
}

/// One `sources,` entry: `HOST:PORT[:CRYPTOPTIONS[:USERHASH]]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkSource {
    /// The address.
    pub host: SourceHost,
    /// The TCP port.
    pub port: u16,
    /// Obfuscation options (bit 0x80: a user hash follows), 0 if absent.
    pub crypt_options: u8,
    /// The source's user hash, when `crypt_options & 0x80`.
    pub user_hash: Option<Md4Hash>,
}

impl LinkSource {
    /// The socket address, when the host is an IPv4 address.
    pub fn addr(&self) -> Option<SocketAddrV4> {
        match self.host {
            SourceHost::Ip(ip) => Some(SocketAddrV4::new(ip, self.port)),
            SourceHost::Name(_) => None,
        }
    }
}

/// A parsed `ed2k://|file|...` link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileLink {
    /// The file name (decoded, checked to be a safe single path component).
    pub name: String,
    /// File size in bytes.
    pub size: u64,
    /// The ed2k file hash.
    pub hash: Md4Hash,
    /// The AICH master hash (`h=`).
    pub aich: Option<AichHash>,
    /// The wire hashset (`p=`), checked against size and hash.
    pub part_hashes: Option<Vec<Md4Hash>>,
    /// Sources (`|sources,...|`).
    pub sources: Vec<LinkSource>,
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(&h), Some(&l)) = (b.get(i + 1), b.get(i + 2)) {
                if let (Some(h), Some(l)) = (hex(h), hex(l)) {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    match String::from_utf8(out) {
        Ok(s) => s,
        Err(e) => e.into_bytes().iter().map(|&c| c as char).collect(),
    }
}

fn percent_encode_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            ' ' | '%' | '|' | '\u{7f}' => {
                let _ = write!(out, "%{:02X}", c as u32);
            }
            // Controls, and white space (which parsing trims off the ends
            // of the name) as UTF-8 bytes.
            c if (c as u32) < 0x20 || c.is_whitespace() => {
                for b in c.encode_utf8(&mut [0; 4]).bytes() {
                    let _ = write!(out, "%{b:02X}");
                }
            }
            c => out.push(c),
        }
    }
    out
}

fn parse_source(entry: &str) -> Result<LinkSource, LinkError> {
    let bad = || LinkError::BadSource(entry.to_string());
    let mut it = entry.split(':');
    let host = it.next().filter(|h| !h.is_empty()).ok_or_else(bad)?;
    let port: u16 = it
        .next()
        .and_then(|p| p.trim().parse().ok())
        .filter(|&p| p != 0)
        .ok_or_else(bad)?;
    let mut crypt_options = 0;
    let mut user_hash = None;
    if let Some(opt) = it.next().filter(|o| !o.is_empty()) {
        crypt_options = opt.trim().parse().map_err(|_| bad())?;
        if crypt_options & 0x80 != 0 {
            let h = it.next().ok_or_else(bad)?;
            user_hash = Some(Md4Hash::from_hex(h.trim()).map_err(|_| bad())?);
        }
    }
    let host = match host.parse::<Ipv4Addr>() {
        Ok(ip) => SourceHost::Ip(ip),
        Err(_) => {
            let ok = host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
            if !ok {
                return Err(bad());
            }
            SourceHost::Name(host.to_ascii_lowercase())
        }
    };
    Ok(LinkSource {
        host,
        port,
        crypt_options,
        user_hash,
    })
}

/// A link's file name: not empty, one safe path component here and on Unix.
fn check_name(name: &str) -> Result<(), LinkError> {
    if name.is_empty() {
        return Err(LinkError::EmptyName);
    }
    safepath::component(name, Platform::current()).map_err(LinkError::UnsafeName)?;
    // On every platform the name must be a single Unix component too.
    safepath::component(name, Platform::Unix).map_err(LinkError::UnsafeName)?;
    Ok(())
}

fn check_size(size: u64) -> Result<(), LinkError> {
    if size == 0 || size > MAX_FILE_SIZE {
        return Err(LinkError::SizeOutOfRange(size));
    }
    Ok(())
}

impl FileLink {
    /// The link of a file named elsewhere (an eD2k magnet's `dn`, `xl` and
    /// `xt=urn:ed2k:`), with no hashset and no source: its name and size
    /// checked as [`FileLink::parse`] checks a link's.
    pub fn new(name: String, size: u64, hash: Md4Hash) -> Result<Self, LinkError> {
        check_name(&name)?;
        check_size(size)?;
        Ok(FileLink {
            name,
            size,
            hash,
            aich: None,
            part_hashes: None,
            sources: Vec::new(),
        })
    }

    /// Parses a link; see the module docs for the rules.
    pub fn parse(link: &str) -> Result<Self, LinkError> {
        let link = link.trim();
        let mut tok = link.split('|');
        let scheme = tok.next().unwrap_or("");
        if !scheme.eq_ignore_ascii_case("ed2k://") {
            return Err(LinkError::NotEd2k);
        }
        let kind = tok.next().ok_or(LinkError::Missing("type"))?;
        if !kind.eq_ignore_ascii_case("file") {
            return Err(LinkError::NotAFileLink(kind.to_string()));
        }
        let raw_name = tok.next().ok_or(LinkError::Missing("name"))?;
        let raw_size = tok.next().ok_or(LinkError::Missing("size"))?.trim();
        let raw_hash = tok.next().ok_or(LinkError::Missing("hash"))?.trim();

        let name = percent_decode(raw_name.trim());
        check_name(&name)?;

        if raw_size.is_empty() || !raw_size.bytes().all(|c| c.is_ascii_digit()) {
            return Err(LinkError::BadSize(raw_size.to_string()));
        }
        let size: u64 = raw_size
            .parse()
            .map_err(|_| LinkError::BadSize(raw_size.to_string()))?;
        check_size(size)?;
        let hash = Md4Hash::from_hex(raw_hash).map_err(LinkError::BadHash)?;

        let mut out = FileLink {
            name,
            size,
            hash,
            aich: None,
            part_hashes: None,
            sources: Vec::new(),
        };
        for field in tok {
            let field = field.trim();
            let lower = field.to_ascii_lowercase();
            if let Some(list) = lower.strip_prefix("sources,") {
                for entry in list.split(',') {
                    let entry = entry.trim();
                    if entry.is_empty() {
                        continue;
                    }
                    out.sources.push(parse_source(entry)?);
                }
            } else if let Some(h) = field.strip_prefix("h=").or(field.strip_prefix("H=")) {
                out.aich = Some(AichHash::from_base32(h.trim()).map_err(LinkError::BadAich)?);
            } else if let Some(p) = field.strip_prefix("p=").or(field.strip_prefix("P=")) {
                out.part_hashes = Some(out.check_part_hashes(p)?);
            }
            // "", "/", and fields weir does not use (s=, f=, ...) are skipped.
        }
        Ok(out)
    }

    fn check_part_hashes(&self, list: &str) -> Result<Vec<Md4Hash>, LinkError> {
        let hashes = list
            .split(':')
            .map(|h| Md4Hash::from_hex(h.trim()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| LinkError::BadPartHashes(e.to_string()))?;
        let want = hashset_len(self.size);
        if hashes.len() as u64 != want {
            return Err(LinkError::BadPartHashes(format!(
                "{} hashes, a file of {} bytes has {want}",
                hashes.len(),
                self.size
            )));
        }
        if file_hash_from_hashset(&hashes) != self.hash {
            return Err(LinkError::BadPartHashes(
                "they do not hash to the file hash".into(),
            ));
        }
        Ok(hashes)
    }

    /// The link as aMule prints it (see the module docs), with `p=` and
    /// `sources` when present.
    pub fn to_link(&self) -> String {
        let mut s = format!(
            "ed2k://|file|{}|{}|{}|",
            percent_encode_name(&self.name),
            self.size,
            self.hash.to_hex()
        );
        if let Some(p) = &self.part_hashes {
            s.push_str("p=");
            for (i, h) in p.iter().enumerate() {
                if i > 0 {
                    s.push(':');
                }
                s.push_str(&h.to_hex());
            }
            s.push('|');
        }
        if let Some(h) = &self.aich {
            let _ = write!(s, "h={}|", h.to_base32());
        }
        s.push('/');
        if !self.sources.is_empty() {
            s.push_str("|sources");
            for src in &self.sources {
                match &src.host {
                    SourceHost::Ip(ip) => {
                        let _ = write!(s, ",{ip}:{}", src.port);
                    }
                    SourceHost::Name(n) => {
                        let _ = write!(s, ",{n}:{}", src.port);
                    }
                }
                if src.crypt_options != 0 || src.user_hash.is_some() {
                    let _ = write!(s, ":{}", src.crypt_options);
                    if let Some(h) = src.user_hash {
                        let _ = write!(s, ":{}", h.to_hex());
                    }
                }
            }
            s.push_str("|/");
        }
        s
    }
}

impl std::str::FromStr for FileLink {
    type Err = LinkError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl std::fmt::Display for FileLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_link())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const H: &str = "D3B6B09D73D3FE0DD41DDE5ED244215A";

    #[test]
    fn parses_plain_and_full_links() {
        let l = FileLink::parse(&format!("ed2k://|file|a%20b.bin|9728000|{H}|/")).unwrap();
        assert_eq!(l.name, "a b.bin");
        assert_eq!(l.size, 9_728_000);
        assert_eq!(l.hash.to_hex(), H);
        assert!(l.sources.is_empty() && l.aich.is_none() && l.part_hashes.is_none());

        let p0 = "6E6DC9CAF5C2BAB98702E5C4E68769F0";
        let e = "31D6CFE0D16AE931B73C59D7E0C089C0";
        let aich = "3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ";
        let text = format!(
            "ed2k://|file|x.bin|9728000|{}|p={p0}:{e}|h={aich}|/|sources,10.0.0.2:4662,host.lan:4663|/",
            H.to_lowercase()
        );
        let l = FileLink::parse(&text).unwrap();
        assert_eq!(l.part_hashes.as_ref().unwrap().len(), 2);
        assert_eq!(l.aich.unwrap().to_base32(), aich);
        assert_eq!(l.sources[0].addr(), Some("10.0.0.2:4662".parse().unwrap()));
        assert_eq!(l.sources[1].host, SourceHost::Name("host.lan".into()));
        assert_eq!(FileLink::parse(&l.to_link()).unwrap(), l);
        // Sources inside the first part of the link, as some sites write them.
        let l2 = FileLink::parse(&format!("ed2k://|file|x|5|{H}|sources,1.2.3.4:5|/")).unwrap();
        assert_eq!(l2.sources.len(), 1);
    }

    #[test]
    fn formats_like_amule() {
        let l = FileLink {
            name: "my file.bin".into(),
            size: 3,
            hash: Md4Hash::from_hex(H).unwrap(),
            aich: Some(AichHash([0; 20])),
            part_hashes: None,
            sources: vec![],
        };
        assert_eq!(
            l.to_link(),
            format!("ed2k://|file|my%20file.bin|3|{H}|h=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA|/")
        );
    }

    /// Parsing trims Unicode white space around the name, so a name that
    /// starts or ends with some (a no-break space, an ideographic space)
    /// must be printed escaped, as UTF-8, to come back the same (the
    /// `ed2k_link` fuzz target's round-trip check fails on it otherwise).
    #[test]
    fn names_with_unicode_space_at_an_end_round_trip() {
        for name in ["\u{a0}x", "x\u{3000}", "\u{2003}", "é\u{a0}", "  "] {
            let l = FileLink {
                name: name.into(),
                size: 5,
                hash: Md4Hash::from_hex(H).unwrap(),
                aich: None,
                part_hashes: None,
                sources: vec![],
            };
            assert_eq!(
                FileLink::parse(&l.to_link()),
                Ok(l.clone()),
                "{}",
                l.to_link()
            );
        }
    }

    #[test]
    fn each_bad_input_is_a_named_error() {
        type Check = fn(&LinkError) -> bool;
        let cases: Vec<(String, Check)> = vec![
            ("http://x".into(), |e| matches!(e, LinkError::NotEd2k)),
            ("ed2k://|server|1.2.3.4|4661|/".into(), |e| {
                matches!(e, LinkError::NotAFileLink(_))
            }),
            ("ed2k://|file|a|".into(), |e| {
                matches!(e, LinkError::Missing("hash"))
            }),
            (format!("ed2k://|file|a|12x|{H}|/"), |e| {
                matches!(e, LinkError::BadSize(_))
            }),
            (format!("ed2k://|file|a|-1|{H}|/"), |e| {
                matches!(e, LinkError::BadSize(_))
            }),
            (format!("ed2k://|file|a|0|{H}|/"), |e| {
                matches!(e, LinkError::SizeOutOfRange(0))
            }),
            (format!("ed2k://|file|a|274877906945|{H}|/"), |e| {
                matches!(e, LinkError::SizeOutOfRange(_))
            }),
            (
                format!("ed2k://|file|a|99999999999999999999999|{H}|/"),
                |e| matches!(e, LinkError::BadSize(_)),
            ),
            ("ed2k://|file|a|5|D3B6B09D|/".into(), |e| {
                matches!(e, LinkError::BadHash(_))
            }),
            (
                "ed2k://|file|a|5|Z3B6B09D73D3FE0DD41DDE5ED244215A|/".into(),
                |e| matches!(e, LinkError::BadHash(_)),
            ),
            (format!("ed2k://|file||5|{H}|/"), |e| {
                matches!(e, LinkError::EmptyName)
            }),
            (format!("ed2k://|file|..|5|{H}|/"), |e| {
                matches!(e, LinkError::UnsafeName(_))
            }),
            (
                format!("ed2k://|file|..%2F..%2Fetc%2Fpasswd|5|{H}|/"),
                |e| matches!(e, LinkError::UnsafeName(_)),
            ),
            (format!("ed2k://|file|a%00b|5|{H}|/"), |e| {
                matches!(e, LinkError::UnsafeName(_))
            }),
            (format!("ed2k://|file|a|5|{H}|h=XYZ|/"), |e| {
                matches!(e, LinkError::BadAich(_))
            }),
            (format!("ed2k://|file|a|5|{H}|p={H}|/"), |e| {
                matches!(e, LinkError::BadPartHashes(_))
            }),
            (format!("ed2k://|file|a|9728000|{H}|p={H}:{H}|/"), |e| {
                matches!(e, LinkError::BadPartHashes(_))
            }),
            (format!("ed2k://|file|a|5|{H}|/|sources,1.2.3.4|/"), |e| {
                matches!(e, LinkError::BadSource(_))
            }),
            (format!("ed2k://|file|a|5|{H}|/|sources,1.2.3.4:0|/"), |e| {
                matches!(e, LinkError::BadSource(_))
            }),
            (
                format!("ed2k://|file|a|5|{H}|/|sources,1.2.3.4:99999|/"),
                |e| matches!(e, LinkError::BadSource(_)),
            ),
            (format!("ed2k://|file|a|5|{H}|/|sources,a b:5|/"), |e| {
                matches!(e, LinkError::BadSource(_))
            }),
        ];
        for (text, ok) in cases {
            let err = FileLink::parse(&text).expect_err(&text);
            assert!(ok(&err), "{text}: {err}");
            assert!(!err.to_string().is_empty());
        }
    }

    fn name_strategy() -> impl Strategy<Value = String> {
        "[^/\\\\\u{0}]{1,40}".prop_filter("not . or ..", |s| {
            s != "." && s != ".." && safepath::component(s, Platform::current()).is_ok()
        })
    }

    fn link_strategy() -> impl Strategy<Value = FileLink> {
        (
            name_strategy(),
            1u64..=MAX_FILE_SIZE,
            any::<[u8; 16]>(),
            proptest::option::of(any::<[u8; 20]>()),
            proptest::collection::vec((any::<[u8; 4]>(), 1u16..), 0..4),
        )
            .prop_map(|(name, size, hash, aich, sources)| FileLink {
                name,
                size,
                hash: Md4Hash(hash),
                aich: aich.map(AichHash),
                part_hashes: None,
                sources: sources
                    .into_iter()
                    .map(|(ip, port)| LinkSource {
                        host: SourceHost::Ip(ip.into()),
                        port,
                        crypt_options: 0,
                        user_hash: None,
                    })
                    .collect(),
            })
    }

    proptest! {
        #[test]
        fn format_parse_round_trip(l in link_strategy()) {
            prop_assert_eq!(FileLink::parse(&l.to_link()), Ok(l));
        }

        #[test]
        fn parse_never_panics(s in ".{0,120}") {
            // Only text that starts like a link can be one; a link with the
            // file type is never refused as the wrong kind; whatever parses
            // prints to a link that parses to the same.
            let plain = FileLink::parse(&s);
            if !s.trim().to_ascii_lowercase().starts_with("ed2k://") {
                prop_assert_eq!(&plain, &Err(LinkError::NotEd2k));
            }
            for r in [
                plain,
                FileLink::parse(&format!("ed2k://|file|{s}")),
                FileLink::parse(&format!("ed2k://|file|a|5|{H}|{s}")),
            ] {
                match r {
                    Ok(l) => prop_assert_eq!(FileLink::parse(&l.to_link()), Ok(l)),
                    Err(LinkError::NotEd2k | LinkError::NotAFileLink(_)) => {}
                    Err(e) => prop_assert!(!e.to_string().is_empty()),
                }
            }
            for r in [
                FileLink::parse(&format!("ed2k://|file|{s}")),
                FileLink::parse(&format!("ed2k://|file|a|5|{H}|{s}")),
            ] {
                prop_assert!(!matches!(r, Err(LinkError::NotEd2k | LinkError::NotAFileLink(_))), "{:?}", r);
            }
        }

        #[test]
        fn parsed_names_are_safe(s in "[ -~%]{1,30}") {
            if let Ok(l) = FileLink::parse(&format!("ed2k://|file|{s}|5|{H}|/")) {
                let p = std::path::Path::new("/dl").join(&l.name);
                prop_assert_eq!(p.parent(), Some(std::path::Path::new("/dl")));
            }
        }
    }
}
