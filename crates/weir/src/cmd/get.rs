//! `weir get SOURCE`: download a .torrent (BitTorrent) or an `ed2k://` link.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use weir_bt::metainfo::Metainfo;
use weir_core::picker::Order;

use crate::cmd::Ctx;
use crate::exit::bad_input;

/// Options shared by `weir get` and `weir seed`.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct TransferOpts {
    /// Address to accept peers on (`IP:PORT`; port 0 picks one). Default
    /// 0.0.0.0:6881, or the next free port up to 6889 (said when it moves);
    /// a port given here that is taken is an error.
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<SocketAddr>,
    /// Dial this peer directly (repeatable). With torrents or magnets in
    /// the run it is a BitTorrent peer; with only ed2k links, an eD2k
    /// source.
    #[arg(long = "peer", value_name = "HOST:PORT")]
    pub(crate) peers: Vec<String>,
    /// Do not contact the torrent's trackers.
    #[arg(long)]
    pub(crate) no_trackers: bool,
    /// No peer exchange (BEP 11): neither learn peers from peers nor tell
    /// them ours. Private torrents never use it.
    #[arg(long)]
    pub(crate) no_pex: bool,
    /// DHT node to bootstrap from (repeatable; replaces the public
    /// routers, which are used only when --allow lets weir reach every
    /// address). Under a narrower --allow and without this the DHT has no
    /// node to start from: it only answers nodes that reach it.
    #[arg(long = "dht-bootstrap", value_name = "HOST:PORT")]
    pub(crate) dht_bootstrap: Vec<String>,
    /// No DHT (BEP 5): no UDP socket, no lookups, no announces.
    #[arg(long)]
    pub(crate) no_dht: bool,
    /// Local Service Discovery (BEP 14): announce torrents to the local
    /// network's multicast groups (239.192.152.143:6771,
    /// [ff15::efc0:988f]:6771) and connect to local peers announcing them.
    /// Needs the groups in --allow; private torrents never use it.
    #[arg(long)]
    pub(crate) lsd: bool,
    /// Tests only: send LSD announces to this unicast address instead of
    /// the multicast groups.
    #[arg(
        long = "lsd-group",
        value_name = "ADDR:PORT",
        hide = true,
        requires = "lsd"
    )]
    pub(crate) lsd_group: Option<SocketAddr>,
    /// eD2k server to log into, to find sources and be found (repeatable).
    #[arg(long = "server", value_name = "IP:PORT")]
    pub(crate) servers: Vec<SocketAddr>,
    /// Download cap, e.g. 20MB/s (0: unlimited).
    #[arg(long, value_name = "RATE", default_value = "0")]
    pub(crate) max_down: String,
    /// Upload cap, e.g. 5MB/s (0: unlimited).
    #[arg(long, value_name = "RATE", default_value = "0")]
    pub(crate) max_up: String,
    /// Most peer connections.
    #[arg(long, default_value_t = 50)]
    pub(crate) max_peers: usize,
    /// Hash all data already on disk instead of trusting resume data.
    #[arg(long)]
    pub(crate) recheck: bool,
    /// Most requests in flight to one peer (default: sized from its rate
    /// and round trip; 1 makes every block a round trip).
    #[arg(long, value_name = "N")]
    pub(crate) max_requests: Option<u32>,
    /// With no way to find peers (no tracker, no --peer; for eD2k no
    /// source, --peer or --server), wait this long for one to connect
    /// before giving up with exit 2 (0: wait forever).
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub(crate) peer_wait: u64,
    /// Protocol encryption (MSE/PE) with BitTorrent peers: prefer
    /// (encrypt outgoing connections, fall back to plaintext, accept
    /// both), require (encrypted only, both ways), allow (plaintext first,
    /// encrypted for peers that need it), off (plaintext only).
    #[arg(long, value_name = "POLICY", default_value = "prefer")]
    pub(crate) encryption: weir_bt::mse::Encryption,
    /// Transports for BitTorrent peers, both ways: tcp, utp or tcp,utp
    /// (outgoing: both at once, uTP preferred: a TCP connection up first
    /// waits about one more round trip for uTP, then is used).
    #[arg(long, value_name = "LIST", default_value = "tcp,utp")]
    pub(crate) transports: weir_runtime::engine::Transports,
    /// No progress output.
    #[arg(short, long)]
    pub(crate) quiet: bool,
}

/// Arguments of `weir get`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// .torrent files, magnet links and `ed2k://|file|...|/` links, in any
    /// mix (a magnet's metadata is fetched from its peers first): several
    /// run in one session (one port per protocol, shared caps), and a link
    /// naming a torrent's file fetches that file from both networks, as
    /// does a magnet with `xt=urn:ed2k:` and `xl` beside its info-hash. An
    /// eD2k magnet (`xt=urn:ed2k:`, `xl`, `dn`) is its ed2k link.
    #[arg(required = true, num_args = 1..)]
    sources: Vec<String>,
    /// Download directory.
    #[arg(short = 'o', long = "out", default_value = ".")]
    out: PathBuf,
    /// Keep seeding after the download completes.
    #[arg(long)]
    seed: bool,
    /// Download pieces in order (for streaming and previews).
    #[arg(long)]
    sequential: bool,
    /// Let the download write into files weir did not create (files of the
    /// same names already in the directory are otherwise only verified,
    /// and a download that would change them is refused).
    #[arg(long)]
    overwrite: bool,
    /// Start even if the missing data exceeds the free space (files are
    /// sparse; the download then pauses when the disk fills).
    #[arg(long)]
    no_space_check: bool,
    /// Fetch only these files of the one torrent or magnet given, by index
    /// from 0 as `weir show` lists them and as BEP 53 numbers them:
    /// `0,2,4-6` (replaces a magnet's `so=`). Files sharing a piece with
    /// them get those boundary bytes; the others are not created.
    #[arg(long, value_name = "LIST", value_parser = parse_files)]
    files: Option<weir_bt::magnet::FileSelection>,
    #[command(flatten)]
    opts: TransferOpts,
}

/// What a transfer may do to its directory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DirPolicy {
    /// Upload what is there; never create or write (`weir seed`).
    pub(crate) seed_only: bool,
    /// Write into files weir did not create (`--overwrite`).
    pub(crate) overwrite: bool,
    /// Refuse a download larger than the free space.
    pub(crate) space_check: bool,
}

/// A storage refusal the user can act on exits 2 (its message says what
/// to do); others (another process holds the download) exit 1.
pub(crate) fn open_error(e: weir_runtime::storage::OpenError) -> anyhow::Error {
    if e.is_user_error() {
        bad_input(e.to_string())
    } else {
        anyhow::Error::new(e)
    }
}

/// Runs `weir get`.
pub(crate) fn run(ctx: &Ctx, args: Args) -> anyhow::Result<ExitCode> {
    let dir = DirPolicy {
        seed_only: false,
        overwrite: args.overwrite,
        space_check: !args.no_space_check,
    };
    let order = if args.sequential {
        Order::Sequential
    } else {
        Order::RarestFirst
    };
    let mut torrents = Vec::new();
    let mut links = Vec::new();
    let mut magnets = Vec::new();
    for s in &args.sources {
        if s.get(..7)
            .is_some_and(|p| p.eq_ignore_ascii_case("magnet:"))
        {
            let m =
                weir_bt::magnet::Magnet::parse(s).map_err(|e| bad_input(format!("{s}: {e}")))?;
            if m.info_hash.is_none() {
                // An eD2k magnet (`xt=urn:ed2k:` with `xl`, as eMule and
                // aMule write them) is the ed2k link it stands for.
                links.push(
                    weir_runtime::magnet::ed2k_link(&m)
                        .map_err(|e| bad_input(format!("{s}: {e}")))?,
                );
                continue;
            }
            magnets.push(m);
        } else if is_ed2k_link(s) {
            links.push(
                weir_ed2k::link::FileLink::parse(s).map_err(|e| bad_input(format!("{s}: {e}")))?,
            );
        } else {
            torrents.push(load_torrent(s)?);
        }
    }
    if let Some(sel) = &args.files {
        if torrents.len() + magnets.len() != 1 {
            return Err(bad_input(format!(
                "--files {sel}: give it with exactly one torrent or magnet ({} given)",
                torrents.len() + magnets.len()
            )));
        }
        // Known now for a .torrent: an index past its files is a mistake.
        if let Some(meta) = torrents.first() {
            let n = meta.info.files.len();
            let (_, past) = sel.flags(n);
            if let Some(&(a, b)) = past.first() {
                let which = if a == b {
                    format!("file {a}")
                } else {
                    format!("files {a}-{b}")
                };
                return Err(bad_input(format!(
                    "--files {sel}: {} has {n} file{} (numbered from 0), so there is no {which}; \
                     `weir info {}` lists them",
                    meta.info.name,
                    if n == 1 { "" } else { "s" },
                    args.sources[0],
                )));
            }
        }
    }
    // Every source, of either network, in one engine.
    crate::cmd::multi::run(
        ctx,
        crate::cmd::multi::Sources {
            torrents,
            magnets,
            links,
            shares: Vec::new(),
            select: args.files.clone(),
        },
        crate::cmd::multi::RunOpts {
            out: args.out,
            seed: args.seed,
            order,
            opts: &args.opts,
            dir,
        },
    )
}

/// Reads `--files` (BEP 53's syntax).
fn parse_files(v: &str) -> Result<weir_bt::magnet::FileSelection, String> {
    weir_bt::magnet::FileSelection::parse(v).map_err(|e| match e {
        weir_bt::magnet::MagnetError::BadSelect { reason, .. } => reason.to_string(),
        e => e.to_string(),
    })
}

/// Whether a source is an eD2k link rather than a .torrent path.
fn is_ed2k_link(s: &str) -> bool {
    s.get(..7)
        .is_some_and(|p| p.eq_ignore_ascii_case("ed2k://"))
}

/// Reads and checks a .torrent; a bad one exits 2 naming the problem.
pub(crate) fn load_torrent(path: &str) -> anyhow::Result<Arc<Metainfo>> {
    let data = std::fs::read(path).map_err(|e| bad_input(format!("cannot read {path}: {e}")))?;
    let meta = Metainfo::from_bytes(&data)
        .map_err(|e| bad_input(format!("{path} is not a usable torrent: {e}")))?;
    Ok(Arc::new(meta))
}

/// Resolves `HOST:PORT` peers through the one policy-checked resolver
/// (`weir_runtime::net`): IP literals and `localhost` directly, names only
/// when the policy allows every address. Anything unusable is bad input.
pub(crate) fn resolve_peers(ctx: &Ctx, peers: &[String]) -> anyhow::Result<Vec<SocketAddr>> {
    let mut out = Vec::new();
    for p in peers {
        let addrs = weir_runtime::net::resolve_host_port(&ctx.policy, p)
            .map_err(|e| bad_input(format!("--peer {p}: {e}")))?;
        out.extend(addrs);
    }
    Ok(out)
}

/// Why weir has no way to find peers for `meta` (`None`: it has some;
/// the DHT or LSD is one for a torrent that is not private when
/// `finds`: see [`dht_finds`] and [`lsd_finds`]).
pub(crate) fn no_source(meta: &Metainfo, opts: &TransferOpts, finds: bool) -> Option<String> {
    if !opts.peers.is_empty() || finds && !meta.info.private {
        return None;
    }
    let has_trackers = meta.trackers().iter().any(|t| !t.is_empty());
    match (has_trackers, opts.no_trackers) {
        (true, false) => None,
        (true, true) => Some("--no-trackers was given and no --peer".into()),
        (false, _) => Some("the torrent lists no tracker and no --peer was given".into()),
    }
}

/// Whether the DHT of a run can find peers by itself: it runs and has a
/// node to start from (`--dht-bootstrap`, or the public routers under a
/// policy that allows every address).
pub(crate) fn dht_finds(ctx: &Ctx, opts: &TransferOpts) -> bool {
    !opts.no_dht && (!opts.dht_bootstrap.is_empty() || ctx.policy.allows_name_resolution())
}

/// The LSD settings of a run (`None`: no `--lsd`).
pub(crate) fn lsd_settings(opts: &TransferOpts) -> Option<weir_runtime::engine::LsdSettings> {
    opts.lsd.then_some(weir_runtime::engine::LsdSettings {
        group: opts.lsd_group,
    })
}

/// Whether LSD can find peers in this run: `--lsd` and a group the
/// policy allows.
pub(crate) fn lsd_finds(ctx: &Ctx, opts: &TransferOpts) -> bool {
    lsd_settings(opts).is_some_and(|s| {
        !weir_runtime::engine::lsd::plan(&ctx.policy, &s)
            .groups
            .is_empty()
    })
}

/// The DHT settings of a run (`None`: `--no-dht`): `--dht-bootstrap`
/// resolved under the policy (bad input if unusable), the routing table
/// kept at `table`.
pub(crate) fn dht_settings(
    ctx: &Ctx,
    opts: &TransferOpts,
    table: Option<PathBuf>,
) -> anyhow::Result<Option<weir_runtime::engine::DhtSettings>> {
    if opts.no_dht {
        return Ok(None);
    }
    let mut nodes = Vec::new();
    for b in &opts.dht_bootstrap {
        let addrs = weir_runtime::net::resolve_host_port(&ctx.policy, b)
            .map_err(|e| bad_input(format!("--dht-bootstrap {b}: {e}")))?;
        nodes.extend(addrs);
    }
    Ok(Some(weir_runtime::engine::DhtSettings::new(
        nodes,
        &ctx.policy,
        table,
    )))
}

/// What to check when a torrent's sources give no peer.
pub(crate) fn source_hint(opts: &TransferOpts) -> &'static str {
    if opts.no_trackers {
        "check that the --peer addresses run a client that has this torrent and let it in"
    } else {
        "check that the trackers answer (their errors are logged above) and that a seeder \
         announced there, or give --peer HOST:PORT"
    }
}
