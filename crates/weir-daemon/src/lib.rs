//! The front end of `weir daemon`: a Transmission-compatible RPC server and
//! a web page, over a [`Backend`] that the engine's session implements.
//!
//! - [`server::RpcServer`] serves `/transmission/rpc` (alias `/rpc`) in
//!   both of Transmission's forms (classic `{method, arguments, tag}` and
//!   RPC 6.0's JSON-RPC 2.0), with the session-id handshake, Basic auth,
//!   the Host check and bounded bodies, and the page at `/`.
//! - [`backend`] is the contract with the engine: typed views, commands and
//!   errors; all JSON mapping stays in this crate.
//! - [`client::RpcClient`] is a small classic-form client (tests, benches).
//! - With feature `fake`, [`fake::FakeBackend`] keeps transfers in memory
//!   and simulates progress, so the server can be run for real in tests.
//!
//! ```no_run
//! # #[cfg(feature = "fake")]
//! # async fn demo() -> Result<(), weir_daemon::server::ServerError> {
//! use std::sync::Arc;
//! use weir_daemon::{fake::FakeBackend, server::{RpcConfig, RpcServer}};
//! let backend = Arc::new(FakeBackend::new("/tmp/downloads"));
//! let server = RpcServer::bind(RpcConfig::new("127.0.0.1:9091".parse().unwrap()), backend).await?;
//! let handle = server.spawn();
//! // ... transmission-remote 127.0.0.1:9091 -l ...
//! handle.stop().await
//! # }
//! ```

mod args;
pub mod backend;
pub mod client;
#[cfg(any(feature = "fake", feature = "engine"))]
mod disk;
#[cfg(feature = "engine")]
pub mod engine;
#[cfg(feature = "fake")]
pub mod fake;
mod fields;
mod json;
mod methods;
mod rpc;
pub mod server;
mod session;
#[cfg(any(feature = "fake", feature = "engine"))]
mod sources;
mod torrents;
mod web;

pub use backend::Backend;
pub use rpc::{ErrorKind, Form, RpcError, answer};
pub use server::{Credentials, RpcConfig, RpcServer, ServerError, ServerHandle};
