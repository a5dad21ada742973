//! The BEP 10 extension handshake (extended message id 0).

use std::collections::BTreeMap;

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
}

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
            ..Default::default()
        };
        h.m.insert("ut_metadata".into(), 2);
        h.m.insert("ut_pex".into(), 0);
        let bytes = h.encode();
        assert!(bytes.starts_with(b"d1:md11:ut_metadatai2e6:ut_pexi0ee"));
        assert_eq!(ExtHandshake::decode(&bytes).unwrap(), h);
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
            b"li1ee",
            b"d1:pi1e",
        ] {
            let e = ExtHandshake::decode(bad).unwrap_err();
            assert!(matches!(e, WireError::ExtHandshake(_)), "{e}");
        }
    }
}
