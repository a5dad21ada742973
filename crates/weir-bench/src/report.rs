//! Result tables: rows of measurements over N runs, printed with aligned
//! columns (medians), and written as `<out>/<scenario>-<UTC>.json` and
//! `.md` with the command line and machine information.
//!
//! ```no_run
//! # fn f(cfg: &weir_bench::BenchConfig) -> anyhow::Result<()> {
//! use weir_bench::report::{Metric, Report};
//! let mut rep = Report::new("bt-single", cfg, &["leecher", "seeder"], vec![
//!     Metric::new("s", 2), Metric::new("MB/s", 1), Metric::new("CPU s", 2),
//! ]);
//! rep.add_run(&["weir", "libtorrent"], &[2.41, 445.6, 1.90]);
//! rep.add_failure(&["weir", "rtorrent"], "timed out");
//! rep.print();
//! let (json, md) = rep.write()?;
//! # Ok(()) }
//! ```

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde::Serialize;

use crate::common::{BenchConfig, median};

/// A measured column: its header and how many decimals to print.
#[derive(Clone, Debug, Serialize)]
pub struct Metric {
    /// Column header, with the unit (`"MB/s"`, `"CPU s"`).
    pub name: String,
    /// Decimals in tables.
    pub decimals: usize,
}

impl Metric {
    /// A column named `name` printed with `decimals` decimals.
    pub fn new(name: &str, decimals: usize) -> Self {
        Self {
            name: name.to_string(),
            decimals,
        }
    }
}

/// One row: its label cells and every run's measurements.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Label cells (e.g. leecher, seeder).
    pub labels: Vec<String>,
    /// One vector of metric values per successful run.
    pub runs: Vec<Vec<f64>>,
    /// Median of each metric over the successful runs.
    pub median: Vec<Option<f64>>,
    /// Error messages of failed runs.
    pub failures: Vec<String>,
}

/// Where and on what the bench ran.
#[derive(Clone, Debug, Serialize)]
pub struct MachineInfo {
    /// CPU model name (`/proc/cpuinfo`).
    pub cpu: String,
    /// Logical CPUs available.
    pub cores: usize,
    /// Kernel release (`/proc/sys/kernel/osrelease`).
    pub kernel: String,
}

impl MachineInfo {
    /// Reads this machine's information.
    pub fn current() -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0);
        Self { cpu, cores, kernel }
    }
}

/// A scenario's result table.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Scenario name (file name prefix).
    pub scenario: String,
    /// UTC time the report was created, ISO 8601.
    pub date: String,
    /// The `weir bench ...` command line.
    pub command_line: String,
    /// Machine information.
    pub machine: MachineInfo,
    /// Runs per row requested.
    pub runs_requested: usize,
    /// Payload size override, MiB.
    pub size_mib: Option<u64>,
    /// `--set` options.
    pub options: Vec<(String, String)>,
    /// Label column headers.
    pub label_columns: Vec<String>,
    /// Metric columns.
    pub metrics: Vec<Metric>,
    /// Rows in insertion order.
    pub rows: Vec<Row>,
    /// Free-text notes printed under the table.
    pub notes: Vec<String>,
    #[serde(skip)]
    out_dir: PathBuf,
    #[serde(skip)]
    stamp: String,
}

/// `(ISO 8601, file-name stamp)` of a Unix time, UTC.
fn utc(secs: u64) -> (String, String) {
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    (
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}Z"),
        format!("{y:04}{mo:02}{d:02}-{h:02}{m:02}{s:02}Z"),
    )
}

impl Report {
    /// An empty report for `scenario` with the given label columns and metrics.
    pub fn new(
        scenario: &str,
        cfg: &BenchConfig,
        label_columns: &[&str],
        metrics: Vec<Metric>,
    ) -> Self {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let (date, stamp) = utc(secs);
        Self {
            scenario: scenario.to_string(),
            date,
            command_line: cfg.command_line.clone(),
            machine: MachineInfo::current(),
            runs_requested: cfg.runs,
            size_mib: cfg.size_mib,
            options: cfg.extra.clone(),
            label_columns: label_columns.iter().map(|s| s.to_string()).collect(),
            metrics,
            rows: Vec::new(),
            notes: Vec::new(),
            out_dir: cfg.out_dir.clone(),
            stamp,
        }
    }

    fn row(&mut self, labels: &[&str]) -> &mut Row {
        let labels: Vec<String> = labels.iter().map(|s| s.to_string()).collect();
        let i = match self.rows.iter().position(|r| r.labels == labels) {
            Some(i) => i,
            None => {
                self.rows.push(Row {
                    labels,
                    runs: Vec::new(),
                    median: vec![None; self.metrics.len()],
                    failures: Vec::new(),
                });
                self.rows.len() - 1
            }
        };
        &mut self.rows[i]
    }

    /// Records one successful run of the row `labels` (created on first
    /// use). `values` has one entry per metric (NaN: not measured).
    pub fn add_run(&mut self, labels: &[&str], values: &[f64]) {
        assert_eq!(values.len(), self.metrics.len(), "one value per metric");
        let n = self.metrics.len();
        let row = self.row(labels);
        row.runs.push(values.to_vec());
        row.median = (0..n)
            .map(|i| median(&row.runs.iter().map(|r| r[i]).collect::<Vec<_>>()))
            .collect();
    }

    /// Records a failed run of the row `labels`.
    pub fn add_failure(&mut self, labels: &[&str], error: &str) {
        self.row(labels).failures.push(error.to_string());
    }

    /// Adds a note printed under the table.
    pub fn note(&mut self, text: &str) {
        self.notes.push(text.to_string());
    }

    fn cells(&self) -> (Vec<String>, Vec<Vec<String>>) {
        let mut header = self.label_columns.clone();
        header.extend(self.metrics.iter().map(|m| m.name.clone()));
        header.push("ok runs".into());
        let rows = self
            .rows
            .iter()
            .map(|r| {
                let mut c = r.labels.clone();
                c.extend(r.median.iter().zip(&self.metrics).map(|(v, m)| match v {
                    Some(v) => format!("{v:.*}", m.decimals),
                    None => "-".into(),
                }));
                c.push(format!(
                    "{}/{}",
                    r.runs.len(),
                    r.runs.len() + r.failures.len()
                ));
                c
            })
            .collect();
        (header, rows)
    }

    /// The table with aligned columns (labels left, numbers right), medians
    /// over the successful runs.
    pub fn to_text(&self) -> String {
        let (header, rows) = self.cells();
        let widths: Vec<usize> = (0..header.len())
            .map(|i| {
                rows.iter()
                    .map(|r| r[i].chars().count())
                    .chain(std::iter::once(header[i].chars().count()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let nl = self.label_columns.len();
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                if i > 0 {
                    s.push_str("  ");
                }
                if i < nl {
                    let _ = write!(s, "{c:<w$}", w = widths[i]);
                } else {
                    let _ = write!(s, "{c:>w$}", w = widths[i]);
                }
            }
            s.trim_end().to_string()
        };
        let mut out = format!(
            "{} (median of {} run{})\n",
            self.scenario,
            self.runs_requested,
            if self.runs_requested == 1 { "" } else { "s" }
        );
        out.push_str(&line(&header));
        out.push('\n');
        out.push_str(
            &"-".repeat(widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1)),
        );
        out.push('\n');
        for r in &rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        for r in self.rows.iter().filter(|r| !r.failures.is_empty()) {
            for f in &r.failures {
                let _ = writeln!(
                    out,
                    "failed: {}: {}",
                    r.labels.join(" / "),
                    f.lines().next().unwrap_or("")
                );
            }
        }
        for n in &self.notes {
            let _ = writeln!(out, "note: {n}");
        }
        out
    }

    /// Prints [`Report::to_text`] to stdout.
    pub fn print(&self) {
        crate::say(format_args!("{}", self.to_text()));
    }

    /// The report as markdown: title, command line, machine, table, notes.
    pub fn to_markdown(&self) -> String {
        let (header, rows) = self.cells();
        let mut md = format!("# {} ({})\n\n", self.scenario, self.date);
        let _ = writeln!(md, "Command: `{}`  ", self.command_line);
        let _ = writeln!(
            md,
            "Machine: {}, {} cores, Linux {}  ",
            self.machine.cpu, self.machine.cores, self.machine.kernel
        );
        let _ = writeln!(md, "Median of {} runs per row.\n", self.runs_requested);
        let esc = |s: &str| s.replace('|', "\\|");
        let _ = writeln!(
            md,
            "| {} |",
            header
                .iter()
                .map(|h| esc(h))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let align: Vec<&str> = (0..header.len())
            .map(|i| {
                if i < self.label_columns.len() {
                    "---"
                } else {
                    "---:"
                }
            })
            .collect();
        let _ = writeln!(md, "|{}|", align.join("|"));
        for r in &rows {
            let _ = writeln!(
                md,
                "| {} |",
                r.iter().map(|c| esc(c)).collect::<Vec<_>>().join(" | ")
            );
        }
        let failures: Vec<String> = self
            .rows
            .iter()
            .flat_map(|r| {
                r.failures.iter().map(move |f| {
                    format!(
                        "- {}: {}",
                        r.labels.join(" / "),
                        esc(f.lines().next().unwrap_or(""))
                    )
                })
            })
            .collect();
        if !failures.is_empty() {
            md.push_str("\nFailed runs:\n\n");
            md.push_str(&failures.join("\n"));
            md.push('\n');
        }
        if !self.notes.is_empty() {
            md.push('\n');
            for n in &self.notes {
                let _ = writeln!(md, "- {n}");
            }
        }
        md
    }

    /// Path stem `<out>/<scenario>-<UTC stamp>` (add `.json`, `.md`, `.png`).
    pub fn path_stem(&self) -> PathBuf {
        self.out_dir
            .join(format!("{}-{}", self.scenario, self.stamp))
    }

    /// Writes `<stem>.json` and `<stem>.md`; returns their paths.
    pub fn write(&self) -> anyhow::Result<(PathBuf, PathBuf)> {
        std::fs::create_dir_all(&self.out_dir)
            .with_context(|| format!("creating {}", self.out_dir.display()))?;
        let stem = self.path_stem();
        let json = stem.with_extension("json");
        let md = stem.with_extension("md");
        std::fs::write(&json, serde_json::to_string_pretty(self)?)
            .with_context(|| format!("writing {}", json.display()))?;
        std::fs::write(&md, self.to_markdown())
            .with_context(|| format!("writing {}", md.display()))?;
        Ok((json, md))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0).0, "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400).0, "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_700_000_000).0, "2023-11-14T22:13:20Z");
        assert_eq!(utc(1_700_000_000).1, "20231114-221320Z");
    }

    fn sample(dir: &std::path::Path) -> Report {
        let mut cfg = BenchConfig::new("weir".into(), dir.to_path_buf());
        cfg.command_line = "weir bench bt-single --runs 3".into();
        let mut r = Report::new(
            "bt-single",
            &cfg,
            &["leecher", "seeder"],
            vec![Metric::new("s", 2), Metric::new("MB/s", 1)],
        );
        for (s, mbps) in [(2.5, 400.0), (2.0, 500.0), (3.0, 333.3)] {
            r.add_run(&["weir", "libtorrent-hps"], &[s, mbps]);
        }
        r.add_run(&["aria2c", "weir"], &[6.68, 161.0]);
        r.add_failure(&["aria2c", "weir"], "timed out\nmore");
        r.note("1 GiB, 1 MiB pieces");
        r
    }

    #[test]
    fn table_has_medians_aligned_columns_and_failures() {
        let r = sample(std::path::Path::new("/nonexistent"));
        let t = r.to_text();
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("bt-single (median of 3 runs)"));
        assert!(lines[1].starts_with("leecher  seeder"));
        assert!(
            lines[3].contains("2.50") && lines[3].contains("400.0") && lines[3].ends_with("3/3"),
            "{t}"
        );
        assert!(lines[4].ends_with("1/2"), "{t}");
        // Right-aligned numbers: the MB/s column ends at the same place.
        let end = |l: &str, tok: &str| l.find(tok).unwrap() + tok.len();
        assert_eq!(end(lines[1], "MB/s"), end(lines[3], "400.0"));
        assert_eq!(end(lines[1], "MB/s"), end(lines[4], "161.0"));
        assert!(t.contains("failed: aria2c / weir: timed out"));
        assert!(t.contains("note: 1 GiB"));
        let md = r.to_markdown();
        assert!(md.contains("| leecher | seeder | s | MB/s | ok runs |"));
        assert!(md.contains("|---|---|---:|---:|---:|"));
        assert!(md.contains("| weir | libtorrent-hps | 2.50 | 400.0 | 3/3 |"));
        assert!(md.contains("Command: `weir bench bt-single --runs 3`"));
    }

    #[test]
    fn writes_json_and_markdown() {
        let dir = std::env::temp_dir().join(format!("weir-bench-report-{}", std::process::id()));
        let r = sample(&dir);
        let (json, md) = r.write().unwrap();
        assert!(
            json.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("bt-single-")
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(v["rows"][0]["median"][0], 2.5);
        assert_eq!(v["rows"][1]["failures"][0], "timed out\nmore");
        assert!(v["machine"]["cores"].as_u64().unwrap() >= 1);
        assert!(
            std::fs::read_to_string(&md)
                .unwrap()
                .starts_with("# bt-single")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
