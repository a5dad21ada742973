//! What a download says when it has no peer: at once when weir has no way
//! to find one (no tracker, no `--peer`, no source in an eD2k link, no
//! server), then giving up with exit 2 after `--peer-wait` seconds unless
//! a peer connected meanwhile (someone may have been told to dial us, so
//! the wait is bounded, not zero); and once after a while when it has
//! sources but none answered (a dead tracker, a seeder not running).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// With sources but no peer, the hint comes after this long.
pub(crate) const HINT_AFTER: Duration = Duration::from_secs(30);

/// What the caller shows or does after [`PeerWatch::tick`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing to say.
    Wait,
    /// Show this line.
    Note(String),
    /// Stop the download and exit 2 with this message.
    GiveUp(String),
}

/// Watches one download's peer count.
#[derive(Debug)]
pub(crate) struct PeerWatch {
    label: String,
    /// Why weir cannot find peers itself (`None`: it has sources).
    no_source: Option<String>,
    /// What to check when sources give no peer.
    hint: String,
    /// How long to wait for an incoming peer without sources (`None`:
    /// forever).
    wait: Option<Duration>,
    listen: Option<SocketAddr>,
    since: Option<Instant>,
    had_peer: bool,
    said: bool,
}

impl PeerWatch {
    /// A watch for `label`. `no_source` says why weir has no way to find
    /// peers (`None` when it has some); `hint` what to check when its
    /// sources give none; `wait_secs` 0 waits forever.
    pub(crate) fn new(
        label: &str,
        no_source: Option<String>,
        hint: &str,
        wait_secs: u64,
        listen: Option<SocketAddr>,
    ) -> Self {
        Self {
            label: label.to_string(),
            no_source,
            hint: hint.to_string(),
            wait: (wait_secs > 0).then(|| Duration::from_secs(wait_secs)),
            listen,
            since: None,
            had_peer: false,
            said: false,
        }
    }

    /// One look at the download: `downloading` is false while checking or
    /// once complete.
    pub(crate) fn tick(&mut self, now: Instant, downloading: bool, peers: usize) -> Verdict {
        if peers > 0 {
            self.had_peer = true;
        }
        if self.had_peer || !downloading {
            return Verdict::Wait;
        }
        let since = *self.since.get_or_insert(now);
        let waited = now.saturating_duration_since(since);
        let at = self.listen.map(|a| format!(" at {a}")).unwrap_or_default();
        match &self.no_source {
            Some(why) => {
                if let Some(w) = self.wait.filter(|&w| waited >= w) {
                    return Verdict::GiveUp(format!(
                        "{}: no peer connected in {} s, and weir has no way to find one ({why}); \
                         give --peer HOST:PORT of a peer that has it (where `weir seed` runs, say)",
                        self.label,
                        w.as_secs()
                    ));
                }
                if self.said {
                    return Verdict::Wait;
                }
                self.said = true;
                let until = match self.wait {
                    Some(w) => format!("giving up in {} s unless one does", w.as_secs()),
                    None => "waiting for one (--peer-wait 0)".to_string(),
                };
                Verdict::Note(format!(
                    "{}: no way to find peers: {why}. weir only gets peers that connect to \
                     it{at}; {until}. Give --peer HOST:PORT of a peer that has it",
                    self.label
                ))
            }
            None if !self.said && waited >= HINT_AFTER => {
                self.said = true;
                Verdict::Note(format!(
                    "{}: no peer yet after {} s; {}",
                    self.label,
                    HINT_AFTER.as_secs(),
                    self.hint
                ))
            }
            None => Verdict::Wait,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_source_says_so_at_once_then_gives_up_after_the_wait() {
        let t = Instant::now();
        let mut w = PeerWatch::new("x", Some("no tracker".into()), "h", 10, None);
        // Nothing while checking.
        assert_eq!(w.tick(t, false, 0), Verdict::Wait);
        let Verdict::Note(n) = w.tick(t, true, 0) else {
            panic!()
        };
        assert!(
            n.contains("no way to find peers") && n.contains("--peer"),
            "{n}"
        );
        assert_eq!(w.tick(t + Duration::from_secs(9), true, 0), Verdict::Wait);
        let Verdict::GiveUp(g) = w.tick(t + Duration::from_secs(10), true, 0) else {
            panic!()
        };
        assert!(g.contains("10 s") && g.contains("no tracker"), "{g}");
    }

    #[test]
    fn a_peer_that_connects_ends_the_watch() {
        let t = Instant::now();
        let mut w = PeerWatch::new("x", Some("none".into()), "h", 10, None);
        w.tick(t, true, 0);
        assert_eq!(w.tick(t + Duration::from_secs(5), true, 1), Verdict::Wait);
        assert_eq!(w.tick(t + Duration::from_secs(60), true, 0), Verdict::Wait);
        // Waiting forever: said once, never given up.
        let mut w = PeerWatch::new("x", Some("none".into()), "h", 0, None);
        assert!(matches!(w.tick(t, true, 0), Verdict::Note(_)));
        assert_eq!(
            w.tick(t + Duration::from_secs(99_999), true, 0),
            Verdict::Wait
        );
    }

    #[test]
    fn sources_without_peers_get_one_hint_after_a_while() {
        let t = Instant::now();
        let mut w = PeerWatch::new("x", None, "check the tracker", 10, None);
        assert_eq!(w.tick(t, true, 0), Verdict::Wait);
        assert_eq!(
            w.tick(t + HINT_AFTER - Duration::from_secs(1), true, 0),
            Verdict::Wait
        );
        let Verdict::Note(n) = w.tick(t + HINT_AFTER, true, 0) else {
            panic!()
        };
        assert!(n.contains("check the tracker"), "{n}");
        assert_eq!(w.tick(t + HINT_AFTER * 9, true, 0), Verdict::Wait);
    }
}
