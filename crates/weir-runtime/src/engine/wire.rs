//! Connections before and around the session: decoders for the shared
//! reader, the BitTorrent handshake, dialling and accepting.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use weir_bt::wire::{self, Handshake, Limits as BtLimits, Message};
use weir_core::policy::NetPolicy;
use weir_ed2k::packet::{Decoder, Limits as Ed2kLimits, Packet};
use weir_session::{ConnId, Established, Hello};

use super::driver::Msg;
use super::mse::MseCtx;
use super::transport::{Link, PeerStream, TransportCtx};
use crate::mse::MseStream;
use crate::peerconn::Decode;

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

/// What a handshake is read into: the 68 bytes and what usually rides
/// along (a bitfield, an extension handshake). Not a 512 KiB receive
/// buffer: connections that never finish a handshake (hundreds at once)
/// would each hold one; the reader moves what is left into a buffer from
/// the read pool.
const HANDSHAKE_READ: usize = 4096;

/// Reads the peer's BitTorrent handshake (68 bytes) from `stream`; what
/// came after it stays in the returned buffer.
pub(super) async fn read_handshake<S: AsyncRead + Unpin>(
    stream: &mut S,
) -> std::io::Result<(Handshake, BytesMut)> {
    let mut buf = BytesMut::with_capacity(HANDSHAKE_READ);
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

/// Dials `addr` for `conn` and says `hello` (BitTorrent: over the
/// transports `transports` allows, see [`super::transport`], then
/// encrypted or not as `mse`'s policy says, see
/// [`super::mse::connect_bt`]); the result goes to the driver.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn dial(
    conn: ConnId,
    policy: NetPolicy,
    local: Option<IpAddr>,
    addr: SocketAddr,
    hello: Hello,
    timeout: Duration,
    mse: MseCtx,
    transports: TransportCtx,
    tx: mpsc::Sender<Msg>,
) {
    let result = match hello {
        Hello::Bt { ours, preamble } => {
            let first = tokio::time::timeout(timeout, transports.race(&policy, local, addr))
                .await
                .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()));
            match first {
                Err(e) => Err(format!("connect: {e}")),
                Ok(Link::Tcp(s)) => {
                    let again = || async {
                        let s = crate::net::connect_tcp_from(&policy, local, addr).await?;
                        s.set_nodelay(true)?;
                        Ok(s)
                    };
                    bt_over(s, &mse, addr, &ours, &preamble, again)
                        .await
                        .map(|(c, est)| (PeerStream::from(c.stream), est, c.leftover))
                }
                Ok(Link::Utp(s)) => {
                    let utp = transports.utp.clone();
                    let again = || {
                        let utp = utp.clone();
                        async move {
                            match utp {
                                Some(u) => u.connect(addr).await,
                                None => Err(std::io::ErrorKind::Unsupported.into()),
                            }
                        }
                    };
                    bt_over(s, &mse, addr, &ours, &preamble, again)
                        .await
                        .map(|(c, est)| (PeerStream::from(c.stream), est, c.leftover))
                }
            }
        }
        hello => tokio::time::timeout(timeout, async {
            let s = crate::net::connect_tcp_from(&policy, local, addr).await?;
            s.set_nodelay(true)?;
            let est = match hello {
                Hello::Ed2kServer => Established::Ed2kServer,
                _ => Established::Ed2k {
                    local_ip: local_v4(&s),
                },
            };
            Ok::<_, std::io::Error>((
                PeerStream::Tcp(MseStream::plain(s, Bytes::new())),
                est,
                BytesMut::new(),
            ))
        })
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::TimedOut => "connect and handshake timed out".to_string(),
            _ => e.to_string(),
        }),
    };
    let msg = match result {
        Ok((stream, established, leftover)) => Msg::Handshaked {
            conn,
            stream: Box::new(stream),
            established,
            leftover,
        },
        Err(error) => Msg::Failed { conn, error },
    };
    let _ = tx.send(msg).await;
}

/// The BitTorrent handshakes over `first` (already connected), new
/// connections of the same transport from `again` for the MSE attempts
/// after it.
async fn bt_over<S, C, F>(
    first: S,
    mse: &MseCtx,
    addr: SocketAddr,
    ours: &Handshake,
    preamble: &[u8],
    mut again: C,
) -> Result<(super::mse::Connected<S>, Established), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
    C: FnMut() -> F,
    F: std::future::Future<Output = std::io::Result<S>>,
{
    let mut first = Some(first);
    let connect = || {
        let f = first.take();
        let next = again();
        async move {
            match f {
                Some(s) => Ok(s),
                None => next.await,
            }
        }
    };
    match super::mse::connect_bt(mse, addr, ours, preamble, connect).await {
        Ok(c) => {
            let est = Established::Bt {
                theirs: c.theirs,
                preamble_sent: !preamble.is_empty(),
            };
            Ok((c, est))
        }
        Err(e) => Err(e.to_string()),
    }
}

fn local_v4(s: &TcpStream) -> Option<std::net::Ipv4Addr> {
    match s.local_addr().ok()?.ip() {
        IpAddr::V4(v4) => Some(v4),
        IpAddr::V6(v6) => v6.to_ipv4_mapped(),
    }
}

/// Runs an accepted BitTorrent connection's handshake: plaintext or MSE
/// (see [`super::mse::accept_bt`]), reads theirs, asks the driver for ours
/// (routed by info-hash), answers.
pub(crate) async fn accept_bt<S>(conn: ConnId, stream: S, mse: MseCtx, tx: mpsc::Sender<Msg>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    MseStream<S>: Into<PeerStream>,
{
    // The handshakes are bounded (and counted) in there; routing and our
    // answer have a bound of their own.
    let a = match super::mse::accept_bt(&mse, stream).await {
        Ok(a) => a,
        Err(e) => {
            let _ = tx
                .send(Msg::Failed {
                    conn,
                    error: e.to_string(),
                })
                .await;
            return;
        }
    };
    let r = tokio::time::timeout(mse.timeout, async {
        let (reply_tx, reply_rx) = oneshot::channel();
        tx.send(Msg::BtRoute {
            info_hash: a.theirs.info_hash,
            reply: reply_tx,
        })
        .await
        .map_err(|_| "shutting down".to_string())?;
        let ours = reply_rx
            .await
            .map_err(|_| "shutting down".to_string())?
            .ok_or_else(|| "handshake for a torrent we do not serve".to_string())?;
        let mut out = BytesMut::with_capacity(Handshake::LEN);
        ours.encode(&mut out);
        let mut stream = a.stream;
        let sent: std::io::Result<()> = async {
            stream.write_all(&out).await?;
            stream.flush().await
        }
        .await;
        sent.map_err(|e| e.to_string())?;
        Ok::<_, String>((stream, a.theirs, a.leftover))
    })
    .await;
    let msg = match r {
        Ok(Ok((stream, theirs, leftover))) => Msg::Handshaked {
            conn,
            stream: Box::new(stream.into()),
            established: Established::Bt {
                theirs,
                preamble_sent: false,
            },
            leftover,
        },
        Ok(Err(error)) => Msg::Failed { conn, error },
        Err(_) => Msg::Failed {
            conn,
            error: "handshake timed out".into(),
        },
    };
    let _ = tx.send(msg).await;
}
