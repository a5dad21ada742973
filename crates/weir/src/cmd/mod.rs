//! One module per subcommand. Each exposes its clap `Args` and a `run`
//! function returning the process exit code.

pub(crate) mod bench;
pub(crate) mod create;
pub(crate) mod demo;
pub(crate) mod ed2k;
pub(crate) mod get;
pub(crate) mod hash;
pub(crate) mod info;
pub(crate) mod linkem;
pub(crate) mod seed;
pub(crate) mod zmodem;

use weir_core::policy::NetPolicy;

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

/// Logs go to stderr (stdout may be a ZMODEM line). `RUST_LOG` overrides.
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
        .with_target(false)
        .try_init();
}

/// Builds the multi-threaded tokio runtime the transfer commands run on.
#[allow(dead_code)] // used as the subcommands land
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("weir")
        .build()?)
}
