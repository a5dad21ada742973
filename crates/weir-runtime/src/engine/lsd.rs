//! Local Service Discovery (BEP 14) on the engine: the sans-IO
//! [`weir_dht::lsd::Lsd`] driven by the driver task, one per group, each
//! on a UDP socket of its own (`--lsd`, off by default).
//!
//! - The groups are BEP 14's, [`GROUP_V4`] and [`GROUP_V6`], each only if
//!   the network policy allows it ([`plan`]); with neither allowed (a
//!   loopback `--allow`) LSD is off, no socket is made, and the engine
//!   says so once ([`off_message`]). [`LsdSettings::group`] replaces
//!   them with one unicast address (tests: a relay on loopback), sent to
//!   from a socket of its own beside the BitTorrent listener.
//! - Every checked torrent that is not private is announced with the
//!   BitTorrent port: when added, then every 5 minutes, at most one
//!   datagram a minute in all (the state machine's BEP 14 limits).
//! - A peer heard announcing one of our torrents goes into that
//!   transfer's peer book (`Source::Lsd`: the policy, bans and the dial
//!   limits apply as to every learnt peer).
//! - Bounded: at most [`RECV_QUEUE`] datagrams wait for the driver (more
//!   are dropped and counted), the state machine caps torrents, sources
//!   and remembered peers, and a datagram that cannot be sent at once is
//!   dropped (the next announce comes in 5 minutes).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use weir_core::peers::Source;
use weir_core::policy::NetPolicy;
use weir_dht::lsd::{GROUP_V4, GROUP_V6, Lsd, LsdConfig, LsdEvent, MAX_MESSAGE};
use weir_session::{Proto, Session, TransferId};

use crate::net::PolicedUdp;

/// Received datagrams waiting for the driver, at most.
pub const RECV_QUEUE: usize = 64;

/// How the engine runs LSD ([`super::EngineConfig::lsd`]).
#[derive(Clone, Debug, Default)]
pub struct LsdSettings {
    /// Where announces go instead of the BEP 14 multicast groups: one
    /// unicast address, for tests on loopback (`--lsd-group`, hidden).
    /// Datagrams sent back to the socket announces leave from are heard.
    pub group: Option<SocketAddr>,
}

/// The groups LSD would use under a policy: those it allows, and those
/// it refuses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LsdPlan {
    /// Groups announced to.
    pub groups: Vec<SocketAddr>,
    /// Groups the policy refuses (nothing is sent there).
    pub refused: Vec<SocketAddr>,
}

/// Decides which groups LSD uses under `policy` (no socket is made).
pub fn plan(policy: &NetPolicy, settings: &LsdSettings) -> LsdPlan {
    let wanted = match settings.group {
        Some(g) => vec![g],
        None => vec![GROUP_V4, GROUP_V6],
    };
    let (groups, refused) = wanted.into_iter().partition(|g| policy.allows(g.ip()));
    LsdPlan { groups, refused }
}

/// What the engine says, once, when the policy leaves LSD no group.
pub fn off_message(policy: &NetPolicy, refused: &[SocketAddr]) -> String {
    let list: Vec<String> = refused.iter().map(ToString::to_string).collect();
    let what = if refused.iter().all(|g| g.ip().is_multicast()) {
        "multicast group"
    } else {
        "group"
    };
    format!(
        "LSD is off: the allow list (--allow {policy}) excludes the LSD {what}{} {}, so weir \
         sends nothing there and finds no local peer (add it to --allow to use --lsd)",
        if list.len() > 1 { "s" } else { "" },
        list.join(" and ")
    )
}

/// Counters of the engine's LSD.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LsdStatus {
    /// The groups announced to.
    pub groups: Vec<SocketAddr>,
    /// Announces sent.
    pub sent: u64,
    /// Sends that failed or found the socket full (dropped).
    pub send_errors: u64,
    /// Datagrams received (from sources the policy allows).
    pub received: u64,
    /// Received datagrams dropped because the driver's queue was full.
    pub recv_overflow: u64,
    /// Peers handed to the session.
    pub peers: u64,
    /// Torrents announced.
    pub torrents: usize,
}

/// One group: its state machine and its socket.
struct Chan {
    group: SocketAddr,
    lsd: Lsd,
    sock: Arc<PolicedUdp>,
}

/// LSD for the engine: its groups, their sockets and receive tasks.
pub(crate) struct LsdGlue {
    chans: Vec<Chan>,
    rx: mpsc::Receiver<(usize, SocketAddr, Vec<u8>)>,
    tasks: Vec<JoinHandle<()>>,
    /// Our torrents by info-hash (to route a heard peer).
    by_hash: BTreeMap<[u8; 20], TransferId>,
    status: LsdStatus,
    recv_overflow: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for LsdGlue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LsdGlue")
            .field("groups", &self.status.groups)
            .finish_non_exhaustive()
    }
}

impl Drop for LsdGlue {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl LsdGlue {
    /// Starts LSD on the groups the policy allows (`None`, with no socket
    /// made, when it allows none, said once; or without a BitTorrent
    /// port to announce). `local` is the BitTorrent listener's address.
    pub(crate) async fn start(
        settings: &LsdSettings,
        policy: &NetPolicy,
        local: Option<SocketAddr>,
        port: Option<u16>,
        seed: u64,
    ) -> Option<LsdGlue> {
        let p = plan(policy, settings);
        if p.groups.is_empty() {
            tracing::warn!("{}", off_message(policy, &p.refused));
            return None;
        }
        for g in &p.refused {
            tracing::info!("LSD: not announcing to {g}: outside the allow list (--allow {policy})");
        }
        let Some(port) = port else {
            tracing::warn!(
                "LSD is off: weir accepts no BitTorrent peer here, so has no port to announce"
            );
            return None;
        };
        let (tx, rx) = mpsc::channel(RECV_QUEUE);
        let recv_overflow = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let now = Instant::now();
        let mut glue = LsdGlue {
            chans: Vec::new(),
            rx,
            tasks: Vec::new(),
            by_hash: BTreeMap::new(),
            status: LsdStatus::default(),
            recv_overflow: recv_overflow.clone(),
        };
        let mut failed = Vec::new();
        for (i, group) in p.groups.into_iter().enumerate() {
            let sock = match open(policy, group, local).await {
                Ok(s) => Arc::new(s),
                Err(e) => {
                    // A host without IPv6 multicast still runs on IPv4:
                    // said loudly only if no group is left (below).
                    tracing::info!("LSD: cannot use {group}: {e}");
                    failed.push(format!("{group}: {e}"));
                    continue;
                }
            };
            let from = sock
                .local_addr()
                .map_or_else(|_| "?".into(), |a| a.to_string());
            tracing::info!("LSD: announcing to {group} from UDP {from}, port {port}");
            let cfg = LsdConfig {
                port,
                group,
                ..LsdConfig::default()
            };
            let idx = glue.chans.len();
            glue.tasks.push(tokio::spawn(receive(
                idx,
                sock.clone(),
                tx.clone(),
                recv_overflow.clone(),
            )));
            glue.chans.push(Chan {
                group,
                lsd: Lsd::new(cfg, seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9), now),
                sock,
            });
            glue.status.groups.push(group);
        }
        if glue.chans.is_empty() {
            tracing::warn!("LSD is off: no group could be used ({})", failed.join("; "));
            return None;
        }
        Some(glue)
    }

    /// The groups announced to.
    pub(crate) fn groups(&self) -> Vec<SocketAddr> {
        self.status.groups.clone()
    }

    /// The next received datagram: (group index, source, bytes).
    pub(crate) async fn recv(&mut self) -> Option<(usize, SocketAddr, Vec<u8>)> {
        self.rx.recv().await
    }

    /// When [`LsdGlue::handle_timeout`] is due (`None`: no torrent).
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.chans.iter().filter_map(|c| c.lsd.poll_timeout()).min()
    }

    /// A datagram from `from` on group `idx`.
    pub(crate) fn on_datagram(
        &mut self,
        idx: usize,
        from: SocketAddr,
        data: &[u8],
        session: &mut Session,
    ) {
        let now = Instant::now();
        self.status.received += 1;
        let Some(c) = self.chans.get_mut(idx) else {
            return;
        };
        if let Err(e) = c.lsd.handle_datagram(from, data, now) {
            tracing::debug!("LSD: datagram from {from}: {e}");
        }
        self.after(session, now);
    }

    /// Timers: announces that are due.
    pub(crate) fn handle_timeout(&mut self, session: &mut Session) {
        let now = Instant::now();
        for c in &mut self.chans {
            c.lsd.handle_timeout(now);
        }
        self.after(session, now);
    }

    /// A torrent was checked: announce it from now on (never a private
    /// one, BEP 27).
    pub(crate) fn add_torrent(&mut self, id: TransferId, session: &mut Session) {
        let Some(meta) = session.metainfo(id) else {
            return;
        };
        if meta.info.private {
            return;
        }
        let now = Instant::now();
        let ih = meta.info_hash;
        self.by_hash.insert(ih, id);
        for c in &mut self.chans {
            if !c.lsd.add_torrent(weir_dht::InfoHash::from(ih), now) {
                tracing::debug!("LSD: {id} not announced to {}: too many torrents", c.group);
            }
        }
        self.status.torrents = self.by_hash.len();
        self.after(session, now);
    }

    /// A torrent went away: stop announcing it.
    pub(crate) fn remove_torrent(&mut self, id: TransferId) {
        let gone: Vec<[u8; 20]> = self
            .by_hash
            .iter()
            .filter(|(_, t)| **t == id)
            .map(|(h, _)| *h)
            .collect();
        for h in gone {
            self.by_hash.remove(&h);
            for c in &mut self.chans {
                c.lsd.remove_torrent(&weir_dht::InfoHash::from(h));
            }
        }
        self.status.torrents = self.by_hash.len();
    }

    /// The figures now ([`super::Snapshot::lsd`]).
    pub(crate) fn status(&self) -> LsdStatus {
        let mut s = self.status.clone();
        s.recv_overflow = self
            .recv_overflow
            .load(std::sync::atomic::Ordering::Relaxed);
        s
    }

    /// Sends what the state machines queued; hands heard peers to the
    /// session.
    fn after(&mut self, session: &mut Session, now: Instant) {
        for c in &mut self.chans {
            while let Some((to, data)) = c.lsd.poll_transmit() {
                match c.sock.try_send_to(&data, to) {
                    Ok(_) => self.status.sent += 1,
                    Err(e) => {
                        self.status.send_errors += 1;
                        tracing::debug!("LSD: announce to {to} not sent: {e}");
                    }
                }
            }
            while let Some(ev) = c.lsd.poll_event() {
                match ev {
                    LsdEvent::Peer { info_hash, addr } => {
                        let Some(id) = self.by_hash.get(&info_hash.0).copied() else {
                            continue;
                        };
                        let n = session.add_peers(id, Proto::Bt, &[addr], Source::Lsd, now);
                        self.status.peers += 1;
                        tracing::debug!("LSD: peer {addr} for {id} ({n} new)");
                    }
                }
            }
        }
    }
}

/// The socket of one group: a multicast group's port, joined; a unicast
/// test group's, any port beside the BitTorrent listener.
async fn open(
    policy: &NetPolicy,
    group: SocketAddr,
    local: Option<SocketAddr>,
) -> std::io::Result<PolicedUdp> {
    let local_ip = local.map(|a| a.ip());
    if group.ip().is_multicast() {
        return PolicedUdp::bind_multicast(policy, group, local_ip).await;
    }
    let ip = match (local_ip, group) {
        (Some(ip), g) if ip.is_ipv4() == g.is_ipv4() => ip,
        (_, SocketAddr::V4(_)) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        (_, SocketAddr::V6(_)) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    PolicedUdp::bind(policy, SocketAddr::new(ip, 0)).await
}

/// Reads a group's socket; each datagram (sources outside the policy are
/// dropped by the socket) goes to the driver, or is dropped and counted
/// when the queue is full.
async fn receive(
    idx: usize,
    sock: Arc<PolicedUdp>,
    tx: mpsc::Sender<(usize, SocketAddr, Vec<u8>)>,
    overflow: Arc<std::sync::atomic::AtomicU64>,
) {
    // One byte more than an announce may be: a longer one is seen as
    // too large, not cut to a valid one.
    let mut buf = vec![0u8; MAX_MESSAGE + 1];
    loop {
        match sock.recv_from(&mut buf).await {
            Ok((n, from)) => match tx.try_send((idx, from, buf[..n].to_vec())) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    overflow.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return,
            },
            Err(e) => {
                tracing::debug!("LSD: receive: {e}");
                // An ICMP error of a send shows here; not fatal.
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::ConnectionReset
                ) {
                    continue;
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_policy_leaves_no_group() {
        let p = plan(&NetPolicy::loopback(), &LsdSettings::default());
        assert!(p.groups.is_empty());
        assert_eq!(p.refused, vec![GROUP_V4, GROUP_V6]);
        let m = off_message(&NetPolicy::loopback(), &p.refused);
        assert!(m.starts_with("LSD is off: the allow list (--allow 127.0.0.0/8,::1/128)"));
        assert!(m.contains("multicast groups 239.192.152.143:6771 and [ff15::efc0:988f]:6771"));
    }

    #[test]
    fn groups_follow_the_policy() {
        let all = plan(&NetPolicy::allow_all(), &LsdSettings::default());
        assert_eq!(all.groups, vec![GROUP_V4, GROUP_V6]);
        assert!(all.refused.is_empty());
        let v4 = NetPolicy::parse("127.0.0.0/8,239.0.0.0/8").unwrap();
        let p = plan(&v4, &LsdSettings::default());
        assert_eq!(p.groups, vec![GROUP_V4]);
        assert_eq!(p.refused, vec![GROUP_V6]);
        let test = LsdSettings {
            group: Some("127.0.0.9:4000".parse().unwrap()),
        };
        let p = plan(&NetPolicy::loopback(), &test);
        assert_eq!(p.groups, test.group.into_iter().collect::<Vec<_>>());
        let p = plan(&NetPolicy::parse("10.0.0.0/8").unwrap(), &test);
        assert!(p.groups.is_empty());
        assert!(
            off_message(&NetPolicy::parse("10.0.0.0/8").unwrap(), &p.refused)
                .contains("the LSD group 127.0.0.9:4000")
        );
    }

    /// With a loopback allow list nothing starts: no socket, so nothing
    /// can be sent (no multicast, ever, in a test).
    #[tokio::test]
    async fn loopback_policy_starts_nothing() {
        let g = LsdGlue::start(
            &LsdSettings::default(),
            &NetPolicy::loopback(),
            Some("127.0.0.1:0".parse().unwrap()),
            Some(6881),
            1,
        )
        .await;
        assert!(g.is_none());
    }

    /// A multicast socket is never made for a group the policy refuses.
    #[tokio::test]
    async fn multicast_bind_is_refused_outside_the_policy() {
        let e = PolicedUdp::bind_multicast(&NetPolicy::loopback(), GROUP_V4, None)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    }

    /// The test group: an announce goes to the unicast address given,
    /// from a socket beside the listener, and an announce sent back to
    /// that socket is heard.
    #[tokio::test]
    async fn test_group_announces_and_hears() {
        let relay = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let settings = LsdSettings {
            group: Some(relay.local_addr().unwrap()),
        };
        let mut g = LsdGlue::start(
            &settings,
            &NetPolicy::loopback(),
            Some("127.0.0.1:0".parse().unwrap()),
            Some(6881),
            7,
        )
        .await
        .expect("started");
        assert_eq!(g.groups(), vec![relay.local_addr().unwrap()]);
        assert!(g.poll_timeout().is_none(), "no torrent, no timer");
        // Fed straight to the state machine (no session needed here).
        let ih = weir_dht::InfoHash::from([7u8; 20]);
        g.chans[0].lsd.add_torrent(ih, Instant::now());
        let due = g.chans[0].lsd.poll_timeout().unwrap();
        g.chans[0].lsd.handle_timeout(due);
        let (to, data) = g.chans[0].lsd.poll_transmit().expect("an announce");
        g.chans[0].sock.try_send_to(&data, to).unwrap();
        let mut buf = [0u8; 2048];
        let (n, from) = relay.recv_from(&mut buf).await.unwrap();
        let a = weir_dht::lsd::Announce::decode(&buf[..n]).unwrap();
        assert_eq!(a.port, 6881);
        assert_eq!(a.info_hashes, vec![ih]);
        // Another peer's announce, sent back to the socket, is heard.
        let other = weir_dht::lsd::Announce {
            host: to.to_string(),
            port: 7000,
            info_hashes: vec![ih],
            cookie: Some("other".into()),
        };
        relay.send_to(&other.encode(), from).await.unwrap();
        let (idx, src, bytes) = g.recv().await.unwrap();
        assert_eq!((idx, src), (0, relay.local_addr().unwrap()));
        g.chans[0]
            .lsd
            .handle_datagram(src, &bytes, Instant::now())
            .unwrap();
        assert_eq!(
            g.chans[0].lsd.poll_event(),
            Some(LsdEvent::Peer {
                info_hash: ih,
                addr: "127.0.0.1:7000".parse().unwrap()
            })
        );
    }
}
