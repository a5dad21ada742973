//! `weir sz` / `weir rz`: ZMODEM send and receive, drop-in for lrzsz's `sz`
//! and `rz` over stdin/stdout, or over a TCP socket (`--tcp`, `--listen`).
//! Progress goes to stderr only: stdout is the line.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use weir_core::meter::RateMeter;
use weir_runtime::zmodem::{
    Line, Progress, RecvOptions, SendOptions, StopRequest, ZmodemError, receive_files, send_files,
};
use weir_zmodem::{ReceiverConfig, SendError, SenderConfig};

use crate::cmd::Ctx;
use crate::exit::bad_input;

/// Where the line is.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct LineArgs {
    /// Connect to HOST:PORT and run the session over that TCP connection
    /// instead of stdin/stdout.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "listen")]
    tcp: Option<String>,

    /// Listen on [ADDR:]PORT (default address 0.0.0.0), accept one
    /// connection and run the session over it.
    #[arg(long, value_name = "[ADDR:]PORT")]
    listen: Option<String>,

    /// Seconds without an answer before a frame is resent.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    timeout: u64,

    /// Quiet: no progress output.
    #[arg(short, long)]
    quiet: bool,

    /// Verbose: also report every retransmission (repeat for more).
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

/// Arguments of `weir sz`.
#[derive(clap::Args)]
pub(crate) struct SzArgs {
    /// Files to send.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,

    /// Windowed mode: at most BYTES unacknowledged, an acknowledgement asked
    /// for every BYTES/4 (lrzsz `-w`).
    #[arg(short, long, value_name = "BYTES")]
    window: Option<u32>,

    /// 8 KiB data subpackets (the default; lrzsz `rz` accepts them).
    #[arg(short = '8', long = "8k", conflicts_with = "one_k")]
    eight_k: bool,

    /// 1 KiB data subpackets, for receivers that only take the spec's size.
    #[arg(short = 'k', long = "1k")]
    one_k: bool,

    /// Use CRC-16 frames even if the receiver can do CRC-32.
    #[arg(short = 'o', long = "crc16")]
    crc16: bool,

    /// Escape every control character (for lines that eat them).
    #[arg(short, long)]
    escape: bool,

    /// Ask the receiver to resume partial files.
    #[arg(short, long)]
    resume: bool,

    /// Ask the receiver to replace existing files.
    #[arg(short = 'y', long)]
    overwrite: bool,

    /// In streaming mode, bound the line's kernel buffer (socket send buffer
    /// or pipe) to BYTES, so a line error costs a bounded retransmission.
    /// 0 leaves the kernel's buffer (for a high bandwidth-delay link).
    #[arg(long, value_name = "BYTES", default_value_t = 256 * 1024)]
    sndbuf: usize,

    /// In streaming mode, still ask for an acknowledgement every BYTES/4
    /// (without stopping) and keep at most BYTES unacknowledged, so a line
    /// error costs a bounded retransmission whatever buffers the line has
    /// (lrzsz `rz` gives up after ~1 MiB of stale data). A weir receiver,
    /// which skips any amount, gets 4 MiB. 0 streams unbounded (with
    /// --sndbuf 0, for a high bandwidth-delay link).
    #[arg(long, value_name = "BYTES", default_value_t = 256 * 1024)]
    stream_window: u32,

    /// Segmented mode: stop for an acknowledgement every BYTES.
    #[arg(long, value_name = "BYTES")]
    segment: Option<u32>,

    #[command(flatten)]
    line: LineArgs,
}

/// Arguments of `weir rz`.
#[derive(clap::Args)]
pub(crate) struct RzArgs {
    /// Directory to receive into (default: the current directory).
    #[arg(value_name = "DIR")]
    dir: Option<PathBuf>,

    /// Replace existing files.
    #[arg(short = 'y', long)]
    overwrite: bool,

    /// Resume partial files (the sender can also ask with `sz -r`).
    #[arg(short, long)]
    resume: bool,

    /// Ask the sender to escape every control character.
    #[arg(short, long)]
    escape: bool,

    /// Do not offer CRC-32: the sender uses CRC-16.
    #[arg(short = 'o', long = "crc16")]
    crc16: bool,

    /// Announce a receive buffer of BYTES: the sender stops for an
    /// acknowledgement every BYTES (0: full streaming).
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    bufsize: u16,

    #[command(flatten)]
    line: LineArgs,
}

/// Runs `weir sz`.
pub(crate) fn run_sz(ctx: &Ctx, args: SzArgs) -> anyhow::Result<ExitCode> {
    let core = SenderConfig {
        block_size: if args.one_k { 1024 } else { 8192 },
        window: args.window,
        segment: args.segment,
        stream_window: (args.stream_window > 0).then_some(args.stream_window),
        crc32: !args.crc16,
        escape_ctl: args.escape,
        resume: args.resume,
        overwrite: args.overwrite,
        timeout: Duration::from_secs(args.line.timeout.max(1)),
        ..SenderConfig::default()
    };
    let opts = SendOptions {
        core,
        sndbuf: (args.sndbuf > 0).then_some(args.sndbuf),
    };
    for f in &args.files {
        let md = std::fs::metadata(f).map_err(|e| bad_input(format!("{}: {e}", f.display())))?;
        if !md.is_file() {
            return Err(bad_input(format!("{}: not a regular file", f.display())));
        }
        if md.len() > weir_zmodem::consts::MAX_FILE_SIZE {
            return Err(bad_input(
                SendError::FileTooLarge {
                    name: f.display().to_string(),
                    size: md.len(),
                }
                .to_string(),
            ));
        }
    }
    let line = open_line(ctx, &args.line)?;
    let mut shown = Shown::new(&args.line, "sent");
    let res = send_files(line, &args.files, &opts, &mut |p| shown.show(p));
    shown.end();
    match res {
        Ok(r) => {
            if !args.line.quiet && args.line.verbose > 0 {
                crate::out::errln!(
                    "weir sz: {} sent, {} skipped, {} bytes, {} retransmissions",
                    r.sent,
                    r.skipped,
                    r.bytes,
                    r.restarts
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(ZmodemError::Send(e @ SendError::FileTooLarge { .. })) => Err(bad_input(e.to_string())),
        Err(e @ ZmodemError::Stopped { signal }) => {
            crate::out::errln!("weir sz: {e}");
            Ok(crate::exit::signal_code(signal))
        }
        Err(e) => Err(anyhow::Error::new(e).context("weir sz")),
    }
}

/// Runs `weir rz`.
pub(crate) fn run_rz(ctx: &Ctx, args: RzArgs) -> anyhow::Result<ExitCode> {
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from("."));
    if !dir.is_dir() {
        return Err(bad_input(format!("{}: not a directory", dir.display())));
    }
    let core = ReceiverConfig {
        crc32: !args.crc16,
        escape_ctl: args.escape,
        buffer: args.bufsize,
        timeout: Duration::from_secs(args.line.timeout.max(1)),
        ..ReceiverConfig::default()
    };
    let opts = RecvOptions {
        core,
        dir,
        overwrite: args.overwrite,
        resume: args.resume,
    };
    let line = open_line(ctx, &args.line)?;
    let mut shown = Shown::new(&args.line, "received");
    let res = receive_files(line, &opts, &mut |p| shown.show(p));
    shown.end();
    let r = match res {
        Ok(r) => r,
        Err(e @ ZmodemError::Stopped { signal }) => {
            crate::out::errln!("weir rz: {e}");
            return Ok(crate::exit::signal_code(signal));
        }
        Err(e) => return Err(anyhow::Error::new(e).context("weir rz")),
    };
    if !args.line.quiet && args.line.verbose > 0 {
        crate::out::errln!(
            "weir rz: {} received, {} skipped, {} refused, {} bytes, {} retransmissions",
            r.received.len(),
            r.skipped,
            r.refused,
            r.bytes,
            r.retransmits
        );
    }
    Ok(if r.refused > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The session's line, stopped cleanly by SIGINT or SIGTERM once open
/// (the other side is told, exit 130 or 143); while connecting or waiting
/// for the connection a signal ends the process as usual.
fn open_line(ctx: &Ctx, a: &LineArgs) -> anyhow::Result<Line> {
    let line = open_line_inner(ctx, a)?;
    let stop = StopRequest::on_signals().context("catching signals")?;
    Ok(line.stop_on(stop))
}

fn open_line_inner(ctx: &Ctx, a: &LineArgs) -> anyhow::Result<Line> {
    if let Some(t) = &a.tcp {
        let addr = resolve(ctx, "--tcp", t)?;
        return Line::connect(&ctx.policy, addr).with_context(|| format!("connect to {addr}"));
    }
    if let Some(l) = &a.listen {
        let addr = if l.contains(':') {
            resolve(ctx, "--listen", l)?
        } else {
            let port: u16 = l
                .parse()
                .map_err(|_| bad_input(format!("--listen {l}: not a port")))?;
            SocketAddr::from(([0, 0, 0, 0], port))
        };
        let l = Line::bind(addr).with_context(|| format!("listen on {addr}"))?;
        // Scripts and tests wait for this line before connecting.
        crate::out::errln!("weir: listening on {}", l.local_addr()?);
        return l.accept(&ctx.policy).context("accept");
    }
    Line::stdio().context("stdin/stdout")
}

/// `HOST:PORT` through the one policy-checked resolver
/// (`weir_runtime::net`): no DNS query unless the policy allows every
/// address.
fn resolve(ctx: &Ctx, what: &str, s: &str) -> anyhow::Result<SocketAddr> {
    weir_runtime::net::resolve_host_port(&ctx.policy, s)
        .map_err(|e| bad_input(format!("{what} {s}: {e}")))?
        .into_iter()
        .next()
        .ok_or_else(|| bad_input(format!("{what} {s}: no address")))
}

/// Progress on stderr: a self-updating line on a terminal, otherwise one
/// line per file (and per retransmission with -v).
struct Shown {
    quiet: bool,
    verbose: u8,
    tty: bool,
    verb: &'static str,
    name: String,
    size: Option<u64>,
    meter: Option<RateMeter>,
    last_pos: u64,
    live: bool,
}

impl Shown {
    fn new(a: &LineArgs, verb: &'static str) -> Self {
        Shown {
            quiet: a.quiet,
            verbose: a.verbose,
            tty: std::io::stderr().is_terminal(),
            verb,
            name: String::new(),
            size: None,
            meter: None,
            last_pos: 0,
            live: false,
        }
    }

    fn show(&mut self, p: Progress) {
        if self.quiet {
            return;
        }
        let now = Instant::now();
        let mut err = std::io::stderr().lock();
        match p {
            Progress::FileStarted { name, size, offset } => {
                self.name = name;
                self.size = size;
                self.meter = Some(RateMeter::new(now, Duration::from_secs(5)));
                self.last_pos = offset;
                if offset > 0 {
                    let _ = writeln!(err, "{}: resuming at {offset}", self.name);
                }
            }
            Progress::Bytes { pos, size } => {
                if let Some(m) = self.meter.as_mut() {
                    m.record(now, pos.saturating_sub(self.last_pos));
                }
                self.last_pos = pos;
                if self.tty || self.verbose > 1 {
                    let rate = self.meter.as_ref().map_or(0.0, |m| m.rate(now));
                    let of = size.map(|s| format!("/{s}")).unwrap_or_default();
                    let end = if self.tty { "\r" } else { "\n" };
                    let _ = write!(
                        err,
                        "{}: {pos}{of} bytes, {:.1} MB/s   {end}",
                        self.name,
                        rate / 1e6
                    );
                    self.live = self.tty;
                }
            }
            Progress::Retransmit { pos } => {
                if self.verbose > 0 {
                    self.clear(&mut err);
                    let _ = writeln!(err, "{}: line error, resending from {pos}", self.name);
                }
            }
            Progress::FileDone {
                name,
                bytes,
                elapsed,
            } => {
                self.clear(&mut err);
                let secs = elapsed.as_secs_f64().max(1e-6);
                let _ = writeln!(
                    err,
                    "{} {name}: {bytes} bytes in {secs:.2} s ({:.1} MB/s)",
                    self.verb,
                    bytes as f64 / secs / 1e6
                );
            }
            Progress::FileSkipped { name, reason } => {
                self.clear(&mut err);
                let _ = writeln!(err, "skipped {name}: {reason}");
            }
        }
    }

    fn clear(&mut self, err: &mut impl Write) {
        if self.live {
            let _ = write!(err, "\r\x1b[K");
            self.live = false;
        }
    }

    fn end(&mut self) {
        let mut err = std::io::stderr().lock();
        self.clear(&mut err);
    }
}
