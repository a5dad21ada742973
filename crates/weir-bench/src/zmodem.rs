//! Scenario `zmodem` (in progress).

use crate::BenchConfig;

/// Runs the scenario.
pub fn run(_cfg: &BenchConfig) -> anyhow::Result<()> {
    anyhow::bail!("bench scenario zmodem is not implemented yet")
}
