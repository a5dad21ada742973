//! PNG charts with plotters: cumulative MiB over time, one series per
//! client, with labelled axes and a legend.
//!
//! Text needs a font file: DejaVu Sans from Debian's `fonts-dejavu-core`
//! (`/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf`), or the file named by
//! env `WEIR_FONT`. It is read once and registered with plotters' `ab_glyph`
//! renderer, so no system font library is needed.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, bail};
use plotters::prelude::*;

/// Where the font is looked for when `WEIR_FONT` is unset.
pub const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend text (the client's name).
    pub name: String,
    /// `(x, y)` points in order of x.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A series of cumulative MiB over seconds from `(seconds, bytes)`
    /// samples.
    pub fn cumulative_mib(name: &str, samples: &[(f64, u64)]) -> Self {
        Self {
            name: name.to_string(),
            points: samples
                .iter()
                .map(|&(t, b)| (t, b as f64 / (1024.0 * 1024.0)))
                .collect(),
        }
    }
}

fn font_path() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("WEIR_FONT") {
        return Ok(PathBuf::from(p));
    }
    FONT_PATHS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .context("no font for chart text: install Debian's fonts-dejavu-core or set WEIR_FONT to a .ttf file")
}

/// Registers the font under plotters' "sans-serif" once per process.
fn ensure_font() -> anyhow::Result<()> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let p = font_path().map_err(|e| e.to_string())?;
        let bytes = std::fs::read(&p).map_err(|e| format!("reading font {}: {e}", p.display()))?;
        // plotters keeps a &'static reference: the font lives for the process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| format!("{} is not a usable font", p.display()))
    })
    .clone()
    .map_err(anyhow::Error::msg)
}

/// Draws a line chart of `series` to the PNG `path` (800x500) with the
/// given title and axis labels; the axes span every point (from 0).
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> anyhow::Result<()> {
    if series.is_empty() || series.iter().all(|s| s.points.is_empty()) {
        bail!("chart {title:?}: no data");
    }
    if series
        .iter()
        .flat_map(|s| &s.points)
        .any(|(x, y)| !x.is_finite() || !y.is_finite())
    {
        bail!("chart {title:?}: non-finite point");
    }
    ensure_font()?;
    let max_x = series
        .iter()
        .flat_map(|s| &s.points)
        .map(|p| p.0)
        .fold(0.0, f64::max);
    let max_y = series
        .iter()
        .flat_map(|s| &s.points)
        .map(|p| p.1)
        .fold(0.0, f64::max);
    let (max_x, max_y) = (
        if max_x > 0.0 { max_x * 1.02 } else { 1.0 },
        if max_y > 0.0 { max_y * 1.05 } else { 1.0 },
    );
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = BitMapBackend::new(path, (800, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(65)
            .build_cartesian_2d(0.0..max_x, 0.0..max_y)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 16))
            .draw()?;
        for (i, s) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    color.stroke_width(2),
                ))?
                .label(s.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow::anyhow!("drawing {}: {e}", path.display()))
}

/// Cumulative MiB over seconds, one series per client (see
/// [`Series::cumulative_mib`]).
pub fn cumulative_mib(path: &Path, title: &str, series: &[Series]) -> anyhow::Result<()> {
    line_chart(path, title, "time (s)", "received (MiB)", series)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_chart_png() {
        if font_path().is_err() && std::env::var_os("CI").is_none() {
            weir_lab::ci::unavailable("no font (install fonts-dejavu-core)")
                .expect("CI is unset here");
            return;
        }
        let dir = std::env::temp_dir().join(format!("weir-bench-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("ramp.png");
        let a: Vec<(f64, u64)> = (0..=40)
            .map(|i| (i as f64 * 0.5, (i * i) as u64 * (1 << 20)))
            .collect();
        let b: Vec<(f64, u64)> = (0..=40)
            .map(|i| (i as f64 * 0.5, i as u64 * 20 * (1 << 20)))
            .collect();
        cumulative_mib(
            &p,
            "ramp at 150 ms RTT",
            &[
                Series::cumulative_mib("weir", &a),
                Series::cumulative_mib("libtorrent", &b),
            ],
        )
        .unwrap();
        let png = std::fs::read(&p).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert!(
            png.len() > 5000,
            "suspiciously small png: {} bytes",
            png.len()
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(line_chart(&p, "empty", "x", "y", &[]).is_err());
        let nan = Series {
            name: "n".into(),
            points: vec![(0.0, f64::NAN)],
        };
        assert!(line_chart(&p, "nan", "x", "y", &[nan]).is_err());
    }
}
