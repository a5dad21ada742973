//! `weir linkem`: a TCP proxy that emulates a link (one-way delay, rate cap,
//! bounded queue, corruption, drops) between real programs. Prints
//! `linkem listening on ADDR` on stdout when ready, then one summary line per
//! closed connection on stderr. See `weir_runtime::linkem` for the semantics.
//!
//! With `--udp` it relays UDP datagrams instead (for uTP): one-way delay,
//! rate with a bottleneck queue (tail drop), random loss (`--loss`, drawn
//! with `--seed`); corruption and drop ranges are TCP-only. It prints
//! `linkem listening on ADDR (udp)` and its counters every 10 s on stderr.

use std::net::SocketAddr;
use std::process::ExitCode;

use weir_runtime::linkem::{self, Direction, Faults, LinkConfig, parse};

use crate::cmd::Ctx;
use crate::exit::bad_input;

/// Arguments of `weir linkem` (boxed: they are large next to other
/// subcommands').
#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    link: Box<LinkArgs>,
}

/// The link emulator's options.
#[derive(clap::Args)]
struct LinkArgs {
    /// Address to accept connections on (port 0: any free port; the chosen
    /// address is printed).
    #[arg(long, value_name = "ADDR")]
    listen: SocketAddr,
    /// Address each accepted connection is forwarded to.
    #[arg(long, value_name = "ADDR")]
    connect: SocketAddr,
    /// One-way delay added to each direction (e.g. 75ms).
    #[arg(long, value_name = "DURATION", default_value = "0")]
    delay: String,
    /// Rate cap per direction (e.g. 50MB/s, 20MiB/s, 400Mbit/s); unshaped if absent.
    #[arg(long, value_name = "RATE")]
    rate: Option<String>,
    /// Most bytes held per direction before linkem stops reading (should be
    /// at least rate x delay).
    #[arg(long, value_name = "SIZE", default_value = "4MiB")]
    queue: String,
    /// Stream offsets whose byte is corrupted (XOR with a nonzero mask),
    /// comma-separated.
    #[arg(long = "corrupt-at", value_name = "OFF,OFF..")]
    corrupt_at: Option<String>,
    /// Corrupt N distinct offsets drawn uniformly from [0, --corrupt-span)
    /// with --seed (the offsets are printed on stderr).
    #[arg(long = "corrupt-random", value_name = "N", requires = "corrupt_span")]
    corrupt_random: Option<usize>,
    /// Seed for --corrupt-random.
    #[arg(long, value_name = "S", default_value_t = 0)]
    seed: u64,
    /// Span of stream offsets --corrupt-random draws from (e.g. 64MiB).
    #[arg(long = "corrupt-span", value_name = "BYTES")]
    corrupt_span: Option<String>,
    /// Byte ranges removed from the stream, `OFFSET:LENGTH,...`.
    #[arg(long = "drop-at", value_name = "OFF:LEN,..")]
    drop_at: Option<String>,
    /// Which direction corruption and drops apply to: fwd (client to
    /// server), rev or both.
    #[arg(long, value_name = "DIR", default_value = "fwd")]
    direction: String,
    /// Relay UDP datagrams (uTP) instead of TCP connections.
    #[arg(long)]
    udp: bool,
    /// UDP mode: probability that a datagram is lost, each direction (e.g. 0.01).
    #[arg(long, value_name = "P", requires = "udp")]
    loss: Option<f64>,
}

fn bad(e: parse::ParseError) -> anyhow::Error {
    bad_input(e.to_string())
}

/// Builds the link configuration from the arguments (also used by benches
/// through the same flags).
fn config(a: &LinkArgs) -> anyhow::Result<LinkConfig> {
    let delay = parse::duration(&a.delay).map_err(bad)?;
    let rate = a
        .rate
        .as_deref()
        .map(parse::rate)
        .transpose()
        .map_err(bad)?;
    let queue = parse::size(&a.queue).map_err(bad)?;
    if queue == 0 {
        return Err(bad_input("--queue must be at least 1 byte"));
    }
    let mut corrupt_at = match &a.corrupt_at {
        Some(s) => parse::offsets(s).map_err(bad)?,
        None => Vec::new(),
    };
    if let Some(n) = a.corrupt_random {
        let span = parse::size(a.corrupt_span.as_deref().unwrap_or_default()).map_err(bad)?;
        let offs = linkem::random_offsets(n, a.seed, span).ok_or_else(|| {
            bad_input(format!(
                "--corrupt-random {n} exceeds --corrupt-span {span}"
            ))
        })?;
        let list: Vec<String> = offs.iter().map(u64::to_string).collect();
        crate::out::errln!(
            "linkem: corrupt-random {n} seed {} span {span}: offsets {}",
            a.seed,
            list.join(",")
        );
        corrupt_at.extend(offs);
    } else if a.corrupt_span.is_some() {
        return Err(bad_input("--corrupt-span needs --corrupt-random"));
    }
    let drop = match &a.drop_at {
        Some(s) => parse::drops(s).map_err(bad)?,
        None => Vec::new(),
    };
    let fault_direction: Direction = a.direction.parse().map_err(bad)?;
    Ok(LinkConfig {
        delay,
        rate,
        queue: usize::try_from(queue).map_err(|_| bad_input("--queue too large"))?,
        faults: Faults { corrupt_at, drop },
        fault_direction,
    })
}

/// Builds the UDP link configuration (`--udp`).
fn udp_config(a: &LinkArgs) -> anyhow::Result<linkem::UdpLinkConfig> {
    if a.corrupt_at.is_some() || a.corrupt_random.is_some() || a.drop_at.is_some() {
        return Err(bad_input(
            "--corrupt-at, --corrupt-random and --drop-at are for TCP; --udp has --loss",
        ));
    }
    let delay = parse::duration(&a.delay).map_err(bad)?;
    let rate = a
        .rate
        .as_deref()
        .map(parse::rate)
        .transpose()
        .map_err(bad)?;
    let queue = parse::size(&a.queue).map_err(bad)?;
    if queue == 0 {
        return Err(bad_input("--queue must be at least 1 byte"));
    }
    let loss = a.loss.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&loss) {
        return Err(bad_input(format!("--loss {loss}: must be within 0..=1")));
    }
    Ok(linkem::UdpLinkConfig {
        delay,
        rate,
        queue: usize::try_from(queue).map_err(|_| bad_input("--queue too large"))?,
        loss,
        seed: a.seed,
    })
}

/// Runs the UDP mode until interrupted (exit 130 for SIGINT, 143 for
/// SIGTERM).
fn run_udp(ctx: &Ctx, args: LinkArgs) -> anyhow::Result<ExitCode> {
    let cfg = udp_config(&args)?;
    if let Some(rate) = cfg.rate {
        let bdp = rate as f64 * cfg.delay.as_secs_f64();
        if bdp > 0.0 && (cfg.queue as f64) < bdp / 4.0 {
            crate::out::errln!(
                "linkem: note: queue {} B holds {:.0} ms at the rate (a shallow bottleneck)",
                cfg.queue,
                cfg.queue as f64 / rate as f64 * 1e3
            );
        }
    }
    let rt = crate::cmd::runtime()?;
    rt.block_on(async {
        let mut signals = crate::cmd::Signals::new()?;
        let l = weir_runtime::net::PolicedUdp::bind(&ctx.policy, args.listen).await?;
        let addr = l.local_addr()?;
        crate::out::outln!("linkem listening on {addr} (udp)")?;
        let stats = std::sync::Arc::new(linkem::UdpStats::default());
        let s2 = stats.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(10));
            tick.tick().await;
            loop {
                tick.tick().await;
                crate::out::errln!("linkem udp: {s2}");
            }
        });
        tokio::select! {
            r = linkem::serve_udp_with(l, args.connect, cfg, ctx.policy.clone(), stats) => {
                r?;
                Ok(ExitCode::SUCCESS)
            }
            s = signals.next() => Ok(s.exit_code()),
        }
    })
}

/// Runs `weir linkem` until interrupted (exit 130 for SIGINT, 143 for
/// SIGTERM).
pub(crate) fn run(ctx: &Ctx, args: Args) -> anyhow::Result<ExitCode> {
    let args = *args.link;
    if args.udp {
        if let Err(e) = ctx.policy.check(args.connect) {
            return Err(bad_input(format!("--connect: {e}")));
        }
        return run_udp(ctx, args);
    }
    let cfg = config(&args)?;
    if let Err(e) = ctx.policy.check(args.connect) {
        return Err(bad_input(format!("--connect: {e}")));
    }
    if let Some(w) = cfg.bdp_warning() {
        crate::out::errln!("linkem: warning: {w}");
    }
    let rt = crate::cmd::runtime()?;
    rt.block_on(async {
        let mut signals = crate::cmd::Signals::new()?;
        let l = weir_runtime::net::listen_tcp(args.listen)
            .await
            .map_err(|e| crate::cmd::listen_error(args.listen, &e))?;
        let addr = l.local_addr()?;
        crate::out::outln!("linkem listening on {addr}")?;
        tokio::select! {
            r = linkem::serve_with(l, args.connect, cfg, ctx.policy.clone(), |s| {
                crate::out::errln!("{s}")
            }) => {
                r?;
                Ok(ExitCode::SUCCESS)
            }
            s = signals.next() => Ok(s.exit_code()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: Args,
    }

    fn cfg(args: &[&str]) -> anyhow::Result<LinkConfig> {
        let mut v = vec!["t", "--listen", "127.0.0.1:0", "--connect", "127.0.0.1:9"];
        v.extend_from_slice(args);
        config(&T::try_parse_from(v)?.a.link)
    }

    #[test]
    fn flags_build_the_config() {
        let c = cfg(&[
            "--delay",
            "75ms",
            "--rate",
            "50MB/s",
            "--queue",
            "8MiB",
            "--corrupt-at",
            "1,2",
            "--drop-at",
            "10:5",
            "--direction",
            "both",
        ])
        .unwrap();
        assert_eq!(c.delay, std::time::Duration::from_millis(75));
        assert_eq!(c.rate, Some(50_000_000));
        assert_eq!(c.queue, 8 << 20);
        assert_eq!(c.faults.corrupt_at, vec![1, 2]);
        assert_eq!(c.faults.drop, vec![(10, 5)]);
        assert_eq!(c.fault_direction, Direction::Both);
        let d = cfg(&[]).unwrap();
        assert_eq!(d, LinkConfig::default());
    }

    #[test]
    fn random_corruption_is_reproducible() {
        let a = cfg(&[
            "--corrupt-random",
            "3",
            "--seed",
            "9",
            "--corrupt-span",
            "1MiB",
        ])
        .unwrap();
        let b = cfg(&[
            "--corrupt-random",
            "3",
            "--seed",
            "9",
            "--corrupt-span",
            "1MiB",
        ])
        .unwrap();
        assert_eq!(a.faults.corrupt_at.len(), 3);
        assert_eq!(a, b);
        assert!(a.faults.corrupt_at.iter().all(|&o| o < 1 << 20));
    }

    fn udp_cfg(args: &[&str]) -> anyhow::Result<linkem::UdpLinkConfig> {
        let mut v = vec![
            "t",
            "--listen",
            "127.0.0.1:0",
            "--connect",
            "127.0.0.1:9",
            "--udp",
        ];
        v.extend_from_slice(args);
        udp_config(&T::try_parse_from(v)?.a.link)
    }

    #[test]
    fn udp_flags_build_the_udp_config() {
        let c = udp_cfg(&[
            "--delay", "75ms", "--rate", "50MB/s", "--queue", "16MiB", "--loss", "0.01", "--seed",
            "3",
        ])
        .unwrap();
        assert_eq!(c.delay, std::time::Duration::from_millis(75));
        assert_eq!(c.rate, Some(50_000_000));
        assert_eq!(c.queue, 16 << 20);
        assert_eq!(c.loss, 0.01);
        assert_eq!(c.seed, 3);
        for bad in [
            &["--loss", "1.5"][..],
            &["--loss", "-0.1"],
            &["--corrupt-at", "5"],
            &["--drop-at", "1:2"],
            &["--queue", "0"],
        ] {
            let e = udp_cfg(bad).unwrap_err();
            assert!(
                e.chain().any(|c| c.is::<crate::exit::BadInput>()) || e.is::<clap::Error>(),
                "{bad:?}: {e}"
            );
        }
        // --loss needs --udp.
        let v = [
            "t",
            "--listen",
            "127.0.0.1:0",
            "--connect",
            "127.0.0.1:9",
            "--loss",
            "0.1",
        ];
        assert!(T::try_parse_from(v).is_err());
    }

    #[test]
    fn bad_flags_are_bad_input() {
        for bad in [
            &["--delay", "75"][..],
            &["--rate", "fast"],
            &["--queue", "0"],
            &["--direction", "up"],
            &["--corrupt-random", "5", "--corrupt-span", "3"],
            &["--corrupt-span", "3"],
            &["--drop-at", "5"],
        ] {
            let e = cfg(bad).unwrap_err();
            assert!(
                e.chain().any(|c| c.is::<crate::exit::BadInput>()) || e.is::<clap::Error>(),
                "{bad:?}: {e}"
            );
        }
    }
}
