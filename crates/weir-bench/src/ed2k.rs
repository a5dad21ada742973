//! Scenario `ed2k` (in progress).

use crate::BenchConfig;

/// Runs the scenario.
pub fn run(_cfg: &BenchConfig) -> anyhow::Result<()> {
    anyhow::bail!("bench scenario ed2k is not implemented yet")
}
