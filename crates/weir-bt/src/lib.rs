//! Sans-IO BitTorrent v1 protocol core for weir.
//!
//! - [`metadata`]: BEP 9 metadata exchange (fetching and serving the info
//!   dictionary for magnet links).
//! - [`metainfo`]: `.torrent` parsing and checking (info-hash, geometry,
//!   safe file names).
//! - [`wire`]: the peer wire codec (BEP 3, BEP 6 fast extension, BEP 10
//!   extension protocol), zero-copy over `bytes`.
//! - [`tracker`]: HTTP (BEP 3/7/23) and UDP (BEP 15) tracker codecs.
//! - [`create`]: building `.torrent` files.
//! - [`magnet`]: magnet URIs (btih, btmh, ed2k, trackers, peers, BEP 53).
//! - [`torrent`]: the torrent state machine and peer sessions.
//! - [`pex`]: BEP 11 peer exchange (codec and a per-connection state with
//!   send and receive bounds).
//! - [`mse`]: MSE/PE, the encrypted handshake in front of the BitTorrent
//!   handshake (Diffie-Hellman, RC4), for initiators and responders.
//!
//! Nothing here performs I/O or reads a clock; `weir-runtime` drives it.

pub mod create;
pub mod magnet;
pub mod metadata;
pub mod metainfo;
pub mod mse;
pub mod pex;
pub mod torrent;
pub mod tracker;
pub mod wire;
