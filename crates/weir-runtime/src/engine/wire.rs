//! Connections before and around the session: decoders for the shared
//! reader, the BitTorrent handshake, dialling and accepting.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use weir_bt::wire::{self, Handshake, Limits as BtLimits, Message};
use weir_core::policy::NetPolicy;
use weir_ed2k::packet::{Decoder, Limits as Ed2kLimits, Packet};
use weir_session::{ConnId, Established, Hello};

use super::driver::Msg;
use crate::peerconn::{Decode, READ_BUF};

/// What a connection's reader decodes, whatever the protocol.
#[derive(Debug)]
pub(crate) enum Wire {
    /// A BitTorrent message.
    Bt(Message),
    /// An eD2k packet (of a peer or a server).
    Ed2k(Packet),
}

/// Why a connection's bytes did not decode, whatever the protocol.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WireError {
    /// A BitTorrent peer's message.
    #[error(transparent)]
    Bt(#[from] wire::WireError),
    /// An eD2k peer's or server's packet.
    #[error(transparent)]
    Ed2k(#[from] weir_ed2k::packet::PacketError),
}

/// The peer-wire codec as the shared reader's decoder.
pub(crate) struct BtDecoder(pub(crate) BtLimits);

impl Decode for BtDecoder {
    type Msg = Wire;
    type Error = WireError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Wire>, WireError> {
        Ok(wire::decode(buf, &self.0)?.map(Wire::Bt))
    }
}

/// eD2k framing (client-client or client-server limits).
pub(crate) struct Ed2kDecoder(pub(crate) Decoder);

impl Ed2kDecoder {
    pub(crate) fn peer() -> Self {
        Self(Decoder::new(Ed2kLimits::CLIENT))
    }

    pub(crate) fn server() -> Self {
        Self(Decoder::new(Ed2kLimits::SERVER))
    }
}

impl Decode for Ed2kDecoder {
    type Msg = Wire;
    type Error = WireError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Wire>, WireError> {
        Ok(self.0.decode(buf)?.map(Wire::Ed2k))
    }
}

/// Reads the peer's BitTorrent handshake (68 bytes) from `stream`; what
/// came after it stays in the returned buffer.
async fn read_handshake(stream: &mut TcpStream) -> std::io::Result<(Handshake, BytesMut)> {
    let mut buf = BytesMut::with_capacity(READ_BUF);
    let theirs = loop {
        match Handshake::decode(&buf) {
            Ok(Some(h)) => break h,
            Ok(None) => {}
            Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        }
        if buf.len() >= Handshake::LEN {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "not a BitTorrent handshake",
            ));
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    };
    buf.advance(Handshake::LEN);
    Ok((theirs, buf))
}

fn invalid(msg: &'static str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
}

/// Dials `addr` for `conn` and says `hello`; the result goes to the driver.
pub(crate) async fn dial(
    conn: ConnId,
    policy: NetPolicy,
    local: Option<IpAddr>,
    addr: SocketAddr,
    hello: Hello,
    timeout: Duration,
    tx: mpsc::Sender<Msg>,
) {
    let result = tokio::time::timeout(timeout, async {
        let mut s = crate::net::connect_tcp_from(&policy, local, addr).await?;
        s.set_nodelay(true)?;
        match hello {
            Hello::Bt { ours, preamble } => {
                let mut out = BytesMut::with_capacity(Handshake::LEN + preamble.len());
                ours.encode(&mut out);
                // Messages valid for any peer ride along with our handshake.
                out.extend_from_slice(&preamble);
                s.write_all(&out).await?;
                let (theirs, leftover) = read_handshake(&mut s).await?;
                if theirs.info_hash != ours.info_hash {
                    return Err(invalid("handshake for another torrent"));
                }
                let est = Established::Bt {
                    theirs,
                    preamble_sent: !preamble.is_empty(),
                };
                Ok((s, est, leftover))
            }
            Hello::Ed2k => {
                let local_ip = local_v4(&s);
                Ok((s, Established::Ed2k { local_ip }, BytesMut::new()))
            }
            Hello::Ed2kServer => Ok((s, Established::Ed2kServer, BytesMut::new())),
        }
    })
    .await;
    let msg = match result {
        Ok(Ok((stream, established, leftover))) => Msg::Handshaked {
            conn,
            stream,
            established,
            leftover,
        },
        Ok(Err(e)) => Msg::Failed {
            conn,
            error: e.to_string(),
        },
        Err(_) => Msg::Failed {
            conn,
            error: "connect and handshake timed out".into(),
        },
    };
    let _ = tx.send(msg).await;
}

fn local_v4(s: &TcpStream) -> Option<std::net::Ipv4Addr> {
    match s.local_addr().ok()?.ip() {
        IpAddr::V4(v4) => Some(v4),
        IpAddr::V6(v6) => v6.to_ipv4_mapped(),
    }
}

/// Runs an accepted BitTorrent connection's handshake: reads theirs, asks
/// the driver for ours (routed by info-hash), answers.
pub(crate) async fn accept_bt(
    conn: ConnId,
    mut stream: TcpStream,
    timeout: Duration,
    tx: mpsc::Sender<Msg>,
) {
    let _ = stream.set_nodelay(true);
    let r = tokio::time::timeout(timeout, async {
        let (theirs, leftover) = read_handshake(&mut stream).await?;
        let (reply_tx, reply_rx) = oneshot::channel();
        tx.send(Msg::BtRoute {
            info_hash: theirs.info_hash,
            reply: reply_tx,
        })
        .await
        .map_err(|_| invalid("shutting down"))?;
        let ours = reply_rx
            .await
            .map_err(|_| invalid("shutting down"))?
            .ok_or_else(|| invalid("handshake for a torrent we do not serve"))?;
        let mut out = BytesMut::with_capacity(Handshake::LEN);
        ours.encode(&mut out);
        stream.write_all(&out).await?;
        Ok::<_, std::io::Error>((theirs, leftover))
    })
    .await;
    let msg = match r {
        Ok(Ok((theirs, leftover))) => Msg::Handshaked {
            conn,
            stream,
            established: Established::Bt {
                theirs,
                preamble_sent: false,
            },
            leftover,
        },
        Ok(Err(e)) => Msg::Failed {
            conn,
            error: e.to_string(),
        },
        Err(_) => Msg::Failed {
            conn,
            error: "handshake timed out".into(),
        },
    };
    let _ = tx.send(msg).await;
}
