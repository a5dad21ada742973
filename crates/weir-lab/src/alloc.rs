//! A global allocator that counts the heap bytes allocated and not yet
//! freed, for tests that bound what a structure holds. A test binary
//! installs it with
//! `#[global_allocator] static A: weir_lab::alloc::Counting = weir_lab::alloc::Counting;`
//! and reads [`live`] before and after building what it measures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// Bytes allocated and not yet freed, by every thread of the binary.
static LIVE: AtomicIsize = AtomicIsize::new(0);

/// The bytes allocated through [`Counting`] and not yet freed (what the
/// allocations asked for, not the allocator's overhead).
pub fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// [`System`], counting sizes into [`live`].
pub struct Counting;

// SAFETY: every call is passed unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the counter is only arithmetic on the sizes the
// caller gave (an atomic, so any thread may allocate).
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's layout, passed on (see the impl).
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with this layout (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: `ptr` came from `System` with `layout` (see `alloc`).
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
