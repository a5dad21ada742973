//! Benchmark scenarios of weir, run side by side with real peers: each
//! prints a table and writes JSON (and a PNG chart where it plots) under
//! the output directory. Benchmarks are commands (`weir bench ...`), not tests.
//!
//! Scenario authors get [`BenchConfig`] (with [`BenchConfig::weir`] to start
//! weir under the loopback policy), [`report::Report`] for tables, JSON and
//! markdown, [`chart`] for PNG charts, and `weir_lab` for namespaces, real
//! clients and process accounting.

pub mod bt_setup;
pub mod bt_single;
pub mod cap;
pub mod chart;
pub mod common;
pub mod daemon;
pub mod ed2k;
pub mod hostile;
pub mod http_timer;
pub mod instructions;
pub mod killsuite;
pub mod magnet;
pub mod many;
pub mod multi;
pub mod ramp;
pub mod recheck;
pub mod report;
pub mod rtt;
pub mod swarm;
pub mod tracker;
pub mod transports;
pub mod udplink;
pub mod zmodem;

pub use common::BenchConfig;

/// Writes to stdout, ignoring a reader that went away (`weir bench x |
/// head`): the run goes on and its results are still written to files;
/// `println!` would panic there.
pub(crate) fn say(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(args).and_then(|()| out.flush());
}

/// `println!` through [`say`].
macro_rules! sayln {
    ($($arg:tt)*) => {
        $crate::say(format_args!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use sayln;

/// The scenarios `weir bench` knows, by command-line name.
pub const SCENARIOS: [&str; 16] = [
    "bt-single",
    "ramp",
    "cap",
    "rtt",
    "zmodem",
    "ed2k",
    "daemon",
    "killsuite",
    "multi",
    "many",
    "hostile",
    "recheck",
    "transports",
    "magnet",
    "swarm",
    "instructions",
];

/// Runs per table cell of scenario `name` when `--runs` is not given: 3,
/// or 1 for `instructions` (a run under valgrind is some 50x slower and
/// its counts barely vary).
pub fn default_runs(name: &str) -> usize {
    match name {
        "instructions" => instructions::DEFAULT_RUNS,
        _ => 3,
    }
}

/// Runs the scenario named `name` (one of [`SCENARIOS`]).
pub fn run(name: &str, cfg: &BenchConfig) -> anyhow::Result<()> {
    match name {
        "bt-single" => bt_single::run(cfg),
        "ramp" => ramp::run(cfg),
        "cap" => cap::run(cfg),
        "rtt" => rtt::run(cfg),
        "zmodem" => zmodem::run(cfg),
        "ed2k" => ed2k::run(cfg),
        "daemon" => daemon::run(cfg),
        "killsuite" => killsuite::run(cfg),
        "multi" => multi::run(cfg),
        "many" => many::run(cfg),
        "hostile" => hostile::run(cfg),
        "recheck" => recheck::run(cfg),
        "transports" => transports::run(cfg),
        "magnet" => magnet::run(cfg),
        "swarm" => swarm::run(cfg),
        "instructions" => instructions::run(cfg),
        _ => anyhow::bail!(
            "unknown scenario {name:?} (known: {})",
            SCENARIOS.join(", ")
        ),
    }
}
