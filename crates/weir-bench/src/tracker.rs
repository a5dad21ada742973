//! A fake HTTP tracker for scenarios: every announce gets the same
//! bencoded answer (set, and changed, by the scenario), and is counted.
//! The kill suite's daemon mode uses it to point `weir daemon` at the link
//! emulator; `hostile` to send a 1 MiB answer of peers.
//!
//! It runs on a thread of its own (its own tokio runtime), listening on
//! 127.0.0.1 through `weir_runtime::net`.

use std::net::{SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Largest announce request head read (a real one is < 1 KiB).
const MAX_HEAD: usize = 16 << 10;

/// A running fake tracker; stopped when dropped.
pub struct FakeTracker {
    addr: SocketAddr,
    body: Arc<Mutex<Vec<u8>>>,
    announces: Arc<AtomicU64>,
    stop: Arc<tokio::sync::Notify>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for FakeTracker {
    fn drop(&mut self) {
        self.stop.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A tracker answer naming `peers` (compact IPv4 form), re-announce after
/// `interval` seconds.
pub fn compact_answer(peers: &[SocketAddrV4], interval: u32) -> Vec<u8> {
    let mut compact = Vec::with_capacity(peers.len() * 6);
    for p in peers {
        compact.extend_from_slice(&p.ip().octets());
        compact.extend_from_slice(&p.port().to_be_bytes());
    }
    let mut body = format!("d8:intervali{interval}e5:peers{}:", compact.len()).into_bytes();
    body.extend_from_slice(&compact);
    body.push(b'e');
    body
}

impl FakeTracker {
    /// Starts a tracker on 127.0.0.1 answering `body` to every announce.
    pub fn start(body: Vec<u8>) -> anyhow::Result<Self> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let listener = rt.block_on(weir_runtime::net::listen_tcp("127.0.0.1:0".parse()?))?;
        let addr = listener.local_addr()?;
        let body = Arc::new(Mutex::new(body));
        let announces = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(tokio::sync::Notify::new());
        let (b, n, halt) = (body.clone(), announces.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let policy = weir_core::policy::NetPolicy::loopback();
            rt.block_on(async move {
                loop {
                    let accepted = tokio::select! {
                        a = weir_runtime::net::accept_tcp(&policy, &listener) => a,
                        _ = halt.notified() => return,
                    };
                    let Ok((mut s, _)) = accepted else { continue };
                    let (b, n) = (b.clone(), n.clone());
                    tokio::spawn(async move {
                        let mut head = Vec::new();
                        let mut buf = [0u8; 2048];
                        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
                            match s.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(k) => head.extend_from_slice(&buf[..k]),
                            }
                        }
                        n.fetch_add(1, Ordering::Relaxed);
                        let body = b.lock().unwrap_or_else(|p| p.into_inner()).clone();
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        );
                        let _ = s.write_all(resp.as_bytes()).await;
                        let _ = s.write_all(&body).await;
                        let _ = s.shutdown().await;
                    });
                }
            });
        });
        Ok(Self {
            addr,
            body,
            announces,
            stop,
            thread: Some(thread),
        })
    }

    /// The announce URL.
    pub fn url(&self) -> String {
        format!("http://{}/announce", self.addr)
    }

    /// Replaces the answer given from now on.
    pub fn set_answer(&self, body: Vec<u8>) {
        *self.body.lock().unwrap_or_else(|p| p.into_inner()) = body;
    }

    /// Announces answered so far.
    pub fn announces(&self) -> u64 {
        self.announces.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_answers() {
        let a = compact_answer(&["127.0.0.1:6881".parse().unwrap()], 30);
        assert_eq!(
            a,
            b"d8:intervali30e5:peers6:\x7f\x00\x00\x01\x1a\xe1e".to_vec()
        );
        let big: Vec<SocketAddrV4> = (0..174_000u32)
            .map(|i| SocketAddrV4::new((0x7f00_0000 | i).into(), 9))
            .collect();
        let n = compact_answer(&big, 1800).len();
        assert!((1_044_000..1_044_100).contains(&n), "{n}");
    }
}
