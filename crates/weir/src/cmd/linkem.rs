//! `weir linkem`: placeholder until its owner lands it.

use std::process::ExitCode;

use crate::cmd::Ctx;

/// Arguments of `weir linkem`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Arguments (not yet parsed).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<String>,
}

/// Runs `weir linkem`.
pub(crate) fn run(_ctx: &Ctx, _args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("weir linkem is not implemented yet")
}
