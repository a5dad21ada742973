//! `torrent-get` answers: each requested field of each view written straight
//! into the output buffer, in chunks, so a list of 10,000 transfers streams
//! out without a JSON tree or a copy of the whole answer.

use std::sync::Arc;

use base64::Engine as _;

use crate::backend::{
    Eta, LimitMode, PeerSource, PeerView, Priority, Ratio, TrackerState, TrackerView,
    TransferError, TransferList, TransferState, TransferView,
};
use crate::fields::{Field, FieldList};
use crate::json;
use crate::rpc::Form;

/// Transmission's `status` number.
pub(crate) fn status_number(s: TransferState) -> i64 {
    match s {
        TransferState::Stopped => 0,
        TransferState::QueuedToVerify => 1,
        TransferState::Verifying => 2,
        TransferState::QueuedToDownload => 3,
        TransferState::Downloading => 4,
        TransferState::QueuedToSeed => 5,
        TransferState::Seeding => 6,
    }
}

fn eta_number(e: Eta) -> i64 {
    match e {
        Eta::NotAvailable => -1,
        Eta::Unknown => -2,
        Eta::Secs(s) => s.min(i64::MAX as u64) as i64,
    }
}

pub(crate) fn priority_number(p: Priority) -> i64 {
    match p {
        Priority::Low => -1,
        Priority::Normal => 0,
        Priority::High => 1,
    }
}

fn mode_number(m: LimitMode) -> i64 {
    match m {
        LimitMode::Global => 0,
        LimitMode::Single => 1,
        LimitMode::Unlimited => 2,
    }
}

fn tracker_state_number(s: TrackerState) -> i64 {
    match s {
        TrackerState::Inactive => 0,
        TrackerState::Waiting => 1,
        TrackerState::Queued => 2,
        TrackerState::Active => 3,
    }
}

fn opt_time(out: &mut Vec<u8>, t: Option<u64>) {
    json::u64(out, t.unwrap_or(0));
}

fn opt_count(out: &mut Vec<u8>, c: Option<u64>) {
    match c {
        Some(c) => json::u64(out, c),
        None => json::i64(out, -1),
    }
}

/// Transmission's `flagStr` letters for a peer.
pub(crate) fn flag_str(p: &PeerView) -> String {
    let mut s = String::with_capacity(8);
    if p.is_utp {
        s.push('T');
    }
    if p.is_downloading_from {
        s.push('D');
    } else if p.client_is_interested {
        s.push('d');
    }
    if p.is_uploading_to {
        s.push('U');
    } else if p.peer_is_interested {
        s.push('u');
    }
    if !p.client_is_choked && !p.client_is_interested {
        s.push('K');
    }
    if !p.peer_is_choked && !p.peer_is_interested {
        s.push('?');
    }
    if p.is_encrypted {
        s.push('E');
    }
    match p.source {
        PeerSource::Dht => s.push('H'),
        PeerSource::Pex => s.push('X'),
        PeerSource::Incoming => s.push('I'),
        PeerSource::Lpd | PeerSource::Tracker => {}
    }
    s
}

/// `scheme://host:port` of an announce URL (trackerStats `host`).
fn tracker_host(url: &str) -> &str {
    let Some(scheme_end) = url.find("://") else {
        return url;
    };
    let rest = &url[scheme_end + 3..];
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    &url[..scheme_end + 3 + end]
}

/// The site name Transmission shows: the label before the public suffix of
/// the host ("example" for tracker.example.org), or the address itself.
fn tracker_sitename(url: &str) -> &str {
    let host = tracker_host(url);
    let host = host.split("://").nth(1).unwrap_or(host);
    let host = if let Some(stripped) = host.strip_prefix('[') {
        return stripped.split(']').next().unwrap_or(stripped);
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    if host.parse::<std::net::IpAddr>().is_ok() {
        return host;
    }
    let labels: Vec<&str> = host.split('.').filter(|l| !l.is_empty()).collect();
    match labels.len() {
        0 => host,
        1 => labels[0],
        n => labels[n - 2],
    }
}

/// Keys of nested objects in the form's spelling.
struct Keys {
    classic: bool,
}

impl Keys {
    fn k(&self, out: &mut Vec<u8>, classic: &str, snake: &str) {
        json::key(out, if self.classic { classic } else { snake });
    }
}

fn write_files(out: &mut Vec<u8>, v: &TransferView, keys: &Keys) {
    out.push(b'[');
    for (i, f) in v.files.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        keys.k(out, "beginPiece", "begin_piece");
        json::u64(out, f.begin_piece.into());
        out.push(b',');
        keys.k(out, "bytesCompleted", "bytes_completed");
        json::u64(out, f.bytes_completed);
        out.push(b',');
        keys.k(out, "endPiece", "end_piece");
        json::u64(out, f.end_piece.into());
        out.push(b',');
        json::key(out, "length");
        json::u64(out, f.length);
        out.push(b',');
        json::key(out, "name");
        json::str(out, &f.name);
        out.push(b'}');
    }
    out.push(b']');
}

fn write_file_stats(out: &mut Vec<u8>, v: &TransferView, keys: &Keys) {
    out.push(b'[');
    for (i, f) in v.files.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        keys.k(out, "bytesCompleted", "bytes_completed");
        json::u64(out, f.bytes_completed);
        out.push(b',');
        json::key(out, "priority");
        json::i64(out, priority_number(f.priority));
        out.push(b',');
        json::key(out, "wanted");
        json::bool(out, f.wanted);
        out.push(b'}');
    }
    out.push(b']');
}

fn write_peers(out: &mut Vec<u8>, v: &TransferView, keys: &Keys) {
    out.push(b'[');
    for (i, p) in v.peers.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        json::key(out, "address");
        json::str(out, &p.address.to_string());
        let bools: [(&str, &str, bool); 9] = [
            ("clientIsChoked", "client_is_choked", p.client_is_choked),
            (
                "clientIsInterested",
                "client_is_interested",
                p.client_is_interested,
            ),
            (
                "isDownloadingFrom",
                "is_downloading_from",
                p.is_downloading_from,
            ),
            ("isEncrypted", "is_encrypted", p.is_encrypted),
            ("isIncoming", "is_incoming", p.is_incoming),
            ("isUTP", "is_utp", p.is_utp),
            ("isUploadingTo", "is_uploading_to", p.is_uploading_to),
            ("peerIsChoked", "peer_is_choked", p.peer_is_choked),
            (
                "peerIsInterested",
                "peer_is_interested",
                p.peer_is_interested,
            ),
        ];
        for (c, s, b) in bools.iter() {
            out.push(b',');
            keys.k(out, c, s);
            json::bool(out, *b);
        }
        out.push(b',');
        keys.k(out, "clientName", "client_name");
        json::str(out, &p.client_name);
        out.push(b',');
        keys.k(out, "flagStr", "flag_str");
        json::str(out, &flag_str(p));
        out.push(b',');
        json::key(out, "port");
        json::u64(out, p.port.into());
        out.push(b',');
        json::key(out, "progress");
        json::f64(out, p.progress);
        out.push(b',');
        keys.k(out, "rateToClient", "rate_to_client");
        json::u64(out, p.rate_to_client);
        out.push(b',');
        keys.k(out, "rateToPeer", "rate_to_peer");
        json::u64(out, p.rate_to_peer);
        out.push(b'}');
    }
    out.push(b']');
}

fn write_trackers(out: &mut Vec<u8>, v: &TransferView, keys: &Keys) {
    out.push(b'[');
    for (i, t) in v.trackers.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        json::key(out, "announce");
        json::str(out, &t.announce);
        out.push(b',');
        json::key(out, "id");
        json::u64(out, t.id.into());
        out.push(b',');
        json::key(out, "scrape");
        json::str(out, &t.scrape);
        out.push(b',');
        json::key(out, "sitename");
        json::str(out, tracker_sitename(&t.announce));
        out.push(b',');
        json::key(out, "tier");
        json::u64(out, t.tier.into());
        out.push(b'}');
    }
    out.push(b']');
    let _ = keys;
}

fn write_tracker_stat(out: &mut Vec<u8>, t: &TrackerView, keys: &Keys) {
    out.push(b'{');
    json::key(out, "announce");
    json::str(out, &t.announce);
    out.push(b',');
    keys.k(out, "announceState", "announce_state");
    json::i64(out, tracker_state_number(t.announce_state));
    out.push(b',');
    keys.k(out, "downloadCount", "download_count");
    opt_count(out, t.download_count);
    let bools = [
        ("hasAnnounced", "has_announced", t.has_announced),
        ("hasScraped", "has_scraped", t.has_scraped),
    ];
    for (c, s, b) in bools {
        out.push(b',');
        keys.k(out, c, s);
        json::bool(out, b);
    }
    out.push(b',');
    json::key(out, "host");
    json::str(out, tracker_host(&t.announce));
    out.push(b',');
    json::key(out, "id");
    json::u64(out, t.id.into());
    out.push(b',');
    keys.k(out, "isBackup", "is_backup");
    json::bool(out, t.is_backup);
    out.push(b',');
    keys.k(out, "lastAnnouncePeerCount", "last_announce_peer_count");
    json::u64(out, t.last_announce_peer_count.into());
    out.push(b',');
    keys.k(out, "lastAnnounceResult", "last_announce_result");
    json::str(out, &t.last_announce_result);
    out.push(b',');
    keys.k(out, "lastAnnounceStartTime", "last_announce_start_time");
    opt_time(out, t.last_announce_start_time);
    out.push(b',');
    keys.k(out, "lastAnnounceSucceeded", "last_announce_succeeded");
    json::bool(out, t.last_announce_succeeded);
    out.push(b',');
    keys.k(out, "lastAnnounceTime", "last_announce_time");
    opt_time(out, t.last_announce_time);
    out.push(b',');
    keys.k(out, "lastAnnounceTimedOut", "last_announce_timed_out");
    json::bool(out, t.last_announce_timed_out);
    out.push(b',');
    keys.k(out, "lastScrapeResult", "last_scrape_result");
    json::str(out, &t.last_scrape_result);
    out.push(b',');
    keys.k(out, "lastScrapeStartTime", "last_scrape_start_time");
    opt_time(out, t.last_scrape_start_time);
    out.push(b',');
    keys.k(out, "lastScrapeSucceeded", "last_scrape_succeeded");
    json::bool(out, t.last_scrape_succeeded);
    out.push(b',');
    keys.k(out, "lastScrapeTime", "last_scrape_time");
    opt_time(out, t.last_scrape_time);
    out.push(b',');
    keys.k(out, "lastScrapeTimedOut", "last_scrape_timed_out");
    json::bool(out, t.last_scrape_timed_out);
    out.push(b',');
    keys.k(out, "leecherCount", "leecher_count");
    opt_count(out, t.leecher_count);
    out.push(b',');
    keys.k(out, "nextAnnounceTime", "next_announce_time");
    opt_time(out, t.next_announce_time);
    out.push(b',');
    keys.k(out, "nextScrapeTime", "next_scrape_time");
    opt_time(out, t.next_scrape_time);
    out.push(b',');
    json::key(out, "scrape");
    json::str(out, &t.scrape);
    out.push(b',');
    keys.k(out, "scrapeState", "scrape_state");
    json::i64(out, tracker_state_number(t.scrape_state));
    out.push(b',');
    keys.k(out, "seederCount", "seeder_count");
    opt_count(out, t.seeder_count);
    out.push(b',');
    json::key(out, "sitename");
    json::str(out, tracker_sitename(&t.announce));
    out.push(b',');
    json::key(out, "tier");
    json::u64(out, t.tier.into());
    out.push(b'}');
}

fn write_tracker_list(out: &mut Vec<u8>, v: &TransferView) {
    let mut s = String::new();
    let mut tier = None;
    for t in &v.trackers {
        if tier.is_some() && tier != Some(t.tier) {
            s.push('\n');
        }
        tier = Some(t.tier);
        s.push_str(&t.announce);
        s.push('\n');
    }
    json::str(out, &s);
}

fn str_list(out: &mut Vec<u8>, items: &[String]) {
    out.push(b'[');
    for (i, l) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        json::str(out, l);
    }
    out.push(b']');
}

/// Writes the value of `field` for `v`.
fn write_value(out: &mut Vec<u8>, field: Field, v: &TransferView, keys: &Keys) {
    use Field as F;
    match field {
        F::ActivityDate => opt_time(out, v.activity_date),
        F::AddedDate => json::u64(out, v.added_date),
        F::Availability => {
            out.push(b'[');
            for (i, a) in v.availability.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json::i64(out, (*a).into());
            }
            out.push(b']');
        }
        F::BandwidthPriority => json::i64(out, priority_number(v.bandwidth_priority)),
        F::Comment => json::str(out, &v.comment),
        F::CorruptEver => json::u64(out, v.corrupt_ever),
        F::Creator => json::str(out, &v.creator),
        F::DateCreated => opt_time(out, v.date_created),
        F::DesiredAvailable => json::u64(out, v.desired_available),
        F::DoneDate => opt_time(out, v.done_date),
        F::DownloadDir => json::str(out, &v.download_dir),
        F::DownloadedEver => json::u64(out, v.downloaded_ever),
        F::DownloadLimit => json::u64(out, v.download_limit.kbps),
        F::DownloadLimited => json::bool(out, v.download_limit.enabled),
        F::EditDate => opt_time(out, v.edit_date),
        F::Error => json::i64(
            out,
            match v.error {
                TransferError::None => 0,
                TransferError::TrackerWarning(_) => 1,
                TransferError::TrackerError(_) => 2,
                TransferError::Local(_) => 3,
            },
        ),
        F::ErrorString => json::str(
            out,
            match &v.error {
                TransferError::None => "",
                TransferError::TrackerWarning(m)
                | TransferError::TrackerError(m)
                | TransferError::Local(m) => m,
            },
        ),
        F::Eta => json::i64(out, eta_number(v.eta)),
        F::EtaIdle => json::i64(out, eta_number(v.eta_idle)),
        F::FileCount => json::u64(out, v.file_count.into()),
        F::Files => write_files(out, v, keys),
        F::FileStats => write_file_stats(out, v, keys),
        F::Group => json::str(out, ""),
        F::HashString => {
            out.push(b'"');
            v.hash.write_hex(out);
            out.push(b'"');
        }
        F::HaveUnchecked => json::u64(out, v.have_unchecked),
        F::HaveValid => json::u64(out, v.have_valid),
        F::HonorsSessionLimits => json::bool(out, v.honors_session_limits),
        F::Id => json::u64(out, v.id),
        F::IsFinished => json::bool(out, v.is_finished),
        F::IsPrivate => json::bool(out, v.is_private),
        F::IsStalled => json::bool(out, v.is_stalled),
        F::Labels => str_list(out, &v.labels),
        F::LeftUntilDone => json::u64(out, v.left_until_done),
        F::MagnetLink => json::str(out, &v.link),
        F::ManualAnnounceTime => match v.manual_announce_time {
            Some(t) => json::u64(out, t),
            None => json::i64(out, -1),
        },
        F::MaxConnectedPeers | F::PeerLimit => json::u64(out, v.peer_limit.into()),
        F::MetadataPercentComplete => json::f64(out, v.metadata_percent_complete),
        F::Name => json::str(out, &v.name),
        F::Peers => write_peers(out, v, keys),
        F::PeersConnected => json::u64(out, v.peers_connected.into()),
        F::PeersFrom => {
            let p = &v.peers_from;
            let items = [
                ("fromCache", "from_cache", p.cache),
                ("fromDht", "from_dht", p.dht),
                ("fromIncoming", "from_incoming", p.incoming),
                ("fromLpd", "from_lpd", p.lpd),
                ("fromLtep", "from_ltep", p.ltep),
                ("fromPex", "from_pex", p.pex),
                ("fromTracker", "from_tracker", p.tracker),
            ];
            out.push(b'{');
            for (i, (c, s, n)) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                keys.k(out, c, s);
                json::u64(out, (*n).into());
            }
            out.push(b'}');
        }
        F::PeersGettingFromUs => json::u64(out, v.peers_getting_from_us.into()),
        F::PeersSendingToUs => json::u64(out, v.peers_sending_to_us.into()),
        F::PercentComplete => json::f64(out, v.percent_complete()),
        F::PercentDone => json::f64(out, v.percent_done()),
        F::Pieces => {
            let mut s = String::new();
            base64::engine::general_purpose::STANDARD.encode_string(&v.pieces, &mut s);
            json::str(out, &s);
        }
        F::PieceCount => json::u64(out, v.piece_count.into()),
        F::PieceSize => json::u64(out, v.piece_size),
        F::Priorities => {
            out.push(b'[');
            for (i, f) in v.files.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json::i64(out, priority_number(f.priority));
            }
            out.push(b']');
        }
        F::PrimaryMimeType => json::str(out, "application/octet-stream"),
        F::QueuePosition => json::u64(out, v.queue_position.into()),
        F::RateDownload => json::u64(out, v.rate_download),
        F::RateUpload => json::u64(out, v.rate_upload),
        F::RecheckProgress => json::f64(out, v.recheck_progress),
        F::SecondsDownloading => json::u64(out, v.seconds_downloading),
        F::SecondsSeeding => json::u64(out, v.seconds_seeding),
        F::SeedIdleLimit => json::u64(out, v.seed_idle_limit.into()),
        F::SeedIdleMode => json::i64(out, mode_number(v.seed_idle_mode)),
        F::SeedRatioLimit => json::f64(out, v.seed_ratio_limit),
        F::SeedRatioMode => json::i64(out, mode_number(v.seed_ratio_mode)),
        F::SequentialDownload => json::bool(out, v.sequential),
        F::SizeWhenDone => json::u64(out, v.size_when_done),
        F::StartDate => opt_time(out, v.start_date),
        F::Status => json::i64(out, status_number(v.state)),
        F::TorrentFile => json::str(out, &v.torrent_file),
        F::TotalSize => json::u64(out, v.total_size),
        F::Trackers => write_trackers(out, v, keys),
        F::TrackerList => write_tracker_list(out, v),
        F::TrackerStats => {
            out.push(b'[');
            for (i, t) in v.trackers.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_tracker_stat(out, t, keys);
            }
            out.push(b']');
        }
        F::UploadedEver => json::u64(out, v.uploaded_ever),
        F::UploadLimit => json::u64(out, v.upload_limit.kbps),
        F::UploadLimited => json::bool(out, v.upload_limit.enabled),
        F::UploadRatio => match v.upload_ratio {
            Ratio::NotAvailable => json::i64(out, -1),
            Ratio::Infinite => json::i64(out, -2),
            Ratio::Value(r) => json::f64(out, r),
        },
        F::Wanted => {
            // 0/1, not booleans: Transmission 3.00 and 4.0.2+ (see rpc-spec).
            out.push(b'[');
            for (i, f) in v.files.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.push(if f.wanted { b'1' } else { b'0' });
            }
            out.push(b']');
        }
        F::Webseeds => str_list(out, &v.webseeds),
        F::WebseedsSendingToUs => json::u64(out, v.webseeds_sending_to_us.into()),
    }
}

/// What a `torrent-get` row's bytes depend on besides its view: the table
/// flag, the form and the field names (the key of
/// [`crate::backend::RowCache`]).
pub(crate) fn row_key(fields: &FieldList, form: Form, table: bool) -> Arc<[u8]> {
    let mut key = vec![u8::from(table), u8::from(form == Form::Classic)];
    for (_, name) in &fields.fields {
        key.extend_from_slice(name.as_bytes());
        key.push(0);
    }
    key.into()
}

/// Streams the `torrents` array (and `removed`) of a `torrent-get` answer
/// inside its envelope: call [`TorrentsWriter::fill`] until it says done.
pub(crate) struct TorrentsWriter {
    list: TransferList,
    fields: FieldList,
    /// Each field's `"key":` bytes, written once per request.
    prefixes: Vec<Vec<u8>>,
    /// What a row's bytes depend on besides its view (the form, the table
    /// flag and the field names), the key of [`crate::backend::RowCache`].
    row_key: Arc<[u8]>,
    table: bool,
    with_removed: bool,
    keys: Keys,
    head: Vec<u8>,
    tail: Vec<u8>,
    next: usize,
    stage: Stage,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Head,
    Rows,
    Tail,
    Done,
}

impl TorrentsWriter {
    /// A writer for `list` with `fields`; `head` and `tail` are the
    /// envelope bytes before `"torrents":` and after the arguments object.
    pub(crate) fn new(
        list: TransferList,
        fields: FieldList,
        form: Form,
        table: bool,
        with_removed: bool,
        head: Vec<u8>,
        tail: Vec<u8>,
    ) -> Self {
        let prefixes = fields
            .fields
            .iter()
            .map(|(_, name)| {
                let mut p = Vec::with_capacity(name.len() + 3);
                json::key(&mut p, name);
                p
            })
            .collect();
        let row_key = row_key(&fields, form, table);
        TorrentsWriter {
            list,
            fields,
            prefixes,
            row_key,
            table,
            with_removed,
            keys: Keys {
                classic: form == Form::Classic,
            },
            head,
            tail,
            next: 0,
            stage: Stage::Head,
        }
    }

    /// A guess of the answer's size, to size the first buffer.
    pub(crate) fn size_hint(&self) -> usize {
        64 + self.list.transfers.len() * (16 + self.fields.fields.len() * 24)
    }

    /// Appends output until `out` holds at least `chunk` bytes or the
    /// answer is complete; `true` when complete.
    pub(crate) fn fill(&mut self, out: &mut Vec<u8>, chunk: usize) -> bool {
        loop {
            match self.stage {
                Stage::Head => {
                    out.extend_from_slice(&self.head);
                    out.extend_from_slice(b"{\"torrents\":[");
                    if self.table {
                        out.push(b'[');
                        for (i, (_, name)) in self.fields.fields.iter().enumerate() {
                            if i > 0 {
                                out.push(b',');
                            }
                            json::str(out, name);
                        }
                        out.push(b']');
                    }
                    self.stage = Stage::Rows;
                }
                Stage::Rows => {
                    let views = &self.list.transfers;
                    while self.next < views.len() {
                        let v = &views[self.next];
                        if self.next > 0 || self.table {
                            out.push(b',');
                        }
                        let cache = self.list.rows.get(self.next).and_then(Option::as_ref);
                        let written = self.list.written.get(self.next).and_then(Option::as_ref);
                        self.next += 1;
                        if let Some(row) = written {
                            out.extend_from_slice(row);
                            if out.len() >= chunk {
                                return false;
                            }
                            continue;
                        }
                        match cache {
                            Some(c) if c.append(&self.row_key, out) => {}
                            Some(c) => {
                                let start = out.len();
                                self.write_row(out, v);
                                c.store(&self.row_key, &out[start..]);
                            }
                            None => self.write_row(out, v),
                        }
                        if out.len() >= chunk {
                            return false;
                        }
                    }
                    self.stage = Stage::Tail;
                }
                Stage::Tail => {
                    out.push(b']');
                    if self.with_removed {
                        out.extend_from_slice(b",\"removed\":[");
                        for (i, id) in self.list.removed.iter().enumerate() {
                            if i > 0 {
                                out.push(b',');
                            }
                            json::u64(out, *id);
                        }
                        out.push(b']');
                    }
                    out.push(b'}');
                    out.extend_from_slice(&self.tail);
                    self.stage = Stage::Done;
                    return true;
                }
                Stage::Done => return true,
            }
        }
    }

    fn write_row(&self, out: &mut Vec<u8>, v: &TransferView) {
        out.push(if self.table { b'[' } else { b'{' });
        for (i, (field, _)) in self.fields.fields.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            if !self.table {
                out.extend_from_slice(&self.prefixes[i]);
            }
            write_value(out, *field, v, &self.keys);
        }
        out.push(if self.table { b']' } else { b'}' });
    }

    /// The whole answer in one buffer.
    pub(crate) fn into_bytes(mut self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size_hint());
        while !self.fill(&mut out, usize::MAX) {}
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{FileView, TransferHash};
    use std::sync::Arc;

    fn view() -> TransferView {
        let mut v = TransferView::new(7, TransferHash::Bt([0xab; 20]), "a \"b\"");
        v.state = TransferState::Downloading;
        v.eta = Eta::Unknown;
        v.size_when_done = 100;
        v.left_until_done = 25;
        v.labels = Arc::from(vec!["x".to_owned()]);
        v.files = vec![FileView {
            name: Arc::from("a/b"),
            length: 100,
            bytes_completed: 75,
            wanted: true,
            priority: Priority::High,
            begin_piece: 0,
            end_piece: 1,
        }];
        v
    }

    fn answer(names: &[&str], table: bool, form: Form) -> serde_json::Value {
        let list = TransferList {
            transfers: vec![Arc::new(view()), Arc::new(view())],
            removed: vec![3],
            rows: Vec::new(),
            written: Vec::new(),
        };
        let w = TorrentsWriter::new(
            list,
            FieldList::parse(names.iter().copied()),
            form,
            table,
            true,
            b"{\"arguments\":".to_vec(),
            b",\"result\":\"success\"}".to_vec(),
        );
        serde_json::from_slice(&w.into_bytes()).unwrap()
    }

    #[test]
    fn objects_carry_requested_keys_and_transmission_numbers() {
        let a = answer(
            &[
                "id",
                "status",
                "eta",
                "percentDone",
                "hashString",
                "labels",
                "wanted",
                "bogus",
            ],
            false,
            Form::Classic,
        );
        let t = &a["arguments"]["torrents"][0];
        assert_eq!(t["id"], 7);
        assert_eq!(t["status"], 4);
        assert_eq!(t["eta"], -2);
        assert_eq!(t["percentDone"], 0.75);
        assert_eq!(t["hashString"], "ab".repeat(20));
        assert_eq!(t["labels"], serde_json::json!(["x"]));
        assert_eq!(t["wanted"], serde_json::json!([1]));
        assert!(t.get("bogus").is_none());
        assert_eq!(t.as_object().unwrap().len(), 7);
        assert_eq!(a["arguments"]["removed"], serde_json::json!([3]));
        assert_eq!(a["result"], "success");
    }

    #[test]
    fn table_format_has_a_header_row() {
        let a = answer(&["id", "name"], true, Form::Classic);
        let rows = a["arguments"]["torrents"].as_array().unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0], serde_json::json!(["id", "name"]));
        assert_eq!(rows[1], serde_json::json!([7, "a \"b\""]));
    }

    #[test]
    fn nested_keys_follow_the_form() {
        let a = answer(&["files"], false, Form::Classic);
        assert_eq!(
            a["arguments"]["torrents"][0]["files"][0]["bytesCompleted"],
            75
        );
        let a = answer(&["files", "file_stats"], false, Form::JsonRpc);
        let t = &a["arguments"]["torrents"][0];
        assert_eq!(t["files"][0]["bytes_completed"], 75);
        assert_eq!(t["file_stats"][0]["priority"], 1);
    }

    #[test]
    fn chunks_reassemble() {
        let list = TransferList {
            transfers: (0..50).map(|_| Arc::new(view())).collect(),
            removed: vec![],
            rows: Vec::new(),
            written: Vec::new(),
        };
        let mk = |list| {
            TorrentsWriter::new(
                list,
                FieldList::parse(["id", "name", "files"]),
                Form::Classic,
                false,
                false,
                Vec::new(),
                Vec::new(),
            )
        };
        let whole = mk(list.clone()).into_bytes();
        let mut w = mk(list);
        let mut parts = Vec::new();
        let mut chunks = 0;
        loop {
            let mut out = Vec::new();
            let done = w.fill(&mut out, 100);
            chunks += 1;
            parts.extend_from_slice(&out);
            if done {
                break;
            }
        }
        assert_eq!(parts, whole);
        assert!(chunks > 10 && chunks <= 51, "{chunks}");
    }

    #[test]
    fn cached_rows_are_copied_for_the_same_fields_and_form_only() {
        let views: Vec<Arc<TransferView>> = (0..3).map(|_| Arc::new(view())).collect();
        let caches: Vec<Arc<crate::backend::RowCache>> = (0..3).map(|_| Arc::default()).collect();
        // The last view has no cache: it is always written.
        let rows: Vec<_> = vec![Some(caches[0].clone()), Some(caches[1].clone()), None];
        let get = |names: &[&str], form: Form, table: bool| {
            let list = TransferList {
                transfers: views.clone(),
                removed: Vec::new(),
                rows: rows.clone(),
                written: Vec::new(),
            };
            let w = TorrentsWriter::new(
                list,
                FieldList::parse(names.iter().copied()),
                form,
                table,
                false,
                Vec::new(),
                Vec::new(),
            );
            w.into_bytes()
        };
        let fresh = |names: &[&str], form: Form, table: bool| {
            let list = TransferList {
                transfers: views.clone(),
                removed: Vec::new(),
                rows: Vec::new(),
                written: Vec::new(),
            };
            TorrentsWriter::new(
                list,
                FieldList::parse(names.iter().copied()),
                form,
                table,
                false,
                Vec::new(),
                Vec::new(),
            )
            .into_bytes()
        };
        let first = get(&["id", "name"], Form::Classic, false);
        assert_eq!(first, fresh(&["id", "name"], Form::Classic, false));
        // The rows are copied now: a planted row shows it.
        let key: Arc<[u8]> = {
            let mut k = vec![0u8, 1];
            for n in ["id", "name"] {
                k.extend_from_slice(n.as_bytes());
                k.push(0);
            }
            k.into()
        };
        // `views` with these rows and written rows, as ["id", "name"] in
        // the classic form.
        let id_name = |rows, written| {
            let list = TransferList {
                transfers: views.clone(),
                removed: Vec::new(),
                rows,
                written,
            };
            TorrentsWriter::new(
                list,
                FieldList::parse(["id", "name"]),
                Form::Classic,
                false,
                false,
                Vec::new(),
                Vec::new(),
            )
            .into_bytes()
        };
        let planted = Arc::new(crate::backend::RowCache::default());
        planted.store(&key, b"{\"id\":99}");
        let out = id_name(vec![Some(planted)], Vec::new());
        assert!(
            out.starts_with(b"{\"torrents\":[{\"id\":99},{"),
            "{}",
            String::from_utf8_lossy(&out)
        );
        // A row the backend gives as written is copied, whatever the view
        // beside it says (the view may be the transfer's base).
        let out = id_name(Vec::new(), vec![None, Some(Arc::from(&b"{\"id\":42}"[..]))]);
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("},{\"id\":42},{"), "{text}");
        assert_eq!(
            key,
            row_key(&FieldList::parse(["id", "name"]), Form::Classic, false)
        );
        // Copies of the real rows read the same as writing them.
        assert_eq!(get(&["id", "name"], Form::Classic, false), first);
        // Other fields, the other form or a table are written afresh
        // (and cached beside the first, up to the slots).
        for (names, form, table) in [
            (&["id", "eta"][..], Form::Classic, false),
            (&["id", "name"][..], Form::JsonRpc, false),
            (&["id", "name"][..], Form::Classic, true),
        ] {
            assert_eq!(get(names, form, table), fresh(names, form, table));
            assert_eq!(get(names, form, table), fresh(names, form, table));
        }
        let mut out = Vec::new();
        assert!(!caches[0].append(&key, &mut out), "oldest slot gave way");
    }

    #[test]
    fn sitenames_and_hosts() {
        assert_eq!(
            tracker_host("http://tracker.example.org:6969/announce"),
            "http://tracker.example.org:6969"
        );
        assert_eq!(
            tracker_sitename("http://tracker.example.org:6969/announce"),
            "example"
        );
        assert_eq!(tracker_sitename("udp://127.0.0.1:6969"), "127.0.0.1");
        assert_eq!(tracker_sitename("http://[::1]:80/a"), "::1");
        assert_eq!(tracker_sitename("nonsense"), "nonsense");
    }

    #[test]
    fn flags() {
        let p = PeerView {
            address: "127.0.0.1".parse().unwrap(),
            port: 1,
            client_name: Arc::from("x"),
            progress: 0.5,
            rate_to_client: 1,
            rate_to_peer: 0,
            is_encrypted: true,
            is_incoming: true,
            is_utp: false,
            client_is_choked: false,
            client_is_interested: true,
            peer_is_choked: true,
            peer_is_interested: false,
            is_downloading_from: true,
            is_uploading_to: false,
            source: PeerSource::Incoming,
        };
        assert_eq!(flag_str(&p), "DEI");
    }
}
