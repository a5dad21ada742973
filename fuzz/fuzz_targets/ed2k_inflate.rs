//! weir-ed2k `inflate`: `inflate_bounded` (packed packets) and
//! `BlockInflater` (compressed part data arriving in pieces).
//!
//! Checked against a plain, unbounded use of the same zlib library: the
//! bounded inflater must give exactly the reference's bytes when those fit
//! the limit and the stream ends where the input ends, and an error
//! otherwise (`TooLarge` when the output is over the limit). Feeding the
//! stream in pieces must give the same bytes. What it inflates deflates
//! (`deflate_if_smaller`) and inflates back.
#![no_main]

use flate2::{Decompress, FlushDecompress, Status};
use libfuzzer_sys::fuzz_target;
use weir_ed2k::inflate::{BlockInflater, InflateError, deflate_if_smaller, inflate_bounded};
use weir_fuzz::{Input, chunks};

/// What zlib makes of `data`, at most `cap` bytes: the output, whether the
/// stream ended, input bytes used, and whether zlib reported corruption.
fn reference(data: &[u8], cap: usize) -> (Vec<u8>, bool, usize, bool) {
    let mut z = Decompress::new(true);
    let mut out = Vec::with_capacity(cap.min(1 << 22));
    loop {
        if out.len() == out.capacity() {
            if out.len() >= cap {
                return (out, false, z.total_in() as usize, false);
            }
            out.reserve((cap - out.len()).min(1 << 16));
        }
        let (in0, out0) = (z.total_in(), z.total_out());
        match z.decompress_vec(
            &data[z.total_in() as usize..],
            &mut out,
            FlushDecompress::None,
        ) {
            Err(_) => return (out, false, z.total_in() as usize, true),
            Ok(Status::StreamEnd) => return (out, true, z.total_in() as usize, false),
            Ok(_) if z.total_in() == in0 && z.total_out() == out0 && out.len() < out.capacity() => {
                return (out, false, z.total_in() as usize, false);
            }
            Ok(_) => {}
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let limit = match inp.byte() % 4 {
        0 => 0,
        1 => usize::from(inp.byte()),
        2 => usize::from(inp.u16()),
        _ => 250_000,
    };
    let seed = inp.byte();
    let z = inp.rest();

    let got = inflate_bounded(z, limit);
    let (want, ended, used, corrupt) = reference(z, limit + 1);
    let over = want.len() > limit;
    match &got {
        Ok(out) => {
            assert!(
                ended && used == z.len() && !over,
                "bounded inflate accepted what zlib does not"
            );
            assert_eq!(&out[..], &want[..]);
        }
        // zlib decodes ahead into its window, so where it notices corrupt
        // data depends on the output room it is given: near the limit,
        // either error is right.
        Err(InflateError::TooLarge { limit: l }) => {
            assert_eq!(*l, limit as u64);
            assert!(over || corrupt, "TooLarge for {} bytes", want.len());
        }
        Err(InflateError::Corrupt(_)) => assert!(corrupt || over, "zlib found it valid"),
        Err(InflateError::Incomplete) => assert!(!ended && !corrupt && !over),
        Err(InflateError::Trailing(n)) => assert!(ended && *n == z.len() - used && !over),
    }
    if ended && used == z.len() && !over {
        assert!(got.is_ok(), "zlib inflates it within the limit: {got:?}");
    }

    // The same stream in pieces.
    let mut b = BlockInflater::new(limit as u64);
    let mut out = Vec::new();
    let mut first_err = None;
    for c in chunks(z, seed) {
        match b.feed(c) {
            Ok(o) => {
                out.extend_from_slice(&o);
                assert!(out.len() <= limit);
                assert_eq!(b.total_out(), out.len() as u64);
            }
            Err(e) => {
                first_err = Some(e);
                break;
            }
        }
    }
    match &got {
        Ok(whole) => {
            assert_eq!(first_err, None);
            assert!(b.is_done());
            assert_eq!(&out[..], &whole[..]);
            if whole.len() > 1 << 16 {
                return; // deflating 250 kB again on every run costs more than it finds
            }
            if let Some(again) = deflate_if_smaller(whole, 6) {
                assert_eq!(inflate_bounded(&again, limit).as_deref(), Ok(&whole[..]));
            }
        }
        Err(InflateError::TooLarge { .. } | InflateError::Corrupt(_)) => {
            assert!(
                matches!(
                    first_err,
                    Some(InflateError::TooLarge { .. } | InflateError::Corrupt(_))
                ),
                "{first_err:?}"
            )
        }
        Err(InflateError::Incomplete) => assert!(first_err.is_none() && !b.is_done()),
        Err(InflateError::Trailing(_)) => assert!(first_err.is_some()),
    }
});
