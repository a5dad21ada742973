//! eD2k over tokio outside the engine: the index server (`weir
//! ed2k-server`) and the user hash each listen port presents (the engine's
//! eD2k identity).

pub mod server;
pub mod userhash;

pub use server::{Ed2kServer, ServerOptions};
