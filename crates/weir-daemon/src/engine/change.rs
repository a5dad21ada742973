//! `torrent-set`, `torrent-set-location`, the queue moves and the seeding
//! goals of [`EngineBackend`].
//!
//! What weir's engine cannot do is refused with an error naming it, never
//! accepted and ignored: it has no per-transfer peer limit, sequential
//! switch, tracker editing, bandwidth priority or way around the session
//! caps. `files-wanted`/`files-unwanted` and file priorities
//! (`priority-high`/`-low`/`-normal`) restart the transfer in the engine
//! with the new selection and priorities (its storage reopens trusting its
//! journal: nothing verified is fetched again).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use weir_runtime::engine::DataPaths;

use super::state::{Folder, Limits};
use super::{Content, EngineBackend, EngineId, Infos, Touch, cap_of, unix_now};
use crate::backend::*;

fn mode_byte(m: LimitMode) -> u8 {
    match m {
        LimitMode::Global => 0,
        LimitMode::Single => 1,
        LimitMode::Unlimited => 2,
    }
}

/// The mode a saved byte names.
pub(super) fn mode_of(b: u8) -> LimitMode {
    match b {
        1 => LimitMode::Single,
        2 => LimitMode::Unlimited,
        _ => LimitMode::Global,
    }
}

/// Refuses what the engine cannot do (before anything changes).
fn check_supported(c: &TransferChange, file_count: u32, ed2k: bool) -> Result<(), BackendError> {
    let check_range = |set: &Option<FileSet>| -> Result<(), BackendError> {
        if let Some(FileSet::Indices(v)) = set {
            if let Some(bad) = v.iter().find(|i| **i >= file_count) {
                return Err(BackendError::FileIndexOutOfRange(*bad));
            }
        }
        Ok(())
    };
    for set in [
        &c.files_wanted,
        &c.files_unwanted,
        &c.priority_high,
        &c.priority_low,
        &c.priority_normal,
    ] {
        check_range(set)?;
    }
    let names = |set: &Option<FileSet>| match set {
        None => false,
        Some(FileSet::All) => true,
        Some(FileSet::Indices(v)) => !v.is_empty(),
    };
    if ed2k && names(&c.files_unwanted) {
        return Err(BackendError::Unsupported(
            "files-unwanted: an eD2k download is one file; remove it instead",
        ));
    }
    if c.bandwidth_priority.is_some_and(|p| p != Priority::Normal) {
        return Err(BackendError::Unsupported(
            "bandwidthPriority: weir has one bandwidth priority",
        ));
    }
    if c.honors_session_limits == Some(false) {
        return Err(BackendError::Unsupported(
            "honorsSessionLimits: weir's transfers always obey the session caps",
        ));
    }
    if c.peer_limit.is_some() {
        return Err(BackendError::Unsupported(
            "peer-limit: weir has no per-transfer peer limit",
        ));
    }
    if c.sequential.is_some() {
        return Err(BackendError::Unsupported(
            "sequentialDownload: not supported by weir's daemon",
        ));
    }
    if c.tracker_list.is_some() || !c.tracker_add.is_empty() || !c.tracker_remove.is_empty() {
        return Err(BackendError::Unsupported(
            "trackerList/trackerAdd/trackerRemove: weir does not edit a torrent's trackers",
        ));
    }
    if let Some(r) = c.seed_ratio_limit {
        if !r.is_finite() || r < 0.0 {
            return Err(BackendError::Invalid(format!(
                "seedRatioLimit {r}: not a ratio"
            )));
        }
    }
    Ok(())
}

/// Applies `files-unwanted` then `files-wanted` of `c` (as Transmission
/// orders them) to a sorted list of unwanted file indices; whether it
/// changed.
fn apply_files(unwanted: &mut Vec<u32>, c: &TransferChange, file_count: u32) -> bool {
    let mut set: std::collections::BTreeSet<u32> = unwanted.iter().copied().collect();
    match &c.files_unwanted {
        Some(FileSet::All) => set.extend(0..file_count),
        Some(FileSet::Indices(v)) => set.extend(v.iter().copied()),
        None => {}
    }
    match &c.files_wanted {
        Some(FileSet::All) => set.clear(),
        Some(FileSet::Indices(v)) => {
            for i in v {
                set.remove(i);
            }
        }
        None => {}
    }
    let new: Vec<u32> = set.into_iter().collect();
    let changed = new != *unwanted;
    *unwanted = new;
    changed
}

/// Applies `priority-high`, `priority-low` then `priority-normal` of `c`
/// to a record's file priorities (see `Record::priorities`); whether they
/// changed. (Transmission applies them in that order, so a file named in
/// two ends at the later; an empty list names every file.)
fn apply_priorities(prio: &mut Vec<(u32, i8)>, c: &TransferChange, file_count: u32) -> bool {
    let files = |set: &Option<FileSet>| match set {
        Some(FileSet::All) => (0..file_count).collect(),
        Some(FileSet::Indices(v)) => v.clone(),
        None => Vec::new(),
    };
    set_levels(
        prio,
        [
            (&files(&c.priority_high)[..], 1),
            (&files(&c.priority_low)[..], -1),
            (&files(&c.priority_normal)[..], 0),
        ],
    )
}

/// Sets the files of each list to its level (1 high, -1 low, 0 normal),
/// list after list, in a record's file priorities (see
/// `Record::priorities`: the non-normal files, sorted); whether they
/// changed. `torrent-add` and `torrent-set` both go through it, each in
/// Transmission's order.
pub(super) fn set_levels(prio: &mut Vec<(u32, i8)>, lists: [(&[u32], i8); 3]) -> bool {
    let mut map: std::collections::BTreeMap<u32, i8> = prio.iter().copied().collect();
    for (files, level) in lists {
        for &f in files {
            if level == 0 {
                map.remove(&f);
            } else {
                map.insert(f, level);
            }
        }
    }
    let new: Vec<(u32, i8)> = map.into_iter().collect();
    let changed = new != *prio;
    *prio = new;
    changed
}

/// Applies the limits of `c` to `l`.
fn apply_limits(l: &mut Limits, c: &TransferChange) {
    if let Some(v) = c.download_limit {
        l.down_kbps = v;
    }
    if let Some(v) = c.download_limited {
        l.down_on = v;
    }
    if let Some(v) = c.upload_limit {
        l.up_kbps = v;
    }
    if let Some(v) = c.upload_limited {
        l.up_on = v;
    }
    if let Some(v) = c.seed_ratio_limit {
        l.ratio_limit = v;
    }
    if let Some(v) = c.seed_ratio_mode {
        l.ratio_mode = mode_byte(v);
    }
    if let Some(v) = c.seed_idle_limit {
        l.idle_limit = v;
    }
    if let Some(v) = c.seed_idle_mode {
        l.idle_mode = mode_byte(v);
    }
}

/// Moves a transfer's files (and journal) from `from` to `to` under the
/// same relative paths: a rename, or a copy and delete across file
/// systems. Folders left empty in `from` are removed.
fn move_files(from: &DataPaths, to: &Path) -> Result<(), BackendError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BackendError::Io { path, source }
    };
    for rel in from.files.iter().chain(&from.side) {
        let src = from.root.join(rel);
        let dst = to.join(rel);
        match std::fs::symlink_metadata(&src) {
            Ok(m) if m.is_file() => {}
            // Not there (not written yet) or not a plain file: nothing to move.
            _ => continue,
        }
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        if std::fs::rename(&src, &dst).is_err() {
            std::fs::copy(&src, &dst).map_err(io(&dst))?;
            std::fs::File::open(&dst)
                .and_then(|f| f.sync_all())
                .map_err(io(&dst))?;
            std::fs::remove_file(&src).map_err(io(&src))?;
        }
        let mut d = src.parent();
        while let Some(dir) = d {
            if dir == from.root || !dir.starts_with(&from.root) || std::fs::remove_dir(dir).is_err()
            {
                break;
            }
            d = dir.parent();
        }
    }
    Ok(())
}

impl EngineBackend {
    /// `torrent-set`.
    pub(super) async fn change_transfers(
        &self,
        select: Selection,
        change: TransferChange,
    ) -> Result<(), BackendError> {
        let infos = self.snapshot().await;
        let by_eid = Infos::new(&infos);
        let (caps, ids, reselect) = {
            let mut st = self.lock();
            let ids = st.selected(&select, None);
            for id in &ids {
                let e = &st.entries[id];
                check_supported(
                    &change,
                    e.base.file_count,
                    matches!(e.content, Content::Ed2k(_)),
                )?;
            }
            let now = unix_now();
            let mut caps = Vec::new();
            let mut reselect = Vec::new();
            for id in &ids {
                let Some(e) = st.entries.get_mut(id) else {
                    continue;
                };
                let files = apply_files(&mut e.record.unwanted, &change, e.base.file_count);
                let priorities =
                    apply_priorities(&mut e.record.priorities, &change, e.base.file_count);
                if files || priorities {
                    e.mark_wanted();
                    // Not yet in the engine (a magnet fetching, a stopped
                    // or opening transfer): it starts with it next time.
                    if let Some(i) = e.engine_id.and_then(|eid| by_eid.get(&eid)) {
                        e.saw(i);
                    }
                    if !e.adding
                        && let Some(eid) = e.engine_id.take()
                    {
                        e.adding = true;
                        e.earlier = (e.earlier.0 + e.run.0, e.earlier.1 + e.run.1);
                        e.run = (0, 0);
                        reselect.push((*id, eid));
                    }
                }
                let before = e.record.limits;
                apply_limits(&mut e.record.limits, &change);
                if let Some(labels) = &change.labels {
                    e.record.labels = labels.clone();
                }
                // A new goal lets a finished transfer be started again.
                if before.ratio_limit != e.record.limits.ratio_limit
                    || before.ratio_mode != e.record.limits.ratio_mode
                {
                    e.record.finished = false;
                }
                e.edited = now;
                if change.seed_idle_mode.is_some() || change.seed_idle_limit.is_some() {
                    // Idle time counts from the new goal (activity is only
                    // followed while a goal applies).
                    e.last_active = now;
                }
                let l = e.record.limits;
                let changed = (l.down_kbps, l.down_on, l.up_kbps, l.up_on)
                    != (
                        before.down_kbps,
                        before.down_on,
                        before.up_kbps,
                        before.up_on,
                    );
                if let (true, Some(eid)) = (changed, e.engine_id) {
                    caps.push((
                        eid,
                        cap_of(l.down_kbps, l.down_on),
                        cap_of(l.up_kbps, l.up_on),
                    ));
                }
            }
            if let Some(pos) = change.queue_position {
                for id in &ids {
                    st.queue.retain(|q| q != id);
                    let at = (pos as usize).min(st.queue.len());
                    st.queue.insert(at, *id);
                }
            }
            (caps, ids, reselect)
        };
        for (eid, down, up) in caps {
            self.0.engine.set_caps(eid, down, up).await;
        }
        let mut touched = vec![Touch::Transfers(ids)];
        if change.queue_position.is_some() {
            touched.push(Touch::Queue);
        }
        let persisted = self
            .persist(touched)
            .await
            .map_err(super::methods::state_err);
        // Taken out of the engine above: back with the new selection even
        // when the state could not be saved (the error is still said).
        for (id, eid) in reselect {
            self.0.engine.remove_closed(eid).await;
            self.launch(id, false);
        }
        persisted?;
        if let Some(location) = change.location {
            self.move_to(select, location, false).await?;
        }
        Ok(())
    }

    /// `queue-move-top/up/down/bottom`.
    pub(super) async fn queue_move(
        &self,
        select: Selection,
        action: Action,
    ) -> Result<(), BackendError> {
        {
            let mut st = self.lock();
            let chosen = st.selected(&select, None);
            // In queue order, so that several ids keep their order.
            let mut ids: Vec<TransferId> = st
                .queue
                .iter()
                .copied()
                .filter(|q| chosen.contains(q))
                .collect();
            if matches!(action, Action::QueueTop | Action::QueueDown) {
                ids.reverse();
            }
            for id in ids {
                let Some(at) = st.queue.iter().position(|q| *q == id) else {
                    continue;
                };
                st.queue.remove(at);
                let to = match action {
                    Action::QueueTop => 0,
                    Action::QueueUp => at.saturating_sub(1),
                    Action::QueueDown => (at + 1).min(st.queue.len()),
                    _ => st.queue.len(),
                };
                st.queue.insert(to, id);
            }
            let now = unix_now();
            for id in chosen {
                if let Some(e) = st.entries.get_mut(&id) {
                    e.edited = now;
                }
            }
        }
        self.persist(vec![Touch::Queue])
            .await
            .map_err(super::methods::state_err)
    }

    /// `torrent-set-location`: each selected transfer leaves the engine
    /// (its storage closed), its files move when `move_data`, and it comes
    /// back from `location` (data found there is checked).
    pub(super) async fn move_to(
        &self,
        select: Selection,
        location: PathBuf,
        move_data: bool,
    ) -> Result<(), BackendError> {
        if !location.is_absolute() {
            return Err(BackendError::PathNotAbsolute(location));
        }
        let infos = self.snapshot().await;
        let by_eid = Infos::new(&infos);
        let targets: Vec<(TransferId, Option<EngineId>, DataPaths)> = {
            let mut st = self.lock();
            let ids = st.selected(&select, None);
            let mut out = Vec::new();
            for id in ids {
                let Some(e) = st.entries.get_mut(&id) else {
                    continue;
                };
                if e.adding || e.record.download_dir == location {
                    continue;
                }
                if let Some(i) = e.engine_id.and_then(|eid| by_eid.get(&eid)) {
                    e.saw(i);
                }
                let eid = e.engine_id.take();
                if eid.is_some() {
                    e.adding = true;
                    e.earlier = (e.earlier.0 + e.run.0, e.earlier.1 + e.run.1);
                    e.run = (0, 0);
                }
                out.push((id, eid, e.content.paths(&e.record.download_dir)));
            }
            out
        };
        let mut first_err = None;
        let ids: Vec<TransferId> = targets.iter().map(|t| t.0).collect();
        for (id, eid, paths) in targets {
            if let Some(eid) = eid {
                self.0.engine.remove_closed(eid).await;
            }
            let moved = if move_data {
                let to = location.clone();
                tokio::task::spawn_blocking(move || move_files(&paths, &to))
                    .await
                    .map_err(|e| BackendError::Invalid(e.to_string()))
                    .and_then(|r| r)
            } else {
                Ok(())
            };
            {
                let mut st = self.lock();
                if let Some(e) = st.entries.get_mut(&id) {
                    match &moved {
                        Ok(()) => {
                            let folder = Folder::new(&location);
                            Arc::make_mut(&mut e.base).download_dir = folder.shown();
                            e.record.download_dir = folder;
                        }
                        Err(err) => tracing::warn!("transfer {id}: moving its data: {err}"),
                    }
                    e.edited = unix_now();
                }
            }
            if let Err(e) = moved {
                first_err.get_or_insert(e);
            }
            self.launch(id, false);
        }
        self.persist(vec![Touch::Transfers(ids)])
            .await
            .map_err(super::methods::state_err)?;
        first_err.map_or(Ok(()), Err)
    }

    /// Checks the seeding goals every `every`: a complete transfer that
    /// reached its ratio goal, or sat idle past its idle limit, stops and
    /// reads as finished (Transmission's `isFinished`).
    pub(super) fn watch_limits(&self, every: Duration) {
        let me = Arc::downgrade(&self.0);
        tokio::spawn(async move {
            let mut t = tokio::time::interval(every);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                t.tick().await;
                let Some(shared) = me.upgrade() else {
                    return;
                };
                EngineBackend(shared).check_limits().await;
            }
        });
    }

    async fn check_limits(&self) {
        // Nothing to check (the usual case): no snapshot of every transfer.
        let any_goal = {
            let st = self.lock();
            st.settings.seed_ratio_limited
                || st.settings.idle_seeding_limit_enabled
                || st
                    .entries
                    .values()
                    .any(|e| e.record.limits.ratio_mode == 1 || e.record.limits.idle_mode == 1)
        };
        if !any_goal {
            return;
        }
        let infos = self.snapshot().await;
        let by_eid = Infos::new(&infos);
        let now = unix_now();
        let stop: Vec<(TransferId, EngineId)> = {
            let mut st = self.lock();
            let (g_ratio, g_ratio_on) =
                (st.settings.seed_ratio_limit, st.settings.seed_ratio_limited);
            let (g_idle, g_idle_on) = (
                st.settings.idle_seeding_limit,
                st.settings.idle_seeding_limit_enabled,
            );
            let mut stop = Vec::new();
            for e in st.entries.values_mut() {
                let Some(eid) = e.engine_id else {
                    continue;
                };
                let Some(i) = by_eid.get(&eid) else {
                    continue;
                };
                e.saw(i);
                if i.download_rate > 0.0 || i.upload_rate > 0.0 {
                    e.last_active = now;
                }
                let complete = i.wanted > 0 && i.bytes_had >= i.wanted;
                if e.record.paused || !complete || matches!(e.content, Content::Ed2k(_)) {
                    continue;
                }
                let l = e.record.limits;
                let ratio = match l.ratio_mode {
                    0 if g_ratio_on => Some(g_ratio),
                    1 => Some(l.ratio_limit),
                    _ => None,
                };
                let idle = match l.idle_mode {
                    0 if g_idle_on => Some(g_idle),
                    1 => Some(l.idle_limit),
                    _ => None,
                };
                let down = e.earlier.0 + e.run.0;
                let up = e.earlier.1 + e.run.1;
                // As Transmission: the goal is a multiple of what was
                // downloaded, or of the size for a seed from the start.
                let base = if down > 0 { down } else { i.size };
                let ratio_done = ratio.is_some_and(|r| up as f64 >= r * base as f64);
                let idle_done =
                    idle.is_some_and(|m| now.saturating_sub(e.last_active) >= u64::from(m) * 60);
                if ratio_done || idle_done {
                    tracing::info!(
                        "{}: seeding goal reached ({}); stopped",
                        e.base.name,
                        if ratio_done { "ratio" } else { "idle time" }
                    );
                    e.record.paused = true;
                    e.record.finished = true;
                    e.edited = now;
                    stop.push((e.record.id, eid));
                }
            }
            stop
        };
        if stop.is_empty() {
            return;
        }
        for (_, eid) in &stop {
            self.0.engine.pause(*eid).await;
        }
        let ids = stop.into_iter().map(|(id, _)| id).collect();
        if let Err(e) = self.persist(vec![Touch::Transfers(ids)]).await {
            tracing::warn!("saving the state: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_engine_cannot_do_is_refused_naming_it() {
        let ok = TransferChange {
            download_limit: Some(10),
            files_wanted: Some(FileSet::All),
            priority_normal: Some(FileSet::Indices(vec![0, 1])),
            files_unwanted: Some(FileSet::Indices(vec![])),
            ..TransferChange::default()
        };
        check_supported(&ok, 2, false).unwrap();
        let refused = |c: TransferChange, word: &str| match check_supported(&c, 2, true) {
            Err(BackendError::Unsupported(m)) => assert!(m.contains(word), "{m}"),
            other => panic!("{word}: {other:?}"),
        };
        refused(
            TransferChange {
                files_unwanted: Some(FileSet::Indices(vec![1])),
                ..TransferChange::default()
            },
            "files-unwanted",
        );
        refused(
            TransferChange {
                bandwidth_priority: Some(Priority::High),
                ..TransferChange::default()
            },
            "bandwidthPriority",
        );
        // File priorities are done, on eD2k's one file too; out of range
        // is still refused.
        check_supported(
            &TransferChange {
                priority_high: Some(FileSet::All),
                priority_low: Some(FileSet::Indices(vec![1])),
                ..TransferChange::default()
            },
            2,
            true,
        )
        .unwrap();
        assert!(matches!(
            check_supported(
                &TransferChange {
                    priority_low: Some(FileSet::Indices(vec![2])),
                    ..TransferChange::default()
                },
                2,
                false
            ),
            Err(BackendError::FileIndexOutOfRange(2))
        ));
        refused(
            TransferChange {
                peer_limit: Some(3),
                ..TransferChange::default()
            },
            "peer-limit",
        );
        refused(
            TransferChange {
                honors_session_limits: Some(false),
                ..TransferChange::default()
            },
            "honorsSessionLimits",
        );
        assert!(matches!(
            check_supported(
                &TransferChange {
                    files_wanted: Some(FileSet::Indices(vec![2])),
                    ..TransferChange::default()
                },
                2,
                false
            ),
            Err(BackendError::FileIndexOutOfRange(2))
        ));
        assert!(matches!(
            check_supported(
                &TransferChange {
                    seed_ratio_limit: Some(f64::NAN),
                    ..TransferChange::default()
                },
                2,
                false
            ),
            Err(BackendError::Invalid(_))
        ));
    }

    #[test]
    fn file_priorities_apply_high_then_low_then_normal() {
        let set = |h: Option<FileSet>, l: Option<FileSet>, n: Option<FileSet>| TransferChange {
            priority_high: h,
            priority_low: l,
            priority_normal: n,
            ..TransferChange::default()
        };
        let idx = |v: &[u32]| Some(FileSet::Indices(v.to_vec()));
        let mut p = Vec::new();
        assert!(apply_priorities(
            &mut p,
            &set(idx(&[3, 1]), idx(&[0]), None),
            5
        ));
        assert_eq!(p, [(0, -1), (1, 1), (3, 1)]);
        // Named high and low in one call: low (applied after) wins; normal
        // after both.
        assert!(apply_priorities(
            &mut p,
            &set(idx(&[2]), idx(&[2, 3]), idx(&[1])),
            5
        ));
        assert_eq!(p, [(0, -1), (2, -1), (3, -1)]);
        assert!(
            !apply_priorities(&mut p, &set(None, idx(&[0]), None), 5),
            "no change"
        );
        // An empty list names every file.
        assert!(apply_priorities(
            &mut p,
            &set(Some(FileSet::All), None, None),
            3
        ));
        assert_eq!(p, [(0, 1), (1, 1), (2, 1), (3, -1)]);
        assert!(apply_priorities(
            &mut p,
            &set(None, None, Some(FileSet::All)),
            4
        ));
        assert!(p.is_empty());
    }

    #[test]
    fn file_selection_changes_apply_unwanted_then_wanted() {
        let set = |u: Option<FileSet>, w: Option<FileSet>| TransferChange {
            files_unwanted: u,
            files_wanted: w,
            ..TransferChange::default()
        };
        let mut unwanted = vec![1];
        assert!(apply_files(
            &mut unwanted,
            &set(Some(FileSet::Indices(vec![4, 2, 2])), None),
            5
        ));
        assert_eq!(unwanted, [1, 2, 4]);
        // Named both ways in one call: wanted wins, as in Transmission.
        assert!(apply_files(
            &mut unwanted,
            &set(
                Some(FileSet::Indices(vec![3])),
                Some(FileSet::Indices(vec![3, 1]))
            ),
            5
        ));
        assert_eq!(unwanted, [2, 4]);
        assert!(!apply_files(&mut unwanted, &set(None, None), 5));
        assert!(apply_files(
            &mut unwanted,
            &set(Some(FileSet::All), None),
            5
        ));
        assert_eq!(unwanted, [0, 1, 2, 3, 4]);
        assert!(apply_files(
            &mut unwanted,
            &set(None, Some(FileSet::All)),
            5
        ));
        assert!(unwanted.is_empty());
    }

    #[test]
    fn limits_apply_and_modes_round_trip() {
        let mut l = Limits::default();
        apply_limits(
            &mut l,
            &TransferChange {
                download_limit: Some(50),
                download_limited: Some(true),
                seed_ratio_limit: Some(1.5),
                seed_ratio_mode: Some(LimitMode::Single),
                ..TransferChange::default()
            },
        );
        assert_eq!((l.down_kbps, l.down_on, l.up_on), (50, true, false));
        assert_eq!(
            (l.ratio_limit, mode_of(l.ratio_mode)),
            (1.5, LimitMode::Single)
        );
        for m in [LimitMode::Global, LimitMode::Single, LimitMode::Unlimited] {
            assert_eq!(mode_of(mode_byte(m)), m);
        }
    }

    #[test]
    fn files_move_with_their_folders() {
        let dir = std::env::temp_dir().join(format!("weir-move-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::create_dir_all(a.join("t/sub")).unwrap();
        std::fs::write(a.join("t/sub/x"), b"xx").unwrap();
        std::fs::write(a.join("t/y"), b"y").unwrap();
        std::fs::write(a.join(".j"), b"j").unwrap();
        let p = DataPaths {
            root: a.clone(),
            files: vec!["t/sub/x".into(), "t/y".into(), "t/missing".into()],
            side: vec![".j".into()],
            own_root: false,
        };
        move_files(&p, &b).unwrap();
        assert_eq!(std::fs::read(b.join("t/sub/x")).unwrap(), b"xx");
        assert_eq!(std::fs::read(b.join("t/y")).unwrap(), b"y");
        assert_eq!(std::fs::read(b.join(".j")).unwrap(), b"j");
        assert!(!a.join("t").exists(), "the emptied folder stays");
        assert!(a.exists(), "the download directory itself stays");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
