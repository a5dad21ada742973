//! Sans-IO ZMODEM protocol core for weir.
//!
//! Bytes, time and commands in; bytes, timers and events out. Nothing here
//! touches a file, a socket or the clock: the runtime (`weir-runtime`)
//! drives these state machines over stdin/stdout, pipes, socketpairs or TCP.
//!
//! - [`frame`], [`decode`], [`escape`], [`crc`]: the wire codecs (hex,
//!   binary CRC-16 and CRC-32 headers, data subpackets, ZDLE escaping).

pub mod consts;
pub mod crc;
pub mod decode;
pub mod escape;
pub mod frame;
