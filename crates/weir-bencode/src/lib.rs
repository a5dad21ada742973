//! Strict bencode decoder and encoder for weir.
