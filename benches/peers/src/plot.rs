//! SVG charts of the per-second series (plotters, pure-Rust SVG backend,
//! as the tools draw theirs): one chart per workload with every engine's
//! rows/s against seconds since the open, one of the restart runs, and
//! one of W5's RSS against the DRAM budget.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::report::Report;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Width of the legend column, pixels.
const LEGEND_W: u32 = 480;

/// Distinct, readable colours, one per series.
const COLOURS: [RGBColor; 8] = [
    RGBColor(0, 0, 0),
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
];

/// Write `peers-<workload>.svg` for each workload of the report (and
/// `peers-restart.svg`) into `dir`; returns the paths written.
pub fn write_all(rep: &Report, dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut workloads: Vec<&str> = Vec::new();
    for r in &rep.results {
        if !workloads.contains(&r.run.workload.as_str()) {
            workloads.push(&r.run.workload);
        }
    }
    let mut paths = Vec::new();
    for w in workloads {
        let series: Vec<(String, &[f64])> = rep
            .results
            .iter()
            .filter(|r| r.run.workload == w && !r.run.per_second.is_empty())
            .map(|r| {
                let name = match &r.run.restart {
                    Some(how) => format!("{}: {how}", r.run.engine),
                    None => r.run.engine.clone(),
                };
                (name, r.run.per_second.as_slice())
            })
            .collect();
        if series.is_empty() {
            continue;
        }
        let title = if w == "restart" {
            "Restart after W5, then W2: rows/s per second from the open".to_string()
        } else {
            match w {
                "W5" => format!(
                    "W5: rows/s per second from the open (no warm-up, checkpoint every {} s)",
                    rep.settings.checkpoint_every_s
                ),
                _ => format!(
                    "{w}: rows/s per second from the open ({} s warm-up)",
                    rep.settings.warmup_s
                ),
            }
        };
        let path = dir.join(format!("peers-{}.svg", w.to_lowercase()));
        let pts: Vec<(String, Vec<(f64, f64)>)> = series
            .iter()
            .map(|(n, v)| {
                let p = v
                    .iter()
                    .enumerate()
                    .map(|(s, &r)| (s as f64 + 0.5, r / 1e3))
                    .collect();
                (n.clone(), p)
            })
            .collect();
        let axes = (
            "seconds since the store opened",
            "thousand rows/s (1-s bins)",
        );
        chart(&path, &title, axes, &pts, &[])?;
        paths.push(path);
    }
    // W5's RSS over the run, against the DRAM budget and the bar
    // (the budget + 64 MiB + 5%).
    let rss: Vec<(String, Vec<(f64, f64)>)> = rep
        .results
        .iter()
        .filter_map(|r| {
            let w = r.run.w5.as_ref()?;
            (!w.rss_series.is_empty()).then(|| {
                let p = w
                    .rss_series
                    .iter()
                    .map(|&(t, b)| (t, b as f64 / MIB))
                    .collect();
                (r.run.engine.clone(), p)
            })
        })
        .collect();
    if !rss.is_empty() {
        let budget = rep.settings.dram as f64 / MIB;
        let bar = budget * 1.05 + 64.0;
        let path = dir.join("peers-w5-rss.svg");
        chart(
            &path,
            "W5: resident memory (RSS) every half second, final persist and merge included",
            ("seconds since the store opened", "RSS, MiB"),
            &rss,
            &[
                (format!("DRAM budget ({budget:.0} MiB)"), budget),
                (format!("budget + 64 MiB + 5% ({bar:.0} MiB)"), bar),
            ],
        )?;
        paths.push(path);
    }
    Ok(paths)
}

const MIB: f64 = (1u64 << 20) as f64;

/// One line chart of `series` (x, y points), with dashed horizontal
/// reference lines `hlines` (label, y); `axes` = (x, y) descriptions.
fn chart(
    path: &Path,
    title: &str,
    axes: (&str, &str),
    series: &[(String, Vec<(f64, f64)>)],
    hlines: &[(String, f64)],
) -> Result<(), String> {
    let w = 1100 + LEGEND_W;
    let root = SVGBackend::new(path, (w, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(err)?;
    let (plot, legend) = root.split_horizontally(w - LEGEND_W);
    let max_x = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(2.0f64, f64::max);
    let max_y = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .chain(hlines.iter().map(|h| h.1))
        .fold(1.0f64, f64::max)
        * 1.05;
    let mut c = ChartBuilder::on(&plot)
        .margin(14)
        .x_label_area_size(46)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..max_x, 0f64..max_y)
        .map_err(err)?;
    c.configure_mesh()
        .x_desc(axes.0)
        .y_desc(axes.1)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(err)?;
    for (i, (_, pts)) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        c.draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))
            .map_err(err)?;
    }
    // Reference lines: grey, then magenta (no series uses either).
    let grey = |i: usize| [RGBColor(110, 110, 110), RGBColor(190, 40, 150)][i % 2];
    for (i, (_, y)) in hlines.iter().enumerate() {
        c.draw_series(DashedLineSeries::new(
            [(0.0, *y), (max_x, *y)],
            8,
            6,
            grey(i).stroke_width(2),
        ))
        .map_err(err)?;
    }
    for (i, (name, _)) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let y = 60 + 26 * i as i32;
        legend
            .draw(&PathElement::new(
                vec![(8, y), (36, y)],
                colour.stroke_width(3),
            ))
            .map_err(err)?;
        let label: String = if name.chars().count() > 64 {
            name.chars().take(63).chain(std::iter::once('…')).collect()
        } else {
            name.clone()
        };
        legend
            .draw(&Text::new(label, (44, y - 8), ("sans-serif", 14)))
            .map_err(err)?;
    }
    for (i, (name, _)) in hlines.iter().enumerate() {
        let y = 60 + 26 * (series.len() + i) as i32;
        legend
            .draw(&PathElement::new(
                vec![(8, y), (36, y)],
                grey(i).stroke_width(3),
            ))
            .map_err(err)?;
        legend
            .draw(&Text::new(
                format!("{name} (dashed)"),
                (44, y - 8),
                ("sans-serif", 14),
            ))
            .map_err(err)?;
    }
    root.present().map_err(err)
}
