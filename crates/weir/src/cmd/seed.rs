//! `weir seed TORRENT DIR`: check the data in DIR and upload it; or
//! `weir seed --ed2k FILE...`: share files over eD2k.

use std::path::PathBuf;
use std::process::ExitCode;

use weir_core::picker::Order;

use crate::cmd::Ctx;
use crate::cmd::get::{DirPolicy, TransferOpts, load_torrent};
use crate::exit::bad_input;

/// Arguments of `weir seed`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Share these files over eD2k instead of seeding a torrent.
    #[arg(long)]
    ed2k: bool,
    /// The .torrent and the directory holding its data; with `--ed2k`, the
    /// files to share.
    #[arg(required = true, num_args = 1..)]
    paths: Vec<PathBuf>,
    #[command(flatten)]
    opts: TransferOpts,
}

/// Runs `weir seed`.
pub(crate) fn run(ctx: &Ctx, args: Args) -> anyhow::Result<ExitCode> {
    if args.ed2k {
        return crate::cmd::ed2k::seed(ctx, &args.paths, &args.opts);
    }
    let [torrent, dir] = args.paths.as_slice() else {
        return Err(bad_input(
            "usage: weir seed TORRENT DIR (or weir seed --ed2k FILE...)",
        ));
    };
    let meta = load_torrent(&torrent.to_string_lossy())?;
    // Seeding never downloads: a directory without the data is refused
    // (exit 2), and partial data is seeded as far as it verifies.
    crate::cmd::multi::run(
        ctx,
        crate::cmd::multi::Sources {
            torrents: vec![meta],
            magnets: Vec::new(),
            links: Vec::new(),
            shares: Vec::new(),
            select: None,
        },
        crate::cmd::multi::RunOpts {
            out: dir.clone(),
            seed: true,
            order: Order::RarestFirst,
            opts: &args.opts,
            dir: DirPolicy {
                seed_only: true,
                overwrite: false,
                space_check: false,
            },
        },
    )
}
