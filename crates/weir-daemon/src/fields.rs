//! The `torrent-get` fields: their names in both spellings (Transmission
//! 3.00/4.0's camelCase and kebab-case, and RPC 6.0's snake_case) and which
//! costly part of a view each needs.

use crate::backend::Detail;

macro_rules! fields {
    ($( $v:ident = $legacy:literal, $snake:literal $(, $alias:literal)? ; )*) => {
        /// One `torrent-get` field.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub(crate) enum Field { $( #[doc = $legacy] $v, )* }

        /// Every field with its classic name, snake_case name and an
        /// extra accepted alias (or "").
        pub(crate) const ALL: &[(Field, &str, &str, &str)] = &[
            $( (Field::$v, $legacy, $snake, fields!(@alias $($alias)?)), )*
        ];
    };
    (@alias $a:literal) => { $a };
    (@alias) => { "" };
}

fields! {
    ActivityDate = "activityDate", "activity_date";
    AddedDate = "addedDate", "added_date";
    Availability = "availability", "availability";
    BandwidthPriority = "bandwidthPriority", "bandwidth_priority";
    Comment = "comment", "comment";
    CorruptEver = "corruptEver", "corrupt_ever";
    Creator = "creator", "creator";
    DateCreated = "dateCreated", "date_created";
    DesiredAvailable = "desiredAvailable", "desired_available";
    DoneDate = "doneDate", "done_date";
    DownloadDir = "downloadDir", "download_dir";
    DownloadedEver = "downloadedEver", "downloaded_ever";
    DownloadLimit = "downloadLimit", "download_limit";
    DownloadLimited = "downloadLimited", "download_limited";
    EditDate = "editDate", "edit_date";
    Error = "error", "error";
    ErrorString = "errorString", "error_string";
    Eta = "eta", "eta";
    EtaIdle = "etaIdle", "eta_idle";
    FileCount = "file-count", "file_count", "fileCount";
    Files = "files", "files";
    FileStats = "fileStats", "file_stats";
    Group = "group", "group";
    HashString = "hashString", "hash_string";
    HaveUnchecked = "haveUnchecked", "have_unchecked";
    HaveValid = "haveValid", "have_valid";
    HonorsSessionLimits = "honorsSessionLimits", "honors_session_limits";
    Id = "id", "id";
    IsFinished = "isFinished", "is_finished";
    IsPrivate = "isPrivate", "is_private";
    IsStalled = "isStalled", "is_stalled";
    Labels = "labels", "labels";
    LeftUntilDone = "leftUntilDone", "left_until_done";
    MagnetLink = "magnetLink", "magnet_link";
    ManualAnnounceTime = "manualAnnounceTime", "manual_announce_time";
    MaxConnectedPeers = "maxConnectedPeers", "max_connected_peers";
    MetadataPercentComplete = "metadataPercentComplete", "metadata_percent_complete";
    Name = "name", "name";
    PeerLimit = "peer-limit", "peer_limit", "peerLimit";
    Peers = "peers", "peers";
    PeersConnected = "peersConnected", "peers_connected";
    PeersFrom = "peersFrom", "peers_from";
    PeersGettingFromUs = "peersGettingFromUs", "peers_getting_from_us";
    PeersSendingToUs = "peersSendingToUs", "peers_sending_to_us";
    PercentComplete = "percentComplete", "percent_complete";
    PercentDone = "percentDone", "percent_done";
    Pieces = "pieces", "pieces";
    PieceCount = "pieceCount", "piece_count";
    PieceSize = "pieceSize", "piece_size";
    Priorities = "priorities", "priorities";
    PrimaryMimeType = "primary-mime-type", "primary_mime_type";
    QueuePosition = "queuePosition", "queue_position";
    RateDownload = "rateDownload", "rate_download";
    RateUpload = "rateUpload", "rate_upload";
    RecheckProgress = "recheckProgress", "recheck_progress";
    SecondsDownloading = "secondsDownloading", "seconds_downloading";
    SecondsSeeding = "secondsSeeding", "seconds_seeding";
    SeedIdleLimit = "seedIdleLimit", "seed_idle_limit";
    SeedIdleMode = "seedIdleMode", "seed_idle_mode";
    SeedRatioLimit = "seedRatioLimit", "seed_ratio_limit";
    SeedRatioMode = "seedRatioMode", "seed_ratio_mode";
    SequentialDownload = "sequentialDownload", "sequential_download";
    SizeWhenDone = "sizeWhenDone", "size_when_done";
    StartDate = "startDate", "start_date";
    Status = "status", "status";
    TorrentFile = "torrentFile", "torrent_file";
    TotalSize = "totalSize", "total_size";
    Trackers = "trackers", "trackers";
    TrackerList = "trackerList", "tracker_list";
    TrackerStats = "trackerStats", "tracker_stats";
    UploadedEver = "uploadedEver", "uploaded_ever";
    UploadLimit = "uploadLimit", "upload_limit";
    UploadLimited = "uploadLimited", "upload_limited";
    UploadRatio = "uploadRatio", "upload_ratio";
    Wanted = "wanted", "wanted";
    Webseeds = "webseeds", "webseeds";
    WebseedsSendingToUs = "webseedsSendingToUs", "webseeds_sending_to_us";
}

impl Field {
    /// The field a name (any accepted spelling) stands for.
    pub(crate) fn lookup(name: &str) -> Option<Field> {
        ALL.iter()
            .find(|(_, legacy, snake, alias)| {
                *legacy == name || *snake == name || (!alias.is_empty() && *alias == name)
            })
            .map(|e| e.0)
    }

    /// The costly view part this field needs, if any.
    fn needs(self, d: &mut Detail) {
        match self {
            Field::Files | Field::FileStats | Field::Priorities | Field::Wanted => d.files = true,
            Field::Peers => d.peers = true,
            Field::Trackers | Field::TrackerStats | Field::TrackerList => d.trackers = true,
            Field::Pieces | Field::Availability => d.pieces = true,
            _ => {}
        }
    }
}

/// The fields a request asked for, each with the spelling it used (the
/// answer uses the same key), without duplicates, in request order.
#[derive(Clone, Debug, Default)]
pub(crate) struct FieldList {
    /// `(field, key as requested)`.
    pub(crate) fields: Vec<(Field, String)>,
}

impl FieldList {
    /// Keeps the known names of `names`, dropping unknown ones and repeats
    /// (as Transmission does).
    pub(crate) fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> FieldList {
        let mut fields: Vec<(Field, String)> = Vec::new();
        for n in names {
            if let Some(f) = Field::lookup(n) {
                if !fields.iter().any(|(g, _)| *g == f) {
                    fields.push((f, n.to_owned()));
                }
            }
        }
        FieldList { fields }
    }

    /// The costly parts these fields need.
    pub(crate) fn detail(&self) -> Detail {
        let mut d = Detail::default();
        for (f, _) in &self.fields {
            f.needs(&mut d);
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        for (f, legacy, snake, alias) in ALL {
            assert_eq!(Field::lookup(legacy), Some(*f), "{legacy}");
            assert_eq!(Field::lookup(snake), Some(*f), "{snake}");
            if !alias.is_empty() {
                assert_eq!(Field::lookup(alias), Some(*f));
            }
        }
        assert_eq!(Field::lookup("bogus"), None);
        assert_eq!(Field::lookup(""), None);
    }

    #[test]
    fn parse_drops_unknown_and_repeats_and_keeps_spelling() {
        let l = FieldList::parse(["id", "bogus", "hash_string", "id", "fileCount"]);
        let got: Vec<_> = l.fields.iter().map(|(f, n)| (*f, n.as_str())).collect();
        assert_eq!(
            got,
            vec![
                (Field::Id, "id"),
                (Field::HashString, "hash_string"),
                (Field::FileCount, "fileCount")
            ]
        );
        assert_eq!(l.detail(), Detail::default());
        let d = FieldList::parse(["wanted", "peers"]).detail();
        assert!(d.files && d.peers && !d.trackers && !d.pieces);
    }
}
