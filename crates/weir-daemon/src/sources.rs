//! Views of what `torrent-add` names: a .torrent, a magnet, an ed2k link
//! (parsed with weir's own parsers), shared by the fake and the engine
//! backends: the parts of a [`TransferView`] the content itself decides
//! (name, sizes, pieces, files, trackers, the link).

use std::path::Path;
use std::sync::Arc;

use weir_bt::metainfo::Metainfo;
use weir_ed2k::link::FileLink;

use crate::backend::*;

/// Largest .torrent read from disk or a URL.
pub(crate) const MAX_TORRENT: usize = 32 << 20;

/// A transfer's view as its content describes it, with its files
/// (progress and state are the backend's to fill; its trackers' views are
/// made when asked for: see [`tracker_views`]).
pub(crate) struct Parsed {
    pub(crate) view: TransferView,
    pub(crate) files: Vec<FileView>,
}

/// Parses a .torrent's bytes; its tracker URLs are shared with every
/// other torrent the process parsed that names them ([`share_trackers`]).
pub(crate) fn parse_metainfo(bytes: &[u8]) -> Result<Metainfo, BackendError> {
    let mut m =
        Metainfo::from_bytes(bytes).map_err(|e| BackendError::InvalidTorrent(e.to_string()))?;
    share_trackers(&mut m);
    Ok(m)
}

/// Makes `m`'s tracker URLs the copies other torrents hold. Most torrents
/// of a daemon name the same few trackers, each torrent a handful: 10,000
/// torrents of five trackers held 50,000 copies of a few URLs (~400 bytes
/// a torrent). The shared set lets go of a URL no torrent holds any more
/// (swept when it has doubled since the last sweep), so it holds at most
/// twice the URLs in use.
pub(crate) fn share_trackers(m: &mut Metainfo) {
    let mut urls = TRACKER_URLS.lock().unwrap_or_else(|e| e.into_inner());
    let (set, swept) = &mut *urls;
    m.share_trackers(|u| match set.get(u) {
        Some(kept) => kept.clone(),
        None => {
            set.insert(u.clone());
            u.clone()
        }
    });
    if set.len() >= 2 * (*swept).max(64) {
        set.retain(|u| Arc::strong_count(u) > 1);
        *swept = set.len();
    }
}

/// The tracker URLs [`share_trackers`] shares, and how many were left at
/// its last sweep.
type SharedUrls = std::sync::Mutex<(std::collections::HashSet<Arc<str>>, usize)>;
static TRACKER_URLS: std::sync::LazyLock<SharedUrls> =
    std::sync::LazyLock::new(SharedUrls::default);

/// Parses an `ed2k://|file|...|/` link.
pub(crate) fn parse_ed2k(link: &str) -> Result<FileLink, BackendError> {
    FileLink::parse(link).map_err(|e| BackendError::InvalidTorrent(format!("bad ed2k link: {e}")))
}

/// Reads a .torrent from the daemon's disk, refusing one past
/// [`MAX_TORRENT`].
pub(crate) fn read_bounded(p: &Path) -> Result<Vec<u8>, BackendError> {
    use std::io::Read;
    let bad = |e: std::io::Error| BackendError::InvalidTorrent(format!("{}: {e}", p.display()));
    let f = std::fs::File::open(p).map_err(bad)?;
    let mut data = Vec::new();
    f.take(MAX_TORRENT as u64 + 1)
        .read_to_end(&mut data)
        .map_err(bad)?;
    if data.len() > MAX_TORRENT {
        return Err(BackendError::InvalidTorrent(format!(
            "{}: larger than {MAX_TORRENT} bytes",
            p.display()
        )));
    }
    Ok(data)
}

/// A source's view and its trackers' (the fake backend holds both).
#[cfg(feature = "fake")]
pub(crate) type WithTrackers = (Parsed, Vec<TrackerView>);

/// The view of a .torrent's bytes.
#[cfg(feature = "fake")]
pub(crate) fn from_metainfo(bytes: &[u8]) -> Result<WithTrackers, BackendError> {
    let m = parse_metainfo(bytes)?;
    Ok((of_metainfo(&m), tracker_views(&m)))
}

/// The views of a torrent's trackers, in tier order. Made when asked for
/// (a `torrent-get` with `trackers` or `trackerStats`), not held: ~370
/// bytes and two strings per tracker, ~2.5 KB for each torrent of five
/// trackers a daemon holds.
pub(crate) fn tracker_views(m: &Metainfo) -> Vec<TrackerView> {
    let mut trackers = Vec::new();
    for (tier, urls) in m.trackers().iter().enumerate() {
        for url in urls {
            trackers.push(TrackerView {
                id: trackers.len() as u32,
                tier: tier as u32,
                announce: Arc::from(url.as_str()),
                scrape: Arc::from(url.replace("/announce", "/scrape").as_str()),
                announce_state: TrackerState::Inactive,
                last_announce_result: Arc::default(),
                last_scrape_result: Arc::default(),
                ..TrackerView::default()
            });
        }
    }
    trackers
}

/// The views of a magnet's trackers (its `tr=` addresses), each its own
/// tier; made when asked for, as a torrent's ([`tracker_views`]).
pub(crate) fn magnet_tracker_views(urls: &[String]) -> Vec<TrackerView> {
    urls.iter()
        .enumerate()
        .map(|(i, t)| TrackerView {
            id: i as u32,
            tier: i as u32,
            announce: Arc::from(t.as_str()),
            ..TrackerView::default()
        })
        .collect()
}

/// The view of a torrent.
pub(crate) fn of_metainfo(m: &Metainfo) -> Parsed {
    let hash = TransferHash::Bt(m.info_hash);
    let mut v = TransferView::new(0, hash, m.info.name.clone());
    let total = m.info.total_length();
    let piece = u64::from(m.info.piece_length);
    v.total_size = total;
    v.piece_size = piece;
    v.piece_count = m.info.piece_count();
    v.file_count = m.info.files.len() as u32;
    v.is_private = m.info.private;
    v.comment = shown_text(&m.comment);
    v.creator = shown_text(&m.created_by);
    v.date_created = m.creation_date.and_then(|d| u64::try_from(d).ok());
    v.link = Arc::from(magnet_link_of(m).as_str());
    let mut files = Vec::with_capacity(m.info.files.len());
    let mut offset = 0u64;
    for f in &m.info.files {
        let name = if m.info.single_file {
            v.name.clone()
        } else {
            Arc::from(format!("{}/{}", m.info.name, f.path.join("/")).as_str())
        };
        let begin = (offset / piece.max(1)) as u32;
        let end = (offset + f.length).div_ceil(piece.max(1)) as u32;
        files.push(FileView {
            name,
            length: f.length,
            bytes_completed: 0,
            wanted: true,
            priority: Priority::Normal,
            begin_piece: begin,
            end_piece: end.max(begin + 1),
        });
        offset += f.length;
    }
    v.size_when_done = total;
    v.left_until_done = total;
    Parsed { view: v, files }
}

/// A metainfo's free text (comment, creator) as a view shows it: none
/// is the one shared empty string (`Arc::from("")` would allocate one per
/// transfer).
pub(crate) fn shown_text(t: &Option<String>) -> Arc<str> {
    t.as_deref()
        .filter(|t| !t.is_empty())
        .map_or_else(Arc::default, Arc::from)
}

/// A torrent's magnet link: its info-hash, name and trackers (what
/// `magnetLink` shows; the daemon makes it when shown, not once a
/// transfer).
pub(crate) fn magnet_link_of(m: &Metainfo) -> String {
    let mut link = format!(
        "magnet:?xt=urn:btih:{}&dn={}",
        TransferHash::Bt(m.info_hash).to_hex(),
        percent_encode(&m.info.name)
    );
    for url in m.trackers().iter().flatten() {
        link.push_str("&tr=");
        link.push_str(&percent_encode(url));
    }
    link
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(feature = "fake")]
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The view of a magnet link (no metadata yet).
#[cfg(feature = "fake")]
pub(crate) fn from_magnet(link: &str) -> Result<WithTrackers, BackendError> {
    let bad = |why: &str| BackendError::InvalidTorrent(format!("bad magnet link: {why}"));
    let query = link
        .get(..8)
        .filter(|p| p.eq_ignore_ascii_case("magnet:?"))
        .map(|_| &link[8..])
        .ok_or_else(|| bad("not magnet:?"))?;
    let mut hash = None;
    let mut name = None;
    let mut trackers = Vec::new();
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "xt" => {
                let h = v
                    .strip_prefix("urn:btih:")
                    .ok_or_else(|| bad("xt is not urn:btih"))?;
                hash = Some(
                    TransferHash::parse_hex(h)
                        .ok_or_else(|| bad("the info-hash is not 40 hex digits"))?,
                );
            }
            "dn" => name = Some(percent_decode(v)),
            "tr" => trackers.push(percent_decode(v)),
            _ => {}
        }
    }
    let hash = hash.ok_or_else(|| bad("no xt"))?;
    if !matches!(hash, TransferHash::Bt(_)) {
        return Err(bad("the info-hash is not 40 hex digits"));
    }
    let name = name.unwrap_or_else(|| hash.to_hex());
    let mut v = TransferView::new(0, hash, name.as_str());
    v.metadata_percent_complete = 0.0;
    v.link = Arc::from(link);
    let trackers = magnet_tracker_views(&trackers);
    Ok((
        Parsed {
            view: v,
            files: Vec::new(),
        },
        trackers,
    ))
}

/// The view of an ed2k link.
#[cfg(feature = "fake")]
pub(crate) fn from_ed2k(link: &str) -> Result<WithTrackers, BackendError> {
    Ok((of_link(&parse_ed2k(link)?), Vec::new()))
}

/// The view of an eD2k file.
pub(crate) fn of_link(l: &FileLink) -> Parsed {
    let hash = TransferHash::Ed2k(l.hash.0);
    let mut v = TransferView::new(0, hash, l.name.as_str());
    const PART: u64 = 9_728_000;
    v.total_size = l.size;
    v.size_when_done = l.size;
    v.left_until_done = l.size;
    v.piece_size = PART;
    v.piece_count = l.size.div_ceil(PART).max(1) as u32;
    v.file_count = 1;
    v.link = Arc::from(l.to_link().as_str());
    let files = vec![FileView {
        name: Arc::from(l.name.as_str()),
        length: l.size,
        bytes_completed: 0,
        wanted: true,
        priority: Priority::Normal,
        begin_piece: 0,
        end_piece: v.piece_count,
    }];
    Parsed { view: v, files }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendError;

    /// Torrents naming one tracker hold one copy of its URL; URLs no
    /// torrent holds any more are let go, so the shared set stays bounded
    /// however many torrents come and go.
    #[test]
    fn torrents_share_their_trackers_and_the_set_stays_bounded() {
        let torrent = |url: &str| {
            let t = format!(
                "d8:announce{}:{url}4:infod6:lengthi5e4:name1:x12:piece lengthi16384e6:pieces20:aaaaaaaaaaaaaaaaaaaaee",
                url.len()
            );
            parse_metainfo(t.as_bytes()).unwrap()
        };
        let (a, b) = (
            torrent("http://shared.example/announce"),
            torrent("http://shared.example/announce"),
        );
        let (ua, ub) = (a.announce.as_ref().unwrap(), b.announce.as_ref().unwrap());
        assert!(Arc::ptr_eq(ua, ub), "one copy for one tracker");
        for i in 0..1_000 {
            drop(torrent(&format!("http://t{i}.example/announce")));
        }
        let kept = TRACKER_URLS.lock().unwrap().0.len();
        assert!(kept < 300, "{kept} URLs kept for 2 torrents held");
        assert!(Arc::ptr_eq(
            ua,
            torrent("http://shared.example/announce")
                .announce
                .as_ref()
                .unwrap()
        ));
    }

    #[test]
    fn magnets() {
        let e = from_magnet(
            "magnet:?xt=urn:btih:0123456789abcdef0123456789abcdef01234567&dn=my+file%21&tr=http%3A%2F%2Fx%2Fa",
        )
        .unwrap();
        assert_eq!(&*e.0.view.name, "my file!");
        assert_eq!(e.0.view.total_size, 0);
        assert_eq!(&*e.1[0].announce, "http://x/a");
        assert!(matches!(
            from_magnet("magnet:?dn=x"),
            Err(BackendError::InvalidTorrent(_))
        ));
        assert!(from_magnet("magnet:?xt=urn:btih:zz").is_err());
        assert!(from_magnet("http://x").is_err());
        assert_eq!(percent_decode("%4"), "%4");
        assert_eq!(percent_decode("a%"), "a%");
    }
}
