//! Reading a file through a read-only memory map that survives the file
//! shrinking under it.
//!
//! A recheck hashes data that is usually in the page cache: a `pread`
//! copies every byte into a buffer before the hash reads it again, and on
//! two cores that copy was a fifth of a 1 GiB check (0.38 s with reads,
//! 0.32 s hashing straight from a map, against 0.28 s of pure SHA-1). A map
//! has one hazard a read has not: a page past the file's end (the file
//! truncated by someone else while it is hashed, or a disk that fails to
//! page it in) raises `SIGBUS`, which kills the process. So every map made
//! here is registered while it lives, and a `SIGBUS` handler replaces the
//! faulting page of a registered map with a page of zeros and marks that
//! map faulted: the read goes on, and the caller, which asks
//! [`Guarded::faulted`] before trusting what it hashed, treats the range as
//! unreadable. A `SIGBUS` anywhere else goes to the handler that was there
//! before (Rust's own, which reports a stack overflow or restores the
//! default action, so the process dies as it would have).
//!
//! No `longjmp`: the handler only makes a system call and stores atomics,
//! and the faulting instruction runs again on the new page.

#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// How many maps may be registered at once (the pool's hash workers and
/// a few rechecks running together use far fewer); with none free,
/// [`Guarded::map`] fails and the caller reads instead.
const SLOTS: usize = 64;

/// One registered map: `[start, end)`, valid while `start != 0`.
struct Slot {
    claimed: AtomicBool,
    start: AtomicUsize,
    end: AtomicUsize,
    faulted: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    claimed: AtomicBool::new(false),
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    faulted: AtomicBool::new(false),
};

static REGISTRY: [Slot; SLOTS] = [FREE; SLOTS];

/// The page size, read once before the handler is installed.
static PAGE: AtomicUsize = AtomicUsize::new(0);

/// The `SIGBUS` action found when ours was installed (handed every fault
/// that is not in a registered map); `Err` if installing failed.
static PREVIOUS: OnceLock<Result<libc::sigaction, i32>> = OnceLock::new();

/// Installs the handler once; whether it is in place.
fn install() -> bool {
    PREVIOUS
        .get_or_init(|| {
            // SAFETY: sysconf has no preconditions.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            if page <= 0 {
                return Err(libc::EINVAL);
            }
            PAGE.store(page as usize, Ordering::Relaxed);
            // SAFETY: sigaction is a plain C struct: all zeros is a valid
            // value (no handler, empty mask, no flags), filled in below.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
            new.sa_sigaction = on_sigbus as *const () as usize;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            // SAFETY: both pointers are to live, initialised structs;
            // sa_mask is a valid sigset to empty.
            let r = unsafe {
                libc::sigemptyset(&mut new.sa_mask);
                libc::sigaction(libc::SIGBUS, &new, &mut old)
            };
            if r != 0 {
                return Err(io::Error::last_os_error().raw_os_error().unwrap_or(0));
            }
            Ok(old)
        })
        .is_ok()
}

/// The `SIGBUS` handler: see the module's documentation. Only atomics, a
/// lock-free `OnceLock::get`, `mmap` and `sigaction` (system calls) are
/// used here.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = PAGE.load(Ordering::Relaxed);
    for s in &REGISTRY {
        let start = s.start.load(Ordering::Acquire);
        if start == 0 || addr < start || addr >= s.end.load(Ordering::Acquire) {
            continue;
        }
        // The fault is in a registered map, which the faulting thread is
        // reading, so it stays mapped until this returns: put a private
        // page of zeros over the faulting page (MAP_FIXED replaces exactly
        // that page of that map; nothing else is touched).
        let at = addr & !(page - 1);
        // SAFETY: `at..at + page` lies inside a live map this module made
        // (registered ranges are page-aligned and whole pages), so
        // replacing it affects no other memory.
        let r = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if r != libc::MAP_FAILED {
            s.faulted.store(true, Ordering::Release);
            return;
        }
        break;
    }
    match PREVIOUS.get() {
        Some(Ok(old)) if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN => {
            if old.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: with SA_SIGINFO the previous handler was installed
                // as this three-argument function, and it gets the
                // arguments the kernel gave us.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(old.sa_sigaction) };
                f(sig, info, ctx);
            } else {
                // SAFETY: without SA_SIGINFO it is a one-argument handler.
                let f: extern "C" fn(libc::c_int) =
                    unsafe { std::mem::transmute(old.sa_sigaction) };
                f(sig);
            }
        }
        _ => {
            // No handler before ours: restore the default action and
            // return; the faulting instruction runs again and the process
            // dies of SIGBUS as it would have without us.
            // SAFETY: a zeroed sigaction with SIG_DFL (0) is the default
            // action; the pointers are valid.
            unsafe {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
            }
        }
    }
}

/// A read-only map of part of a file, registered with the `SIGBUS`
/// handler while it lives.
pub(crate) struct Guarded {
    /// The map's first byte (page-aligned).
    base: *mut libc::c_void,
    /// The map's length (whole pages).
    map_len: usize,
    /// Where the asked range starts within the map.
    skip: usize,
    /// The asked range's length.
    len: usize,
    slot: &'static Slot,
}

impl Guarded {
    /// Maps `len` bytes of `file` at `offset` (read-only, shared). Fails
    /// when `len` is 0, no registry slot is free, the handler could not be
    /// installed or the system refuses the map (some file systems cannot
    /// map): the caller then reads instead. The range should lie within the
    /// file: bytes past its end read as zeros and mark the map faulted.
    pub(crate) fn map(file: &File, offset: u64, len: usize) -> io::Result<Guarded> {
        if len == 0 || !install() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let page = PAGE.load(Ordering::Relaxed) as u64;
        let aligned = offset & !(page - 1);
        let skip = (offset - aligned) as usize;
        let map_len = (skip + len).div_ceil(page as usize) * page as usize;
        let off = libc::off_t::try_from(aligned)
            .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        let Some(slot) = REGISTRY.iter().find(|s| {
            s.claimed
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        }) else {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        };
        // SAFETY: a fresh read-only shared map chosen by the kernel (no
        // MAP_FIXED), of a descriptor that is open for the call.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                off,
            )
        };
        if base == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            slot.claimed.store(false, Ordering::Release);
            return Err(e);
        }
        slot.faulted.store(false, Ordering::Relaxed);
        slot.end.store(base as usize + map_len, Ordering::Release);
        // Set last: a non-zero start makes the slot live for the handler.
        slot.start.store(base as usize, Ordering::Release);
        Ok(Guarded {
            base,
            map_len,
            skip,
            len,
            slot,
        })
    }

    /// The mapped bytes. Pages past the file's end (it shrank after the
    /// map was made) read as zeros and set [`Guarded::faulted`].
    ///
    /// Another process writing the file while it is read can change these
    /// bytes under the slice (as with any shared map): a hash over them is
    /// then as wrong as a read made at that moment would have been, which
    /// piece verification catches; nothing here depends on them staying
    /// equal.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `base + skip .. + len` lies within the live, readable map
        // of `map_len` bytes this value owns until it is dropped, and the
        // slice borrows `self`. Faults in it are turned into zero pages by
        // the registered handler instead of killing the process.
        unsafe { std::slice::from_raw_parts((self.base as *const u8).add(self.skip), self.len) }
    }

    /// Whether a page could not be read (the file ended before it, or the
    /// disk failed): the bytes are then not the file's.
    pub(crate) fn faulted(&self) -> bool {
        self.slot.faulted.load(Ordering::Acquire)
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // Unregister first, so the handler never touches a range that is
        // being unmapped (or reused by a later map).
        self.slot.start.store(0, Ordering::Release);
        self.slot.end.store(0, Ordering::Release);
        // SAFETY: `base..base + map_len` is the map this value made; no
        // slice of it outlives `self`.
        unsafe {
            libc::munmap(self.base, self.map_len);
        }
        self.slot.claimed.store(false, Ordering::Release);
    }
}

// SAFETY: the map is read-only memory owned by the value; reading it from
// another thread is as sound as from this one (faults there are handled
// the same way: the registry is process-wide).
unsafe impl Send for Guarded {}

#[cfg(test)]
mod tests;
