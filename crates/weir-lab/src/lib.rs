//! Test and bench harness for weir: network namespaces that hold only `lo`,
//! real peer programs started safely (every discovery and update feature
//! off, bound to 127.0.0.x), processes ended by PID, CPU/RSS accounting, and
//! test filesystems that fill up or fail (`mounts`).
//!
//! weir-lab depends on none of weir's own crates, so a harness bug and a
//! weir bug cannot hide each other.

pub mod alloc;
pub mod amule;
pub mod bt;
pub mod ci;
pub mod mounts;
pub mod netns;
pub mod payload;
pub mod process;
pub mod tmpdir;
pub mod torrent;

pub use netns::{DnsTrap, Netns, VethPair};
pub use process::{Proc, Usage};
pub use tmpdir::TempDir;
