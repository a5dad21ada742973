//! eD2k over tokio: the client (downloads and uploads on the shared
//! transfer core, an optional server connection) and the index server
//! (`weir ed2k-server`).

pub mod client;
mod conn;
pub mod server;
pub mod userhash;

pub use client::{
    Ed2kConfig, Ed2kError, Ed2kHandle, Phase, Progress, SharedFile, Stopper, Summary,
};
pub use server::{Ed2kServer, ServerOptions};
