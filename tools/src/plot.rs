//! SVG charts of locality reports and simulations (plotters, pure-Rust SVG
//! backend).
//!
//! Every chart names its trace in the title, gives each series its own
//! colour (hues spread evenly over the series drawn; the overall curve is
//! black), and keeps the legend in a column right of the data. With many
//! tables, the charts draw the overall curve and the `top` tables by
//! accesses, and say so in the title.

use std::path::Path;

use embtier_sim::locality::{Log2Hist, Report, TableReport, COUNT_BIN_EDGES};
use plotters::coord::Shift;
use plotters::prelude::*;

type Res = Result<(), String>;

/// Tables drawn beside the overall curve unless told otherwise.
pub const DEFAULT_TOP: u64 = 8;

/// Width of the legend column, pixels.
const LEGEND_W: u32 = 230;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A qualitative palette of ten colours that no two readers confuse
/// (matplotlib's and d3's `category10`).
const CATEGORY10: [RGBColor; 10] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
];

/// One colour per series: black for series 0 when `first_black` (the
/// overall curve), the others from [`CATEGORY10`] where ten suffice, else
/// at hues spread evenly over the circle (evenly spaced hues put two
/// greens side by side at eight series).
fn colour(i: usize, n: usize, first_black: bool) -> RGBColor {
    if first_black && i == 0 {
        return BLACK;
    }
    let (i, n) = if first_black { (i - 1, n - 1) } else { (i, n) };
    if n <= CATEGORY10.len() {
        return CATEGORY10[i];
    }
    let h = i as f64 / n.max(1) as f64;
    // HSL to RGB, saturation 0.75, lightness 0.42 or 0.55 alternating, so
    // that neighbours in hue also differ in lightness.
    let l = if i % 2 == 0 { 0.42 } else { 0.55 };
    let s = 0.75;
    let c = (1.0 - (2.0 * l - 1.0f64).abs()) * s;
    let hp = h * 6.0;
    let x = c * (1.0 - (hp % 2.0 - 1.0).abs());
    let (r, g, b) = match hp as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = l - c / 2.0;
    let v = |f: f64| ((f + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    RGBColor(v(r), v(g), v(b))
}

/// The tables to draw: overall first, then the `top` most accessed, in
/// order of accesses; and a note when some were left out.
fn subjects(r: &Report, top: usize) -> (Vec<&TableReport>, Option<String>) {
    let mut tables: Vec<&TableReport> = r.tables.iter().collect();
    tables.sort_by_key(|t| std::cmp::Reverse(t.accesses));
    let note = (tables.len() > top).then(|| {
        format!(
            "the top {top} of {} tables by accesses, and overall",
            tables.len()
        )
    });
    tables.truncate(top);
    (std::iter::once(&r.overall).chain(tables).collect(), note)
}

/// Write `mrc.svg`, `count_cdf.svg` and `reuse_distance_cdf.svg` of `r`
/// into `dir`; `trace` names the trace in the titles. Returns the note of
/// the tables left out, if any.
pub fn write_all(
    r: &Report,
    dir: &Path,
    trace: &str,
    top: usize,
) -> Result<Option<String>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (subj, note) = subjects(r, top);
    let of = |what: &str| match &note {
        Some(n) => format!("{what}: {trace} ({n})"),
        None => format!("{what}: {trace}"),
    };
    mrc(&subj, &of("LRU miss-ratio curves"), &dir.join("mrc.svg"))?;
    count_cdf(&subj, &of("Access-count CDF"), &dir.join("count_cdf.svg"))?;
    reuse_cdf(
        &subj,
        &of("Reuse-distance CDF"),
        &dir.join("reuse_distance_cdf.svg"),
    )?;
    Ok(note)
}

/// The charts' coordinates: log x, linear y in [0, 1].
type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<LogCoord<f64>, plotters::coord::types::RangedCoordf64>,
>;

/// A series: name, colour, points.
type Series = (String, RGBColor, Vec<(f64, f64)>);

/// The legend column: a line sample and the name of each series.
fn legend(area: &DrawingArea<SVGBackend<'_>, Shift>, series: &[(String, RGBColor)]) -> Res {
    for (i, (name, c)) in series.iter().enumerate() {
        let y = 60 + 22 * i as i32;
        area.draw(&PathElement::new(vec![(8, y), (36, y)], c.stroke_width(3)))
            .map_err(err)?;
        let label: String = if name.chars().count() > 24 {
            name.chars().take(23).chain(std::iter::once('…')).collect()
        } else {
            name.clone()
        };
        area.draw(&Text::new(label, (44, y - 8), ("sans-serif", 15)))
            .map_err(err)?;
    }
    Ok(())
}

/// Panels of log-x charts with y in `[0, 1]`, side by side, at `path`,
/// under one `title`, with one legend column for all: each panel is
/// (subtitle, axis labels, series).
fn log_x_panels(
    path: &Path,
    title: &str,
    max_x: f64,
    panels: &[(&str, (&str, &str), Vec<Series>)],
) -> Res {
    let panel_w = 760u32;
    let w = panel_w * panels.len() as u32 + LEGEND_W;
    let root = SVGBackend::new(path, (w, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(err)?;
    let (plots, legend_area) = root.split_horizontally(w - LEGEND_W);
    let areas = plots.split_evenly((1, panels.len()));
    for (area, (subtitle, (x_desc, y_desc), series)) in areas.iter().zip(panels) {
        let mut chart = ChartBuilder::on(area)
            .caption(*subtitle, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(54)
            .build_cartesian_2d((1f64..max_x.max(2.0)).log_scale(), 0f64..1f64)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(*x_desc)
            .y_desc(*y_desc)
            .x_label_formatter(&|x| count_tick(*x))
            .draw()
            .map_err(err)?;
        draw_lines(&mut chart, series)?;
    }
    let names: Vec<(String, RGBColor)> = panels
        .first()
        .map(|p| p.2.iter().map(|(n, c, _)| (n.clone(), *c)).collect())
        .unwrap_or_default();
    legend(&legend_area, &names)?;
    root.present().map_err(err)
}

/// A tick of a log axis of counts (rows, accesses): `1`, `10`, `100`,
/// `1k`, `10k`, `1M`, not `1000.0`.
fn count_tick(x: f64) -> String {
    let n = x.round() as u64;
    match n {
        n if n >= 1_000_000_000 && n % 1_000_000_000 == 0 => format!("{}G", n / 1_000_000_000),
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

fn draw_lines(chart: &mut Chart<'_, '_>, series: &[Series]) -> Res {
    for (_, c, pts) in series {
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|&(x, y)| (x.max(1.0), y)),
                c.stroke_width(2),
            ))
            .map_err(err)?;
    }
    Ok(())
}

fn coloured(subj: &[&TableReport], pts: impl Fn(&TableReport) -> Vec<(f64, f64)>) -> Vec<Series> {
    subj.iter()
        .enumerate()
        .map(|(i, t)| (t.name.clone(), colour(i, subj.len(), true), pts(t)))
        .collect()
}

fn mrc(subj: &[&TableReport], title: &str, path: &Path) -> Res {
    let series = coloured(subj, |t| {
        t.mrc
            .iter()
            .map(|p| (p.cache_rows as f64, p.miss_ratio))
            .collect()
    });
    let max_x = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.0))
        .fold(2.0f64, f64::max);
    log_x_panels(
        path,
        title,
        max_x,
        &[(
            "each table's cache holds only its rows",
            ("cache size (rows)", "miss ratio"),
            series,
        )],
    )
}

fn count_cdf(subj: &[&TableReport], title: &str, path: &Path) -> Res {
    let x = |i: usize| {
        if i < 16 {
            COUNT_BIN_EDGES[i] as f64
        } else {
            65536.0
        }
    };
    let cum = |v: &[f64]| {
        let mut s = 0.0;
        v.iter()
            .enumerate()
            .map(|(k, f)| {
                s += f;
                (x(k), s)
            })
            .collect::<Vec<_>>()
    };
    let axes = (
        "accesses per row (upper bin edge; dlrm_datasets bins)",
        "cumulative fraction",
    );
    log_x_panels(
        path,
        title,
        65536.0,
        &[
            (
                "by rows: the fraction of rows accessed at most x times",
                axes,
                coloured(subj, |t| cum(&t.count_hist_rows)),
            ),
            (
                "by accesses: the fraction of accesses to such rows",
                axes,
                coloured(subj, |t| cum(&t.count_hist_accesses)),
            ),
        ],
    )
}

fn reuse_cdf(subj: &[&TableReport], title: &str, path: &Path) -> Res {
    let max_k = subj
        .iter()
        .map(|t| t.reuse_distance.bins.len())
        .max()
        .unwrap_or(1)
        .max(2);
    let series = coloured(subj, |t| {
        let h: &Log2Hist = &t.reuse_distance;
        let total: u64 = h.bins.iter().sum();
        let mut s = 0u64;
        h.bins
            .iter()
            .enumerate()
            .map(|(k, &n)| {
                s += n;
                (
                    (Log2Hist::range(k).1 + 1) as f64,
                    s as f64 / total.max(1) as f64,
                )
            })
            .collect()
    });
    log_x_panels(
        path,
        title,
        (1u64 << max_k.min(62)) as f64,
        &[(
            "LRU stack distance of each reuse; first accesses excluded",
            ("stack distance (rows)", "cumulative fraction of reuses"),
            series,
        )],
    )
}

/// One SVG chart of miss-ratio curves, one line per series, log x.
pub fn mrc_lines(path: &Path, title: &str, series: &[(String, Vec<(f64, f64)>)]) -> Res {
    let max_x = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(2.0f64, f64::max);
    let n = series.len();
    let series: Vec<Series> = series
        .iter()
        .enumerate()
        .map(|(i, (name, pts))| (name.clone(), colour(i, n, false), pts.clone()))
        .collect();
    log_x_panels(
        path,
        title,
        max_x,
        &[("", ("cache size (rows)", "miss ratio"), series)],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_ticks_read_as_counts() {
        let ticks: Vec<String> = [1.0, 10.0, 100.0, 1000.0, 20_000.0, 1e6, 3e9, 1500.0]
            .into_iter()
            .map(count_tick)
            .collect();
        assert_eq!(ticks, ["1", "10", "100", "1k", "20k", "1M", "3G", "1500"]);
    }

    #[test]
    fn colours_are_distinct() {
        for n in [2usize, 9, 27] {
            let c: Vec<RGBColor> = (0..n).map(|i| colour(i, n, true)).collect();
            for i in 0..n {
                for j in 0..i {
                    assert_ne!(c[i], c[j], "{n}: {i} {j}");
                }
            }
        }
    }
}
