//! Magnet links on the engine: the transfer is listed at once (its name
//! from `dn`, no size, metadata 0%), its metadata (BEP 9) is fetched in
//! the background from the link's peers (`x.pe`) and trackers
//! (`weir_runtime::magnet::fetch`), tried again after a failure while the
//! transfer is started; once it arrives the .torrent is kept in the state
//! directory and the record becomes an ordinary torrent, so a restart
//! never fetches it again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use weir_bt::magnet::{Magnet, PeerAddr};
use weir_runtime::magnet::{FetchFailure, FetchOptions};

use super::state::RecordSource;
use super::{Content, EngineBackend, Touch};
use crate::backend::*;
use crate::sources::{Parsed, of_metainfo};

/// How long one fetch may take before it is tried again.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);
/// The wait before fetching again after a failure (doubled each time, up
/// to [`MAX_RETRY`]).
const FIRST_RETRY: Duration = Duration::from_secs(2);
/// Longest wait between fetches.
const MAX_RETRY: Duration = Duration::from_secs(60);

/// Parses a magnet link into what is listed before its metadata comes.
/// The ed2k link of an eD2k magnet (`xt=urn:ed2k:` and `xl`, no
/// BitTorrent info-hash); `None` for any other magnet (a malformed one
/// gets its error from [`parse`]).
pub(super) fn ed2k_only(link: &str) -> Result<Option<weir_ed2k::link::FileLink>, BackendError> {
    match Magnet::parse(link) {
        Ok(m) if m.info_hash.is_none() && m.ed2k.is_some() => weir_runtime::magnet::ed2k_link(&m)
            .map(Some)
            .map_err(|e| BackendError::InvalidTorrent(format!("bad magnet link: {e}"))),
        _ => Ok(None),
    }
}

pub(super) fn parse(link: &str) -> Result<(Magnet, Parsed), BackendError> {
    let m = Magnet::parse(link)
        .map_err(|e| BackendError::InvalidTorrent(format!("bad magnet link: {e}")))?;
    let Some(ih) = m.info_hash else {
        return Err(BackendError::InvalidTorrent(
            "bad magnet link: it has no BitTorrent info-hash (xt=urn:btih:)".into(),
        ));
    };
    let hash = TransferHash::Bt(ih);
    let name = m.name.clone().unwrap_or_else(|| hash.to_hex());
    let mut v = TransferView::new(0, hash, name.as_str());
    v.metadata_percent_complete = 0.0;
    v.link = Arc::from(m.to_uri().as_str());
    Ok((
        m,
        Parsed {
            view: v,
            files: Vec::new(),
        },
    ))
}

/// The peers a magnet names by address (dialled for its data too).
pub(super) fn link_peers(m: &Magnet) -> Vec<SocketAddr> {
    m.peers
        .iter()
        .filter_map(|p| match p {
            PeerAddr::Ip(a) => Some(*a),
            PeerAddr::Name { .. } => None,
        })
        .collect()
}

impl EngineBackend {
    /// Starts fetching transfer `id`'s metadata, unless it is stopped, not
    /// a magnet, or already fetching.
    pub(super) fn fetch_metadata(&self, id: TransferId) {
        let magnet = {
            let mut st = self.lock();
            let Some(e) = st.entries.get_mut(&id) else {
                return;
            };
            let Content::Magnet(m) = &e.content else {
                return;
            };
            if e.fetching || e.record.paused {
                return;
            }
            e.fetching = true;
            m.clone()
        };
        let me = self.clone();
        tokio::spawn(async move {
            let mut retry = FIRST_RETRY;
            loop {
                let opts = FetchOptions {
                    policy: me.0.cfg.policy.clone(),
                    peers: Vec::new(),
                    peer_id: weir_runtime::engine::new_peer_id(),
                    port: me.0.cfg.peer_port,
                    local_ip: me.0.cfg.listen_ip,
                    use_trackers: me.0.cfg.use_trackers,
                    timeout: FETCH_TIMEOUT,
                    max_dials: 8,
                    dht_port: me.0.cfg.dht_port,
                };
                // The DHT's peers for the info-hash as well (none without a DHT).
                let from_dht = match magnet.info_hash {
                    Some(ih) => me.0.engine.dht_peers(ih).await.ok(),
                    None => None,
                };
                let r = weir_runtime::magnet::fetch_with(&magnet, &opts, from_dht).await;
                match r {
                    Ok(got) => {
                        me.got_metadata(id, got).await;
                        return;
                    }
                    Err(e) => {
                        tracing::info!("transfer {id}: metadata: {e}");
                        let why: Arc<str> = Arc::from(e.to_string().as_str());
                        let give_up = matches!(e, FetchFailure::Invalid(_));
                        let go_on = {
                            let mut st = me.lock();
                            match st.entries.get_mut(&id) {
                                Some(e) if !e.record.paused && !give_up => {
                                    e.fetch_error = Some(why);
                                    true
                                }
                                Some(e) => {
                                    e.fetching = false;
                                    e.fetch_error = Some(why);
                                    false
                                }
                                None => false,
                            }
                        };
                        if !go_on {
                            return;
                        }
                    }
                }
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(MAX_RETRY);
                let still = {
                    let mut st = me.lock();
                    match st.entries.get_mut(&id) {
                        Some(e) if !e.record.paused => true,
                        Some(e) => {
                            e.fetching = false;
                            false
                        }
                        None => false,
                    }
                };
                if !still {
                    return;
                }
            }
        });
    }

    /// The metadata of transfer `id` arrived: keep the .torrent, make the
    /// record a torrent's (durably), and start it in the engine.
    async fn got_metadata(&self, id: TransferId, got: weir_bt::metadata::FetchedMetadata) {
        let hex = TransferHash::Bt(got.metainfo.info_hash).to_hex();
        if !self.lock().entries.contains_key(&id) {
            return;
        }
        let store = self.store().await;
        let kept = {
            let mut st = self.lock();
            match st.entries.get_mut(&id) {
                Some(e) => {
                    let mut meta = got.metainfo;
                    crate::sources::share_trackers(&mut meta);
                    let meta = Arc::new(meta);
                    let mut parsed = of_metainfo(&meta);
                    parsed.view.id = id;
                    parsed.view.download_dir = e.base.download_dir.clone();
                    let base = super::view::Base::of(&parsed.view);
                    e.base = Arc::new(base.kept_torrent(self.0.dir.torrents_shown()));
                    e.files = parsed.files;
                    // The magnet's `so=` (BEP 53) when the add named no
                    // files itself; indices past the files are ignored.
                    if let Content::Magnet(m) = &e.content
                        && let Some(sel) = &m.select
                        && e.record.unwanted.is_empty()
                    {
                        let (flags, _) = sel.flags(meta.info.files.len());
                        if flags.iter().any(|&f| f) {
                            e.record.unwanted = (0..flags.len() as u32)
                                .filter(|&i| !flags[i as usize])
                                .collect();
                        } else {
                            tracing::warn!(
                                "{}: the magnet's so={sel} names none of its {} files: every file is fetched",
                                meta.info.name,
                                flags.len()
                            );
                        }
                    }
                    e.content = Content::Torrent(meta);
                    e.mark_wanted();
                    e.record.source = RecordSource::Torrent {
                        info_hash: hex.clone(),
                    };
                    e.fetching = false;
                    e.fetch_error = None;
                    e.edited = super::unix_now();
                    true
                }
                None => false,
            }
        };
        if !kept {
            // Removed while its metadata came.
            return;
        }
        // The record names the torrent and carries the .torrent: kept in
        // `torrents/` once durable. If it is not, a restart fetches the
        // metadata again.
        let touch = Touch::Metadata(id, got.torrent_file.to_vec());
        if let Err(e) = self.write(store, vec![touch]).await {
            tracing::error!("transfer {id}: saving the state: {e}");
        }
        tracing::info!("transfer {id}: metadata arrived; starting it");
        self.launch(id, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magnets_list_before_their_metadata() {
        let (m, p) = parse(
            "magnet:?xt=urn:btih:0123456789abcdef0123456789abcdef01234567&dn=my+file%21&tr=http%3A%2F%2F127.0.0.1%2Fa&x.pe=127.0.0.1:6881",
        )
        .unwrap();
        assert_eq!(&*p.view.name, "my file!");
        assert_eq!(p.view.total_size, 0);
        assert_eq!(p.view.metadata_percent_complete, 0.0);
        assert_eq!(
            p.view.hash.to_hex(),
            "0123456789abcdef0123456789abcdef01234567"
        );
        assert_eq!(
            &*crate::sources::magnet_tracker_views(&m.trackers)[0].announce,
            "http://127.0.0.1/a"
        );
        assert_eq!(link_peers(&m), vec!["127.0.0.1:6881".parse().unwrap()]);
        // No name: the hash names it.
        let (_, p) = parse("magnet:?xt=urn:btih:0123456789abcdef0123456789abcdef01234567").unwrap();
        assert_eq!(&*p.view.name, "0123456789abcdef0123456789abcdef01234567");
        for bad in ["magnet:?dn=x", "magnet:?xt=urn:btih:zz", "http://x"] {
            assert!(
                matches!(parse(bad), Err(BackendError::InvalidTorrent(_))),
                "{bad}"
            );
        }
    }
}
