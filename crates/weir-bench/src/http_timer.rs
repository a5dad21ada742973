//! One HTTP/1.1 POST on a blocking socket, timed from the connect to the
//! last byte of the answer: what an RPC latency bench measures the server
//! with.
//!
//! Why not [`weir_daemon::client::RpcClient`]: a hyper client costs about
//! half a millisecond of its own per exchange on this 2-core machine (its
//! connection task, the body's channel, the collected frames), as much as
//! weir's whole `torrent-get` of 1,000 transfers; timed through it, the
//! servers' difference drowns in the client's constant. This exchange is a
//! connect, one write, reads into one reused buffer until the server closes
//! (`Connection: close`), and a parse of the head with `httparse`: what a
//! plain C client such as transmission-remote's libcurl does.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// The most an answer may hold.
const MAX_ANSWER: usize = 256 << 20;

/// A timed answer.
pub struct Timed {
    /// From before the connect to the server's close after the last byte.
    pub elapsed: Duration,
    /// The HTTP status code.
    pub status: u16,
    /// The `X-Transmission-Session-Id` the answer carries, if any.
    pub session_id: Option<String>,
    /// The body, with any chunked transfer coding removed.
    pub body: Vec<u8>,
}

/// POSTs `body` to `path` at `addr` with the Transmission session id
/// `session_id`; `buf` is reused between calls for the raw answer.
pub fn post(
    addr: SocketAddr,
    path: &str,
    session_id: &str,
    body: &[u8],
    buf: &mut Vec<u8>,
) -> anyhow::Result<Timed> {
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         X-Transmission-Session-Id: {session_id}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    buf.clear();
    let t = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    s.write_all(&req)?;
    read_to_close(&mut s, buf)?;
    let elapsed = t.elapsed();
    let (status, session_id, body) = parse(buf)?;
    Ok(Timed {
        elapsed,
        status,
        session_id,
        body,
    })
}

/// Reads until the peer closes, growing `buf` in large steps.
fn read_to_close(s: &mut impl Read, buf: &mut Vec<u8>) -> anyhow::Result<()> {
    let mut len = buf.len();
    loop {
        if buf.len() - len < 64 * 1024 {
            if buf.len() >= MAX_ANSWER {
                bail!("the answer is larger than {MAX_ANSWER} bytes");
            }
            buf.resize((buf.len() * 2).clamp(256 * 1024, MAX_ANSWER), 0);
        }
        match s.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(k) => len += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("reading the answer"),
        }
    }
    buf.truncate(len);
    Ok(())
}

/// The status, session id and body of a whole answer in `raw`.
fn parse(raw: &[u8]) -> anyhow::Result<(u16, Option<String>, Vec<u8>)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    let head = match r.parse(raw).context("parsing the answer's head")? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => bail!("the answer ended inside its head"),
    };
    let status = r.code.context("no status")?;
    let header = |name: &str| {
        r.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
    };
    let session_id = r
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("x-transmission-session-id"))
        .map(|h| String::from_utf8_lossy(h.value).trim().to_owned());
    let rest = &raw[head..];
    if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        return Ok((status, session_id, dechunk(rest)?));
    }
    let body = match header("content-length") {
        Some(v) => {
            let n: usize = v.parse().context("a bad Content-Length")?;
            rest.get(..n)
                .with_context(|| format!("the body ended at {} of {n} bytes", rest.len()))?
        }
        None => rest,
    };
    Ok((status, session_id, body.to_vec()))
}

/// Removes the chunked transfer coding.
fn dechunk(mut rest: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(rest.len());
    loop {
        let line = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("a chunk size without its line end")?;
        let size_text = std::str::from_utf8(&rest[..line])?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .with_context(|| format!("a bad chunk size {size_text:?}"))?;
        rest = &rest[line + 2..];
        if size == 0 {
            return Ok(out);
        }
        let chunk = rest
            .get(..size)
            .context("the answer ended inside a chunk")?;
        out.extend_from_slice(chunk);
        rest = rest
            .get(size + 2..)
            .context("a chunk without its line end")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_bodies_are_cut_at_their_length() {
        let (s, id, b) = parse(
            b"HTTP/1.1 200 OK\r\nX-Transmission-Session-Id: ab12 \r\nContent-Length: 5\r\n\r\nhelloEXTRA",
        )
        .unwrap();
        assert_eq!((s, b.as_slice()), (200, &b"hello"[..]));
        assert_eq!(id.as_deref(), Some("ab12"));
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhello").is_err());
    }

    #[test]
    fn chunked_bodies_are_joined() {
        let raw = b"HTTP/1.1 409 Conflict\r\ntransfer-encoding: chunked\r\n\r\n\
                    3\r\nabc\r\na;x=1\r\n0123456789\r\n0\r\n\r\n";
        let (s, id, b) = parse(raw).unwrap();
        assert_eq!((s, id), (409, None));
        assert_eq!(b, b"abc0123456789");
        assert!(dechunk(b"3\r\nab").is_err());
        assert!(dechunk(b"zz\r\n").is_err());
    }

    #[test]
    fn bodies_without_a_length_run_to_the_close() {
        let (s, _, b) = parse(b"HTTP/1.0 200 OK\r\n\r\nall of it").unwrap();
        assert_eq!((s, b.as_slice()), (200, &b"all of it"[..]));
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-").is_err());
    }

    #[test]
    fn an_exchange_with_a_real_listener() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut got = Vec::new();
            let mut b = [0u8; 4096];
            while !got.ends_with(b"{}") {
                let k = c.read(&mut b).unwrap();
                assert!(k > 0, "the request ended early");
                got.extend_from_slice(&b[..k]);
            }
            let body = vec![b'x'; 300_000];
            write!(
                c,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .unwrap();
            c.write_all(&body).unwrap();
            String::from_utf8(got).unwrap()
        });
        let mut buf = Vec::new();
        let t = post(addr, "/transmission/rpc", "abc", b"{}", &mut buf).unwrap();
        let req = server.join().unwrap();
        assert!(req.starts_with("POST /transmission/rpc HTTP/1.1\r\n"));
        assert!(req.contains("X-Transmission-Session-Id: abc\r\n"));
        assert!(req.contains("Content-Length: 2\r\n"));
        assert_eq!(t.status, 200);
        assert_eq!(t.body.len(), 300_000);
        assert!(t.body.iter().all(|&c| c == b'x'));
    }
}
