//! `weir bench SCENARIO`: runs a benchmark scenario side by side with real
//! peers and writes its table (JSON, markdown, charts) under `--out`.
//! Every weir process a scenario starts runs under the loopback-only
//! policy (`--allow 127.0.0.0/8`), whatever `--allow` this command got.

use std::process::ExitCode;

use weir_bench::{BenchConfig, SCENARIOS};

use crate::cmd::Ctx;
use crate::exit::bad_input;

/// Arguments of `weir bench`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Scenario: bt-single, ramp, cap, rtt, zmodem, ed2k, daemon, killsuite,
    /// multi, many, hostile, recheck, transports, magnet, swarm or
    /// instructions.
    #[arg(value_name = "SCENARIO")]
    scenario: String,
    /// Directory for the result files.
    #[arg(long, value_name = "DIR", default_value = "bench-results")]
    out: std::path::PathBuf,
    /// Runs per table cell (the median is reported; default 3, or 1 for
    /// instructions).
    #[arg(long, value_name = "N")]
    runs: Option<usize>,
    /// Payload size in MiB (default: the scenario's own).
    #[arg(long = "size-mib", value_name = "N")]
    size_mib: Option<u64>,
    /// Scenario option, repeatable (see each scenario's documentation).
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = weir_bench::common::parse_set)]
    set: Vec<(String, String)>,
}

/// Builds the scenario configuration from the arguments.
fn config(args: &Args) -> anyhow::Result<BenchConfig> {
    if !SCENARIOS.contains(&args.scenario.as_str()) {
        return Err(bad_input(format!(
            "unknown scenario {:?} (known: {})",
            args.scenario,
            SCENARIOS.join(", ")
        )));
    }
    if args.runs == Some(0) {
        return Err(bad_input("--runs must be at least 1"));
    }
    if args.size_mib == Some(0) {
        return Err(bad_input("--size-mib must be at least 1"));
    }
    let exe = std::env::current_exe()?;
    let mut cfg = BenchConfig::new(exe, args.out.clone());
    cfg.runs = args
        .runs
        .unwrap_or_else(|| weir_bench::default_runs(&args.scenario));
    cfg.size_mib = args.size_mib;
    cfg.extra = args.set.clone();
    cfg.command_line = std::env::args().collect::<Vec<_>>().join(" ");
    Ok(cfg)
}

/// Runs `weir bench`.
pub(crate) fn run(_ctx: &Ctx, args: Args) -> anyhow::Result<ExitCode> {
    let cfg = config(&args)?;
    cfg.ensure_out_dir()?;
    weir_bench::run(&args.scenario, &cfg)?;
    Ok(ExitCode::SUCCESS)
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

    fn cfg(v: &[&str]) -> anyhow::Result<BenchConfig> {
        let mut argv = vec!["t"];
        argv.extend_from_slice(v);
        config(&T::try_parse_from(argv)?.a)
    }

    #[test]
    fn arguments_build_the_config() {
        let c = cfg(&[
            "rtt",
            "--runs",
            "5",
            "--size-mib",
            "64",
            "--set",
            "rtt=150ms",
            "--set",
            "peers=2",
            "--out",
            "/tmp/x",
        ])
        .unwrap();
        assert_eq!(c.runs, 5);
        assert_eq!(c.size_mib, Some(64));
        assert_eq!(c.get("rtt"), Some("150ms"));
        assert_eq!(c.get("peers"), Some("2"));
        assert_eq!(c.out_dir, std::path::PathBuf::from("/tmp/x"));
        let d = cfg(&["bt-single"]).unwrap();
        assert_eq!(d.runs, 3);
        assert_eq!(d.out_dir, std::path::PathBuf::from("bench-results"));
        assert!(d.weir_argv().contains(&"127.0.0.0/8".to_string()));
        assert_eq!(cfg(&["instructions"]).unwrap().runs, 1);
        assert_eq!(cfg(&["instructions", "--runs", "2"]).unwrap().runs, 2);
    }

    #[test]
    fn bad_arguments_are_refused() {
        for bad in [
            &["nope"][..],
            &["rtt", "--runs", "0"],
            &["rtt", "--size-mib", "0"],
            &["rtt", "--set", "novalue"],
        ] {
            assert!(cfg(bad).is_err(), "{bad:?}");
        }
    }
}
