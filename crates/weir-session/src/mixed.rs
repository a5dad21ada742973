//! One file from two networks: an eD2k file attached to a torrent's
//! content.
//!
//! When an ed2k link names a file of a torrent in the session (the
//! torrent's per-file `ed2k` hash matches, or the size matches and the
//! name when the link gives one), the eD2k side joins that transfer instead
//! of becoming a transfer of its own. The torrent owns the content
//! (`weir_core::content`, in the torrent's pieces): eD2k sources pick
//! blocks from it and deliver into it, so nothing is fetched twice, and
//! every byte is verified by SHA-1 as the torrent's pieces are written.
//! The file's MD4 parts are a secondary scheme of the content: once a
//! source sent the hashset, each part is checked from storage when the
//! pieces under it are verified ([`SessionEvent::CheckRange`]), and only
//! then offered on eD2k. A piece that fails is fetched again and its
//! sender, on either network, struck or banned (the content's evidence).
//!
//! The eD2k core works on the content only while the session lends it
//! (each call into the eD2k core takes it from the torrent and gives it
//! back); the torrent handles the content's events after.

use std::net::IpAddr;
use std::time::Instant;

use weir_core::close::{BanReason, CloseReason};
use weir_core::content::ContentEvent;
use weir_core::content::grid::UnitGrid;
use weir_ed2k::link::FileLink;
use weir_ed2k::transfer::{Client, FileId};

use crate::session::Session;
use crate::transfer::Ed2kSide;
use crate::types::{AddError, LogLevel, SessionEvent, TransferId};

/// Strikes after which a source that sent a bad piece alone is banned.
const BAN_STRIKES: u32 = 2;

impl Session {
    /// The torrent transfer an eD2k link would join (it names one of its
    /// files by eD2k hash, or by size and name): its bytes are that
    /// torrent's, so no storage of its own is opened for it.
    pub fn ed2k_joins(&self, link: &FileLink) -> Option<TransferId> {
        self.matching_torrent_file(link).map(|(id, _)| id)
    }

    /// The torrent transfer and file index an eD2k link names, if any.
    pub(crate) fn matching_torrent_file(&self, link: &FileLink) -> Option<(TransferId, usize)> {
        for (id, t) in self.transfers.iter() {
            let (Some(b), None) = (&t.bt, &t.ed2k) else {
                continue;
            };
            let files = &b.meta.info.files;
            // A deselected file is not fetched, by either network.
            let wanted = |i: usize| {
                let offset: u64 = files[..i].iter().map(|f| f.length).sum();
                !b.view().deselected(offset, files[i].length)
            };
            if let Some(i) = files.iter().position(|f| f.ed2k == Some(link.hash.0)) {
                return wanted(i).then_some((*id, i));
            }
            let by_size = files.iter().position(|f| {
                f.length == link.size
                    && f.ed2k.is_none()
                    && (link.name.is_empty() || f.path.last().is_some_and(|n| *n == link.name))
            });
            if let Some(i) = by_size {
                return wanted(i).then_some((*id, i));
            }
        }
        None
    }

    /// Attaches the eD2k file of `link` to file `index` of the torrent of
    /// transfer `id`.
    pub(crate) fn attach_ed2k(
        &mut self,
        id: TransferId,
        index: usize,
        link: &FileLink,
        now: Instant,
    ) -> Result<FileId, AddError> {
        let t = self.transfers.get_mut(&id).expect("caller found it");
        let b = t.bt.as_mut().expect("a torrent");
        let files = &b.meta.info.files;
        let offset: u64 = files[..index].iter().map(|f| f.length).sum();
        let grid = UnitGrid::new(offset, files[index].length, weir_ed2k::PARTSIZE)
            .expect("a positive part size");
        let scheme = b.torrent().content_mut().add_scheme(grid);
        let file = self.ed2k.add_attached(link, grid, scheme)?;
        let mut book = weir_core::peers::PeerBook::new(
            self.book_cfg.clone(),
            self.cfg.policy.clone(),
            self.cfg.seed ^ u64::from(id.0) << 16 ^ self.rng.u64(..),
        );
        for s in &link.sources {
            if let weir_ed2k::link::SourceHost::Ip(ip) = s.host {
                book.add(
                    std::net::SocketAddr::from((ip, s.port)),
                    weir_core::peers::Source::Manual,
                    now,
                );
            }
        }
        let t = self.transfers.get_mut(&id).expect("caller found it");
        t.ed2k = Some(Box::new(Ed2kSide {
            file,
            hash: link.hash,
            book,
            resumed: Vec::new(),
        }));
        self.by_file.insert(file, id);
        self.mixed.push((id, file, scheme));
        let name = t.name.clone();
        self.log(
            LogLevel::Info,
            format!(
                "{}: eD2k sources will fill {} ({} bytes at offset {offset}) of torrent {name}",
                link.name,
                files_name(&self.transfers[&id], index),
                grid.len
            ),
        );
        // The hashset may be in the link already.
        self.pump_ed2k_lent(now);
        Ok(file)
    }

    /// Runs `f` on the eD2k core with every attached file's content lent
    /// to it, handles what the core asked for while the contents are
    /// there, gives them back and lets their torrents handle the rest.
    pub(crate) fn with_ed2k<R>(&mut self, now: Instant, f: impl FnOnce(&mut Client) -> R) -> R {
        self.lend();
        let r = f(&mut self.ed2k);
        self.pump_ed2k(now);
        self.unlend(now);
        r
    }

    /// [`Session::pump_ed2k`] for events queued outside a call.
    pub(crate) fn pump_ed2k_lent(&mut self, now: Instant) {
        self.with_ed2k(now, |_| ());
    }

    pub(crate) fn lend(&mut self) {
        if self.mixed.is_empty() || self.lending {
            return;
        }
        self.lending = true;
        for &(id, file, _) in &self.mixed {
            if let Some(b) = self.transfers.get_mut(&id).and_then(|t| t.bt.as_mut()) {
                let c = b.torrent().lend_content();
                self.ed2k.lend(file, c);
            }
        }
    }

    pub(crate) fn unlend(&mut self, now: Instant) {
        if !self.lending {
            return;
        }
        self.lending = false;
        let mixed = self.mixed.clone();
        for &(id, file, _) in &mixed {
            if let (Some(c), Some(b)) = (
                self.ed2k.take_back(file),
                self.transfers.get_mut(&id).and_then(|t| t.bt.as_mut()),
            ) {
                b.torrent().return_content(c);
            }
        }
        // What waited for the contents to come home.
        for (conn, error) in std::mem::take(&mut self.deferred) {
            self.forget_conn(conn, now, error);
        }
        for &(id, _, _) in &mixed {
            self.pump_bt(id, now);
        }
    }

    /// A content event a torrent passed on (secondary schemes, evidence
    /// against a sender that is not one of its peers).
    pub(crate) fn on_content_event(&mut self, id: TransferId, ev: ContentEvent, now: Instant) {
        let Some(&(_, file, scheme)) = self.mixed.iter().find(|m| m.0 == id) else {
            if let ContentEvent::BadData { sender, proven } = ev {
                self.strike(sender.ip, proven);
            }
            return;
        };
        match ev {
            ContentEvent::CheckUnit { scheme: s, unit } if s == scheme => {
                let Some(digests) = self.ed2k.digests(file) else {
                    return;
                };
                let Some(digest) = digests.get(unit as usize) else {
                    return;
                };
                let grid = self.scheme_grid(id, scheme);
                let Some(grid) = grid else { return };
                let r = grid.range(unit);
                self.events.push_back(SessionEvent::CheckRange {
                    transfer: id,
                    scheme,
                    unit,
                    offset: r.start,
                    len: r.end - r.start,
                    digest,
                });
            }
            ContentEvent::UnitVerified { scheme: s, unit } if s == scheme => {
                self.with_ed2k(now, |c| c.part_checked(file, unit, now));
            }
            ContentEvent::UnitFailed { scheme: s, unit } if s == scheme => {
                // Every byte of it passed the torrent's SHA-1: the eD2k
                // file is not the torrent's file after all.
                let name = self.transfers[&id].name.clone();
                self.log(
                    LogLevel::Warn,
                    format!(
                        "{name}: eD2k part {unit} does not match the torrent's data; its eD2k sources are not used"
                    ),
                );
                if let Some(t) = self.transfers.get_mut(&id) {
                    t.ed2k_mismatch = true;
                }
                self.close_ed2k_conns(id, now);
            }
            ContentEvent::BadData { sender, proven } => self.strike(sender.ip, proven),
            _ => {}
        }
    }

    fn scheme_grid(
        &self,
        id: TransferId,
        scheme: weir_core::content::SchemeId,
    ) -> Option<UnitGrid> {
        let b = self.transfers.get(&id)?.bt.as_ref()?;
        b.view().awake()?.content().scheme_grid(scheme).copied()
    }

    /// Storage checked a unit of a secondary scheme (the runtime did the
    /// [`SessionEvent::CheckRange`]).
    pub fn range_checked(
        &mut self,
        id: TransferId,
        scheme: weir_core::content::SchemeId,
        unit: u32,
        ok: bool,
        now: Instant,
    ) {
        self.now = Some(now);
        if let Some(b) = self.transfers.get_mut(&id).and_then(|t| t.bt.as_mut()) {
            b.torrent().content_mut().unit_done(scheme, unit, ok);
        }
        self.pump_bt(id, now);
    }

    /// The eD2k hashset of an attached file became known: its parts can be
    /// checked.
    pub(crate) fn attached_digests_known(&mut self, file: FileId) {
        let Some(&(id, _, scheme)) = self.mixed.iter().find(|m| m.1 == file) else {
            return;
        };
        if self.lending {
            // The content is with the eD2k core: tell it there.
            if let Some(c) = self.ed2k.take_back(file) {
                let mut c = c;
                c.scheme_known(scheme);
                self.ed2k.lend(file, c);
            }
        } else if let Some(b) = self.transfers.get_mut(&id).and_then(|t| t.bt.as_mut()) {
            b.torrent().content_mut().scheme_known(scheme);
        }
    }

    /// A sender of bad data on no network the torrent speaks: a proven
    /// liar is banned, a sole sender of a bad piece struck.
    fn strike(&mut self, ip: IpAddr, proven: bool) {
        let n = self.strikes.entry(ip).or_insert(0);
        *n += if proven { BAN_STRIKES } else { 1 };
        if *n >= BAN_STRIKES {
            let strikes = *n;
            self.ban(
                ip,
                if proven {
                    BanReason::BadBlock { strikes }
                } else {
                    BanReason::BadPieces { strikes }
                },
            );
        }
    }

    fn close_ed2k_conns(&mut self, id: TransferId, now: Instant) {
        let conns: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| c.transfer == Some(id) && c.proto == crate::Proto::Ed2k)
            .map(|(k, _)| *k)
            .collect();
        for conn in conns {
            self.forget_conn(conn, now, None);
            self.events.push_back(SessionEvent::Close {
                conn,
                reason: CloseReason::WrongFile,
            });
        }
    }
}

fn files_name(t: &crate::transfer::Transfer, index: usize) -> String {
    t.bt.as_ref()
        .and_then(|b| b.meta.info.files.get(index))
        .map_or_else(String::new, |f| f.path.join("/"))
}
