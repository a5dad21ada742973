//! Batched UDP on a [`PolicedUdp`]: many datagrams per system call,
//! `sendmmsg(2)` and `recvmmsg(2)` on Linux (one datagram per call
//! elsewhere).
//!
//! Why: a uTP transfer over loopback moves tens of thousands of datagrams
//! a second each way, and one `sendto`/`recvfrom` (plus a tokio readiness
//! check and, on receipt, a lock of the uTP endpoint) per datagram was a
//! large share of the CPU both ends spent. A batch pays the system call,
//! the readiness check and the lock once.
//!
//! The policy stays as on the single calls: every destination is checked
//! before anything is sent (a refused one is counted, never sent) and
//! every source after receipt (a refused one is dropped).
//!
//! ```text
//! BatchSender::send(items) -- runs of allowed destinations --> sendmmsg
//!     (WouldBlock: waits for writability; a partial send goes on from
//!     the first datagram not sent; an error is that datagram's, counted)
//! RecvBatch::try_recv -- recvmmsg into slots allocated once --> iter()
//! ```

use std::io;
use std::net::SocketAddr;

use crate::net::PolicedUdp;

/// Datagrams per system call, at most (the headers of one call are built
/// on the stack).
pub const MAX_BATCH: usize = 64;

/// What a [`BatchSender::send`] did with its datagrams.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendCount {
    /// Handed to the kernel.
    pub sent: u64,
    /// Refused by the network policy (never sent).
    pub refused: u64,
    /// Refused by the system (each counted once, then skipped).
    pub errors: u64,
}

/// Sends batches of datagrams; holds what a batch needs between calls
/// (the destinations in the kernel's form), allocated once.
#[derive(Debug, Default)]
pub struct BatchSender {
    #[cfg(target_os = "linux")]
    addrs: Vec<socket2::SockAddr>,
}

impl BatchSender {
    /// A sender with nothing allocated yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends every item (`get` gives its destination and bytes), in
    /// order, waiting for the socket to be writable when its buffer is
    /// full. Destinations outside the policy are counted as refused and
    /// skipped; a datagram the system refuses is counted as an error and
    /// skipped.
    pub async fn send<T, G>(&mut self, sock: &PolicedUdp, items: &[T], get: G) -> SendCount
    where
        G: Fn(&T) -> (SocketAddr, &[u8]),
    {
        let mut c = SendCount::default();
        let mut i = 0;
        while i < items.len() {
            let dst = get(&items[i]).0;
            if !sock.allows(dst) {
                tracing::debug!("datagram to {dst} not sent: outside network policy");
                c.refused += 1;
                i += 1;
                continue;
            }
            // The run of allowed destinations from `i`.
            let mut j = i + 1;
            while j < items.len() && j - i < MAX_BATCH && sock.allows(get(&items[j]).0) {
                j += 1;
            }
            match self.send_run(sock, &items[i..j], &get).await {
                Ok(n) if n > 0 => {
                    c.sent += n as u64;
                    i += n;
                }
                Ok(_) => {
                    c.errors += 1;
                    i += 1;
                }
                Err(e) => {
                    // sendmmsg reports an error only for the first
                    // datagram of the call (later ones end it short).
                    tracing::trace!("datagram to {dst}: {e}");
                    c.errors += 1;
                    i += 1;
                }
            }
        }
        c
    }

    /// Sends a run of allowed datagrams (at most [`MAX_BATCH`]): how many
    /// went (at least one), or the first one's error.
    #[cfg(target_os = "linux")]
    async fn send_run<T, G>(&mut self, sock: &PolicedUdp, run: &[T], get: &G) -> io::Result<usize>
    where
        G: Fn(&T) -> (SocketAddr, &[u8]),
    {
        self.addrs.clear();
        self.addrs.extend(
            run.iter()
                .map(|t| socket2::SockAddr::from(sock.wire(get(t).0))),
        );
        let addrs = &self.addrs;
        let s = sock.as_socket();
        s.async_io(tokio::io::Interest::WRITABLE, || {
            sys::sendmmsg(s, run, addrs, get)
        })
        .await
    }

    /// One datagram per call where `sendmmsg` is not there.
    #[cfg(not(target_os = "linux"))]
    async fn send_run<T, G>(&mut self, sock: &PolicedUdp, run: &[T], get: &G) -> io::Result<usize>
    where
        G: Fn(&T) -> (SocketAddr, &[u8]),
    {
        let (dst, data) = get(&run[0]);
        sock.send_to(data, dst).await.map(|_| 1)
    }
}

/// One datagram of a [`RecvBatch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received<'a> {
    /// Its source (allowed by the policy).
    pub from: SocketAddr,
    /// Its bytes: at most the batch's `max + 1` (one more than kept, so a
    /// longer datagram shows as longer than `max`).
    pub data: &'a [u8],
    /// Longer than `max` (the kernel cut it: `MSG_TRUNC`, or the extra
    /// byte filled).
    pub truncated: bool,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    slot: usize,
    len: usize,
    from: SocketAddr,
    truncated: bool,
}

/// Receives batches of datagrams into slots of `max + 1` bytes allocated
/// once (the extra byte tells a datagram longer than `max`).
#[derive(Debug)]
pub struct RecvBatch {
    buf: Vec<u8>,
    stride: usize,
    max: usize,
    #[cfg(target_os = "linux")]
    names: Vec<libc::sockaddr_storage>,
    /// What the last call returned, per datagram (length, flags, source).
    #[cfg(target_os = "linux")]
    raw: Vec<sys::Raw>,
    got: Vec<Slot>,
}

impl RecvBatch {
    /// Room for `slots` datagrams (at most [`MAX_BATCH`] are read per
    /// call) of up to `max` bytes.
    pub fn new(slots: usize, max: usize) -> Self {
        let slots = slots.clamp(1, MAX_BATCH);
        let stride = max + 1;
        RecvBatch {
            buf: vec![0; slots * stride],
            stride,
            max,
            // SAFETY: sockaddr_storage is a C struct of integers: all
            // zeros is a valid value.
            #[cfg(target_os = "linux")]
            #[allow(unsafe_code)]
            names: vec![unsafe { std::mem::zeroed() }; slots],
            #[cfg(target_os = "linux")]
            raw: Vec::with_capacity(slots),
            got: Vec::with_capacity(slots),
        }
    }

    /// Reads what is waiting, without blocking (tokio's readiness is
    /// cleared on `WouldBlock`, so [`PolicedUdp::readable`] waits again):
    /// how many datagrams from allowed sources were kept (others are
    /// dropped; 0 if all were), `WouldBlock` when none was waiting. The
    /// previous batch is forgotten.
    pub fn try_recv(&mut self, sock: &PolicedUdp) -> io::Result<usize> {
        self.got.clear();
        self.recv(sock)?;
        Ok(self.got.len())
    }

    #[cfg(target_os = "linux")]
    fn recv(&mut self, sock: &PolicedUdp) -> io::Result<()> {
        let s = sock.as_socket();
        let (buf, names, raw) = (&mut self.buf, &mut self.names, &mut self.raw);
        let stride = self.stride;
        s.try_io(tokio::io::Interest::READABLE, || {
            sys::recvmmsg(s, buf, stride, names, raw)
        })?;
        for (slot, &(len, flags, from)) in self.raw.iter().enumerate() {
            let Some(from) = from else { continue };
            let from = weir_core::peers::canonical_addr(from);
            if !sock.allows(from) {
                tracing::debug!("datagram from {from} dropped: outside network policy");
                continue;
            }
            self.got.push(Slot {
                slot,
                len: len.min(stride),
                from,
                truncated: flags & libc::MSG_TRUNC != 0 || len > self.max,
            });
        }
        Ok(())
    }

    #[cfg(not(target_os = "linux"))]
    fn recv(&mut self, sock: &PolicedUdp) -> io::Result<()> {
        if let Some((len, from)) = sock.try_recv_from(&mut self.buf[..self.stride])? {
            self.got.push(Slot {
                slot: 0,
                len,
                from,
                truncated: len > self.max,
            });
        }
        Ok(())
    }

    /// Datagrams of the last [`RecvBatch::try_recv`].
    pub fn len(&self) -> usize {
        self.got.len()
    }

    /// Whether the last [`RecvBatch::try_recv`] kept nothing.
    pub fn is_empty(&self) -> bool {
        self.got.is_empty()
    }

    /// The `i`th datagram of the last [`RecvBatch::try_recv`].
    pub fn get(&self, i: usize) -> Received<'_> {
        let s = self.got[i];
        let start = s.slot * self.stride;
        Received {
            from: s.from,
            data: &self.buf[start..start + s.len],
            truncated: s.truncated,
        }
    }

    /// The datagrams of the last [`RecvBatch::try_recv`], in arrival order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Received<'_>> + '_ {
        (0..self.got.len()).map(|i| self.get(i))
    }
}

/// The system calls (the only `unsafe` of the module).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod sys {
    use std::io;
    use std::mem;
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
    use std::os::fd::AsRawFd;
    use std::ptr;

    use libc::{c_void, iovec, mmsghdr, sockaddr_storage, socklen_t};

    use super::MAX_BATCH;

    fn no_iov() -> iovec {
        iovec {
            iov_base: ptr::null_mut(),
            iov_len: 0,
        }
    }

    fn zeroed_headers() -> [mmsghdr; MAX_BATCH] {
        // SAFETY: mmsghdr is a C struct of integers and pointers (and
        // padding): all zeros is a valid value (null pointers, zero
        // lengths, no flags).
        unsafe { mem::zeroed() }
    }

    /// One `sendmmsg` of `run` (at most [`MAX_BATCH`]) to `addrs` (one
    /// each): how many datagrams went.
    pub(super) fn sendmmsg<T, G>(
        sock: &impl AsRawFd,
        run: &[T],
        addrs: &[socket2::SockAddr],
        get: &G,
    ) -> io::Result<usize>
    where
        G: Fn(&T) -> (SocketAddr, &[u8]),
    {
        let n = run.len().min(addrs.len()).min(MAX_BATCH);
        let mut iov = [no_iov(); MAX_BATCH];
        for (v, t) in iov.iter_mut().zip(&run[..n]) {
            let data = get(t).1;
            // The kernel only reads through iov_base (sendmmsg takes a
            // non-const pointer type for both directions).
            *v = iovec {
                iov_base: data.as_ptr() as *mut c_void,
                iov_len: data.len(),
            };
        }
        let iov_base = iov.as_mut_ptr();
        let mut hdr = zeroed_headers();
        for (k, (h, a)) in hdr.iter_mut().zip(&addrs[..n]).enumerate() {
            h.msg_hdr.msg_name = a.as_ptr() as *mut c_void;
            h.msg_hdr.msg_namelen = a.len();
            h.msg_hdr.msg_iov = iov_base.wrapping_add(k);
            h.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `hdr[..n]` are initialised headers, each naming one
        // address (`addrs[k]`, a valid sockaddr of `len()` bytes) and one
        // iovec (`iov[k]`, within the array) over one item's bytes; every
        // buffer is borrowed for this whole call and the kernel only reads
        // them (it writes just each header's msg_len, inside `hdr`).
        // `n <= MAX_BATCH` is the length of both arrays.
        let r = unsafe { libc::sendmmsg(sock.as_raw_fd(), hdr.as_mut_ptr(), n as _, 0) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }

    /// A received datagram: its length, its flags and its source (`None`
    /// for an unknown family).
    pub(super) type Raw = (usize, libc::c_int, Option<SocketAddr>);

    /// One `recvmmsg` into the `stride`-byte slots of `buf` (as many as
    /// `names` has, at most [`MAX_BATCH`]); `out` gets one [`Raw`] per
    /// datagram received, in slot order.
    pub(super) fn recvmmsg(
        sock: &impl AsRawFd,
        buf: &mut [u8],
        stride: usize,
        names: &mut [sockaddr_storage],
        out: &mut Vec<Raw>,
    ) -> io::Result<()> {
        out.clear();
        let n = names.len().min(buf.len() / stride.max(1)).min(MAX_BATCH);
        let mut iov = [no_iov(); MAX_BATCH];
        let base = buf.as_mut_ptr();
        for (k, v) in iov.iter_mut().enumerate().take(n) {
            *v = iovec {
                iov_base: base.wrapping_add(k * stride) as *mut c_void,
                iov_len: stride,
            };
        }
        let iov_base = iov.as_mut_ptr();
        let names_base = names.as_mut_ptr();
        let mut hdr = zeroed_headers();
        for (k, h) in hdr.iter_mut().enumerate().take(n) {
            h.msg_hdr.msg_name = names_base.wrapping_add(k) as *mut c_void;
            h.msg_hdr.msg_namelen = mem::size_of::<sockaddr_storage>() as socklen_t;
            h.msg_hdr.msg_iov = iov_base.wrapping_add(k);
            h.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `hdr[..n]` are initialised headers, each naming one
        // `sockaddr_storage` of `names` (`msg_namelen` its size) and one
        // iovec of `iov` over the `k`th `stride`-byte slot of `buf`
        // (`n * stride <= buf.len()`); `buf` and `names` are borrowed
        // mutably for this whole call and the kernel writes at most
        // `iov_len`/`msg_namelen` bytes into each. No timeout pointer
        // (null), and MSG_DONTWAIT: the call never blocks.
        let r = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                hdr.as_mut_ptr(),
                n as _,
                libc::MSG_DONTWAIT as _,
                ptr::null_mut(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        out.extend(hdr[..r as usize].iter().zip(names.iter()).map(|(h, s)| {
            (
                h.msg_len as usize,
                h.msg_hdr.msg_flags,
                decode(s, h.msg_hdr.msg_namelen),
            )
        }));
        Ok(())
    }

    /// The address the kernel wrote into `s` (`len` bytes).
    fn decode(s: &sockaddr_storage, len: socklen_t) -> Option<SocketAddr> {
        let len = len as usize;
        match s.ss_family as libc::c_int {
            libc::AF_INET if len >= mem::size_of::<libc::sockaddr_in>() => {
                // SAFETY: the family says the kernel wrote a sockaddr_in
                // (of `len` bytes, checked above); sockaddr_storage is
                // large and aligned enough for any sockaddr.
                let a = unsafe { &*(s as *const sockaddr_storage).cast::<libc::sockaddr_in>() };
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                    u16::from_be(a.sin_port),
                )))
            }
            libc::AF_INET6 if len >= mem::size_of::<libc::sockaddr_in6>() => {
                // SAFETY: as above, for a sockaddr_in6.
                let a = unsafe { &*(s as *const sockaddr_storage).cast::<libc::sockaddr_in6>() };
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(a.sin6_addr.s6_addr),
                    u16::from_be(a.sin6_port),
                    a.sin6_flowinfo,
                    a.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
