//! The tokio runtime layer of weir: the one place sockets, files, clocks and
//! threads are touched. It drives the sans-IO protocol cores (`weir-bt`,
//! `weir-ed2k`, `weir-zmodem`) and executes their storage operations, and it
//! holds the link emulator used by tests and benches.
//!
//! Every socket is opened through [`net`], which enforces the
//! [`weir_core::policy::NetPolicy`] allow-list.

pub mod bandwidth;
pub mod bufpool;
pub mod ed2k;
pub mod engine;
pub mod linkem;
pub mod magnet;
pub mod memory;
pub mod mse;
pub mod net;
pub mod peerconn;
pub mod process;
pub mod storage;
pub mod tracker;
pub mod udp_batch;
pub mod utp;
pub mod zmodem;
