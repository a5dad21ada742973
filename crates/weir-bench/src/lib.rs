//! Benchmark scenarios of weir, run side by side with real peers: each
//! prints a table and writes JSON (and a PNG chart where it plots) under
//! the output directory. Benchmarks are commands (`weir bench ...`), not tests.

pub mod bt_single;
pub mod cap;
pub mod common;
pub mod ed2k;
pub mod ramp;
pub mod rtt;
pub mod zmodem;

pub use common::BenchConfig;
