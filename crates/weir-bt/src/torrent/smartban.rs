//! Strikes and bans for peers that sent bad data. Finding which sender of a
//! failed piece lied is the content's job (`weir_core::content`, shared by
//! every protocol); the torrent turns its evidence into strikes: a sole
//! sender of a bad piece gets one, a proven liar is banned at once.

use weir_core::content::Sender;

use super::{BAN_STRIKES, ConnId, Event, Torrent};

impl Torrent {
    /// The content found `sender` at fault (`proven`: its own block was bad).
    pub(super) fn on_bad_data(&mut self, sender: Sender, proven: bool) {
        let (n, why) = if proven {
            (BAN_STRIKES, "sent a block that failed the piece hash")
        } else {
            (1, "sent a piece that failed its hash")
        };
        let still_here = self
            .peers
            .get(&sender.conn)
            .is_some_and(|p| p.addr.ip() == sender.ip && !p.closing);
        if still_here {
            self.strike(sender.conn, n, why);
        } else {
            if proven {
                self.ban(sender.ip, why.into());
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

    pub(super) fn strike(&mut self, conn: ConnId, n: u32, why: &str) {
        let Some(p) = self.peers.get_mut(&conn).filter(|p| !p.closing) else {
            return;
        };
        p.strikes += n;
        if p.strikes >= BAN_STRIKES {
            let ip = p.addr.ip();
            let reason = format!("{why} ({} strikes)", p.strikes);
            self.ban(ip, reason.clone());
            self.close(conn, reason);
        }
    }

    fn ban(&mut self, ip: std::net::IpAddr, reason: String) {
        if self.banned.insert(ip) {
            self.stats.banned += 1;
            self.events.push_back(Event::Ban { ip, reason });
        }
    }
}
