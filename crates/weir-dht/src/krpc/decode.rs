//! The KRPC decoder.

use weir_bencode::{Dict, Limits, Value};

use super::{
    Body, DecodeError, DecodeErrorKind as K, ErrorBody, MAX_ERROR_MESSAGE, MAX_METHOD_LEN,
    MAX_NODES, MAX_PACKET, MAX_TOKEN_LEN, MAX_TRANSACTION_LEN, MAX_VALUES, MAX_VERSION_LEN,
    Message, Query, Response, Want,
};
use crate::compact::{NODE_V4_LEN, NODE_V6_LEN, read_addr, read_nodes};
use crate::id::Id;

/// Bencode limits for KRPC: the datagram bound, and nesting deep enough for
/// any extension's values (BEP 44 items are arbitrary bencode).
const LIMITS: Limits = Limits {
    max_depth: 16,
    max_input: MAX_PACKET,
};

/// Decodes one KRPC datagram. Any input gives a message or a typed error;
/// none panics. This is the entry point for fuzzing the codec.
pub fn decode(data: &[u8]) -> Result<Message, DecodeError> {
    let fail = |kind| DecodeError {
        kind,
        transaction: None,
        query: false,
    };
    if data.len() > MAX_PACKET {
        return Err(fail(K::TooLarge {
            len: data.len(),
            max: MAX_PACKET,
        }));
    }
    let value = weir_bencode::decode_with(data, &LIMITS).map_err(|e| fail(K::Bencode(e)))?;
    let top = value.as_dict().ok_or_else(|| fail(K::NotADict))?;
    let transaction = match top.get(b"t") {
        None => return Err(fail(K::Missing("t"))),
        Some(v) => {
            let t = v
                .as_bytes()
                .ok_or_else(|| fail(wrong("t", "byte string")))?;
            if t.len() > MAX_TRANSACTION_LEN {
                return Err(fail(K::BadLength {
                    key: "t",
                    len: t.len(),
                }));
            }
            t.to_vec()
        }
    };
    let y = top.get(b"y").and_then(Value::as_bytes);
    let query = y == Some(b"q".as_slice());
    let with_context = |kind| DecodeError {
        kind,
        transaction: Some(transaction.clone()),
        query,
    };
    let body = match y {
        None => Err(K::Missing("y")),
        Some(b"q") => decode_query(top).map(Body::Query),
        Some(b"r") => decode_response(top).map(Body::Response),
        Some(b"e") => decode_error(top).map(Body::Error),
        Some(_) => Err(K::UnknownType),
    }
    .map_err(with_context)?;
    let version = top
        .get(b"v")
        .and_then(Value::as_bytes)
        .filter(|v| v.len() <= MAX_VERSION_LEN)
        .map(<[u8]>::to_vec);
    let read_only = top.get(b"ro").and_then(Value::as_int) == Some(1);
    let ip = top.get(b"ip").and_then(Value::as_bytes).and_then(read_addr);
    Ok(Message {
        transaction,
        version,
        read_only,
        ip,
        body,
    })
}

fn wrong(key: &'static str, expected: &'static str) -> K {
    K::WrongType { key, expected }
}

fn sub_dict<'a, 'b>(d: &'b Dict<'a>, key: &'static str) -> Result<&'b Dict<'a>, K> {
    d.get(key.as_bytes())
        .ok_or(K::Missing(key))?
        .as_dict()
        .ok_or_else(|| wrong(key, "dictionary"))
}

fn bytes<'a>(d: &Dict<'a>, key: &'static str) -> Result<Option<&'a [u8]>, K> {
    match d.get(key.as_bytes()) {
        None => Ok(None),
        Some(v) => v
            .as_bytes()
            .map(Some)
            .ok_or_else(|| wrong(key, "byte string")),
    }
}

fn id(d: &Dict<'_>, key: &'static str) -> Result<Id, K> {
    let b = bytes(d, key)?.ok_or(K::Missing(key))?;
    Id::from_slice(b).ok_or(K::BadLength { key, len: b.len() })
}

fn int(d: &Dict<'_>, key: &'static str) -> Result<Option<i64>, K> {
    match d.get(key.as_bytes()) {
        None => Ok(None),
        Some(v) => v.as_int().map(Some).ok_or_else(|| wrong(key, "integer")),
    }
}

fn want(a: &Dict<'_>) -> Result<Want, K> {
    let mut w = Want::default();
    if let Some(v) = a.get(b"want") {
        let items = v.as_list().ok_or_else(|| wrong("want", "list"))?;
        for item in items {
            match item.as_bytes() {
                Some(b"n4") => w.v4 = true,
                Some(b"n6") => w.v6 = true,
                // Unknown families are ignored, like unknown keys.
                Some(_) => {}
                None => return Err(wrong("want", "list of byte strings")),
            }
        }
    }
    Ok(w)
}

fn decode_query(top: &Dict<'_>) -> Result<Query, K> {
    let method = bytes(top, "q")?.ok_or(K::Missing("q"))?;
    if method.len() > MAX_METHOD_LEN {
        return Err(K::BadLength {
            key: "q",
            len: method.len(),
        });
    }
    let a = sub_dict(top, "a")?;
    Ok(match method {
        b"ping" => Query::Ping { id: id(a, "id")? },
        b"find_node" => Query::FindNode {
            id: id(a, "id")?,
            target: id(a, "target")?,
            want: want(a)?,
        },
        b"get_peers" => Query::GetPeers {
            id: id(a, "id")?,
            info_hash: id(a, "info_hash")?,
            want: want(a)?,
        },
        b"announce_peer" => {
            let implied_port = int(a, "implied_port")?.is_some_and(|v| v != 0);
            let port = match int(a, "port")? {
                Some(p) if (1..=65535).contains(&p) => p as u16,
                // The port is not used when it is implied; some clients send 0.
                Some(p) if implied_port && (0..=65535).contains(&p) => p as u16,
                None if implied_port => 0,
                Some(p) => return Err(K::BadPort(p)),
                None => return Err(K::Missing("port")),
            };
            let token = bytes(a, "token")?.ok_or(K::Missing("token"))?;
            if token.len() > MAX_TOKEN_LEN {
                return Err(K::BadLength {
                    key: "token",
                    len: token.len(),
                });
            }
            Query::AnnouncePeer {
                id: id(a, "id")?,
                info_hash: id(a, "info_hash")?,
                port,
                implied_port,
                token: token.to_vec(),
            }
        }
        other => Query::Other {
            id: id(a, "id").ok(),
            method: other.to_vec(),
        },
    })
}

fn decode_response(top: &Dict<'_>) -> Result<Response, K> {
    let r = sub_dict(top, "r")?;
    let mut out = Response {
        id: id(r, "id")?,
        ..Response::default()
    };
    if let Some(b) = bytes(r, "nodes")? {
        let (nodes, more) = read_nodes(b, NODE_V4_LEN, MAX_NODES).ok_or(K::BadLength {
            key: "nodes",
            len: b.len(),
        })?;
        out.nodes = nodes;
        out.truncated |= more;
    }
    if let Some(b) = bytes(r, "nodes6")? {
        let (nodes, more) = read_nodes(b, NODE_V6_LEN, MAX_NODES).ok_or(K::BadLength {
            key: "nodes6",
            len: b.len(),
        })?;
        out.nodes6 = nodes;
        out.truncated |= more;
    }
    if let Some(v) = r.get(b"values") {
        let items = v.as_list().ok_or_else(|| wrong("values", "list"))?;
        out.truncated |= items.len() > MAX_VALUES;
        out.values.reserve(items.len().min(MAX_VALUES));
        for item in items.iter().take(MAX_VALUES) {
            let b = item
                .as_bytes()
                .ok_or_else(|| wrong("values", "list of byte strings"))?;
            let addr = read_addr(b).ok_or(K::BadLength {
                key: "values",
                len: b.len(),
            })?;
            out.values.push(addr);
        }
    }
    if let Some(t) = bytes(r, "token")? {
        if t.len() > MAX_TOKEN_LEN {
            return Err(K::BadLength {
                key: "token",
                len: t.len(),
            });
        }
        out.token = Some(t.to_vec());
    }
    Ok(out)
}

fn decode_error(top: &Dict<'_>) -> Result<ErrorBody, K> {
    let e = top
        .get(b"e")
        .ok_or(K::Missing("e"))?
        .as_list()
        .ok_or_else(|| wrong("e", "list"))?;
    let code = e
        .first()
        .and_then(Value::as_int)
        .ok_or_else(|| wrong("e", "list starting with an integer"))?;
    let text = e.get(1).and_then(Value::as_bytes).unwrap_or_default();
    // Cut the decoded text, not the bytes: each invalid byte becomes a
    // 3-byte U+FFFD and a cut inside a character adds one, so cutting the
    // bytes first could keep up to 3x the bound (and the message would not
    // survive encode/decode unchanged).
    let text = &text[..text.len().min(MAX_ERROR_MESSAGE)];
    let mut message = String::from_utf8_lossy(text).into_owned();
    let mut end = message.len().min(MAX_ERROR_MESSAGE);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    Ok(ErrorBody { code, message })
}
