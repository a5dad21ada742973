//! The routing table as a blob the runtime keeps in its state directory,
//! so a restart reuses its id and its nodes instead of bootstrapping cold.
//!
//! Format: one bencoded dictionary,
//! `{ "id": <20 bytes>, "nodes": <26-byte compact IPv4 nodes>, "nodes6":
//! <38-byte compact IPv6 nodes>, "v": 1 }`. Nodes are listed best first
//! (good, then questionable); at most [`MAX_SAVED_NODES`] are read back.

use weir_bencode::{Limits, OwnedValue, Value};

use crate::compact::{NODE_V4_LEN, NODE_V6_LEN, NodeInfo, read_nodes, write_node};
use crate::id::Id;

/// Most nodes read from a saved table (160 buckets of 8, twice over).
pub const MAX_SAVED_NODES: usize = 2 * 160 * 8;
/// Largest blob accepted.
pub const MAX_SAVED_LEN: usize = 256 * 1024;
const FORMAT_VERSION: i64 = 1;

/// A routing table as saved: our id and the nodes worth trying first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SavedTable {
    /// The node id to reuse.
    pub id: Id,
    /// Known nodes, best first.
    pub nodes: Vec<NodeInfo>,
}

/// Why a saved table cannot be read (the runtime then starts cold, with a
/// fresh id, and bootstraps).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The blob is larger than [`MAX_SAVED_LEN`].
    #[error("saved DHT table of {0} bytes is too large")]
    TooLarge(usize),
    /// Not bencode.
    #[error("saved DHT table is not bencode: {0}")]
    Bencode(weir_bencode::Error),
    /// A field is missing or has the wrong shape.
    #[error("saved DHT table: bad or missing `{0}`")]
    Field(&'static str),
    /// Written by a later format version.
    #[error("saved DHT table has unknown format version {0}")]
    Version(i64),
}

impl SavedTable {
    /// The bencoded blob.
    pub fn encode(&self) -> Vec<u8> {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for n in &self.nodes {
            if n.addr.is_ipv4() {
                write_node(n, &mut v4);
            } else {
                write_node(n, &mut v6);
            }
        }
        let mut d = OwnedValue::dict();
        d.insert("id", OwnedValue::bytes(self.id.0))
            .insert("nodes", OwnedValue::Bytes(v4))
            .insert("nodes6", OwnedValue::Bytes(v6))
            .insert("v", OwnedValue::Int(FORMAT_VERSION));
        d.to_vec()
    }

    /// Reads a blob written by [`SavedTable::encode`].
    pub fn decode(blob: &[u8]) -> Result<SavedTable, LoadError> {
        if blob.len() > MAX_SAVED_LEN {
            return Err(LoadError::TooLarge(blob.len()));
        }
        let limits = Limits {
            max_depth: 4,
            max_input: MAX_SAVED_LEN,
        };
        let v = weir_bencode::decode_with(blob, &limits).map_err(LoadError::Bencode)?;
        let d = v.as_dict().ok_or(LoadError::Field("dictionary"))?;
        match d.get(b"v").and_then(Value::as_int) {
            Some(FORMAT_VERSION) => {}
            Some(other) => return Err(LoadError::Version(other)),
            None => return Err(LoadError::Field("v")),
        }
        let id = d
            .get(b"id")
            .and_then(Value::as_bytes)
            .and_then(Id::from_slice)
            .ok_or(LoadError::Field("id"))?;
        let mut nodes = Vec::new();
        for (key, entry) in [("nodes", NODE_V4_LEN), ("nodes6", NODE_V6_LEN)] {
            if let Some(b) = d.get(key.as_bytes()) {
                let b = b.as_bytes().ok_or(LoadError::Field(key))?;
                let room = MAX_SAVED_NODES - nodes.len();
                let (mut n, _) = read_nodes(b, entry, room).ok_or(LoadError::Field(key))?;
                nodes.append(&mut n);
            }
        }
        Ok(SavedTable { id, nodes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let t = SavedTable {
            id: Id([3; 20]),
            nodes: vec![
                NodeInfo {
                    id: Id([1; 20]),
                    addr: "1.2.3.4:5".parse().unwrap(),
                },
                NodeInfo {
                    id: Id([2; 20]),
                    addr: "[2001:db8::1]:6".parse().unwrap(),
                },
            ],
        };
        let blob = t.encode();
        assert_eq!(SavedTable::decode(&blob).unwrap(), t);
        assert!(matches!(
            SavedTable::decode(b"xx"),
            Err(LoadError::Bencode(_))
        ));
        assert_eq!(SavedTable::decode(b"d1:vi2ee"), Err(LoadError::Version(2)));
        assert_eq!(
            SavedTable::decode(b"d2:id3:abc1:vi1ee"),
            Err(LoadError::Field("id"))
        );
        let mut bad = b"d2:id20:aaaaaaaaaaaaaaaaaaaa5:nodes3:abc1:vi1ee".to_vec();
        assert_eq!(SavedTable::decode(&bad), Err(LoadError::Field("nodes")));
        bad.resize(MAX_SAVED_LEN + 1, b'x');
        assert_eq!(
            SavedTable::decode(&bad),
            Err(LoadError::TooLarge(MAX_SAVED_LEN + 1))
        );
    }

    #[test]
    fn reads_a_bounded_number_of_nodes() {
        let nodes = (0..MAX_SAVED_NODES as u32 + 500)
            .map(|i| NodeInfo {
                id: Id([(i % 256) as u8; 20]),
                addr: std::net::SocketAddr::new(std::net::Ipv4Addr::from(i + 1).into(), 1),
            })
            .collect();
        let blob = SavedTable {
            id: Id([0; 20]),
            nodes,
        }
        .encode();
        assert_eq!(
            SavedTable::decode(&blob).unwrap().nodes.len(),
            MAX_SAVED_NODES
        );
    }
}
