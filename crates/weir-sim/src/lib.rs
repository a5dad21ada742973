//! Deterministic network simulator that drives weir's sans-IO cores in virtual time.
