//! Sans-IO ZMODEM protocol core for weir.
//!
//! Bytes, time and commands in; bytes, timers and events out. Nothing here
//! touches a file, a socket or the clock: the runtime (`weir-runtime`)
//! drives these state machines over stdin/stdout, pipes, socketpairs or TCP,
//! reading and writing files in large chunks on their behalf.
//!
//! - [`Sender`] (`sz`) and [`Receiver`] (`rz`): the two state machines; their
//!   module docs give the driving loop.
//! - [`frame`], [`decode`], [`escape`], [`crc`]: the wire codecs (hex,
//!   binary CRC-16 and CRC-32 headers, data subpackets, ZDLE escaping),
//!   table-driven and run over whole spans.
//! - [`fileinfo`]: the ZFILE name/size/mtime/mode block.
//!
//! ZMODEM positions are 32-bit: files over 4 GiB - 1 are refused with
//! [`SendError::FileTooLarge`].

pub mod consts;
pub mod crc;
pub mod decode;
pub mod escape;
pub mod fileinfo;
pub mod frame;
pub mod receiver;
mod scan;
pub mod sender;

pub use fileinfo::FileInfo;
pub use receiver::{FileRequest, Receiver, ReceiverConfig, RecvError, RecvEvent, RetransmitReason};
pub use sender::{DataRequest, FileOffer, SendError, SendEvent, Sender, SenderConfig};
