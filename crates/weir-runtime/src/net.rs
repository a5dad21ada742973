//! Sockets under the network policy.
//!
//! Nothing in weir opens a socket, accepts a connection or sends a datagram
//! except through these functions; each checks the address against the
//! [`NetPolicy`] first and logs every refusal with the address and the list.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream, UdpSocket};
use weir_core::policy::NetPolicy;

fn refuse(policy: &NetPolicy, addr: SocketAddr, what: &str) -> io::Result<()> {
    match policy.check(addr) {
        Ok(()) => Ok(()),
        Err(e) => {
            tracing::warn!("{what} {addr} refused: {e}");
            Err(io::Error::new(io::ErrorKind::PermissionDenied, e))
        }
    }
}

/// Connects to `addr` if the policy allows it.
pub async fn connect_tcp(policy: &NetPolicy, addr: SocketAddr) -> io::Result<TcpStream> {
    refuse(policy, addr, "connect to")?;
    TcpStream::connect(addr).await
}

/// Connects to `addr` from `local` (when given and not unspecified), so
/// the peer and trackers see the address we listen on, if the policy
/// allows `addr`.
pub async fn connect_tcp_from(
    policy: &NetPolicy,
    local: Option<std::net::IpAddr>,
    addr: SocketAddr,
) -> io::Result<TcpStream> {
    refuse(policy, addr, "connect to")?;
    let Some(ip) = local.filter(|ip| !ip.is_unspecified() && ip.is_ipv4() == addr.is_ipv4()) else {
        return TcpStream::connect(addr).await;
    };
    let sock = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    sock.bind(SocketAddr::new(ip, 0))?;
    sock.connect(addr).await
}

/// Binds a listener on `addr`. Binding sends nothing; connections it
/// accepts are checked by [`accept_tcp`].
pub async fn listen_tcp(addr: SocketAddr) -> io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Accepts the next connection whose peer address the policy allows;
/// connections from other addresses are closed at once and logged.
pub async fn accept_tcp(
    policy: &NetPolicy,
    listener: &TcpListener,
) -> io::Result<(TcpStream, SocketAddr)> {
    loop {
        let (stream, addr) = listener.accept().await?;
        if refuse(policy, addr, "incoming connection from").is_ok() {
            return Ok((stream, addr));
        }
        drop(stream);
    }
}

/// A UDP socket that checks every destination and every source against the
/// policy.
#[derive(Debug)]
pub struct PolicedUdp {
    sock: UdpSocket,
    policy: NetPolicy,
}

impl PolicedUdp {
    /// Binds a UDP socket on `addr`.
    pub async fn bind(policy: &NetPolicy, addr: SocketAddr) -> io::Result<Self> {
        Ok(Self {
            sock: UdpSocket::bind(addr).await?,
            policy: policy.clone(),
        })
    }

    /// Sends a datagram if the policy allows its destination.
    pub async fn send_to(&self, buf: &[u8], to: SocketAddr) -> io::Result<usize> {
        refuse(&self.policy, to, "datagram to")?;
        self.sock.send_to(buf, to).await
    }

    /// Receives the next datagram from an allowed source (others are dropped).
    pub async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        loop {
            let (n, from) = self.sock.recv_from(buf).await?;
            if self.policy.allows(from.ip()) {
                return Ok((n, from));
            }
            tracing::warn!(
                "datagram from {from} dropped: outside network policy {}",
                self.policy
            );
        }
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connect_outside_policy_is_refused_without_a_packet() {
        let err = connect_tcp(&NetPolicy::loopback(), "192.0.2.1:9".parse().unwrap())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        let udp = PolicedUdp::bind(&NetPolicy::loopback(), "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let err = udp
            .send_to(b"x", "198.51.100.1:53".parse().unwrap())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
    }

    #[tokio::test]
    async fn loopback_connect_and_accept_work() {
        let policy = NetPolicy::loopback();
        let l = listen_tcp("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = l.local_addr().unwrap();
        let (c, a) = tokio::join!(connect_tcp(&policy, addr), accept_tcp(&policy, &l));
        assert!(c.is_ok());
        assert!(a.unwrap().1.ip().is_loopback());
    }
}
