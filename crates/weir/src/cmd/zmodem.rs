//! `weir sz` / `weir rz`: placeholder until its owner lands it.

use std::process::ExitCode;

use crate::cmd::Ctx;

/// Arguments of `weir sz`.
#[derive(clap::Args)]
pub(crate) struct SzArgs {
    /// Arguments (not yet parsed).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<String>,
}

/// Arguments of `weir rz`.
#[derive(clap::Args)]
pub(crate) struct RzArgs {
    /// Arguments (not yet parsed).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<String>,
}

/// Runs `weir sz`.
pub(crate) fn run_sz(_ctx: &Ctx, _args: SzArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("weir sz is not implemented yet")
}

/// Runs `weir rz`.
pub(crate) fn run_rz(_ctx: &Ctx, _args: RzArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("weir rz is not implemented yet")
}
