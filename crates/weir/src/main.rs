//! `weir`: the command-line front end. Every subcommand lives in its own
//! module under `cmd/`; this file only parses arguments, sets up logging and
//! the network policy, and maps errors to exit codes (0 done, 2 bad input,
//! 1 any other failure, 128 + N stopped by signal N: 130 for Ctrl-C, 143
//! for SIGTERM).

mod cmd;
mod exit;
mod out;
mod progress;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::exit::BadInput;

/// A peer-to-peer file-transfer engine: BitTorrent, eD2k and ZMODEM.
#[derive(Parser)]
#[command(name = "weir", version, about, long_about = None)]
struct Cli {
    /// Address ranges weir may open sockets to or send datagrams to,
    /// comma-separated CIDRs or `any` (e.g. `127.0.0.0/8,::1`). Every
    /// refusal is logged. Defaults to `any`; tests and benches set loopback.
    #[arg(long, global = true, env = "WEIR_ALLOW", value_name = "CIDRS")]
    allow: Option<String>,

    /// More log output (repeat for more).
    #[arg(long = "log-verbose", global = true, action = clap::ArgAction::Count, hide = true)]
    log_verbose: u8,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a seeder and leechers on loopback in this process and show their rates.
    Demo(cmd::demo::Args),
    /// Make a .torrent from a file or directory.
    Create(cmd::create::Args),
    /// Show what a .torrent holds.
    Info(cmd::info::Args),
    /// Download a .torrent or an ed2k:// link.
    Get(cmd::get::Args),
    /// Seed a torrent's data, or files over eD2k (`--ed2k`).
    Seed(cmd::seed::Args),
    /// Print hashes and links of files (`--ed2k`: the ed2k link aMule would print).
    Hash(cmd::hash::Args),
    /// Send files with ZMODEM (like lrzsz `sz`).
    Sz(cmd::zmodem::SzArgs),
    /// Receive files with ZMODEM (like lrzsz `rz`).
    Rz(cmd::zmodem::RzArgs),
    /// Run a long-lived session driven over Transmission's RPC (transmission-remote, scripts, a web page).
    Daemon(cmd::daemon::Args),
    /// Run a small eD2k index server (for LAN swarms and tests).
    #[command(name = "ed2k-server")]
    Ed2kServer(cmd::ed2k::ServerArgs),
    /// A TCP proxy that emulates a link: one-way delay, rate cap, corruption, drops.
    Linkem(cmd::linkem::Args),
    /// Run a benchmark scenario side by side with real peers and print the table.
    Bench(cmd::bench::Args),
}

fn main() -> ExitCode {
    // Before any thread starts: one malloc arena bounds peak memory, and
    // the descriptor limit is the hard one (see `weir_runtime::process`).
    weir_runtime::process::one_malloc_arena();
    weir_runtime::process::raise_descriptor_limit();
    let cli = Cli::parse();
    cmd::init_logging(cli.log_verbose);
    let policy = match cmd::parse_policy(cli.allow.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            crate::out::errln!("weir: {}", exit::describe(&e));
            return ExitCode::from(2);
        }
    };
    let ctx = cmd::Ctx { policy };
    let result = match cli.command {
        Command::Demo(a) => cmd::demo::run(&ctx, a),
        Command::Create(a) => cmd::create::run(&ctx, a),
        Command::Info(a) => cmd::info::run(&ctx, a),
        Command::Get(a) => cmd::get::run(&ctx, a),
        Command::Seed(a) => cmd::seed::run(&ctx, a),
        Command::Hash(a) => cmd::hash::run(&ctx, a),
        Command::Sz(a) => cmd::zmodem::run_sz(&ctx, a),
        Command::Rz(a) => cmd::zmodem::run_rz(&ctx, a),
        Command::Daemon(a) => cmd::daemon::run(&ctx, a),
        Command::Ed2kServer(a) => cmd::ed2k::run_server(&ctx, a),
        Command::Linkem(a) => cmd::linkem::run(&ctx, a),
        Command::Bench(a) => cmd::bench::run(&ctx, a),
    };
    match result {
        Ok(code) => code,
        // The reader of stdout went away: nothing to say, nothing failed.
        Err(e) if e.chain().any(|c| c.is::<out::Closed>()) => ExitCode::SUCCESS,
        Err(e) => {
            crate::out::errln!("weir: {}", exit::describe(&e));
            if e.chain().any(|c| c.is::<BadInput>()) {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}
