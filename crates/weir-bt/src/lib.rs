//! Sans-IO BitTorrent v1 protocol core for weir.
//!
//! - [`metainfo`]: `.torrent` parsing and checking (info-hash, geometry,
//!   safe file names).
//! - [`magnet`]: magnet URIs (btih, btmh, ed2k, trackers, peers, BEP 53).
//! - [`wire`]: the peer wire codec (BEP 3, BEP 6 fast extension, BEP 10
//!   extension protocol), zero-copy over `bytes`.
//! - [`mse`]: MSE/PE, the encrypted handshake in front of the BitTorrent
//!   handshake (Diffie-Hellman, RC4), for initiators and responders.
//! - [`metadata`]: BEP 9 metadata exchange (fetching and serving the info
//!   dictionary for magnet links).
//! - [`pex`]: BEP 11 peer exchange (codec and a per-connection state with
//!   send and receive bounds).
//! - [`tracker`]: HTTP (BEP 3/7/23) and UDP (BEP 15) tracker codecs.
//! - [`create`]: building `.torrent` files.
//! - [`torrent`]: the torrent state machine and peer sessions.
//!
//! Nothing here performs I/O or reads a clock; `weir-runtime` drives it.
//!
//! Decoders that take any bytes and never panic (fuzz entry points):
//! [`wire::decode`], [`wire::Handshake::decode`],
//! [`wire::ExtHandshake::decode`], [`metainfo::Metainfo::from_bytes`],
//! [`magnet::Magnet::parse_bytes`], [`metadata::MetadataMsg::decode_slice`],
//! [`pex::PexMessage::decode`], and the MSE state machines fed arbitrary
//! input: [`mse::Responder::handle_input`] (with any
//! [`mse::SkeyLookup`]) and [`mse::Initiator::handle_input`].

pub mod create;
pub mod magnet;
pub mod metadata;
pub mod metainfo;
pub mod mse;
pub mod pex;
pub mod torrent;
pub mod tracker;
pub mod wire;
