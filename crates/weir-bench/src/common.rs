//! What every scenario gets from `weir bench`.

use std::path::PathBuf;

/// Settings shared by every scenario.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// The weir binary to benchmark (normally the running executable).
    pub weir_exe: PathBuf,
    /// Where tables, JSON and charts are written.
    pub out_dir: PathBuf,
    /// Runs per cell (median reported).
    pub runs: usize,
    /// Payload size override in MiB (`None`: the scenario's default).
    pub size_mib: Option<u64>,
    /// Scenario-specific `key=value` options (`--set key=value`).
    pub extra: Vec<(String, String)>,
}
