//! Sans-IO ZMODEM protocol core for weir.
