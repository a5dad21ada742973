//! Sans-IO eD2k protocol core for weir.
