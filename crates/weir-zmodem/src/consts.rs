//! Wire constants of ZMODEM (Forsberg, "The ZMODEM Inter Application File
//! Transfer Protocol", 1988), with the values lrzsz uses.

/// Padding character that starts every header (`*`).
pub const ZPAD: u8 = b'*';
/// The ZMODEM escape character (Ctrl-X, the same byte as CAN).
pub const ZDLE: u8 = 0x18;
/// Cancel; five in a row abort a session.
pub const CAN: u8 = 0x18;
/// XON (Ctrl-Q): flow control, ignored by receivers when it arrives raw.
pub const XON: u8 = 0x11;
/// XOFF (Ctrl-S): flow control, ignored by receivers when it arrives raw.
pub const XOFF: u8 = 0x13;
/// Backspace, sent after the CANs of an abort to erase them on a terminal.
pub const BS: u8 = 0x08;

/// Header format byte after `ZPAD ZDLE`: binary header with CRC-16.
pub const ZBIN: u8 = b'A';
/// Header format byte: hex header (CRC-16).
pub const ZHEX: u8 = b'B';
/// Header format byte: binary header with CRC-32.
pub const ZBIN32: u8 = b'C';

/// Subpacket end: CRC follows, frame ends, a header comes next.
pub const ZCRCE: u8 = b'h';
/// Subpacket end: CRC follows, frame continues nonstop (streaming).
pub const ZCRCG: u8 = b'i';
/// Subpacket end: CRC follows, frame continues, ZACK expected.
pub const ZCRCQ: u8 = b'j';
/// Subpacket end: CRC follows, frame ends, ZACK expected.
pub const ZCRCW: u8 = b'k';
/// Escape sequence for 0x7f.
pub const ZRUB0: u8 = b'l';
/// Escape sequence for 0xff.
pub const ZRUB1: u8 = b'm';

/// Frame (header) types.
pub mod frame {
    /// Request receive init (sender -> receiver).
    pub const ZRQINIT: u8 = 0;
    /// Receive init: capabilities and buffer size.
    pub const ZRINIT: u8 = 1;
    /// Send init: sender's escape needs and attention string.
    pub const ZSINIT: u8 = 2;
    /// Acknowledgement (of ZSINIT, ZCRCQ/ZCRCW subpackets, ...).
    pub const ZACK: u8 = 3;
    /// File name and information follow.
    pub const ZFILE: u8 = 4;
    /// Receiver to sender: skip this file.
    pub const ZSKIP: u8 = 5;
    /// The last header was garbled.
    pub const ZNAK: u8 = 6;
    /// Abort the batch.
    pub const ZABORT: u8 = 7;
    /// Finish the session.
    pub const ZFIN: u8 = 8;
    /// Resume data at this position.
    pub const ZRPOS: u8 = 9;
    /// Data subpackets follow, starting at this position.
    pub const ZDATA: u8 = 10;
    /// End of file at this position.
    pub const ZEOF: u8 = 11;
    /// Fatal read or write error.
    pub const ZFERR: u8 = 12;
    /// Request for (or reply with) the file's CRC.
    pub const ZCRC: u8 = 13;
    /// Receiver's challenge.
    pub const ZCHALLENGE: u8 = 14;
    /// Request is complete.
    pub const ZCOMPL: u8 = 15;
    /// The other end cancelled with CAN*5 (pseudo frame).
    pub const ZCAN: u8 = 16;
    /// Request for free bytes on the file system.
    pub const ZFREECNT: u8 = 17;
    /// Command from the sending program.
    pub const ZCOMMAND: u8 = 18;
    /// Output to standard error, data follows.
    pub const ZSTDERR: u8 = 19;

    /// A printable name for a frame type (for logs and errors).
    pub fn name(t: u8) -> &'static str {
        const NAMES: [&str; 20] = [
            "ZRQINIT",
            "ZRINIT",
            "ZSINIT",
            "ZACK",
            "ZFILE",
            "ZSKIP",
            "ZNAK",
            "ZABORT",
            "ZFIN",
            "ZRPOS",
            "ZDATA",
            "ZEOF",
            "ZFERR",
            "ZCRC",
            "ZCHALLENGE",
            "ZCOMPL",
            "ZCAN",
            "ZFREECNT",
            "ZCOMMAND",
            "ZSTDERR",
        ];
        NAMES.get(usize::from(t)).copied().unwrap_or("unknown")
    }

    /// Whether data subpackets follow a header of this type on the wire.
    pub fn has_data(t: u8) -> bool {
        matches!(t, ZSINIT | ZFILE | ZDATA | ZCOMMAND | ZSTDERR)
    }
}

/// ZRINIT ZF0 capability flags.
pub mod zrinit {
    /// Receiver can send and receive true full duplex.
    pub const CANFDX: u8 = 0x01;
    /// Receiver can receive data during disk I/O.
    pub const CANOVIO: u8 = 0x02;
    /// Receiver can send a break signal.
    pub const CANBRK: u8 = 0x04;
    /// Receiver can use 32-bit frame checks.
    pub const CANFC32: u8 = 0x20;
    /// Receiver expects control characters to be escaped.
    pub const ESCCTL: u8 = 0x40;
    /// Receiver expects the 8th bit to be escaped.
    pub const ESC8: u8 = 0x80;
}

/// ZRINIT ZF1 flags.
pub mod zrinit1 {
    /// Variable-length headers (unused by lrzsz and weir).
    pub const CANVHDR: u8 = 0x01;
    /// lrzsz: the receiver asks for a time sync.
    pub const TIMESYNC: u8 = 0x02;
    /// weir extension (a bit no other implementation defines): the receiver
    /// skips any amount of stale data after a line error, so a sender may
    /// keep more in flight. Senders that do not know it ignore it.
    pub const STALE_OK: u8 = 0x80;
}

/// ZSINIT ZF0 flag: the transmitter expects control characters escaped.
pub const TESCCTL: u8 = 0x40;

/// ZFILE ZF0: conversion options.
pub mod zconv {
    /// Binary transfer.
    pub const ZCBIN: u8 = 1;
    /// Convert newlines (text).
    pub const ZCNL: u8 = 2;
    /// Resume an interrupted transfer.
    pub const ZCRESUM: u8 = 3;
}

/// ZFILE ZF1: management options.
pub mod zmanag {
    /// Mask for the choices below.
    pub const MASK: u8 = 0x1f;
    /// Transfer if source newer or longer.
    pub const ZMNEWL: u8 = 1;
    /// Transfer if different CRC or length.
    pub const ZMCRC: u8 = 2;
    /// Append to an existing file.
    pub const ZMAPND: u8 = 3;
    /// Replace an existing file.
    pub const ZMCLOB: u8 = 4;
    /// Transfer if source newer.
    pub const ZMNEW: u8 = 5;
    /// Transfer if dates or lengths differ.
    pub const ZMDIFF: u8 = 6;
    /// Protect the destination file.
    pub const ZMPROT: u8 = 7;
    /// Change the file name if the destination exists.
    pub const ZMCHNG: u8 = 8;
    /// Skip the file if not present at the receiver.
    pub const ZMSKNOLOC: u8 = 0x80;
}

/// The largest file ZMODEM can describe: positions are 32-bit.
pub const MAX_FILE_SIZE: u64 = u32::MAX as u64;

/// The largest data subpacket lrzsz `rz` accepts (its `MAX_BLOCK`).
pub const LRZSZ_MAX_BLOCK: usize = 8192;
