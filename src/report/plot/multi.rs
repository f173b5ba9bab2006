//! Plots over several runs or ranks: compare and sweep overlays, stacked breakdowns, x-y
//! curves (plan, sweep) and the ranks' heat map.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::DrawResult;
use super::*;

/// Overlays several runs' memory-vs-rank curves (for compare and sweep).
pub fn write_overlay(
    path_stem: &Path,
    title: &str,
    runs: &[(String, Vec<(u32, f64)>)],
) -> Result<Drawn, Error> {
    struct Overlay<'a> {
        title: &'a str,
        runs: &'a [(String, Vec<(u32, f64)>)],
    }
    fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &Overlay<'_>) -> DrawResult
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE)?;
        let xmax = d
            .runs
            .iter()
            .flat_map(|r| r.1.iter().map(|p| p.0))
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        let ymax = d
            .runs
            .iter()
            .flat_map(|r| r.1.iter().map(|p| p.1))
            .fold(1.0, f64::max)
            * 1.1;
        let mut c = chart(root, d.title, 0f64..xmax, 0f64..ymax)?;
        c.configure_mesh()
            .x_desc("node rank")
            .y_desc("peak MiB")
            .x_label_formatter(&tick)
            .y_label_formatter(&tick)
            .label_style(("sans-serif", 14))
            .draw()?;
        for (i, (label, pts)) in d.runs.iter().enumerate() {
            let color = category_color(i);
            c.draw_series(LineSeries::new(
                pts.iter().map(|p| (p.0 as f64, p.1)),
                color.stroke_width(2),
            ))?
            .label(label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        legend(&mut c)?;
        Ok(())
    }
    let d = Overlay { title, runs };
    render_stem!(path_stem, draw, &d)
}

/// Line plot of several series (sweeps).
pub fn write_xy(
    path_stem: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<Drawn, Error> {
    struct Xy<'a> {
        title: &'a str,
        x_desc: &'a str,
        y_desc: &'a str,
        series: &'a [(String, Vec<(f64, f64)>)],
    }
    fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &Xy<'_>) -> DrawResult
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE)?;
        let pts = || d.series.iter().flat_map(|s| s.1.iter());
        let xmax = pts().map(|p| p.0).fold(1.0, f64::max) * 1.1;
        let ymax = pts().map(|p| p.1).fold(1e-9, f64::max) * 1.15;
        let mut c = chart(root, d.title, 0f64..xmax, 0f64..ymax)?;
        c.configure_mesh()
            .x_desc(d.x_desc)
            .y_desc(d.y_desc)
            .x_label_formatter(&tick)
            .y_label_formatter(&tick)
            .label_style(("sans-serif", 14))
            .draw()?;
        for (i, (label, p)) in d.series.iter().enumerate() {
            let color = category_color(i);
            c.draw_series(LineSeries::new(p.iter().copied(), color.stroke_width(2)))?
                .label(label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
            c.draw_series(p.iter().map(|q| Circle::new(*q, 4, color.filled())))?;
        }
        legend(&mut c)?;
        Ok(())
    }
    let d = Xy {
        title,
        x_desc,
        y_desc,
        series,
    };
    render_stem!(path_stem, draw, &d)
}

/// Stacked bars, one bar per label, one segment per series (`series` names them in order):
/// memory by category for sweeps and comparisons, GPU time by kind per rank.
pub fn write_stacked(
    path_stem: &Path,
    title: &str,
    y_desc: &str,
    series: &[&str],
    bars: &[(String, Vec<f64>)],
) -> Result<Drawn, Error> {
    struct St<'a> {
        title: &'a str,
        y_desc: &'a str,
        series: &'a [&'a str],
        bars: &'a [(String, Vec<f64>)],
    }
    fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &St<'_>) -> DrawResult
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE)?;
        let n = d.bars.len().max(1);
        let ymax = d
            .bars
            .iter()
            .map(|b| b.1.iter().sum::<f64>())
            .fold(1e-9, f64::max)
            * 1.15;
        let labels: Vec<String> = d.bars.iter().map(|b| b.0.clone()).collect();
        let mut c = chart(root, d.title, (0..n).into_segmented(), 0f64..ymax)?;
        c.configure_mesh()
            .disable_x_mesh()
            .y_desc(d.y_desc)
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .label_style(("sans-serif", 14))
            .draw()?;
        for (k, name) in d.series.iter().enumerate() {
            let color = category_color(k);
            c.draw_series(d.bars.iter().enumerate().map(|(i, b)| {
                let lo: f64 = b.1.iter().take(k).sum();
                Rectangle::new(
                    [
                        (SegmentValue::Exact(i), lo),
                        (
                            SegmentValue::Exact(i + 1),
                            lo + b.1.get(k).copied().unwrap_or(0.0),
                        ),
                    ],
                    color.filled(),
                )
            }))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
        }
        legend(&mut c)?;
        Ok(())
    }
    let d = St {
        title,
        y_desc,
        series,
        bars,
    };
    render_stem!(path_stem, draw, &d)
}

/// A heat map: one row per label, one cell per column, coloured from blue (the smallest value)
/// to red (the largest); the caption gives the range. Step time per rank per iteration.
pub fn write_heatmap(
    path_stem: &Path,
    title: &str,
    x_desc: &str,
    rows: &[(String, Vec<f64>)],
) -> Result<Drawn, Error> {
    struct Hm<'a> {
        title: String,
        x_desc: &'a str,
        rows: &'a [(String, Vec<f64>)],
        lo: f64,
        hi: f64,
    }
    fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &Hm<'_>) -> DrawResult
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE)?;
        let ny = d.rows.len().max(1);
        let nx = d.rows.iter().map(|r| r.1.len()).max().unwrap_or(0).max(1);
        let labels: Vec<String> = d.rows.iter().map(|r| r.0.clone()).collect();
        let mut c = chart(root, &d.title, 0..nx, (0..ny).into_segmented())?;
        c.configure_mesh()
            .disable_mesh()
            .x_desc(d.x_desc)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .label_style(("sans-serif", 14))
            .draw()?;
        let span = (d.hi - d.lo).max(1e-12);
        for (y, (_, vals)) in d.rows.iter().enumerate() {
            c.draw_series(vals.iter().enumerate().map(|(x, v)| {
                let t = ((v - d.lo) / span).clamp(0.0, 1.0);
                let color = RGBColor(
                    (40.0 + 200.0 * t) as u8,
                    (90.0 * (1.0 - t) + 40.0) as u8,
                    (220.0 * (1.0 - t) + 30.0) as u8,
                );
                Rectangle::new(
                    [
                        (x, SegmentValue::Exact(y)),
                        (x + 1, SegmentValue::Exact(y + 1)),
                    ],
                    color.filled(),
                )
            }))?;
        }
        Ok(())
    }
    let all = || rows.iter().flat_map(|r| r.1.iter().copied());
    let lo = all().fold(f64::INFINITY, f64::min);
    let hi = all().fold(f64::NEG_INFINITY, f64::max);
    let d = Hm {
        title: format!("{title} (blue {lo:.3} to red {hi:.3})"),
        x_desc,
        rows,
        lo: if lo.is_finite() { lo } else { 0.0 },
        hi: if hi.is_finite() { hi } else { 1.0 },
    };
    render_stem!(path_stem, draw, &d)
}
