//! One stable user hash per installation.
//!
//! aMule bans an address for about two hours when the user hash seen from
//! it changes ("Userhash changed"), so weir makes one hash once and keeps
//! it: in `$WEIR_ED2K_HOME/userhash`, else `$XDG_DATA_HOME/weir/ed2k-userhash`,
//! else `~/.local/share/weir/ed2k-userhash`. `WEIR_ED2K_USER_HASH` (32 hex
//! digits) overrides it (tests).

use std::io;
use std::path::{Path, PathBuf};

use weir_ed2k::Md4Hash;
use weir_ed2k::client::hello::user_hash_from_random;

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

/// The user hash: `WEIR_ED2K_USER_HASH` if set, else the one stored at
/// `path`, else a new one stored there.
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
}
