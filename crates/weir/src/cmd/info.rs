//! `weir info`: show what a `.torrent` holds (name, info-hash, size, piece
//! geometry, private flag, trackers by tier, files), as text or `--json`.

use std::path::PathBuf;
use std::process::ExitCode;

use weir_bt::metainfo::Metainfo;

use crate::cmd::Ctx;
use crate::exit::bad_input;
use crate::out::outln;

/// Arguments of `weir info`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The .torrent file.
    torrent: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// Where each file lands, relative to the download directory.
fn display_path(m: &Metainfo, path: &[String]) -> String {
    if m.info.single_file {
        path.join("/")
    } else {
        format!("{}/{}", m.info.name, path.join("/"))
    }
}

/// Reads and parses a torrent; any failure is bad input (exit 2) naming the
/// file and what is wrong.
pub(crate) fn load(path: &std::path::Path) -> anyhow::Result<Metainfo> {
    let data = std::fs::read(path)
        .map_err(|e| bad_input(format!("cannot read {}: {e}", path.display())))?;
    Metainfo::from_bytes(&data).map_err(|e| bad_input(format!("{}: {e}", path.display())))
}

/// Runs `weir info`.
pub(crate) fn run(_ctx: &Ctx, args: Args) -> anyhow::Result<ExitCode> {
    let m = load(&args.torrent)?;
    let info = &m.info;
    if args.json {
        let files: Vec<_> = info
            .files
            .iter()
            .map(|f| {
                serde_json::json!({
                    "path": display_path(&m, &f.path),
                    "components": f.path,
                    "length": f.length,
                })
            })
            .collect();
        let v = serde_json::json!({
            "name": &*info.name,
            "info_hash": hex(&m.info_hash),
            "total_length": m.total_length(),
            "piece_length": info.piece_length,
            "piece_count": info.piece_count(),
            "private": info.private,
            "single_file": info.single_file,
            "trackers": m.trackers(),
            "comment": m.comment,
            "created_by": m.created_by,
            "creation_date": m.creation_date,
            "files": files,
        });
        outln!("{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("name:          {}", info.name)?;
    outln!("info-hash:     {}", hex(&m.info_hash))?;
    outln!(
        "total size:    {} ({} bytes)",
        human(m.total_length()),
        m.total_length()
    )?;
    outln!(
        "pieces:        {} x {} ({} bytes)",
        info.piece_count(),
        human(u64::from(info.piece_length)),
        info.piece_length
    )?;
    outln!("private:       {}", if info.private { "yes" } else { "no" })?;
    if let Some(c) = &m.comment {
        outln!("comment:       {c}")?;
    }
    if let Some(c) = &m.created_by {
        outln!("created by:    {c}")?;
    }
    if let Some(d) = m.creation_date {
        outln!("creation date: {d} (Unix time)")?;
    }
    let tiers = m.trackers();
    if tiers.is_empty() {
        outln!("trackers:      none")?;
    } else {
        outln!("trackers:")?;
        for (i, t) in tiers.iter().enumerate() {
            outln!("  tier {}: {}", i + 1, t.join(" "))?;
        }
    }
    // Numbered from 0, as `weir get --files` and BEP 53 `so=` take them.
    outln!("files ({}):", info.files.len())?;
    let width = info.files.len().saturating_sub(1).to_string().len();
    for (i, f) in info.files.iter().enumerate() {
        outln!(
            "  {i:>width$}  {:>14}  {}",
            f.length,
            display_path(&m, &f.path)
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
