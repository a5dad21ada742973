//! `weir ed2k-server`: the sans-IO [`IndexServer`] over TCP.
//!
//! One task per connection reads and decodes; the index sits behind a
//! mutex held only while one message is handled (control traffic only);
//! each connection has a writer ([`crate::peerconn::writer`]) fed through
//! a bounded [`WriteQueue`], so a reply to another connection (a callback)
//! never waits on this one, and a client that does not read its answers
//! is dropped once [`ServerOptions::queue_limit`] bytes wait for it.
//!
//! What a client controls is bounded: the index's limits
//! ([`ServerConfig`]: files per client, name length, connections per IP
//! and in all, files and bytes indexed), a login within
//! [`ServerOptions::login_timeout`], a message at least every
//! [`ServerOptions::idle_timeout`]. The accept loop never ends on an
//! accept error ([`crate::net::accept_loop`]).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc};
use weir_core::policy::NetPolicy;
use weir_ed2k::packet::{Decoder, Limits};
use weir_ed2k::server::{ClientToServer, ConnId, IndexServer, ServerConfig, ServerEvent};

use crate::bandwidth::Limiter;
use crate::net;
use crate::peerconn::{self, ConnEvent, Outgoing, WriteQueue};

/// How to run the server.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Who may connect.
    pub policy: NetPolicy,
    /// Name, description, flags and the index's limits.
    pub config: ServerConfig,
    /// A connection must log in within this.
    pub login_timeout: Duration,
    /// A logged-in client that sends nothing for this long is dropped.
    pub idle_timeout: Duration,
    /// Most bytes queued for one client and not yet written.
    pub queue_limit: u64,
}

impl ServerOptions {
    /// Defaults under `policy` with `config`.
    pub fn new(policy: NetPolicy, config: ServerConfig) -> Self {
        Self {
            policy,
            config,
            login_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(3600),
            queue_limit: 1 << 20,
        }
    }
}

/// Why a connection whose queue overflowed ends.
const NOT_READING: &str = "not reading its answers";

/// A connection's writer queue and the way to end it from elsewhere.
struct Peer {
    queue: WriteQueue,
    kill: Arc<Notify>,
}

type Peers = Arc<Mutex<HashMap<ConnId, Peer>>>;

/// A bound index server.
pub struct Ed2kServer {
    listener: TcpListener,
    opts: ServerOptions,
}

impl Ed2kServer {
    /// Binds the listener (nothing is accepted until [`run`](Self::run)).
    pub async fn bind(addr: SocketAddr, mut opts: ServerOptions) -> io::Result<Self> {
        let listener = net::listen_tcp(addr).await?;
        let local = listener.local_addr()?;
        if let IpAddr::V4(ip) = local.ip() {
            opts.config.ip = ip;
        }
        opts.config.port = local.port();
        Ok(Self { listener, opts })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts clients (for good: accept errors are waited out);
    /// `on_event` sees every login, offer, source request and departure.
    pub async fn run(
        self,
        on_event: impl Fn(ServerEvent) + Send + Sync + 'static,
    ) -> io::Result<()> {
        let index = Arc::new(Mutex::new(IndexServer::new(self.opts.config.clone())));
        let peers: Peers = Arc::default();
        let on_event = Arc::new(on_event);
        let next = AtomicU64::new(1);
        let opts = Arc::new(self.opts);
        net::accept_loop(&opts.policy, &self.listener, |stream, addr| {
            let ip = match addr.ip() {
                IpAddr::V4(v4) => Some(v4),
                IpAddr::V6(v6) => v6.to_ipv4_mapped(),
            };
            let Some(ip) = ip else {
                tracing::info!("ed2k-server: {addr} refused: eD2k ids are IPv4");
                return std::future::ready(true);
            };
            let conn = next.fetch_add(1, Ordering::Relaxed);
            let admitted = index
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .connected(conn, ip);
            if let Err(e) = admitted {
                tracing::info!("ed2k-server: {addr} refused: {e}");
                return std::future::ready(true);
            }
            let _ = stream.set_nodelay(true);
            let (index, peers, on_event, opts) =
                (index.clone(), peers.clone(), on_event.clone(), opts.clone());
            tokio::spawn(async move {
                let reason = serve(conn, stream, &index, &peers, &*on_event, &opts).await;
                tracing::debug!("ed2k-server: {addr} closed: {reason}");
                peers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&conn);
                let events = {
                    let mut ix = index.lock().unwrap_or_else(|e| e.into_inner());
                    ix.disconnected(conn);
                    ix.take_events()
                };
                events.into_iter().for_each(|e| on_event(e));
            });
            std::future::ready(true)
        })
        .await;
        Ok(())
    }
}

async fn serve(
    conn: ConnId,
    stream: TcpStream,
    index: &Mutex<IndexServer>,
    peers: &Peers,
    on_event: &(dyn Fn(ServerEvent) + Send + Sync),
    opts: &ServerOptions,
) -> String {
    let (mut rd, wr) = stream.into_split();
    let (queue, wrx) = peerconn::write_queue(opts.queue_limit);
    let kill = Arc::new(Notify::new());
    peers.lock().unwrap_or_else(|e| e.into_inner()).insert(
        conn,
        Peer {
            queue,
            kill: kill.clone(),
        },
    );
    // The writer reports its writes and its end here.
    let (ev_tx, mut ev_rx) = mpsc::channel::<ConnEvent<()>>(64);
    let writer = tokio::spawn(peerconn::writer::<
        (),
        std::convert::Infallible,
        ConnEvent<()>,
    >(0, wr, wrx, Limiter::unlimited(), ev_tx));
    let mut dec = Decoder::new(Limits::SERVER);
    // Control traffic only: 64 KiB reads are plenty.
    let mut buf = BytesMut::with_capacity(64 << 10);
    let mut logged_in = false;
    // The client's last message (or its connection): the timers count
    // from it, never from what the server sends, or a silent client that
    // others' callback requests keep writing to would stay for good.
    let mut heard = tokio::time::Instant::now();
    let reason = 'outer: loop {
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(64 << 10);
        }
        let wait = if logged_in {
            opts.idle_timeout
        } else {
            opts.login_timeout
        };
        let read = tokio::select! {
            r = tokio::time::timeout_at(heard + wait, rd.read_buf(&mut buf)) => r,
            () = kill.notified() => break NOT_READING.to_string(),
            e = ev_rx.recv() => match e {
                Some(ConnEvent::Sent { .. }) => continue,
                _ => break "write failed".to_string(),
            },
        };
        match read {
            Err(_) if logged_in => break "idle".to_string(),
            Err(_) => break "no login".to_string(),
            Ok(Ok(0)) => break "eof".to_string(),
            Ok(Ok(_)) => heard = tokio::time::Instant::now(),
            Ok(Err(e)) => break e.to_string(),
        }
        loop {
            let pkt = match dec.decode(&mut buf) {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(e) => break 'outer format!("bad frame: {e}"),
            };
            let msg = match ClientToServer::decode(&pkt) {
                Ok(m) => m,
                Err(e) => break 'outer format!("bad message: {e}"),
            };
            logged_in |= matches!(msg, ClientToServer::Login { .. });
            let (out, events) = {
                let mut ix = index.lock().unwrap_or_else(|e| e.into_inner());
                let r = ix.handle(conn, msg);
                (r, ix.take_events())
            };
            events.into_iter().for_each(on_event);
            match out {
                Ok(replies) => send_replies(peers, replies),
                Err(e) => break 'outer e.to_string(),
            }
        }
    };
    peers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&conn);
    if reason == NOT_READING {
        writer.abort();
    } else {
        // Queued replies drain (for at most the linger time), then the
        // connection closes.
        let abort = writer.abort_handle();
        if tokio::time::timeout(peerconn::WRITE_LINGER, writer)
            .await
            .is_err()
        {
            abort.abort();
        }
    }
    reason
}

/// Queues replies; a connection whose queue is full is ended.
fn send_replies(peers: &Peers, replies: Vec<(ConnId, weir_ed2k::server::ServerToClient)>) {
    let mut peers = peers.lock().unwrap_or_else(|e| e.into_inner());
    for (to, m) in replies {
        let Some(p) = peers.get(&to) else {
            continue;
        };
        let mut b = BytesMut::new();
        m.encode(&mut b);
        let o = Outgoing {
            data: vec![Bytes::from(b)],
            payload: 0,
        };
        if let Err(e) = p.queue.send(o) {
            tracing::info!("ed2k-server: conn {to}: {e}; dropped");
            p.kill.notify_one();
            peers.remove(&to);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use weir_ed2k::Md4Hash;
    use weir_ed2k::server::{OfferedFile, ServerToClient, ft};
    use weir_ed2k::tag::Tag;

    async fn client(addr: SocketAddr) -> (TcpStream, Decoder, BytesMut) {
        let s = net::connect_tcp(&NetPolicy::loopback(), addr)
            .await
            .unwrap();
        (s, Decoder::new(Limits::CLIENT), BytesMut::new())
    }

    async fn send(s: &mut TcpStream, m: ClientToServer) {
        let mut b = BytesMut::new();
        m.encode(&mut b);
        s.write_all(&b).await.unwrap();
    }

    async fn recv(c: &mut (TcpStream, Decoder, BytesMut)) -> ServerToClient {
        loop {
            if let Some(p) = c.1.decode(&mut c.2).unwrap() {
                return ServerToClient::decode(&p).unwrap();
            }
            let n = c.0.read_buf(&mut c.2).await.unwrap();
            assert!(n > 0, "server closed");
        }
    }

    fn login(port: u16) -> ClientToServer {
        ClientToServer::Login {
            user_hash: Md4Hash([port as u8; 16]),
            client_id: 0,
            port,
            tags: vec![],
        }
    }

    #[tokio::test]
    async fn two_clients_find_each_other() {
        let server = Ed2kServer::bind(
            "127.0.0.1:0".parse().unwrap(),
            ServerOptions::new(NetPolicy::loopback(), ServerConfig::default()),
        )
        .await
        .unwrap();
        let addr = server.local_addr().unwrap();
        let (ev_tx, mut ev_rx) = mpsc::unbounded_channel();
        tokio::spawn(server.run(move |e| {
            let _ = ev_tx.send(e);
        }));
        let mut a = client(addr).await;
        send(&mut a.0, login(5001)).await;
        for _ in 0..4 {
            recv(&mut a).await;
        }
        let file = Md4Hash([9; 16]);
        send(
            &mut a.0,
            ClientToServer::OfferFiles {
                files: vec![OfferedFile {
                    hash: file,
                    client_id: 0,
                    port: 0,
                    tags: vec![Tag::u32(ft::FILESIZE, 10)],
                }],
                new_tags: true,
            },
        )
        .await;
        // Wait for the offer to be indexed (event), not for time.
        loop {
            if let Some(ServerEvent::Offered { .. }) = ev_rx.recv().await {
                break;
            }
        }
        let mut b = client(addr).await;
        send(&mut b.0, login(5002)).await;
        let first = recv(&mut b).await;
        assert!(matches!(first, ServerToClient::Message { .. }));
        for _ in 0..3 {
            recv(&mut b).await;
        }
        send(
            &mut b.0,
            ClientToServer::GetSources {
                file,
                size: Some(10),
                obfu: false,
            },
        )
        .await;
        match recv(&mut b).await {
            ServerToClient::FoundSources { sources, .. } => {
                assert_eq!(sources.len(), 1);
                assert_eq!(sources[0].port, 5001);
                assert_eq!(
                    weir_ed2k::client::hello::id_to_ip(sources[0].id),
                    std::net::Ipv4Addr::LOCALHOST
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn garbage_closes_the_connection() {
        let server = Ed2kServer::bind(
            "127.0.0.1:0".parse().unwrap(),
            ServerOptions::new(NetPolicy::loopback(), ServerConfig::default()),
        )
        .await
        .unwrap();
        let addr = server.local_addr().unwrap();
        tokio::spawn(server.run(|_| {}));
        let mut s = net::connect_tcp(&NetPolicy::loopback(), addr)
            .await
            .unwrap();
        s.write_all(&[0x00, 1, 0, 0, 0, 1]).await.unwrap();
        let mut b = [0u8; 16];
        assert_eq!(s.read(&mut b).await.unwrap(), 0);
        // An oversized frame too.
        let mut s = net::connect_tcp(&NetPolicy::loopback(), addr)
            .await
            .unwrap();
        s.write_all(&[0xE3, 0xff, 0xff, 0xff, 0x7f]).await.unwrap();
        assert_eq!(s.read(&mut b).await.unwrap(), 0);
    }
}
