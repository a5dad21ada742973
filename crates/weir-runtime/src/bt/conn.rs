//! A BitTorrent connection before it is a peer: dialling, accepting, the
//! handshake; and the decoder the shared reader ([`crate::peerconn`]) uses
//! afterwards.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use weir_bt::wire::{self, Handshake, Limits, Message};

use super::Msg;
use crate::peerconn::{Decode, READ_BUF};

/// The peer-wire codec as the shared reader's decoder.
pub(crate) struct WireDecoder(pub(crate) Limits);

impl Decode for WireDecoder {
    type Msg = Message;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Message>, String> {
        wire::decode(buf, &self.0).map_err(|e| e.to_string())
    }
}

/// A handshake (with the connect, when we dial) must complete within this
/// by default ([`super::BtConfig::handshake_timeout`]).
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);

/// Exchanges handshakes. `ours_first`: we dialled, so we speak first.
/// `accept` decides whether the peer's handshake is for us (info-hash).
pub(crate) async fn handshake(
    stream: &mut TcpStream,
    ours: &Handshake,
    ours_first: bool,
    preamble: &[u8],
) -> std::io::Result<(Handshake, BytesMut)> {
    let mut out = BytesMut::with_capacity(Handshake::LEN + preamble.len());
    ours.encode(&mut out);
    // Messages valid for any peer ride along with our handshake.
    out.extend_from_slice(preamble);
    if ours_first {
        stream.write_all(&out).await?;
    }
    let mut buf = BytesMut::with_capacity(READ_BUF);
    let theirs = loop {
        match Handshake::decode(&buf) {
            Ok(Some(h)) => break h,
            Ok(None) => {}
            Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    };
    buf.advance(Handshake::LEN);
    if theirs.info_hash != ours.info_hash {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "handshake for another torrent",
        ));
    }
    if !ours_first {
        stream.write_all(&out).await?;
    }
    Ok((theirs, buf))
}

/// Dials `addr` and shakes hands; the result goes to the driver.
pub(crate) async fn dial(
    policy: weir_core::policy::NetPolicy,
    local: Option<std::net::IpAddr>,
    addr: SocketAddr,
    ours: Handshake,
    preamble: bytes::Bytes,
    timeout: Duration,
    tx: mpsc::Sender<Msg>,
) {
    let result = tokio::time::timeout(timeout, async {
        let mut s = crate::net::connect_tcp_from(&policy, local, addr).await?;
        s.set_nodelay(true)?;
        let (theirs, leftover) = handshake(&mut s, &ours, true, &preamble).await?;
        Ok::<_, std::io::Error>((s, theirs, leftover))
    })
    .await;
    let msg = match result {
        Ok(Ok((stream, theirs, leftover))) => Msg::Handshaked {
            stream,
            addr,
            theirs,
            leftover,
            preamble_sent: !preamble.is_empty(),
            incoming: None,
        },
        Ok(Err(e)) => Msg::DialFailed {
            addr,
            error: e.to_string(),
        },
        Err(_) => Msg::DialFailed {
            addr,
            error: "handshake timed out".into(),
        },
    };
    let _ = tx.send(msg).await;
}

/// Shakes hands on an accepted connection (`id`: its place among the
/// handshakes in progress); the result goes to the driver either way. A
/// peer that says nothing is dropped after `timeout`.
pub(crate) async fn accept(
    mut stream: TcpStream,
    addr: SocketAddr,
    id: u64,
    ours: Handshake,
    timeout: Duration,
    tx: mpsc::Sender<Msg>,
) {
    let _ = stream.set_nodelay(true);
    let r = tokio::time::timeout(timeout, handshake(&mut stream, &ours, false, &[])).await;
    let msg = match r {
        Ok(Ok((theirs, leftover))) => Msg::Handshaked {
            stream,
            addr,
            theirs,
            leftover,
            preamble_sent: false,
            incoming: Some(id),
        },
        Ok(Err(e)) => Msg::HandshakeFailed {
            id,
            addr,
            error: e.to_string(),
        },
        Err(_) => Msg::HandshakeFailed {
            id,
            addr,
            error: "handshake timed out".into(),
        },
    };
    let _ = tx.send(msg).await;
}
