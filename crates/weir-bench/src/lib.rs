//! Benchmark scenarios of weir run side by side with real peers.
