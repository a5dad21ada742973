//! 16-bit sequence numbers with wrap-around.
//!
//! uTP numbers packets (not bytes) with a `u16` that wraps. Every comparison
//! goes through these helpers: `a` is "before" `b` when walking up from `a`
//! reaches `b` in fewer than 2^15 steps, so the order is right across the
//! wrap as long as the numbers compared are within half the space of each
//! other (a connection never has more than [`MAX_WINDOW_PACKETS`] packets
//! outstanding, far below that).

/// Most packets a connection keeps in flight or in its reorder buffer: well
/// under half the sequence space, so wrapped comparisons stay unambiguous.
pub const MAX_WINDOW_PACKETS: usize = 16_384;

/// Steps from `a` up to `b` (mod 2^16).
#[inline]
pub fn dist(a: u16, b: u16) -> u16 {
    b.wrapping_sub(a)
}

/// Signed distance from `a` to `b`: positive when `b` is after `a`.
#[inline]
pub fn diff(a: u16, b: u16) -> i32 {
    i32::from(b.wrapping_sub(a) as i16)
}

/// Whether `a` comes strictly before `b`.
#[inline]
pub fn lt(a: u16, b: u16) -> bool {
    diff(a, b) > 0
}

/// Whether `a` comes before `b` or is `b`.
#[inline]
pub fn le(a: u16, b: u16) -> bool {
    diff(a, b) >= 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn order_across_the_wrap() {
        assert!(lt(65535, 0));
        assert!(lt(65530, 5));
        assert!(!lt(5, 65530));
        assert!(le(7, 7));
        assert!(!lt(7, 7));
        assert_eq!(dist(65535, 1), 2);
        assert_eq!(diff(1, 65535), -2);
        assert_eq!(diff(65535, 1), 2);
    }

    proptest! {
        #[test]
        fn order_is_shift_invariant(a: u16, d in 1u16..0x7fff, shift: u16) {
            let b = a.wrapping_add(d);
            prop_assert!(lt(a, b));
            prop_assert!(!lt(b, a));
            prop_assert!(lt(a.wrapping_add(shift), b.wrapping_add(shift)));
            prop_assert_eq!(diff(a, b), i32::from(d));
        }
    }
}
