//! One module per subcommand. Each exposes its clap `Args` and a `run`
//! function returning the process exit code.

pub(crate) mod bench;
pub(crate) mod create;
pub(crate) mod daemon;
pub(crate) mod demo;
pub(crate) mod ed2k;
pub(crate) mod get;
pub(crate) mod hash;
pub(crate) mod info;
pub(crate) mod linkem;
pub(crate) mod multi;
pub(crate) mod peers;
pub(crate) mod seed;
pub(crate) mod zmodem;

use std::net::SocketAddr;
use std::process::ExitCode;

use weir_core::policy::NetPolicy;

use crate::exit::bad_input;

/// What every subcommand gets besides its own arguments.
#[allow(dead_code)] // used as the subcommands land
pub(crate) struct Ctx {
    /// Where weir may open sockets and send datagrams.
    pub(crate) policy: NetPolicy,
}

/// Parses `--allow` / `WEIR_ALLOW`; absent means any address.
pub(crate) fn parse_policy(spec: Option<&str>) -> anyhow::Result<NetPolicy> {
    match spec {
        None => Ok(NetPolicy::allow_all()),
        Some(s) => NetPolicy::parse(s).map_err(|e| crate::exit::bad_input(format!("--allow: {e}"))),
    }
}

/// Whether stderr may carry colour codes: only to a terminal, and not when
/// `NO_COLOR` is set to anything but the empty string (no-color.org).
pub(crate) fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Logs go to stderr (stdout may be a ZMODEM line), coloured only on a
/// terminal ([`colour_on_stderr`]). `RUST_LOG` overrides the levels.
pub(crate) fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn,weir=info,weir_runtime=info",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour_on_stderr())
        .with_target(false)
        .try_init();
}

/// Threads tokio may run blocking work on (opening storage, at most four
/// at once; writing the daemon's state, one at a time; closing transfers,
/// moving files, saving the DHT table). Tokio's default, 512, let the pool
/// grow with the number of transfers: a daemon restarting on 10,000
/// torrents ran 12 of them (18 threads in all against 13 at 100), since a
/// storage open frees its slot before its thread goes back to the pool
/// and the next open, finding none idle, starts another.
const MAX_BLOCKING_THREADS: usize = 8;

/// Builds the multi-threaded tokio runtime the transfer commands run on.
#[allow(dead_code)] // used as the subcommands land
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("weir")
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .build()?)
}

/// A signal that asks weir to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM.
    Terminate,
}

impl Stop {
    fn signo(self) -> i32 {
        match self {
            Stop::Interrupt => 2,
            Stop::Terminate => 15,
        }
    }

    /// The exit code after a clean stop: 130 or 143.
    pub(crate) fn exit_code(self) -> ExitCode {
        crate::exit::signal_code(self.signo())
    }

    /// A second signal while stopping: exit at once (128 + N), as if the
    /// signal had ended the process.
    pub(crate) fn exit_now(self) -> ! {
        crate::out::errln!("weir: stopping at once");
        std::process::exit(128 + self.signo())
    }
}

/// SIGINT and SIGTERM as events: from the first [`Signals::new`] on, they
/// no longer end the process; the command stops cleanly and exits with
/// [`Stop::exit_code`]. Made inside the tokio runtime.
pub(crate) struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    /// Starts catching both.
    pub(crate) fn new() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    /// The next one.
    pub(crate) async fn next(&mut self) -> Stop {
        tokio::select! {
            _ = self.int.recv() => Stop::Interrupt,
            _ = self.term.recv() => Stop::Terminate,
        }
    }
}

/// The listen address when `--listen` is not given (BitTorrent's port).
pub(crate) const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 6881);

/// Ports the default moves to when 6881 is taken, before any free port.
const DEFAULT_PORTS: std::ops::RangeInclusive<u16> = 6881..=6889;

/// Addresses for `n` listeners. With `--listen IP:PORT`, listener `i`
/// takes PORT + i as given (port 0: any); a taken one is then an error
/// ([`listen_error`]). Without it: free ports of 6881..=6889 on 0.0.0.0,
/// then any free port, saying so when 6881 was taken.
pub(crate) fn listen_addrs(explicit: Option<SocketAddr>, n: usize) -> Vec<SocketAddr> {
    if let Some(a) = explicit {
        return (0..n)
            .map(|i| {
                let port = if a.port() == 0 {
                    0
                } else {
                    a.port().saturating_add(i as u16)
                };
                SocketAddr::new(a.ip(), port)
            })
            .collect();
    }
    let mut free = DEFAULT_PORTS
        .map(|p| SocketAddr::new(DEFAULT_LISTEN.ip(), p))
        .filter(|a| weir_runtime::net::port_is_free(*a));
    let out: Vec<SocketAddr> = (0..n)
        .map(|_| {
            free.next()
                .unwrap_or_else(|| SocketAddr::new(DEFAULT_LISTEN.ip(), 0))
        })
        .collect();
    if out
        .first()
        .is_some_and(|a| a.port() != DEFAULT_LISTEN.port())
    {
        let to = match out[0].port() {
            0 => "a free port the system picks".to_string(),
            p => format!("port {p}"),
        };
        tracing::warn!(
            "port {} is in use; listening on {to} instead (give --listen IP:PORT to choose)",
            DEFAULT_LISTEN.port()
        );
    }
    out
}

/// The error for a listen address that cannot be bound: bad input (exit
/// 2), said once, with what to do.
pub(crate) fn listen_error(addr: SocketAddr, e: &std::io::Error) -> anyhow::Error {
    use std::io::ErrorKind as K;
    let why = match e.kind() {
        K::AddrInUse => format!(
            "port {} is in use (another weir or program listens there); choose another with \
             --listen IP:PORT, or leave --listen out to take a free one",
            addr.port()
        ),
        K::AddrNotAvailable => format!(
            "{} is not an address of this machine; give one of its addresses, or 0.0.0.0",
            addr.ip()
        ),
        K::PermissionDenied => format!(
            "not allowed to listen on port {} (ports below 1024 need privileges); choose a \
             higher one",
            addr.port()
        ),
        _ => e.to_string(),
    };
    bad_input(format!("--listen {addr}: {why}"))
}
