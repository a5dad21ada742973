//! The KRPC encoder: canonical bencode written directly, keys in sorted
//! order (the order of the `put` calls below is the byte order of the keys).

use std::net::SocketAddr;

use weir_bencode::{encode_bytes, encode_int};

use super::{Body, ErrorBody, Message, Query, Response, Want};
use crate::compact::{write_addr, write_node};

impl Message {
    /// Appends the canonical encoding of this message to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(b'd');
        match &self.body {
            Body::Query(q) => {
                key(b"a", out);
                query_args(q, out);
            }
            Body::Error(e) => {
                key(b"e", out);
                error_list(e, out);
            }
            Body::Response(_) => {}
        }
        if let Some(ip) = &self.ip {
            key(b"ip", out);
            addr_bytes(ip, out);
        }
        if let Body::Query(q) = &self.body {
            key(b"q", out);
            encode_bytes(q.method(), out);
        }
        if let Body::Response(r) = &self.body {
            key(b"r", out);
            response_dict(r, out);
        }
        if self.read_only {
            key(b"ro", out);
            encode_int(1, out);
        }
        key(b"t", out);
        encode_bytes(&self.transaction, out);
        if let Some(v) = &self.version {
            key(b"v", out);
            encode_bytes(v, out);
        }
        key(b"y", out);
        encode_bytes(
            match self.body {
                Body::Query(_) => b"q",
                Body::Response(_) => b"r",
                Body::Error(_) => b"e",
            },
            out,
        );
        out.push(b'e');
    }

    /// The canonical encoding of this message.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        self.encode(&mut out);
        out
    }
}

fn key(k: &[u8], out: &mut Vec<u8>) {
    encode_bytes(k, out);
}

fn addr_bytes(a: &SocketAddr, out: &mut Vec<u8>) {
    let mut b = Vec::with_capacity(18);
    write_addr(a, &mut b);
    encode_bytes(&b, out);
}

fn want_list(w: &Want, out: &mut Vec<u8>) {
    out.push(b'l');
    if w.v4 {
        encode_bytes(b"n4", out);
    }
    if w.v6 {
        encode_bytes(b"n6", out);
    }
    out.push(b'e');
}

fn query_args(q: &Query, out: &mut Vec<u8>) {
    out.push(b'd');
    match q {
        Query::Ping { id } => {
            key(b"id", out);
            encode_bytes(&id.0, out);
        }
        Query::FindNode { id, target, want } => {
            key(b"id", out);
            encode_bytes(&id.0, out);
            key(b"target", out);
            encode_bytes(&target.0, out);
            if want.v4 || want.v6 {
                key(b"want", out);
                want_list(want, out);
            }
        }
        Query::GetPeers {
            id,
            info_hash,
            want,
        } => {
            key(b"id", out);
            encode_bytes(&id.0, out);
            key(b"info_hash", out);
            encode_bytes(&info_hash.0, out);
            if want.v4 || want.v6 {
                key(b"want", out);
                want_list(want, out);
            }
        }
        Query::AnnouncePeer {
            id,
            info_hash,
            port,
            implied_port,
            token,
        } => {
            key(b"id", out);
            encode_bytes(&id.0, out);
            if *implied_port {
                key(b"implied_port", out);
                encode_int(1, out);
            }
            key(b"info_hash", out);
            encode_bytes(&info_hash.0, out);
            key(b"port", out);
            encode_int(i64::from(*port), out);
            key(b"token", out);
            encode_bytes(token, out);
        }
        Query::Other { id, .. } => {
            if let Some(id) = id {
                key(b"id", out);
                encode_bytes(&id.0, out);
            }
        }
    }
    out.push(b'e');
}

fn response_dict(r: &Response, out: &mut Vec<u8>) {
    out.push(b'd');
    key(b"id", out);
    encode_bytes(&r.id.0, out);
    let v4: Vec<_> = r.nodes.iter().filter(|n| n.addr.is_ipv4()).collect();
    if !v4.is_empty() {
        let mut b = Vec::with_capacity(v4.len() * 26);
        for n in v4 {
            write_node(n, &mut b);
        }
        key(b"nodes", out);
        encode_bytes(&b, out);
    }
    let v6: Vec<_> = r.nodes6.iter().filter(|n| n.addr.is_ipv6()).collect();
    if !v6.is_empty() {
        let mut b = Vec::with_capacity(v6.len() * 38);
        for n in v6 {
            write_node(n, &mut b);
        }
        key(b"nodes6", out);
        encode_bytes(&b, out);
    }
    if let Some(t) = &r.token {
        key(b"token", out);
        encode_bytes(t, out);
    }
    if !r.values.is_empty() {
        key(b"values", out);
        out.push(b'l');
        for v in &r.values {
            addr_bytes(v, out);
        }
        out.push(b'e');
    }
    out.push(b'e');
}

fn error_list(e: &ErrorBody, out: &mut Vec<u8>) {
    out.push(b'l');
    encode_int(e.code, out);
    encode_bytes(e.message.as_bytes(), out);
    out.push(b'e');
}
