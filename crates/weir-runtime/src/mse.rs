//! MSE/PE (BitTorrent protocol encryption) over real streams: the sans-IO
//! handshake of [`weir_bt::mse`] driven over any `AsyncRead + AsyncWrite`
//! ([`initiate`], [`respond`]), and the stream it leaves ([`MseStream`]),
//! which applies RC4 after the handshake or passes bytes through when
//! plaintext was selected.
//!
//! RC4 runs where the bytes are: [`MseRead`] decrypts each read in place in
//! the caller's buffer (the connection's reader task, one pass over a whole
//! read), [`MseWrite`] encrypts into a scratch buffer of at most
//! [`SCRATCH`] bytes (the writer task; peerconn's writer sends shared
//! `Bytes` that others may still read, so they are never encrypted in
//! place). Scratch buffers come from one bounded pool and go back to it
//! when a writer goes idle (`flush`), so idle connections hold none and a
//! busy one reuses the same buffer for every write.
//!
//! Bytes the handshake read past its end (a responder's IA and whatever
//! followed, an initiator's first payload) are already decrypted by the
//! handshake; the stream hands them out first.
//!
//! A write is accepted into the scratch buffer and sent from there: like a
//! `BufWriter`, the stream must be flushed before the writer waits for
//! more to send (peerconn's writer does).

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use weir_bt::mse::{
    Accepted, Crypto, Initiator, MAX_INITIATOR_PREFIX, MAX_RESPONDER_PREFIX, MseCipher, MseConfig,
    MseError, Rc4Stream, Responder, SkeyLookup,
};

use crate::bufpool::BufPool;
use crate::peerconn::PeerRead;

/// Largest scratch buffer one writer encrypts into (and so the most one
/// write sends): large enough that a fast connection costs few syscalls.
pub const SCRATCH: usize = 128 * 1024;
/// Scratch buffers kept for reuse, process-wide (8 MiB).
pub const MAX_POOLED_SCRATCH: usize = 64;
/// Bytes read per step of a handshake.
const STEP: usize = 4096;

fn scratch_pool() -> &'static BufPool {
    static POOL: OnceLock<BufPool> = OnceLock::new();
    POOL.get_or_init(|| BufPool::new(SCRATCH, MAX_POOLED_SCRATCH))
}

/// Why a handshake over a stream failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The peer broke the protocol (or policy refused it): see the kind.
    #[error(transparent)]
    Mse(#[from] MseError),
    /// The stream failed.
    #[error("mse: {0}")]
    Io(#[from] io::Error),
    /// The peer closed the connection before the handshake settled.
    #[error("mse: peer closed the connection after {read} bytes of the handshake")]
    Closed {
        /// Bytes it sent.
        read: usize,
    },
    /// The peer closed during the handshake after a shared secret with a
    /// leading zero: libtorrent 2.0's bug (see
    /// [`Initiator::short_secret`]); retry with new keys.
    #[error("mse: peer closed after a shared secret with a leading zero (retry with new keys)")]
    ShortSecret,
    /// More bytes arrived than a handshake may take before it settles.
    #[error("mse: {read} bytes before the handshake settled (limit {limit})")]
    TooMuch {
        /// Bytes read.
        read: usize,
        /// The bound.
        limit: usize,
    },
    /// The handshake did not settle in time.
    #[error("mse: handshake did not settle within {0:?}")]
    Timeout(Duration),
    /// The BitTorrent handshake inside names another torrent than the
    /// one MSE settled on (or than we dialled for).
    #[error("BitTorrent handshake for another torrent")]
    OtherTorrent,
}

/// Handshake outcomes counted by kind, shared by an engine's handshake
/// tasks (see [`MseStats`]).
#[derive(Debug, Default)]
pub struct MseCounters {
    out_rc4: AtomicU64,
    out_plaintext: AtomicU64,
    fallbacks: AtomicU64,
    in_rc4: AtomicU64,
    in_plaintext: AtomicU64,
    sync_not_found: AtomicU64,
    pad_too_long: AtomicU64,
    too_much: AtomicU64,
    timeouts: AtomicU64,
    unknown_torrent: AtomicU64,
    refused: AtomicU64,
    other: AtomicU64,
}

/// A snapshot of [`MseCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MseStats {
    /// Outgoing connections encrypted with RC4.
    pub out_rc4: u64,
    /// Outgoing connections in plaintext (a plain handshake, or MSE with
    /// plaintext selected).
    pub out_plaintext: u64,
    /// Outgoing connections that got through only on a later attempt
    /// (MSE refused, then plaintext; or the other way round).
    pub fallbacks: u64,
    /// Incoming connections encrypted with RC4.
    pub in_rc4: u64,
    /// Incoming connections in plaintext (either way).
    pub in_plaintext: u64,
    /// Handshakes failed: no synchronisation pattern where the spec puts
    /// it (garbage, PadA/PadB past 512 bytes).
    pub sync_not_found: u64,
    /// Handshakes failed: `len(PadC)`/`len(PadD)` past 512.
    pub pad_too_long: u64,
    /// Handshakes failed: more bytes than the handshake may take (an IA
    /// past the limit included).
    pub too_much: u64,
    /// Handshakes failed: not settled in time (a slow sender).
    pub timeouts: u64,
    /// Incoming handshakes for a torrent this session does not serve.
    pub unknown_torrent: u64,
    /// Refused by policy (plaintext while encryption is required, MSE
    /// while it is off, nothing acceptable offered or selected).
    pub refused: u64,
    /// Every other failure (bad key or VC, closed, i/o).
    pub other: u64,
}

impl MseCounters {
    /// The counts now.
    pub fn snapshot(&self) -> MseStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MseStats {
            out_rc4: g(&self.out_rc4),
            out_plaintext: g(&self.out_plaintext),
            fallbacks: g(&self.fallbacks),
            in_rc4: g(&self.in_rc4),
            in_plaintext: g(&self.in_plaintext),
            sync_not_found: g(&self.sync_not_found),
            pad_too_long: g(&self.pad_too_long),
            too_much: g(&self.too_much),
            timeouts: g(&self.timeouts),
            unknown_torrent: g(&self.unknown_torrent),
            refused: g(&self.refused),
            other: g(&self.other),
        }
    }

    /// Counts a connection that got through.
    pub fn established(&self, incoming: bool, crypto: Crypto, fallback: bool) {
        let c = match (incoming, crypto) {
            (false, Crypto::Rc4) => &self.out_rc4,
            (false, Crypto::Plaintext) => &self.out_plaintext,
            (true, Crypto::Rc4) => &self.in_rc4,
            (true, Crypto::Plaintext) => &self.in_plaintext,
        };
        c.fetch_add(1, Ordering::Relaxed);
        if fallback {
            self.fallbacks.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a failed handshake by its kind.
    pub fn failed(&self, e: &HandshakeError) {
        let c = match e {
            HandshakeError::Mse(MseError::SyncNotFound { .. }) => &self.sync_not_found,
            HandshakeError::Mse(MseError::PadTooLong { .. }) => &self.pad_too_long,
            HandshakeError::Mse(MseError::IaTooLong { .. }) | HandshakeError::TooMuch { .. } => {
                &self.too_much
            }
            HandshakeError::Mse(MseError::Timeout(_)) | HandshakeError::Timeout(_) => {
                &self.timeouts
            }
            HandshakeError::Mse(MseError::UnknownInfoHash) => &self.unknown_torrent,
            HandshakeError::Mse(
                MseError::PlaintextRefused
                | MseError::EncryptionRefused
                | MseError::NoCommonCrypto { .. }
                | MseError::BadSelect { .. }
                | MseError::PolicyForbids(_),
            ) => &self.refused,
            _ => &self.other,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// The read direction's state: bytes the handshake already decrypted,
/// then the decrypting RC4 half (none: plaintext).
#[derive(Debug)]
struct ReadState {
    prefix: Bytes,
    dec: Option<Rc4Stream>,
}

impl ReadState {
    fn poll_read<I: AsyncRead + ?Sized>(
        &mut self,
        inner: Pin<&mut I>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        ready!(inner.poll_read(cx, buf))?;
        if let Some(d) = self.dec.as_mut() {
            d.apply_keystream(&mut buf.filled_mut()[before..]);
        }
        Poll::Ready(Ok(()))
    }
}

/// The write direction's state: the encrypting RC4 half (none:
/// plaintext) and the scratch buffer of encrypted bytes not sent yet.
#[derive(Debug)]
struct WriteState {
    enc: Option<Rc4Stream>,
    scratch: BytesMut,
}

impl WriteState {
    /// Sends what is encrypted and unsent.
    fn poll_drain<I: AsyncWrite + ?Sized>(
        &mut self,
        mut inner: Pin<&mut I>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        while !self.scratch.is_empty() {
            let n = ready!(inner.as_mut().poll_write(cx, &self.scratch))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.scratch.advance(n);
        }
        Poll::Ready(Ok(()))
    }

    fn poll_write_vectored<I: AsyncWrite + ?Sized>(
        &mut self,
        mut inner: Pin<&mut I>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.enc.is_none() {
            return inner.poll_write_vectored(cx, bufs);
        }
        ready!(self.poll_drain(inner.as_mut(), cx))?;
        // Drained: the same allocation again (sending advanced through it),
        // or one from the pool the first time after a flush.
        if !self.scratch.try_reclaim(SCRATCH) {
            self.scratch = scratch_pool().take();
        }
        self.scratch.clear();
        let mut n = 0;
        for b in bufs {
            let room = SCRATCH - self.scratch.len();
            if room == 0 {
                break;
            }
            let take = b.len().min(room);
            self.scratch.extend_from_slice(&b[..take]);
            n += take;
        }
        if n == 0 {
            return Poll::Ready(Ok(0));
        }
        if let Some(e) = self.enc.as_mut() {
            e.apply_keystream(&mut self.scratch[..]);
        }
        // Accepted: try to send at once; what the socket does not take now
        // goes first on the next write or flush.
        if let Poll::Ready(Err(e)) = self.poll_drain(inner, cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush<I: AsyncWrite + ?Sized>(
        &mut self,
        mut inner: Pin<&mut I>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(inner.as_mut(), cx))?;
        // Idle: the scratch buffer goes back to the pool.
        if self.scratch.capacity() > 0 {
            scratch_pool().give(std::mem::take(&mut self.scratch));
        }
        inner.poll_flush(cx)
    }

    fn poll_shutdown<I: AsyncWrite + ?Sized>(
        &mut self,
        mut inner: Pin<&mut I>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(inner.as_mut(), cx))?;
        inner.poll_shutdown(cx)
    }
}

/// A stream after an MSE handshake (or a plaintext one passed through):
/// RC4 both ways when [`Crypto::Rc4`] was selected, bytes as they are
/// otherwise; what the handshake read past its end comes out first.
/// Flush before waiting for more to write (see the module docs).
#[derive(Debug)]
pub struct MseStream<S> {
    inner: S,
    rd: ReadState,
    wr: WriteState,
}

impl<S> MseStream<S> {
    /// `inner` as it is (no encryption), `prefix` read first.
    pub fn plain(inner: S, prefix: Bytes) -> Self {
        MseStream {
            inner,
            rd: ReadState { prefix, dec: None },
            wr: WriteState {
                enc: None,
                scratch: BytesMut::new(),
            },
        }
    }

    /// `inner` with `cipher` applied both ways (`None`: plaintext),
    /// `prefix` (already decrypted) read first.
    pub fn new(inner: S, prefix: Bytes, cipher: Option<MseCipher>) -> Self {
        let mut s = Self::plain(inner, prefix);
        if let Some(c) = cipher {
            let (enc, dec) = c.split();
            s.rd.dec = Some(dec);
            s.wr.enc = Some(enc);
        }
        s
    }

    /// What the stream is after the handshake.
    pub fn crypto(&self) -> Crypto {
        if self.wr.enc.is_some() {
            Crypto::Rc4
        } else {
            Crypto::Plaintext
        }
    }

    /// The underlying stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl MseStream<TcpStream> {
    /// The two halves, for a connection's reader and writer tasks (each
    /// carries its own RC4 half; nothing is shared between them).
    pub fn into_split(self) -> (MseRead<OwnedReadHalf>, MseWrite<OwnedWriteHalf>) {
        let (r, w) = self.inner.into_split();
        (
            MseRead {
                inner: r,
                st: self.rd,
            },
            MseWrite {
                inner: w,
                st: self.wr,
            },
        )
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for MseStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.rd.poll_read(Pin::new(&mut this.inner), cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for MseStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.wr
            .poll_write_vectored(Pin::new(&mut this.inner), cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.wr
            .poll_write_vectored(Pin::new(&mut this.inner), cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.wr.enc.is_some() || self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.wr.poll_flush(Pin::new(&mut this.inner), cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.wr.poll_shutdown(Pin::new(&mut this.inner), cx)
    }
}

/// The read half of an [`MseStream`]: decrypts each read in place.
#[derive(Debug)]
pub struct MseRead<R> {
    inner: R,
    st: ReadState,
}

impl<R: AsyncRead + Unpin> AsyncRead for MseRead<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.st.poll_read(Pin::new(&mut this.inner), cx, buf)
    }
}

/// A TCP read half keeps its quick-ACK hook under the cipher.
impl<R: PeerRead> PeerRead for MseRead<R> {
    fn after_read(&self) {
        self.inner.after_read();
    }
}

/// The write half of an [`MseStream`]: encrypts into its scratch buffer.
#[derive(Debug)]
pub struct MseWrite<W> {
    inner: W,
    st: WriteState,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for MseWrite<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.st
            .poll_write_vectored(Pin::new(&mut this.inner), cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.st
            .poll_write_vectored(Pin::new(&mut this.inner), cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.st.enc.is_some() || self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.st.poll_flush(Pin::new(&mut this.inner), cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.st.poll_shutdown(Pin::new(&mut this.inner), cx)
    }
}

/// Runs the initiator's side of MSE over `s` for the torrent `info_hash`,
/// with `ia` (the BitTorrent handshake, at most 68 bytes for libtorrent)
/// as initial payload, within `cfg.timeout`. Reads at most what the
/// handshake may take ([`MAX_INITIATOR_PREFIX`] and one step).
pub async fn initiate<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    cfg: MseConfig,
    info_hash: [u8; 20],
    ia: &[u8],
    rng: &mut fastrand::Rng,
) -> Result<MseStream<S>, HandshakeError> {
    let mut hs = Initiator::new(cfg, info_hash, ia, rng, Instant::now())?;
    let limit = MAX_INITIATOR_PREFIX + STEP;
    let run = async {
        s.write_all(&hs.take_output()).await?;
        let mut tmp = vec![0u8; STEP];
        let mut read = 0usize;
        let mut out = Vec::new();
        loop {
            let want = STEP.min(limit - read);
            if want == 0 {
                return Err(HandshakeError::TooMuch { read, limit });
            }
            let n = match s.read(&mut tmp[..want]).await {
                Ok(n) => n,
                Err(_) if hs.short_secret() => return Err(HandshakeError::ShortSecret),
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                return Err(if hs.short_secret() {
                    HandshakeError::ShortSecret
                } else {
                    HandshakeError::Closed { read }
                });
            }
            read += n;
            out.clear();
            let r = hs.handle_input(&tmp[..n], &mut out)?;
            if !out.is_empty() {
                s.write_all(&out).await?;
            }
            if let Some(est) = r {
                return Ok(est);
            }
        }
    };
    let est = tokio::time::timeout(cfg.timeout, run)
        .await
        .map_err(|_| HandshakeError::Timeout(cfg.timeout))??;
    Ok(MseStream::new(s, Bytes::from(est.payload), est.cipher))
}

/// What [`respond`] settled.
#[derive(Debug)]
pub struct Responded<S> {
    /// The stream: the peer's BitTorrent handshake is its first bytes.
    pub stream: MseStream<S>,
    /// The torrent an MSE initiator asked for (`None`: it sent a plaintext
    /// BitTorrent handshake).
    pub info_hash: Option<[u8; 20]>,
}

/// Runs the responder's side over an accepted `s`: tells a plaintext
/// BitTorrent handshake from MSE, finds the torrent through `skeys`, and
/// bounds what the peer may send before it settles
/// ([`MAX_RESPONDER_PREFIX`] plus `cfg.max_ia`) and the time
/// (`cfg.timeout`).
pub async fn respond<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    cfg: MseConfig,
    skeys: &(dyn SkeyLookup + Sync),
    rng: &mut fastrand::Rng,
) -> Result<Responded<S>, HandshakeError> {
    let mut hs = Responder::new(cfg, rng, Instant::now());
    let limit = MAX_RESPONDER_PREFIX + usize::from(cfg.max_ia);
    let run = async {
        let mut tmp = vec![0u8; STEP];
        let mut read = 0usize;
        let mut out = Vec::new();
        loop {
            let want = STEP.min(limit - read);
            if want == 0 {
                return Err(HandshakeError::TooMuch { read, limit });
            }
            let n = s.read(&mut tmp[..want]).await?;
            if n == 0 {
                return Err(HandshakeError::Closed { read });
            }
            read += n;
            out.clear();
            let r = hs.handle_input(&tmp[..n], skeys, &mut out)?;
            if !out.is_empty() {
                s.write_all(&out).await?;
            }
            if let Some(a) = r {
                return Ok(a);
            }
        }
    };
    let accepted = tokio::time::timeout(cfg.timeout, run)
        .await
        .map_err(|_| HandshakeError::Timeout(cfg.timeout))??;
    Ok(match accepted {
        Accepted::Plaintext(bytes) => Responded {
            stream: MseStream::plain(s, Bytes::from(bytes)),
            info_hash: None,
        },
        Accepted::Encrypted(est) => {
            let est = *est;
            Responded {
                stream: MseStream::new(s, Bytes::from(est.payload), est.cipher),
                info_hash: Some(est.info_hash),
            }
        }
    })
}

#[cfg(test)]
mod tests;
