//! eD2k sockets before and around the driver: the packet decoders the
//! shared reader ([`crate::peerconn`]) uses, and dialling.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::BytesMut;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use weir_core::policy::NetPolicy;
use weir_ed2k::packet::{Decoder, Limits, Packet};
use weir_ed2k::transfer::ConnId;

use super::client::Msg;
use crate::peerconn::Decode;

/// Client-to-client framing as the shared reader's decoder: whole packets,
/// payloads sliced from the read buffer (packed ones inflated, bounded).
pub(crate) struct PeerDecoder(pub(crate) Decoder);

impl PeerDecoder {
    pub(crate) fn new() -> Self {
        Self(Decoder::new(Limits::CLIENT))
    }
}

impl Decode for PeerDecoder {
    type Msg = Packet;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Packet>, String> {
        self.0.decode(buf).map_err(|e| e.to_string())
    }
}

/// A packet from the server connection (a type of its own, so the driver
/// tells server events from peer events).
#[derive(Debug)]
pub(crate) struct ServerPacket(pub(crate) Packet);

/// Server framing (packed packets unpack to eDonkey opcodes).
pub(crate) struct ServerDecoder(pub(crate) Decoder);

impl Decode for ServerDecoder {
    type Msg = ServerPacket;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<ServerPacket>, String> {
        self.0
            .decode(buf)
            .map(|p| p.map(ServerPacket))
            .map_err(|e| e.to_string())
    }
}

/// A connection must be up within this, and a peer's hello arrive within
/// this, by default ([`super::Ed2kConfig::handshake_timeout`]).
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Dials a peer; the result goes to the driver.
pub(crate) async fn dial(
    policy: NetPolicy,
    local: Option<IpAddr>,
    addr: SocketAddr,
    timeout: Duration,
    tx: mpsc::Sender<Msg>,
) {
    let msg = match connect(&policy, local, addr, timeout).await {
        Ok(stream) => Msg::Dialed { stream, addr },
        Err(error) => Msg::DialFailed { addr, error },
    };
    let _ = tx.send(msg).await;
}

/// Dials a server; the result goes to the driver.
pub(crate) async fn dial_server(
    policy: NetPolicy,
    local: Option<IpAddr>,
    addr: SocketAddr,
    tx: mpsc::Sender<Msg>,
) {
    let msg = match connect(&policy, local, addr, CONNECT_TIMEOUT).await {
        Ok(stream) => Msg::ServerUp { stream, addr },
        Err(error) => Msg::ServerDown { addr, error },
    };
    let _ = tx.send(msg).await;
}

/// A policy-checked connect bounded by `timeout`.
async fn connect(
    policy: &NetPolicy,
    local: Option<IpAddr>,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<TcpStream, String> {
    match tokio::time::timeout(timeout, crate::net::connect_tcp_from(policy, local, addr)).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err("connect timed out".into()),
    }
}

/// Prepares a stream for the shared reader and writer: no Nagle delay
/// (control packets go at once), our local address noted.
pub(crate) fn local_ipv4(stream: &TcpStream) -> Option<std::net::Ipv4Addr> {
    let _ = stream.set_nodelay(true);
    match stream.local_addr().ok()?.ip() {
        IpAddr::V4(v4) => Some(v4),
        IpAddr::V6(v6) => v6.to_ipv4_mapped(),
    }
}

/// Logs a packet's opcode, size and (for part requests and part data)
/// its ranges, at trace level: the interop debugging aid.
pub(crate) fn trace_packet(conn: ConnId, dir: &str, p: &Packet) {
    let ranges = match (p.protocol, p.opcode) {
        (weir_ed2k::packet::Protocol::Edonkey, 0x47)
        | (weir_ed2k::packet::Protocol::Edonkey, 0x46)
            if p.payload.len() >= 24 =>
        {
            let w: Vec<u32> = p.payload[16..]
                .chunks_exact(4)
                .take(if p.opcode == 0x47 { 6 } else { 2 })
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            format!(" {w:?}")
        }
        _ => String::new(),
    };
    tracing::trace!(
        "conn {conn} {dir}: {:?} {:#04x} ({} bytes){ranges}",
        p.protocol,
        p.opcode,
        p.payload.len()
    );
}

pub(crate) fn trace_out(conn: ConnId, data: &[bytes::Bytes]) {
    let mut buf = bytes::BytesMut::new();
    for d in data {
        buf.extend_from_slice(d);
    }
    let mut dec = Decoder::new(Limits::CLIENT);
    while let Ok(Some(p)) = dec.decode(&mut buf) {
        trace_packet(conn, "out", &p);
    }
}
