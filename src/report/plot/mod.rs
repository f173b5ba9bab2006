//! Plots (PNG and SVG) with plotters and an embedded DejaVu Sans, so no system fonts are
//! needed. Every plot also writes the exact points it draws as `<name>.data.csv`, which the
//! tests compare with the tables they come from.

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::ranged1d::AsRangedCoord;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::{csv_err, io, Error};
use crate::analysis::memory::{CATEGORIES, CATEGORY_COUNT};
use crate::analysis::Analysis;

static FONT: Once = Once::new();
const FONT_BYTES: &[u8] = include_bytes!("DejaVuSans.ttf");

fn register_font() {
    FONT.call_once(|| {
        // The embedded font is valid; were it not, plots would draw without text.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT_BYTES);
    });
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Which plots to draw.
pub const PLOTS: [&str; 6] = [
    "memory_vs_rank",
    "memory_over_time",
    "node_runtime",
    "activations",
    "peak_breakdown",
    "roofline",
];

const SIZE: (u32, u32) = (1200, 700);

fn category_color(i: usize) -> RGBColor {
    [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(188, 189, 34),
        RGBColor(127, 127, 127),
    ][i % CATEGORY_COUNT]
}

fn phase_color(p: &str) -> RGBColor {
    match p {
        "forward" => RGBColor(31, 119, 180),
        "backward" => RGBColor(214, 39, 40),
        "optimizer" => RGBColor(44, 160, 44),
        "zero_grad" => RGBColor(148, 103, 189),
        _ => RGBColor(127, 127, 127),
    }
}

const MIB: f64 = 1024.0 * 1024.0;

/// The series legend, in the house style.
fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    c: &mut ChartContext<'a, DB, CT>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
}

/// A chart over an x and a y coordinate range.
type Chart<'a, DB, X, Y> = ChartContext<
    'a,
    DB,
    Cartesian2d<<X as AsRangedCoord>::CoordDescType, <Y as AsRangedCoord>::CoordDescType>,
>;

/// A chart in the house style: caption, margins, axis label areas.
fn chart<'a, DB: DrawingBackend, X: AsRangedCoord, Y: AsRangedCoord>(
    root: &'a DrawingArea<DB, Shift>,
    title: &str,
    x: X,
    y: Y,
) -> Result<Chart<'a, DB, X, Y>, DrawingAreaErrorKind<DB::ErrorType>> {
    ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)
}

fn write_data(path: &Path, header: &[&str], rows: &[Vec<String>]) -> Result<(), Error> {
    let mut w = super::csv_writer(path)?;
    w.write_record(header).map_err(csv_err(path))?;
    for r in rows {
        w.write_record(r).map_err(csv_err(path))?;
    }
    w.flush().map_err(io(path))
}

/// Encodes an RGB image as PNG with the Sub filter on every row: plots are flat colours and
/// lines, which it keeps small (45 KB files, where the image crate's encoder wrote about
/// 210 KB ones; this crate's fast deflate, 540 KB).
fn encode_png(rgb: &[u8], (w, h): (u32, u32)) -> Result<Vec<u8>, png::EncodingError> {
    let mut out = Vec::with_capacity(rgb.len() / 8);
    {
        let mut e = png::Encoder::new(&mut out, w, h);
        e.set_color(png::ColorType::Rgb);
        e.set_depth(png::BitDepth::Eight);
        e.set_compression(png::Compression::Default);
        e.set_filter(png::FilterType::Sub);
        let mut w = e.write_header()?;
        w.write_image_data(rgb)?;
        w.finish()?;
    }
    Ok(out)
}

/// Draws `data` with `draw` as `<dir>/<name>.svg` and `.png`; returns the SVG text (the HTML
/// report inlines it). The one builder every plot goes through.
fn render<D: ?Sized>(
    dir: &Path,
    name: &str,
    draw: impl Fn(&DrawingArea<SVGBackend<'_>, Shift>, &D) -> DrawResult,
    draw_png: impl Fn(&DrawingArea<BitMapBackend<'_>, Shift>, &D) -> DrawResult,
    data: &D,
) -> Result<String, Error> {
    let svg = dir.join(format!("{name}.svg"));
    let png = dir.join(format!("{name}.png"));
    let fail = |p: &Path, e: Box<dyn std::error::Error>| Error::Io {
        path: p.to_path_buf(),
        source: std::io::Error::other(e.to_string()),
    };
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, SIZE).into_drawing_area();
        draw(&root, data).map_err(|e| fail(&svg, e))?;
        root.present().map_err(|e| fail(&svg, e.into()))?;
    }
    super::write_file(&svg, text.as_bytes())?;
    let mut rgb = vec![0u8; SIZE.0 as usize * SIZE.1 as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area();
        draw_png(&root, data).map_err(|e| fail(&png, e))?;
        root.present().map_err(|e| fail(&png, e.into()))?;
    }
    let bytes = encode_png(&rgb, SIZE).map_err(|e| fail(&png, e.into()))?;
    super::write_file(&png, &bytes)?;
    Ok(text)
}

/// [`render`] of a plot with one drawing function for both backends.
macro_rules! render {
    ($dir:expr, $name:expr, $f:ident, $data:expr) => {
        render($dir, $name, |r, d| $f(r, d), |r, d| $f(r, d), $data)
    };
}

/// A plot drawn at a path stem: its two files and the SVG text (a page inlines it).
pub struct Drawn {
    /// `<stem>.svg` and `<stem>.png`.
    pub files: [PathBuf; 2],
    /// The SVG.
    pub svg: String,
}

/// [`render`] of a plot named by a path stem (`<dir>/<name>`: compare, sweep, the ranks).
macro_rules! render_stem {
    ($stem:expr, $f:ident, $data:expr) => {{
        register_font();
        let stem: &Path = $stem;
        let dir = stem.parent().unwrap_or(Path::new("."));
        let name = stem.file_name().unwrap_or_default().to_string_lossy();
        render!(dir, &name, $f, $data).map(|svg| Drawn {
            files: [
                dir.join(format!("{name}.svg")),
                dir.join(format!("{name}.png")),
            ],
            svg,
        })
    }};
}

/// Data of the memory-vs-rank plot.
pub struct MemVsRank {
    /// (rank, peak MiB, active MiB).
    pub points: Vec<(u32, f64, f64)>,
    /// Ranks where backward and the optimizer begin.
    pub boundaries: Vec<(u32, &'static str)>,
    /// GPU memory, MiB.
    pub gpu_mib: Option<f64>,
    /// Title.
    pub title: String,
}

fn draw_mem_vs_rank<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &MemVsRank) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let ymax_data = d.points.iter().map(|p| p.1.max(p.2)).fold(1.0, f64::max);
    // Show the GPU's memory only when it fits on a readable scale.
    let gpu_on = d.gpu_mib.filter(|g| *g <= 3.0 * ymax_data);
    let ymax = gpu_on.unwrap_or(0.0).max(ymax_data) * 1.1;
    let xmax = d.points.iter().map(|p| p.0).max().unwrap_or(1).max(1) as f64;
    let caption = match (d.gpu_mib, gpu_on) {
        (Some(g), None) => format!("{} (GPU memory {:.1} GiB, off scale)", d.title, g / 1024.0),
        _ => d.title.clone(),
    };
    let mut c = chart(root, &caption, 0f64..xmax, 0f64..ymax)?;
    c.configure_mesh()
        .x_desc("node rank")
        .y_desc("MiB")
        .label_style(("sans-serif", 14))
        .draw()?;
    c.draw_series(LineSeries::new(
        d.points.iter().map(|p| (p.0 as f64, p.1)),
        RED.stroke_width(2),
    ))?
    .label("peak during node")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    c.draw_series(LineSeries::new(
        d.points.iter().map(|p| (p.0 as f64, p.2)),
        BLUE.stroke_width(2),
    ))?
    .label("active before node")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    for (r, what) in &d.boundaries {
        c.draw_series(LineSeries::new(
            vec![(*r as f64, 0.0), (*r as f64, ymax)],
            BLACK.stroke_width(1),
        ))?;
        c.draw_series(std::iter::once(Text::new(
            format!("{what} →"),
            (*r as f64, ymax * 0.97),
            ("sans-serif", 14),
        )))?;
    }
    if let Some(g) = gpu_on {
        c.draw_series(LineSeries::new(
            vec![(0.0, g), (xmax, g)],
            MAGENTA.stroke_width(2),
        ))?
        .label("GPU memory")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], MAGENTA));
    }
    legend(&mut c)?;
    Ok(())
}

/// Stacked bytes by category over time.
pub struct MemOverTime {
    /// (ms since the first event, MiB per category).
    pub points: Vec<(f64, [f64; CATEGORY_COUNT])>,
    /// Title.
    pub title: String,
}

fn draw_mem_over_time<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    d: &MemOverTime,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let xmax = d.points.last().map_or(1.0, |p| p.0).max(1e-3);
    let ymax = d
        .points
        .iter()
        .map(|p| p.1.iter().sum::<f64>())
        .fold(1.0, f64::max)
        * 1.1;
    let mut c = chart(root, &d.title, 0f64..xmax, 0f64..ymax)?;
    c.configure_mesh()
        .x_desc("ms")
        .y_desc("MiB")
        .label_style(("sans-serif", 14))
        .draw()?;
    // Stack from the top category down so each area covers the ones below it.
    for k in (0..7).rev() {
        let color = category_color(k);
        c.draw_series(AreaSeries::new(
            d.points
                .iter()
                .map(|p| (p.0, p.1[..=k].iter().sum::<f64>())),
            0.0,
            color.mix(0.8),
        ))?
        .label(CATEGORIES[k].key())
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
    }
    legend(&mut c)?;
    Ok(())
}

/// Per-node values by rank, colored by phase.
pub struct ByRank {
    /// (rank, value, phase).
    pub points: Vec<(u32, f64, String)>,
    /// Y axis.
    pub y_desc: String,
    /// Title.
    pub title: String,
}

fn draw_by_rank<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &ByRank) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let xmax = d.points.iter().map(|p| p.0).max().unwrap_or(1).max(1) as f64 + 1.0;
    let ymax = d.points.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-9) * 1.1;
    let mut c = chart(root, &d.title, 0f64..xmax, 0f64..ymax)?;
    c.configure_mesh()
        .x_desc("node rank")
        .y_desc(&d.y_desc)
        .label_style(("sans-serif", 14))
        .draw()?;
    for phase in ["forward", "backward", "optimizer", "zero_grad", "other"] {
        let color = phase_color(phase);
        let pts: Vec<_> = d.points.iter().filter(|p| p.2 == phase).collect();
        if pts.is_empty() {
            continue;
        }
        c.draw_series(pts.iter().map(|p| {
            Rectangle::new([(p.0 as f64, 0.0), (p.0 as f64 + 0.8, p.1)], color.filled())
        }))?
        .label(phase)
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
    }
    legend(&mut c)?;
    Ok(())
}

/// Activation sizes and inactive times.
pub struct Activations {
    /// (creation rank, MiB, inactive ms).
    pub points: Vec<(u32, f64, f64)>,
    /// Title.
    pub title: String,
}

fn draw_activations<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    d: &Activations,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(SIZE.1 / 2);
    let xmax = d.points.iter().map(|p| p.0).max().unwrap_or(1).max(1) as f64 + 1.0;
    for (area, idx, ydesc, title, color) in [
        (
            &top,
            1,
            "MiB",
            format!("{}: activation sizes", d.title),
            BLUE,
        ),
        (
            &bottom,
            2,
            "ms",
            "inactive time (last forward use to first backward use)".to_owned(),
            RED,
        ),
    ] {
        let val = |p: &(u32, f64, f64)| if idx == 1 { p.1 } else { p.2 };
        let ymax = d.points.iter().map(val).fold(0.0, f64::max).max(1e-9) * 1.1;
        let mut c = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..xmax, 0f64..ymax)?;
        c.configure_mesh()
            .x_desc("creation rank")
            .y_desc(ydesc)
            .label_style(("sans-serif", 12))
            .draw()?;
        c.draw_series(
            d.points
                .iter()
                .map(|p| Circle::new((p.0 as f64, val(p)), 3, color.filled())),
        )?;
    }
    Ok(())
}

/// Bytes by category at the peak.
pub struct PeakBreakdown {
    /// (category, MiB).
    pub bars: Vec<(String, f64)>,
    /// Title.
    pub title: String,
}

fn draw_peak_breakdown<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    d: &PeakBreakdown,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let n = d.bars.len().max(1);
    let xmax = d.bars.iter().map(|b| b.1).fold(0.0, f64::max).max(1e-9) * 1.2;
    let mut c = ChartBuilder::on(root)
        .caption(&d.title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(120)
        .build_cartesian_2d(0f64..xmax, (0..n).into_segmented())?;
    let labels: Vec<String> = d.bars.iter().map(|b| b.0.clone()).collect();
    c.configure_mesh()
        .disable_y_mesh()
        .x_desc("MiB")
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .label_style(("sans-serif", 14))
        .draw()?;
    c.draw_series(d.bars.iter().enumerate().map(|(i, b)| {
        Rectangle::new(
            [
                (0.0, SegmentValue::Exact(i)),
                (b.1, SegmentValue::Exact(i + 1)),
            ],
            category_color(i).filled(),
        )
    }))?;
    c.draw_series(d.bars.iter().enumerate().map(|(i, b)| {
        Text::new(
            format!("{:.1} MiB", b.1),
            (b.1, SegmentValue::CenterOf(i)),
            ("sans-serif", 14),
        )
    }))?;
    Ok(())
}

/// Roofline points and ceilings.
pub struct Roofline {
    /// (arithmetic intensity, achieved TFLOP/s, dtype).
    pub points: Vec<(f64, f64, String)>,
    /// Ceilings: (dtype, peak TFLOP/s).
    pub ceilings: Vec<(String, f64)>,
    /// Bandwidth, TB/s.
    pub bandwidth_tbs: Option<f64>,
    /// Title.
    pub title: String,
}

fn draw_roofline<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &Roofline) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let xmin = d
        .points
        .iter()
        .map(|p| p.0)
        .fold(f64::MAX, f64::min)
        .clamp(1e-3, 0.1);
    let xmax = d.points.iter().map(|p| p.0).fold(1.0, f64::max).max(1e3) * 2.0;
    let peak = d.ceilings.iter().map(|c| c.1).fold(1.0, f64::max);
    let ymin = d
        .points
        .iter()
        .map(|p| p.1)
        .filter(|v| *v > 0.0)
        .fold(f64::MAX, f64::min)
        .clamp(1e-6, 1e-2);
    let mut c = chart(
        root,
        &d.title,
        (xmin..xmax).log_scale(),
        (ymin..peak * 2.0).log_scale(),
    )?;
    c.configure_mesh()
        .x_desc("arithmetic intensity (FLOP/byte)")
        .y_desc("TFLOP/s")
        .label_style(("sans-serif", 14))
        .draw()?;
    if let Some(bw) = d.bandwidth_tbs {
        for (i, (dt, p)) in d.ceilings.iter().enumerate() {
            let color = category_color(i);
            let knee = p / bw;
            let xs = [xmin, knee.clamp(xmin, xmax), xmax];
            c.draw_series(LineSeries::new(
                xs.iter().map(|x| (*x, (x * bw).min(*p))),
                color.stroke_width(2),
            ))?
            .label(format!("{dt} peak {p:.0} TFLOP/s"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
    }
    c.draw_series(
        d.points
            .iter()
            .filter(|p| p.0 > 0.0 && p.1 > 0.0)
            .map(|p| Circle::new((p.0, p.1), 3, BLACK.mix(0.6).filled())),
    )?;
    legend(&mut c)?;
    Ok(())
}

/// The data each plot draws, built from the analysis.
pub fn mem_vs_rank_data(a: &Analysis, gpu_mem_bytes: Option<i64>) -> MemVsRank {
    let mut boundaries = Vec::new();
    for (phase, label) in [("backward", "backward"), ("optimizer", "optimizer")] {
        if let Some(n) = a.node_stats.iter().find(|n| n.gtype.as_str() == phase) {
            boundaries.push((n.rank, label));
        }
    }
    MemVsRank {
        points: a
            .node_stats
            .iter()
            .map(|n| {
                (
                    n.rank,
                    n.median_peak_mem_bytes as f64 / MIB,
                    n.median_active_mem_bytes as f64 / MIB,
                )
            })
            .collect(),
        boundaries,
        gpu_mib: gpu_mem_bytes
            .or(a.summary.device_memory_bytes)
            .map(|b| b as f64 / MIB),
        title: format!("{}: memory vs execution rank", a.summary.name),
    }
}

/// Writes one plot into a directory; returns its SVG text.
type DrawJob = dyn Fn(&Path) -> Result<String, Error> + Send + Sync;

/// One plot to draw: its data is taken from the analysis when the job is made, so jobs run
/// side by side on any thread.
pub struct Job {
    name: &'static str,
    run: Box<DrawJob>,
}

impl Job {
    /// The plot's name (one of [`PLOTS`]).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Writes `<name>.data.csv`, `.svg` and `.png` into `dir`; returns the SVG text.
    pub fn write(&self, dir: &Path) -> Result<String, Error> {
        register_font();
        (self.run)(dir)
    }
}

/// A [`Job`] writing `rows` under `header` as `<name>.data.csv` and drawing `data` with `draw`.
macro_rules! job {
    ($name:literal, $header:expr, $rows:expr, $data:expr, $draw:ident) => {{
        let (header, rows, data) = ($header, $rows, $data);
        Job {
            name: $name,
            run: Box::new(move |dir: &Path| {
                write_data(&dir.join(concat!($name, ".data.csv")), &header, &rows)?;
                render!(dir, $name, $draw, &data)
            }),
        }
    }};
}

/// The chosen plots (all when `which` is empty), in [`PLOTS`] order.
pub fn jobs(a: &Analysis, which: &[String], gpu_mem_bytes: Option<i64>) -> Vec<Job> {
    let want = |n: &str| which.is_empty() || which.iter().any(|w| w == n);
    let mut jobs = Vec::new();
    let name = &a.summary.name;
    if want("memory_vs_rank") {
        let d = mem_vs_rank_data(a, gpu_mem_bytes);
        let rows: Vec<Vec<String>> = d
            .points
            .iter()
            .map(|p| {
                vec![
                    p.0.to_string(),
                    format!("{:.6}", p.1),
                    format!("{:.6}", p.2),
                ]
            })
            .collect();
        jobs.push(job!(
            "memory_vs_rank",
            ["rank", "peak_mib", "active_mib"],
            rows,
            d,
            draw_mem_vs_rank
        ));
    }
    if want("memory_over_time") {
        let t0 = a.timeline.first().map_or(0, |r| r.ts);
        // At most ~2000 points: keep the first row of each time bucket.
        let step = (a.timeline.len() / 2000).max(1);
        let points: Vec<(f64, [f64; CATEGORY_COUNT])> = a
            .timeline
            .iter()
            .step_by(step)
            .map(|r| {
                (
                    (r.ts - t0) as f64 * 1e-6,
                    r.breakdown.map(|b| b as f64 / MIB),
                )
            })
            .collect();
        let mut header = vec!["ms"];
        header.extend(CATEGORIES.iter().map(|c| c.key()));
        let rows: Vec<Vec<String>> = points
            .iter()
            .map(|p| {
                std::iter::once(format!("{:.6}", p.0))
                    .chain(p.1.iter().map(|v| format!("{v:.6}")))
                    .collect()
            })
            .collect();
        let d = MemOverTime {
            points,
            title: format!("{name}: memory by category over time"),
        };
        jobs.push(job!(
            "memory_over_time",
            header,
            rows,
            d,
            draw_mem_over_time
        ));
    }
    if want("node_runtime") {
        let d = ByRank {
            points: a
                .node_stats
                .iter()
                .map(|n| {
                    (
                        n.rank,
                        n.median_run_time_s * 1e3,
                        n.gtype.as_str().to_owned(),
                    )
                })
                .collect(),
            y_desc: "GPU time, ms".into(),
            title: format!("{name}: GPU time per node (median)"),
        };
        let rows: Vec<Vec<String>> = d
            .points
            .iter()
            .map(|p| vec![p.0.to_string(), format!("{:.9}", p.1), p.2.clone()])
            .collect();
        jobs.push(job!(
            "node_runtime",
            ["rank", "gpu_ms", "gtype"],
            rows,
            d,
            draw_by_rank
        ));
    }
    if want("activations") {
        let d = Activations {
            points: a
                .liveness
                .activations
                .iter()
                .map(|x| {
                    (
                        x.creation_rank,
                        x.median_mem_size_bytes as f64 / MIB,
                        x.inactive_time_s * 1e3,
                    )
                })
                .collect(),
            title: name.clone(),
        };
        let rows: Vec<Vec<String>> = d
            .points
            .iter()
            .map(|p| {
                vec![
                    p.0.to_string(),
                    format!("{:.6}", p.1),
                    format!("{:.9}", p.2),
                ]
            })
            .collect();
        jobs.push(job!(
            "activations",
            ["creation_rank", "size_mib", "inactive_ms"],
            rows,
            d,
            draw_activations
        ));
    }
    if want("peak_breakdown") {
        let d = PeakBreakdown {
            bars: CATEGORIES
                .iter()
                .map(|c| {
                    (
                        c.key().to_owned(),
                        a.summary
                            .peak_breakdown_bytes
                            .get(c.key())
                            .copied()
                            .unwrap_or(0) as f64
                            / MIB,
                    )
                })
                .collect(),
            title: format!("{name}: memory at the peak by category"),
        };
        let rows: Vec<Vec<String>> = d
            .bars
            .iter()
            .map(|b| vec![b.0.clone(), format!("{:.6}", b.1)])
            .collect();
        jobs.push(job!(
            "peak_breakdown",
            ["category", "mib"],
            rows,
            d,
            draw_peak_breakdown
        ));
    }
    if want("roofline") {
        let peaks = a.summary.peaks.as_ref();
        let mut dts: Vec<&str> = a
            .flops
            .iter()
            .filter(|r| r.flops > 0)
            .map(|r| r.dtype)
            .collect();
        dts.sort_unstable();
        dts.dedup();
        let d = Roofline {
            points: a
                .flops
                .iter()
                .filter(|r| r.flops > 0 && r.gpu_time_s > 0.0)
                .map(|r| {
                    (
                        r.arithmetic_intensity,
                        r.achieved_tflops,
                        r.dtype.to_owned(),
                    )
                })
                .collect(),
            ceilings: peaks
                .map(|p| {
                    p.tflops
                        .iter()
                        .filter(|(d, _)| dts.contains(&d.as_str()))
                        .map(|(d, v)| (d.as_str().to_owned(), *v))
                        .collect()
                })
                .unwrap_or_default(),
            bandwidth_tbs: peaks.map(|p| p.bandwidth_gbps / 1000.0),
            title: format!(
                "{name}: roofline ({})",
                peaks.map_or("no peaks".to_owned(), |p| p.device.clone())
            ),
        };
        let rows: Vec<Vec<String>> = d
            .points
            .iter()
            .map(|p| vec![format!("{:.6}", p.0), format!("{:.6}", p.1), p.2.clone()])
            .collect();
        jobs.push(job!(
            "roofline",
            ["arithmetic_intensity", "achieved_tflops", "dtype"],
            rows,
            d,
            draw_roofline
        ));
    }
    jobs
}

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
