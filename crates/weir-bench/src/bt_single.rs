//! Scenario `bt_single` (in progress).

use crate::BenchConfig;

/// Runs the scenario.
pub fn run(_cfg: &BenchConfig) -> anyhow::Result<()> {
    anyhow::bail!("bench scenario bt_single is not implemented yet")
}
