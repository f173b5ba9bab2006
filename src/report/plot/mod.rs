//! Plots (PNG and SVG) with plotters and an embedded DejaVu Sans, so no system fonts are
//! needed. Every plot also writes the exact points it draws as `<name>.data.csv`, which the
//! tests compare with the tables they come from.
//!
//! One builder for every plot (this module: font, colours, the chart frame, `render` to SVG
//! and PNG); the charts themselves (`charts`: data and drawing of each analysis plot); the table
//! of which plots an analysis gets and their data (`jobs`); plots over several runs (`multi`:
//! compare, sweep, plan, ranks).

use crate::file_error::FileError;
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
    legend_at(c, SeriesLabelPosition::MiddleRight)
}

/// [`legend`] at `at`: where the chart's data leaves room (above a stack, below a roofline).
fn legend_at<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    c: &mut ChartContext<'a, DB, CT>,
    at: SeriesLabelPosition,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    c.configure_series_labels()
        .position(at)
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

/// A tick of a value axis: whole numbers without decimals ("50", not "50.0"), others as
/// short as they read exactly.
fn tick(v: &f64) -> String {
    let v = *v;
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.abs() >= 1e-3 {
        let s = format!("{v:.6}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        // A log axis's small powers of ten: "1e-5", not "0.000009999999999".
        format!("{v:.1e}").replace(".0e", "e")
    }
}

fn write_data(path: &Path, header: &[&str], rows: &[Vec<String>]) -> Result<(), Error> {
    let mut w = super::csv_writer(path)?;
    w.write_record(header).map_err(csv_err(path))?;
    for r in rows {
        w.write_record(r).map_err(csv_err(path))?;
    }
    w.flush().map_err(io(path))
}

/// zlib level of the plots' PNGs: on the benchmark trace's six plots, level 3 wrote 457 KB
/// against level 6's 306 KB and took the default command from 0.25 to 0.24 s (medians of 6
/// interleaved runs, 2 cores); level 1 was no faster and larger (464 KB).
const PNG_LEVEL: u8 = 3;

/// Encodes an RGB image as PNG with the Sub filter on every row: plots are flat colours and
/// lines, which it keeps small (50-80 KB files, where the image crate's encoder wrote about
/// 210 KB ones; this crate's fdeflate mode, 540 KB).
fn encode_png(rgb: &[u8], (w, h): (u32, u32)) -> Result<Vec<u8>, png::EncodingError> {
    let mut out = Vec::with_capacity(rgb.len() / 8);
    {
        let mut e = png::Encoder::new(&mut out, w, h);
        e.set_color(png::ColorType::Rgb);
        e.set_depth(png::BitDepth::Eight);
        e.set_deflate_compression(png::DeflateCompression::Level(PNG_LEVEL));
        e.set_filter(png::Filter::Sub);
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
    let fail = |p: &Path, e: Box<dyn std::error::Error>| {
        Error::from(FileError::new(p, std::io::Error::other(e.to_string())))
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

/// Writes one plot into a directory; returns its SVG text.
type DrawJob = dyn Fn(&Path) -> Result<String, Error> + Send + Sync;

/// One plot to draw: its data is taken from the analysis when the job is made, so jobs run
/// side by side on any thread.
pub struct Job {
    plot: Plot,
    run: Box<DrawJob>,
}

impl Job {
    /// The plot it draws.
    pub fn plot(&self) -> Plot {
        self.plot
    }

    /// Writes `<name>.data.csv`, `.svg` and `.png` into `dir`; returns the SVG text.
    pub fn write(&self, dir: &Path) -> Result<String, Error> {
        register_font();
        (self.run)(dir)
    }
}

/// A [`Job`] writing `rows` under `header` as `<name>.data.csv` and drawing `data` with `draw`.
macro_rules! job {
    ($plot:expr, $header:expr, $rows:expr, $data:expr, $draw:ident) => {{
        let (header, rows, data) = ($header, $rows, $data);
        let plot: Plot = $plot;
        Job {
            plot,
            run: Box::new(move |dir: &Path| {
                let name = plot.name();
                write_data(&dir.join(format!("{name}.data.csv")), &header, &rows)?;
                render!(dir, name, $draw, &data)
            }),
        }
    }};
}

mod charts;
mod jobs;
mod multi;

use self::charts::{
    draw_activations, draw_bars, draw_by_rank, draw_mem_over_time, draw_mem_vs_rank, draw_roofline,
};
pub use self::charts::{
    mem_vs_rank_data, Activations, BarScale, Bars, ByRank, MemOverTime, MemVsRank, Roofline,
};
pub use self::jobs::jobs;
pub use self::multi::{write_heatmap, write_overlay, write_stacked, write_xy};

#[cfg(test)]
mod tick_tests;
mod which;
pub use self::which::{Plot, PLOTS};
