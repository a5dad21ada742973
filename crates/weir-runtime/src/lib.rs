//! The tokio runtime layer of weir: drives the sans-IO cores over sockets and files.
