//! SVG charts of locality reports and simulations (plotters, pure-Rust SVG backend).

use std::path::Path;

use embtier_sim::locality::{Log2Hist, Report, TableReport, COUNT_BIN_EDGES};
use plotters::prelude::*;

type Res = Result<(), String>;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn palette(i: usize) -> RGBColor {
    const C: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    C[i % C.len()]
}

/// The tables to draw: overall first, then up to 15 tables.
fn subjects(r: &Report) -> Vec<&TableReport> {
    std::iter::once(&r.overall)
        .chain(r.tables.iter().take(15))
        .collect()
}

/// Write `mrc.svg`, `count_cdf.svg` and `reuse_distance_cdf.svg` into `dir`.
pub fn write_all(r: &Report, dir: &Path) -> Res {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    mrc(r, &dir.join("mrc.svg"))?;
    count_cdf(r, &dir.join("count_cdf.svg"))?;
    reuse_cdf(r, &dir.join("reuse_distance_cdf.svg"))
}

/// The charts' coordinates: log x, linear y in [0, 1].
type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<LogCoord<f64>, plotters::coord::types::RangedCoordf64>,
>;

/// A 900x600 SVG at `path` holding one chart with x in `[1, max_x]` on a log
/// scale and y in `[0, 1]`: frame, caption and mesh, then the series `draw`
/// adds, then the legend.
fn log_x_chart(
    path: &Path,
    caption: &str,
    max_x: f64,
    (x_desc, y_desc): (&str, &str),
    draw: impl FnOnce(&mut Chart<'_, '_>) -> Res,
) -> Res {
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((1f64..max_x.max(2.0)).log_scale(), 0f64..1f64)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    draw(&mut chart)?;
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// A solid line in colour `i` with a legend entry.
fn line(chart: &mut Chart<'_, '_>, i: usize, name: &str, pts: Vec<(f64, f64)>) -> Res {
    let c = palette(i);
    chart
        .draw_series(LineSeries::new(pts, c.stroke_width(2)))
        .map_err(err)?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
    Ok(())
}

fn mrc(r: &Report, path: &Path) -> Res {
    let series: Vec<(String, Vec<(f64, f64)>)> = subjects(r)
        .iter()
        .map(|t| {
            let pts = t.mrc.iter().map(|p| (p.cache_rows as f64, p.miss_ratio));
            (t.name.clone(), pts.collect())
        })
        .collect();
    mrc_lines(path, "LRU miss-ratio curves", &series)
}

fn count_cdf(r: &Report, path: &Path) -> Res {
    log_x_chart(
        path,
        "Access-count CDF (solid: by rows, dashed: by accesses)",
        65536.0,
        (
            "accesses per row (upper bin edge; dlrm_datasets bins)",
            "cumulative fraction",
        ),
        |chart| count_series(r, chart),
    )
}

fn count_series(r: &Report, chart: &mut Chart<'_, '_>) -> Res {
    let x = |i: usize| {
        if i < 16 {
            COUNT_BIN_EDGES[i] as f64
        } else {
            65536.0
        }
    };
    for (i, t) in subjects(r).into_iter().enumerate() {
        let c = palette(i);
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
        line(chart, i, &t.name, cum(&t.count_hist_rows))?;
        let pts = cum(&t.count_hist_accesses);
        // Dashed: short segments between alternate points of a fine resampling.
        let fine: Vec<(f64, f64)> = pts
            .windows(2)
            .flat_map(|w| {
                (0..8).map(move |k| {
                    let f = k as f64 / 8.0;
                    let lx = w[0].0.ln() + f * (w[1].0.ln() - w[0].0.ln());
                    (lx.exp(), w[0].1 + f * (w[1].1 - w[0].1))
                })
            })
            .collect();
        chart
            .draw_series(
                fine.chunks(2)
                    .filter(|p| p.len() == 2)
                    .map(|p| PathElement::new(vec![p[0], p[1]], c.stroke_width(1))),
            )
            .map_err(err)?;
    }
    Ok(())
}

fn reuse_cdf(r: &Report, path: &Path) -> Res {
    let max_k = subjects(r)
        .iter()
        .map(|t| t.reuse_distance.bins.len())
        .max()
        .unwrap_or(1)
        .max(2);
    log_x_chart(
        path,
        "Reuse (LRU stack) distance CDF, first accesses excluded",
        (1u64 << max_k.min(62)) as f64,
        ("stack distance (rows)", "cumulative fraction of reuses"),
        |chart| {
            for (i, t) in subjects(r).into_iter().enumerate() {
                let h: &Log2Hist = &t.reuse_distance;
                let total: u64 = h.bins.iter().sum();
                if total == 0 {
                    continue;
                }
                let mut s = 0u64;
                let pts: Vec<(f64, f64)> = h
                    .bins
                    .iter()
                    .enumerate()
                    .map(|(k, &n)| {
                        s += n;
                        ((Log2Hist::range(k).1 + 1) as f64, s as f64 / total as f64)
                    })
                    .collect();
                line(chart, i, &t.name, pts)?;
            }
            Ok(())
        },
    )
}

/// One SVG chart of miss-ratio curves, one line per series, log x.
pub fn mrc_lines(path: &Path, title: &str, series: &[(String, Vec<(f64, f64)>)]) -> Res {
    let max_x = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(2.0f64, f64::max);
    log_x_chart(
        path,
        title,
        max_x,
        ("cache size (rows)", "miss ratio"),
        |chart| {
            for (i, (name, pts)) in series.iter().enumerate() {
                line(
                    chart,
                    i,
                    name,
                    pts.iter().map(|&(x, y)| (x.max(1.0), y)).collect(),
                )?;
            }
            Ok(())
        },
    )
}
