//! Strikes and bans for peers that sent bad data. Finding which sender of a
//! failed piece lied is the content's job (`weir_core::content`, shared by
//! every protocol); the torrent turns its evidence into strikes: a sole
//! sender of a bad piece gets one, a proven liar is banned at once.

use weir_core::content::Sender;

use super::{BAN_STRIKES, BanReason, CloseReason, ConnId, Event, Torrent};

impl Torrent {
    /// The content found `sender` at fault (`proven`: its own block was bad).
    pub(super) fn on_bad_data(&mut self, sender: Sender, proven: bool) {
        let n = if proven { BAN_STRIKES } else { 1 };
        let still_here = self
            .peers
            .get(&sender.conn)
            .is_some_and(|p| p.addr.ip() == sender.ip && !p.closing);
        if still_here {
            self.strike(sender.conn, n, proven);
        } else {
            if proven {
                let strikes = BAN_STRIKES;
                self.ban(sender.ip, BanReason::BadBlock { strikes });
            }
            // Not one of our peers: maybe a source on another network
            // feeding the same content; its owner strikes it there.
            self.events
                .push_back(Event::Content(weir_core::content::ContentEvent::BadData {
                    sender,
                    proven,
                }));
        }
        self.refill = true;
    }

    /// Counts `n` strikes against a peer (`proven`: for a block of its own
    /// found bad); at [`BAN_STRIKES`] its address is banned.
    pub(super) fn strike(&mut self, conn: ConnId, n: u32, proven: bool) {
        let Some(p) = self.peers.get_mut(&conn).filter(|p| !p.closing) else {
            return;
        };
        p.strikes += n;
        if p.strikes >= BAN_STRIKES {
            let ip = p.addr.ip();
            let strikes = p.strikes;
            let reason = if proven {
                BanReason::BadBlock { strikes }
            } else {
                BanReason::BadPieces { strikes }
            };
            self.ban(ip, reason);
            self.close(conn, CloseReason::Banned(reason));
        }
    }

    fn ban(&mut self, ip: std::net::IpAddr, reason: BanReason) {
        if self.banned.insert(ip) {
            self.stats.banned += 1;
            self.events.push_back(Event::Ban { ip, reason });
        }
    }
}
