//! Scenario `rtt` (in progress).

use crate::BenchConfig;

/// Runs the scenario.
pub fn run(_cfg: &BenchConfig) -> anyhow::Result<()> {
    anyhow::bail!("bench scenario rtt is not implemented yet")
}
