//! eD2k front end: `weir get ed2k://...`, `weir seed --ed2k`, `weir ed2k-server`.
//! Placeholder until its owner lands it.

use std::process::ExitCode;

use crate::cmd::Ctx;

/// Arguments of `weir ed2k-server`.
#[derive(clap::Args)]
pub(crate) struct ServerArgs {
    /// Arguments (not yet parsed).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<String>,
}

/// Runs `weir ed2k-server`.
pub(crate) fn run_server(_ctx: &Ctx, _args: ServerArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("weir ed2k-server is not implemented yet")
}

/// `weir get ed2k://...` (placeholder until the eD2k client lands).
pub(crate) fn get(
    _ctx: &Ctx,
    _link: &str,
    _out: &std::path::Path,
    _seed: bool,
    _opts: &crate::cmd::get::TransferOpts,
) -> anyhow::Result<ExitCode> {
    anyhow::bail!("eD2k downloads are not implemented yet")
}

/// `weir seed --ed2k FILE...` (placeholder until the eD2k client lands).
pub(crate) fn seed(
    _ctx: &Ctx,
    _files: &[std::path::PathBuf],
    _opts: &crate::cmd::get::TransferOpts,
) -> anyhow::Result<ExitCode> {
    anyhow::bail!("eD2k seeding is not implemented yet")
}
