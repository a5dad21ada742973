//! Test and bench harness for weir: network namespaces that hold only `lo`,
//! real peer programs started safely (every discovery and update feature
//! off, bound to 127.0.0.x), processes ended by PID, and CPU/RSS accounting.

pub mod amule;
pub mod bt;
pub mod ci;
pub mod netns;
pub mod payload;
pub mod process;
