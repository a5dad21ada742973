//! Everything weir prints goes through here: a reader of stdout that went
//! away (`weir info x.torrent --json | head -5`) ends the command quietly
//! instead of panicking as `println!` does on a broken pipe, and a stderr
//! that is gone is ignored (`eprintln!` would panic).

use std::fmt;
use std::io::Write;

/// stdout's reader went away; the command stops and weir exits 0 without
/// a message (the reader asked for no more).
#[derive(Debug)]
pub(crate) struct Closed;

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("stdout was closed")
    }
}

impl std::error::Error for Closed {}

/// Writes `args` to stdout and flushes. A broken pipe is [`Closed`]; any
/// other failure an error naming stdout.
pub(crate) fn write(args: fmt::Arguments<'_>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_fmt(args).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Closed.into()),
        Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
    }
}

/// Like [`write`], for callbacks that cannot return an error: a closed
/// stdout ends the process quietly (exit 0).
pub(crate) fn write_or_exit(args: fmt::Arguments<'_>) {
    match write(args) {
        Ok(()) => {}
        Err(e) if e.is::<Closed>() => std::process::exit(0),
        Err(e) => {
            eprintln!("weir: {e:#}");
            std::process::exit(1);
        }
    }
}

/// `println!` that returns [`Closed`] (through `?`) instead of panicking.
macro_rules! outln {
    () => {
        $crate::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that returns [`Closed`] (through `?`) instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::write(format_args!($($arg)*))
    };
}

/// Writes to stderr, ignoring failure: with stderr gone (`weir create d
/// 2>&1 | head`) there is nowhere to report anything, and `eprintln!`
/// would panic.
pub(crate) fn err(args: fmt::Arguments<'_>) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_fmt(args);
}

/// `eprintln!` through [`err`].
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::out::err(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {errln, out, outln};

#[cfg(test)]
mod tests {
    #[test]
    fn closed_is_found_in_a_chain() {
        let e = anyhow::Error::new(super::Closed).context("printing");
        assert!(e.chain().any(|c| c.is::<super::Closed>()));
    }
}
