//! Sans-IO BitTorrent v1 protocol core for weir.
