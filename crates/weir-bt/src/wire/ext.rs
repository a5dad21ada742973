//! The BEP 10 extension handshake (extended message id 0).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use weir_bencode::{OwnedValue, Value};

use super::WireError;

/// The extension handshake dictionary. Unknown keys are ignored; a known key
/// with the wrong type or an out-of-range value is an error.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtHandshake {
    /// Extension name -> the message id the sender wants to receive it on
    /// (0 = the sender disables that extension).
    pub m: BTreeMap<String, u8>,
    /// How many outstanding requests the sender accepts.
    pub reqq: Option<u32>,
    /// Client name and version.
    pub v: Option<String>,
    /// The sender's listen port.
    pub p: Option<u16>,
    /// BEP 9: size of the info dictionary in bytes.
    pub metadata_size: Option<u64>,
    /// The receiver's address as the sender sees it (4 or 16 bytes).
    pub yourip: Option<Vec<u8>>,
    /// `e`: the sender prefers encrypted connections (MSE), as libtorrent
    /// and Transmission send it; PEX carries the same as a flag.
    pub e: Option<bool>,
    /// BEP 21 `upload_only`: the sender is a seed (or only uploads).
    pub upload_only: Option<bool>,
    /// The sender's own IPv4 address (`ipv4`, 4 bytes).
    pub ipv4: Option<Ipv4Addr>,
    /// The sender's own IPv6 address (`ipv6`, 16 bytes).
    pub ipv6: Option<Ipv6Addr>,
}

/// The `m` name of BEP 9 metadata exchange.
pub const UT_METADATA: &str = "ut_metadata";
/// The `m` name of BEP 11 peer exchange.
pub const UT_PEX: &str = "ut_pex";
/// Most entries accepted in `m` (real clients send fewer than 16).
pub const MAX_M_ENTRIES: usize = 128;

fn bad(what: String) -> WireError {
    WireError::ExtHandshake(what)
}

fn int(v: &Value<'_>, key: &str) -> Result<i64, WireError> {
    v.as_int()
        .ok_or_else(|| bad(format!("`{key}` is a {}, expected integer", v.type_name())))
}

fn ranged<T: TryFrom<i64>>(v: &Value<'_>, key: &str) -> Result<T, WireError> {
    let n = int(v, key)?;
    T::try_from(n).map_err(|_| bad(format!("`{key}` value {n} out of range")))
}

impl ExtHandshake {
    /// The id the sender wants extension `name` sent on; `None` when absent
    /// or 0 (disabled).
    pub fn ext_id(&self, name: &str) -> Option<u8> {
        self.m.get(name).copied().filter(|&id| id != 0)
    }

    /// [`ExtHandshake::yourip`] as an address (`None` unless 4 or 16 bytes).
    pub fn yourip_addr(&self) -> Option<IpAddr> {
        let b = self.yourip.as_deref()?;
        match b.len() {
            4 => Some(IpAddr::from(<[u8; 4]>::try_from(b).ok()?)),
            16 => Some(IpAddr::from(<[u8; 16]>::try_from(b).ok()?)),
            _ => None,
        }
    }

    /// The bencoded dictionary (the payload after the extended id byte 0).
    pub fn encode(&self) -> Vec<u8> {
        let mut m = OwnedValue::dict();
        for (name, id) in &self.m {
            m.insert(name, OwnedValue::Int(i64::from(*id)));
        }
        let mut d = OwnedValue::dict();
        d.insert("m", m);
        if let Some(r) = self.reqq {
            d.insert("reqq", OwnedValue::Int(i64::from(r)));
        }
        if let Some(v) = &self.v {
            d.insert("v", OwnedValue::bytes(v));
        }
        if let Some(p) = self.p {
            d.insert("p", OwnedValue::Int(i64::from(p)));
        }
        if let Some(s) = self.metadata_size {
            d.insert("metadata_size", OwnedValue::Int(s as i64));
        }
        if let Some(ip) = &self.yourip {
            d.insert("yourip", OwnedValue::bytes(ip));
        }
        if let Some(e) = self.e {
            d.insert("e", OwnedValue::Int(i64::from(e)));
        }
        if let Some(u) = self.upload_only {
            d.insert("upload_only", OwnedValue::Int(i64::from(u)));
        }
        if let Some(ip) = self.ipv4 {
            d.insert("ipv4", OwnedValue::bytes(ip.octets()));
        }
        if let Some(ip) = self.ipv6 {
            d.insert("ipv6", OwnedValue::bytes(ip.octets()));
        }
        d.to_vec()
    }

    /// Parses the handshake dictionary.
    pub fn decode(payload: &[u8]) -> Result<Self, WireError> {
        let v = weir_bencode::decode(payload).map_err(|e| bad(e.to_string()))?;
        let d = v.as_dict().ok_or_else(|| {
            bad(format!(
                "payload is a {}, expected dictionary",
                v.type_name()
            ))
        })?;
        let mut out = ExtHandshake::default();
        if let Some(m) = d.get(b"m") {
            let md = m
                .as_dict()
                .ok_or_else(|| bad(format!("`m` is a {}, expected dictionary", m.type_name())))?;
            if md.entries.len() > MAX_M_ENTRIES {
                return Err(bad(format!(
                    "`m` has {} entries, at most {MAX_M_ENTRIES} accepted",
                    md.entries.len()
                )));
            }
            for (k, v) in &md.entries {
                let name = String::from_utf8_lossy(k).into_owned();
                let id: u8 = ranged(v, &format!("m.{name}"))?;
                out.m.insert(name, id);
            }
        }
        if let Some(v) = d.get(b"reqq") {
            out.reqq = Some(ranged(v, "reqq")?);
        }
        if let Some(v) = d.get(b"v") {
            let b = v
                .as_bytes()
                .ok_or_else(|| bad(format!("`v` is a {}, expected string", v.type_name())))?;
            out.v = Some(String::from_utf8_lossy(b).into_owned());
        }
        if let Some(v) = d.get(b"p") {
            out.p = Some(ranged(v, "p")?);
        }
        if let Some(v) = d.get(b"metadata_size") {
            out.metadata_size = Some(ranged(v, "metadata_size")?);
        }
        if let Some(v) = d.get(b"yourip") {
            let b = v
                .as_bytes()
                .ok_or_else(|| bad(format!("`yourip` is a {}, expected string", v.type_name())))?;
            out.yourip = Some(b.to_vec());
        }
        // `e` and `upload_only`: any integer, non-zero meaning yes (clients
        // disagree on 1 versus other values); a wrong type is an error.
        if let Some(v) = d.get(b"e") {
            out.e = Some(int(v, "e")? != 0);
        }
        if let Some(v) = d.get(b"upload_only") {
            out.upload_only = Some(int(v, "upload_only")? != 0);
        }
        // `ipv4`/`ipv6` of the wrong length are ignored, not errors: they
        // are advisory and some clients send them in text form.
        if let Some(v) = d.get(b"ipv4") {
            out.ipv4 = v
                .as_bytes()
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(Ipv4Addr::from);
        }
        if let Some(v) = d.get(b"ipv6") {
            out.ipv6 = v
                .as_bytes()
                .and_then(|b| <[u8; 16]>::try_from(b).ok())
                .map(Ipv6Addr::from);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut h = ExtHandshake {
            reqq: Some(500),
            v: Some("weir 0.1".into()),
            p: Some(6881),
            metadata_size: Some(31_235),
            yourip: Some(vec![127, 0, 0, 1]),
            e: Some(true),
            upload_only: Some(false),
            ipv4: Some(Ipv4Addr::new(10, 0, 0, 1)),
            ipv6: Some(Ipv6Addr::LOCALHOST),
            m: BTreeMap::new(),
        };
        h.m.insert("ut_metadata".into(), 2);
        h.m.insert("ut_pex".into(), 0);
        let bytes = h.encode();
        assert!(bytes.starts_with(b"d1:ei1e4:ipv44:"), "{bytes:?}");
        assert_eq!(ExtHandshake::decode(&bytes).unwrap(), h);
        assert_eq!(h.ext_id(UT_METADATA), Some(2));
        assert_eq!(h.ext_id(UT_PEX), None, "0 disables");
        assert_eq!(h.ext_id("lt_donthave"), None);
        assert_eq!(h.yourip_addr(), Some(IpAddr::from([127, 0, 0, 1])));
    }

    #[test]
    fn libtorrent_style_handshake() {
        // As libtorrent 2.0 sends it (trimmed).
        let raw: &[u8] = b"d12:complete_agoi-1e1:ei0e4:ipv616:\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x011:md11:lt_donthavei7e10:share_modei8e11:upload_onlyi3e12:ut_holepunchi4e11:ut_metadatai2e6:ut_pexi1ee13:metadata_sizei31235e1:pi6881e4:reqqi500e11:upload_onlyi1e1:v18:libtorrent/2.0.8.06:yourip4:\x7f\0\0\x01e";
        let h = ExtHandshake::decode(raw).unwrap();
        assert_eq!(h.ext_id(UT_METADATA), Some(2));
        assert_eq!(h.ext_id(UT_PEX), Some(1));
        assert_eq!(h.metadata_size, Some(31_235));
        assert_eq!(h.e, Some(false));
        assert_eq!(h.upload_only, Some(true));
        assert_eq!(h.ipv6, Some(Ipv6Addr::LOCALHOST));
        assert_eq!(h.v.as_deref(), Some("libtorrent/2.0.8.0"));
    }

    #[test]
    fn too_many_m_entries_refused() {
        let mut h = ExtHandshake::default();
        for i in 0..=MAX_M_ENTRIES {
            h.m.insert(format!("x{i:04}"), 1);
        }
        let e = ExtHandshake::decode(&h.encode()).unwrap_err();
        assert!(e.to_string().contains("entries"), "{e}");
        h.m.pop_last();
        assert!(ExtHandshake::decode(&h.encode()).is_ok());
    }

    #[test]
    fn unknown_keys_ignored_wrong_types_refused() {
        let h = ExtHandshake::decode(b"d1:md11:ut_metadatai3ee4:zzzzi1ee").unwrap();
        assert_eq!(h.m["ut_metadata"], 3);
        for bad in [
            &b"d1:mi1ee"[..],
            b"d1:md1:xi256eee",
            b"d1:md1:xi-1eee",
            b"d4:reqq3:abce",
            b"d1:pi70000ee",
            b"d1:vi1ee",
            b"d13:metadata_sizei-5ee",
            b"d6:youripi1ee",
            b"d1:e1:1e",
            b"d11:upload_only0:e",
            b"li1ee",
            b"d1:pi1e",
        ] {
            let e = ExtHandshake::decode(bad).unwrap_err();
            assert!(matches!(e, WireError::ExtHandshake(_)), "{e}");
        }
    }
}
