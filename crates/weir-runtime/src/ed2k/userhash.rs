//! Stable user hashes: one per listen port of an installation.
//!
//! aMule and eMule remember the user hash each `IP:port` presented (the
//! port from the hello) and ban the address for about two hours when it
//! changes ("Userhash changed", `ComparePriorUserhash(ip, port, ...)`). And
//! two clients must not share a hash: each takes the other for itself
//! ("connected to ourselves"), so `weir seed --ed2k` and `weir get` of the
//! same user on one machine never talked.
//!
//! So the hash is a function of exactly what aMule keys it by: weir keeps
//! one secret per installation (made once: in `$WEIR_ED2K_HOME/userhash`,
//! else `$XDG_DATA_HOME/weir/ed2k-userhash`, else
//! `~/.local/share/weir/ed2k-userhash`) and each client uses
//! [`UserHash::for_port`] of the port it listens on. The same port always
//! presents the same hash, run after run; two processes cannot listen on
//! one port at once, so they never share a hash; no lock or slot is
//! needed. `WEIR_ED2K_USER_HASH` (32 hex digits) fixes one hash for every
//! port (tests).

use std::io;
use std::path::{Path, PathBuf};

use weir_ed2k::Md4Hash;
use weir_ed2k::client::hello::user_hash_from_random;

/// Which user hash a client presents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserHash {
    /// This hash on every port (`WEIR_ED2K_USER_HASH`, tests). Two clients
    /// given the same one take each other for themselves.
    Fixed(Md4Hash),
    /// Derived from this installation's secret and the listen port.
    PerPort(Md4Hash),
}

impl UserHash {
    /// The hash a client listening on `port` presents (0: not listening).
    /// Stable for a given secret and port; distinct ports give distinct
    /// hashes; eMule's markers (bytes 5 and 14) are set.
    pub fn for_port(&self, port: u16) -> Md4Hash {
        match self {
            UserHash::Fixed(h) => *h,
            UserHash::PerPort(secret) => {
                let mut input = Vec::with_capacity(48);
                input.extend_from_slice(b"weir eD2k user hash per port\0");
                input.extend_from_slice(&secret.0);
                input.extend_from_slice(&port.to_be_bytes());
                user_hash_from_random(weir_ed2k::hash::md4(&input).0)
            }
        }
    }
}

/// The user hash source: [`UserHash::Fixed`] from `WEIR_ED2K_USER_HASH`
/// if set, else [`UserHash::PerPort`] of the secret kept at `path` (made
/// there on first use).
pub fn load(path: &Path) -> io::Result<UserHash> {
    if std::env::var_os("WEIR_ED2K_USER_HASH").is_some() {
        return load_or_create(path).map(UserHash::Fixed);
    }
    load_or_create(path).map(UserHash::PerPort)
}

/// Where the user hash is kept.
pub fn default_path() -> PathBuf {
    if let Some(d) = std::env::var_os("WEIR_ED2K_HOME") {
        return PathBuf::from(d).join("userhash");
    }
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(std::env::temp_dir);
    data.join("weir").join("ed2k-userhash")
}

/// The stored secret (a hash-shaped 16 bytes): `WEIR_ED2K_USER_HASH` if
/// set, else the one stored at `path`, else a new one stored there.
pub fn load_or_create(path: &Path) -> io::Result<Md4Hash> {
    if let Ok(hex) = std::env::var("WEIR_ED2K_USER_HASH") {
        return Md4Hash::from_hex(hex.trim()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("WEIR_ED2K_USER_HASH: {e}"),
            )
        });
    }
    if let Ok(s) = std::fs::read_to_string(path) {
        return Md4Hash::from_hex(s.trim()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        });
    }
    let h = user_hash_from_random(random16());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // Written aside and renamed: two first runs never see half a hash.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, format!("{}\n", h.to_hex()))?;
    std::fs::rename(&tmp, path)?;
    // If another process won the race, use its hash.
    let s = std::fs::read_to_string(path)?;
    Md4Hash::from_hex(s.trim()).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

fn random16() -> [u8; 16] {
    let mut rng = fastrand::Rng::new();
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = rng.u8(..) ^ (t >> ((i % 8) * 8)) as u8 ^ (std::process::id() >> (i % 4 * 8)) as u8;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_once_then_kept() {
        let dir = std::env::temp_dir().join(format!("weir-userhash-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let p = dir.join("a/userhash");
        if std::env::var_os("WEIR_ED2K_USER_HASH").is_some() {
            return; // the override wins; nothing to test here
        }
        let a = load_or_create(&p).unwrap();
        let b = load_or_create(&p).unwrap();
        assert_eq!(a, b);
        assert_eq!((a.0[5], a.0[14]), (14, 111));
        std::fs::write(&p, "not hex").unwrap();
        assert!(load_or_create(&p).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn one_stable_hash_per_port_and_never_two_alike() {
        let secret = user_hash_from_random([0x3c; 16]);
        let u = UserHash::PerPort(secret);
        let mut seen = std::collections::BTreeSet::new();
        for port in (0..=u16::MAX).step_by(97).chain([4662, 4663, 6881, 6882]) {
            let h = u.for_port(port);
            assert_eq!(h, u.for_port(port), "stable");
            assert_eq!((h.0[5], h.0[14]), (14, 111), "eMule markers");
            assert_ne!(h, secret);
            seen.insert((port, h.0));
        }
        let hashes: std::collections::BTreeSet<_> = seen.iter().map(|(_, h)| *h).collect();
        assert_eq!(hashes.len(), seen.len(), "two ports share a hash");
        // Another installation's secret gives other hashes.
        let other = UserHash::PerPort(user_hash_from_random([0x3d; 16]));
        assert_ne!(other.for_port(4662), u.for_port(4662));
        // A fixed hash is the same everywhere.
        let f = UserHash::Fixed(secret);
        assert_eq!((f.for_port(1), f.for_port(2)), (secret, secret));
    }
}
