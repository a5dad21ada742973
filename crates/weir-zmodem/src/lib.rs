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
//!
//! # Line errors
//!
//! A receiver that sees a bad frame asks for the last good position with
//! ZRPOS and must then skip everything already in flight; lrzsz `rz` gives
//! up after roughly 1 MiB of such stale data. So the sender keeps what is
//! unacknowledged bounded even when streaming: it asks for a ZACK with
//! ZCRCQ (which does not stop the stream) every quarter of its bound and
//! frames new data only while the bound has room — 256 KiB by default, or
//! 4 MiB toward a receiver that announces it skips any amount of stale data
//! (weir's own, ZRINIT ZF1 [`consts::zrinit1::STALE_OK`]). After a restart
//! the first block ends with ZCRCW, as lsz does; repeated ZRPOS for that
//! position (rz sends one per ~40 KB of garbage it skips) are ignored.
//! The receiver sends one ZRPOS per error and waits for the sender's new
//! ZDATA header (or its timer, or 8 MiB more stale data) before asking again.

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
