//! `OP_HELLO` / `OP_HELLOANSWER` and `OP_EMULEINFO`: who a peer is and
//! what it supports.
//!
//! Layout (`BaseClient.cpp:470-720`, `SendHelloTypePacket` 1023-1170):
//! `[16 u8 (OP_HELLO only)]<user hash 16><client id u32><port u16>
//! <tag count u32><tags><server ip u32><server port u16>`. Every tag is
//! optional to aMule; `CT_EMULE_VERSION` marks an eMule-compatible client
//! (then no `OP_EMULEINFO` exchange follows), and the two misc-option words
//! announce the features used later (multipacket, large files, AICH,
//! extended requests, compression, SecIdent).

use std::net::Ipv4Addr;

use bytes::{BufMut, Bytes};

use crate::Md4Hash;
use crate::tag::{self, Tag, TagValue};
use crate::wire::{Reader, WireError, invalid};

/// Hello tag names (`ClientTags.h`).
pub mod ct {
    /// User nick (string).
    pub const NAME: u8 = 0x01;
    /// TCP port (u32).
    pub const PORT: u8 = 0x0F;
    /// eDonkey version (u32, 0x3C).
    pub const VERSION: u8 = 0x11;
    /// `(kad port << 16) | udp port`.
    pub const EMULE_UDPPORTS: u8 = 0xF9;
    /// Misc options word 1 ([`MiscOptions1`](super::MiscOptions1)).
    pub const EMULE_MISCOPTIONS1: u8 = 0xFA;
    /// `(compatible client << 24) | (major << 17) | (minor << 10) | (update << 7)`.
    pub const EMULE_VERSION: u8 = 0xFB;
    /// Buddy IP (firewalled Kad clients).
    pub const EMULE_BUDDYIP: u8 = 0xFC;
    /// Buddy port.
    pub const EMULE_BUDDYUDP: u8 = 0xFD;
    /// Misc options word 2 ([`MiscOptions2`](super::MiscOptions2)).
    pub const EMULE_MISCOPTIONS2: u8 = 0xFE;
    /// aMule compat options (bit 0: OS info, bit 1: value-based tags).
    pub const EMULECOMPAT_OPTIONS: u8 = 0xEF;
    /// Mod name (string).
    pub const MOD_VERSION: u8 = 0x55;
}

/// `EDONKEYVERSION`, sent in `CT_VERSION`.
pub const EDONKEY_VERSION: u32 = 0x3C;

/// The "compatible client" id weir announces in `CT_EMULE_VERSION`
/// (unassigned in aMule's `ClientSoftware.h`; aMule shows it as
/// "Unknown(0x57)").
pub const WEIR_COMPAT_CLIENT: u8 = 0x57;

/// Misc options word 1 (`CT_EMULE_MISCOPTIONS1`, `BaseClient.cpp:540-560`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MiscOptions1 {
    /// AICH version (3 bits; 1 = supported).
    pub aich: u8,
    /// Strings are UTF-8.
    pub unicode: bool,
    /// UDP protocol version.
    pub udp_ver: u8,
    /// Data compression version (1 = accepts `OP_COMPRESSEDPART`).
    pub data_comp: u8,
    /// Secure identification (bit 0: v1, bit 1: v2).
    pub sec_ident: u8,
    /// Source exchange version.
    pub source_exchange: u8,
    /// Extended requests version (part status after file requests).
    pub ext_requests: u8,
    /// Comments version.
    pub comments: u8,
    /// PeerCache.
    pub peer_cache: bool,
    /// Does not allow viewing shared files.
    pub no_view_shared: bool,
    /// Accepts `OP_MULTIPACKET`.
    pub multipacket: bool,
    /// Preview.
    pub preview: bool,
}

impl MiscOptions1 {
    /// The packed word.
    pub fn to_u32(&self) -> u32 {
        (self.aich as u32 & 7) << 29
            | (self.unicode as u32) << 28
            | (self.udp_ver as u32 & 15) << 24
            | (self.data_comp as u32 & 15) << 20
            | (self.sec_ident as u32 & 15) << 16
            | (self.source_exchange as u32 & 15) << 12
            | (self.ext_requests as u32 & 15) << 8
            | (self.comments as u32 & 15) << 4
            | (self.peer_cache as u32) << 3
            | (self.no_view_shared as u32) << 2
            | (self.multipacket as u32) << 1
            | (self.preview as u32)
    }

    /// Unpacks the word.
    pub fn from_u32(f: u32) -> Self {
        MiscOptions1 {
            aich: (f >> 29 & 7) as u8,
            unicode: f >> 28 & 1 != 0,
            udp_ver: (f >> 24 & 15) as u8,
            data_comp: (f >> 20 & 15) as u8,
            sec_ident: (f >> 16 & 15) as u8,
            source_exchange: (f >> 12 & 15) as u8,
            ext_requests: (f >> 8 & 15) as u8,
            comments: (f >> 4 & 15) as u8,
            peer_cache: f >> 3 & 1 != 0,
            no_view_shared: f >> 2 & 1 != 0,
            multipacket: f >> 1 & 1 != 0,
            preview: f & 1 != 0,
        }
    }
}

/// Misc options word 2 (`CT_EMULE_MISCOPTIONS2`, `BaseClient.cpp:582-605`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MiscOptions2 {
    /// Direct UDP callback.
    pub direct_udp_callback: bool,
    /// Chat captchas.
    pub captcha: bool,
    /// Source exchange 2.
    pub source_ex2: bool,
    /// Requires protocol obfuscation.
    pub requires_crypt: bool,
    /// Requests protocol obfuscation.
    pub requests_crypt: bool,
    /// Supports protocol obfuscation.
    pub supports_crypt: bool,
    /// `OP_MULTIPACKET_EXT` (hash + size).
    pub ext_multipacket: bool,
    /// Files above 4 GB (64-bit offsets).
    pub large_files: bool,
    /// Kad version (4 bits).
    pub kad_version: u8,
}

impl MiscOptions2 {
    /// The packed word.
    pub fn to_u32(&self) -> u32 {
        (self.direct_udp_callback as u32) << 12
            | (self.captcha as u32) << 11
            | (self.source_ex2 as u32) << 10
            | (self.requires_crypt as u32) << 9
            | (self.requests_crypt as u32) << 8
            | (self.supports_crypt as u32) << 7
            | (self.ext_multipacket as u32) << 5
            | (self.large_files as u32) << 4
            | (self.kad_version as u32 & 15)
    }

    /// Unpacks the word.
    pub fn from_u32(f: u32) -> Self {
        MiscOptions2 {
            direct_udp_callback: f >> 12 & 1 != 0,
            captcha: f >> 11 & 1 != 0,
            source_ex2: f >> 10 & 1 != 0,
            requires_crypt: f >> 9 & 1 != 0,
            requests_crypt: f >> 8 & 1 != 0,
            supports_crypt: f >> 7 & 1 != 0,
            ext_multipacket: f >> 5 & 1 != 0,
            large_files: f >> 4 & 1 != 0,
            kad_version: (f & 15) as u8,
        }
    }
}

/// The body of `OP_HELLO` / `OP_HELLOANSWER`.
#[derive(Clone, Debug, PartialEq)]
pub struct Hello {
    /// The peer's user hash (stable per installation; aMule bans an IP
    /// whose user hash changes).
    pub user_hash: Md4Hash,
    /// Its ed2k id: its IPv4 address (as a little-endian u32 of the
    /// octets) when high id, a server-assigned number below 2^24 when low.
    pub client_id: u32,
    /// Its TCP listen port.
    pub port: u16,
    /// Tags ([`ct`]).
    pub tags: Vec<Tag>,
    /// The server it is connected to (0.0.0.0 if none).
    pub server_ip: Ipv4Addr,
    /// That server's port.
    pub server_port: u16,
    /// The extra u32 eDonkeyHybrid ("hybrid") and MLDonkey ("KDLM") send.
    pub trailer: Option<u32>,
}

/// An ed2k id as an IPv4 address (high ids only).
pub fn id_to_ip(id: u32) -> Ipv4Addr {
    Ipv4Addr::from(id.to_le_bytes())
}

/// The high ed2k id of an IPv4 address.
pub fn ip_to_id(ip: Ipv4Addr) -> u32 {
    u32::from_le_bytes(ip.octets())
}

/// Whether an ed2k id is a low id (server-assigned, not an address).
pub fn is_low_id(id: u32) -> bool {
    id < 0x0100_0000
}

impl Hello {
    /// Reads the body (without the `OP_HELLO` hash-size byte).
    pub fn decode_body(r: &mut Reader) -> Result<Self, WireError> {
        let user_hash = r.md4("user hash")?;
        let client_id = r.u32("client id")?;
        let port = r.u16("port")?;
        let tags = tag::decode_list(r)?;
        let server_ip = Ipv4Addr::from(r.u32("server ip")?.to_le_bytes());
        let server_port = r.u16("server port")?;
        let trailer = match r.remaining() {
            0 => None,
            4 => Some(r.u32("hello trailer")?),
            n => return Err(WireError::Trailing(n)),
        };
        Ok(Hello {
            user_hash,
            client_id,
            port,
            tags,
            server_ip,
            server_port,
            trailer,
        })
    }

    /// Reads an `OP_HELLO` payload (hash size byte first; aMule accepts
    /// only 16).
    pub fn decode_hello(r: &mut Reader) -> Result<Self, WireError> {
        let n = r.u8("user hash size")?;
        if n != 16 {
            return Err(invalid("user hash size", format!("{n}, only 16 exists")));
        }
        Self::decode_body(r)
    }

    /// Writes the body (old-style tags, as aMule writes them).
    pub fn encode_body(&self, out: &mut impl BufMut) {
        out.put_slice(&self.user_hash.0);
        out.put_u32_le(self.client_id);
        out.put_u16_le(self.port);
        tag::encode_list(&self.tags, false, out);
        out.put_slice(&self.server_ip.octets());
        out.put_u16_le(self.server_port);
        if let Some(t) = self.trailer {
            out.put_u32_le(t);
        }
    }

    /// What the tags say.
    pub fn info(&self) -> HelloInfo {
        HelloInfo::from_tags(&self.tags, self.port)
    }
}

/// The typed view of a hello's tags.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HelloInfo {
    /// User nick.
    pub name: Option<String>,
    /// `CT_VERSION`.
    pub version: Option<u32>,
    /// TCP port (the `CT_PORT` tag overrides the fixed field).
    pub port: u16,
    /// UDP port.
    pub udp_port: u16,
    /// Kad UDP port.
    pub kad_port: u16,
    /// Raw `CT_EMULE_VERSION`; its presence makes an eMule-compatible peer.
    pub emule_version: Option<u32>,
    /// Misc options 1 (all zero when absent).
    pub misc1: MiscOptions1,
    /// Misc options 2 (all zero when absent).
    pub misc2: MiscOptions2,
    /// aMule compat options.
    pub compat_options: u32,
    /// Mod name.
    pub mod_version: Option<String>,
}

impl HelloInfo {
    /// Collects the known tags; unknown ones are ignored (as aMule does).
    pub fn from_tags(tags: &[Tag], port: u16) -> Self {
        let mut i = HelloInfo {
            port,
            ..Default::default()
        };
        for t in tags {
            let int = t.as_int().map(|v| v as u32);
            match (t.id(), int) {
                (Some(ct::NAME), _) => {
                    i.name = t.as_str().map(|s| crate::wire::decode_string(s));
                }
                (Some(ct::VERSION), Some(v)) => i.version = Some(v),
                (Some(ct::PORT), Some(v)) => i.port = v as u16,
                (Some(ct::EMULE_UDPPORTS), Some(v)) => {
                    i.kad_port = (v >> 16) as u16;
                    i.udp_port = v as u16;
                }
                (Some(ct::EMULE_MISCOPTIONS1), Some(v)) => i.misc1 = MiscOptions1::from_u32(v),
                (Some(ct::EMULE_MISCOPTIONS2), Some(v)) => i.misc2 = MiscOptions2::from_u32(v),
                (Some(ct::EMULE_VERSION), Some(v)) => i.emule_version = Some(v),
                (Some(ct::EMULECOMPAT_OPTIONS), Some(v)) => i.compat_options = v,
                (Some(ct::MOD_VERSION), _) => {
                    i.mod_version = match &t.value {
                        TagValue::Str(s) => Some(crate::wire::decode_string(s)),
                        _ => t.as_int().map(|v| format!("ModID={v}")),
                    }
                }
                _ => {}
            }
        }
        i
    }

    /// Whether the peer is eMule-compatible (sent `CT_EMULE_VERSION`).
    pub fn is_emule(&self) -> bool {
        self.emule_version.is_some()
    }

    /// The compatible-client id from `CT_EMULE_VERSION`.
    pub fn compat_client(&self) -> Option<u8> {
        self.emule_version.map(|v| (v >> 24) as u8)
    }
}

/// What weir announces about itself in a hello.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnHello {
    /// Nick shown by the peer.
    pub name: String,
    /// UDP port (0: none).
    pub udp_port: u16,
    /// Version (major, minor, update) for `CT_EMULE_VERSION`.
    pub version: (u8, u8, u8),
    /// Misc options 1.
    pub misc1: MiscOptions1,
    /// Misc options 2.
    pub misc2: MiscOptions2,
}

impl OwnHello {
    /// weir's defaults: eMule-compatible, AICH, unicode, multipacket and
    /// its ext form, large files, extended requests v2 (part status with
    /// file requests, like aMule), no SecIdent (no RSA key: aMule then
    /// never starts the SecIdent exchange, see PROTOCOL-NOTES.md), no
    /// obfuscation, and `data_comp` as given (whether the peer may send us
    /// zlib-compressed parts).
    pub fn weir(name: impl Into<String>, udp_port: u16, accept_compressed: bool) -> Self {
        OwnHello {
            name: name.into(),
            udp_port,
            version: (0, 1, 0),
            misc1: MiscOptions1 {
                aich: 1,
                unicode: true,
                udp_ver: 4,
                data_comp: accept_compressed as u8,
                sec_ident: 0,
                source_exchange: 3,
                ext_requests: 2,
                comments: 1,
                peer_cache: false,
                no_view_shared: true,
                multipacket: true,
                preview: false,
            },
            misc2: MiscOptions2 {
                ext_multipacket: true,
                large_files: true,
                ..Default::default()
            },
        }
    }

    /// The hello tags, in aMule's order.
    pub fn tags(&self) -> Vec<Tag> {
        let (mj, mn, up) = self.version;
        let ver = (WEIR_COMPAT_CLIENT as u32) << 24
            | (mj as u32) << 17
            | (mn as u32 & 0x7f) << 10
            | (up as u32 & 7) << 7;
        vec![
            Tag::string(ct::NAME, Bytes::from(self.name.clone().into_bytes())),
            Tag::u32(ct::VERSION, EDONKEY_VERSION),
            Tag::u32(ct::EMULE_UDPPORTS, self.udp_port as u32),
            Tag::u32(ct::EMULE_VERSION, ver),
            Tag::u32(ct::EMULE_MISCOPTIONS1, self.misc1.to_u32()),
            Tag::u32(ct::EMULE_MISCOPTIONS2, self.misc2.to_u32()),
        ]
    }

    /// A complete hello body.
    pub fn hello(&self, user_hash: Md4Hash, client_id: u32, port: u16) -> Hello {
        Hello {
            user_hash,
            client_id,
            port,
            tags: self.tags(),
            server_ip: Ipv4Addr::UNSPECIFIED,
            server_port: 0,
            trailer: None,
        }
    }
}

/// `OP_EMULEINFO` / `OP_EMULEINFOANSWER`: the pre-0.42 way to announce
/// eMule features (`BaseClient.cpp:749-1000`).
#[derive(Clone, Debug, PartialEq)]
pub struct EmuleInfo {
    /// eMule version byte.
    pub version: u8,
    /// Protocol (1; 0xFF marks aMule's OS-info variant).
    pub protocol: u8,
    /// Tags (`ET_*`).
    pub tags: Vec<Tag>,
}

impl EmuleInfo {
    /// Reads the body.
    pub fn decode(r: &mut Reader) -> Result<Self, WireError> {
        Ok(EmuleInfo {
            version: r.u8("emule version")?,
            protocol: r.u8("emule protocol")?,
            tags: tag::decode_list(r)?,
        })
    }

    /// Writes the body.
    pub fn encode(&self, out: &mut impl BufMut) {
        out.put_u8(self.version);
        out.put_u8(self.protocol);
        tag::encode_list(&self.tags, false, out);
    }
}

/// Makes a user hash in eMule's style (bytes 5 and 14 are 14 and 111, which
/// aMule reads as an eMule-compatible client) from 16 random bytes.
pub fn user_hash_from_random(mut b: [u8; 16]) -> Md4Hash {
    b[5] = 14;
    b[14] = 111;
    Md4Hash(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn amule_misc_words() {
        // aMule 2.3.3's hello: AICH 1, unicode, UDP 4, comp 1, SecIdent 3,
        // SX 3, ext req 2, comments 1, multipacket.
        let m = MiscOptions1 {
            aich: 1,
            unicode: true,
            udp_ver: 4,
            data_comp: 1,
            sec_ident: 3,
            source_exchange: 3,
            ext_requests: 2,
            comments: 1,
            multipacket: true,
            ..Default::default()
        };
        assert_eq!(m.to_u32(), 0x3413_3212);
        assert_eq!(MiscOptions1::from_u32(0x3413_3212), m);
        let m2 = MiscOptions2::from_u32(0x0430);
        assert!(m2.source_ex2 && m2.ext_multipacket && m2.large_files);
        assert_eq!(m2.to_u32(), 0x0430);
    }

    #[test]
    fn ids() {
        let ip: Ipv4Addr = "10.1.2.3".parse().unwrap();
        let id = ip_to_id(ip);
        assert_eq!(id.to_le_bytes(), [10, 1, 2, 3]);
        assert_eq!(id_to_ip(id), ip);
        assert!(!is_low_id(id));
        assert!(is_low_id(12345));
        let h = user_hash_from_random([0xAA; 16]);
        assert_eq!((h.0[5], h.0[14]), (14, 111));
    }

    #[test]
    fn own_hello_reads_back() {
        let own = OwnHello::weir("weir", 4672, false);
        let hello = own.hello(
            user_hash_from_random([1; 16]),
            ip_to_id([10, 0, 0, 1].into()),
            4662,
        );
        let mut v = Vec::new();
        hello.encode_body(&mut v);
        let back = Hello::decode_body(&mut Reader::new(v.into())).unwrap();
        assert_eq!(back, hello);
        let info = back.info();
        assert_eq!(info.name.as_deref(), Some("weir"));
        assert!(info.is_emule());
        assert_eq!(info.compat_client(), Some(WEIR_COMPAT_CLIENT));
        assert_eq!(info.udp_port, 4672);
        assert_eq!(info.misc1, own.misc1);
        assert_eq!(info.misc2, own.misc2);
        assert_eq!(info.version, Some(EDONKEY_VERSION));
    }

    #[test]
    fn bad_hellos() {
        assert!(matches!(
            Hello::decode_hello(&mut Reader::new(Bytes::from_static(&[20]))),
            Err(WireError::Invalid {
                field: "user hash size",
                ..
            })
        ));
        let own = OwnHello::weir("w", 0, true);
        let mut v = vec![16u8];
        own.hello(Md4Hash::default(), 0, 1).encode_body(&mut v);
        v.push(1); // 1 stray byte: neither nothing nor a 4-byte trailer
        assert_eq!(
            Hello::decode_hello(&mut Reader::new(v.into())),
            Err(WireError::Trailing(1))
        );
    }

    proptest! {
        #[test]
        fn misc_words_round_trip(w1 in any::<u32>(), w2 in 0u32..0x2000) {
            prop_assert_eq!(MiscOptions1::from_u32(w1).to_u32(), w1);
            let w2 = w2 & !(1 << 6); // bit 6 is reserved
            prop_assert_eq!(MiscOptions2::from_u32(w2).to_u32(), w2);
        }
    }
}
