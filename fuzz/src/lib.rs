//! Helpers shared by weir's fuzz targets (`fuzz_targets/*.rs`).
//!
//! A target gets one byte string from libFuzzer. Many targets first take a
//! few bytes of it as choices (limits, flags, where to cut the stream) with
//! [`Input`], and feed the rest to the decoder; [`chunks`] cuts a stream
//! into the pieces a socket might deliver, so a target can check that a
//! streaming decoder gives the same answer however its input is split.

/// A cursor over the fuzzer's bytes that hands out choices. Past the end
/// every read returns zeros, so every input is usable.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    /// The next byte (0 past the end).
    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    /// The next two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    /// The next four bytes, little-endian.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    /// The next eight bytes, little-endian.
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }

    /// The next `n` bytes (fewer at the end).
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    /// Whether everything was read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Everything not read yet.
    pub fn rest(self) -> &'a [u8] {
        self.data
    }
}

/// Cuts `data` into pieces whose lengths (1 to 300 bytes, with 1, 2 and
/// 64-ish lengths frequent) follow from `seed`; seed 0 gives `data` whole.
pub fn chunks(data: &[u8], seed: u8) -> Vec<&[u8]> {
    if seed == 0 || data.is_empty() {
        return vec![data];
    }
    let mut x = u32::from(seed).wrapping_mul(0x9E37_79B9) | 1;
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        // xorshift32: deterministic for a seed.
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let n = match x % 8 {
            0 => 1,
            1 => 2,
            2 => 63 + (x >> 8) as usize % 3,
            3 => 127 + (x >> 8) as usize % 3,
            _ => 1 + (x >> 8) as usize % 300,
        };
        let (head, tail) = rest.split_at(n.min(rest.len()));
        out.push(head);
        rest = tail;
    }
    out
}
