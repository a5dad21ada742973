//! eD2k over tokio. Phase 1 holds the index server (`weir ed2k-server`);
//! the client download/upload driver joins it on the shared transfer core.

pub mod server;

pub use server::{Ed2kServer, ServerOptions};
