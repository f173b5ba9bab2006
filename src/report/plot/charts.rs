//! The analysis plots: each one's data and how it is drawn.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::DrawResult;
use super::*;

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

pub(super) fn draw_mem_vs_rank<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    d: &MemVsRank,
) -> DrawResult
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
        .x_desc("node, in execution order")
        .y_desc("MiB")
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
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

pub(super) fn draw_mem_over_time<DB: DrawingBackend>(
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
        // Room above the stack for the legend (it covered the data at 1.1).
        * 1.45;
    let mut c = chart(root, &d.title, 0f64..xmax, 0f64..ymax)?;
    c.configure_mesh()
        .x_desc("ms")
        .y_desc("MiB")
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
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
    legend_at(&mut c, SeriesLabelPosition::UpperRight)?;
    Ok(())
}

/// Per-node values by rank, colored by phase.
pub struct ByRank {
    /// (rank, value, phase).
    pub points: Vec<(u32, f64, String)>,
    /// Points named on the chart: (rank, value, name).
    pub labels: Vec<(u32, f64, String)>,
    /// Y axis.
    pub y_desc: String,
    /// Title.
    pub title: String,
}

pub(super) fn draw_by_rank<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    d: &ByRank,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let xmax = d.points.iter().map(|p| p.0).max().unwrap_or(1).max(1) as f64 + 1.0;
    let ymax = d.points.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-9) * 1.1;
    let mut c = chart(root, &d.title, 0f64..xmax, 0f64..ymax)?;
    c.configure_mesh()
        .x_desc("node, in execution order")
        .y_desc(&d.y_desc)
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
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
    let at: Vec<((i32, i32), &str)> = d
        .labels
        .iter()
        .map(|(x, y, name)| (c.backend_coord(&(*x as f64 + 1.0, *y)), name.as_str()))
        .collect();
    let drawn: Vec<&str> = ["forward", "backward", "optimizer", "zero_grad", "other"]
        .into_iter()
        .filter(|ph| d.points.iter().any(|p| p.2 == *ph))
        .collect();
    let plot = c.plotting_area().get_pixel_range();
    place_labels(root, &at, Some(legend_box(root, plot, &drawn, false)?))?;
    legend(&mut c)?;
    Ok(())
}

/// Writes each name right of its point (pixels; left of it at the chart's right edge), on the
/// nearest line where it overprints no name written before it and not the legend (`legend`: its box,
/// [`legend_box`]).
fn place_labels<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    at: &[((i32, i32), &str)],
    legend: Option<Rect>,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let style: TextStyle = ("sans-serif", 12).into();
    let right = root.dim_in_pixel().0 as i32 - 10;
    let mut sized = Vec::with_capacity(at.len());
    for &(p, name) in at {
        sized.push((p, root.estimate_text_size(name, &style)?.0 as i32));
    }
    for (r, &(_, name)) in label_boxes(&sized, right, legend).iter().zip(at) {
        root.draw(&Text::new(name.to_owned(), (r.0, r.1), style.clone()))?;
    }
    Ok(())
}

/// Where [`place_labels`] writes each name of width `w` for its point: right of it (left at
/// the `right` edge), on its line or the nearest line below or above it where it meets no
/// name placed before it and not `legend`.
fn label_boxes(at: &[((i32, i32), i32)], right: i32, legend: Option<Rect>) -> Vec<Rect> {
    const LINE: i32 = 14;
    let mut placed: Vec<Rect> = legend.into_iter().collect();
    let first = placed.len();
    for &((x, y), w) in at {
        let x = if x + 6 + w > right { x - 6 - w } else { x + 6 };
        let free = |dy: i32| {
            let r = Rect::new(x, y - LINE / 2 + dy, w, LINE);
            (!placed.iter().any(|p| p.meets(&r))).then_some(r)
        };
        let r = (0..)
            .find_map(|k: i32| free(k * LINE).or_else(|| free(-k * LINE)))
            .expect("a free line: the names placed are finitely many");
        placed.push(r);
    }
    placed.split_off(first)
}

/// A roofline ceiling's legend entry.
fn ceiling_label(dtype: &str, tflops: f64) -> String {
    format!("{dtype} peak {tflops:.0} TFLOP/s")
}

/// A box on the chart, pixels: left, top, width, height.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Rect(i32, i32, i32, i32);

impl Rect {
    fn new(x: i32, y: i32, w: i32, h: i32) -> Self {
        Rect(x, y, w, h)
    }

    /// Whether the two overlap.
    fn meets(&self, o: &Rect) -> bool {
        self.0 < o.0 + o.2 && o.0 < self.0 + self.2 && self.1 < o.1 + o.3 && o.1 < self.1 + self.3
    }
}

/// Where the legend of `labels` goes at the plotting area's right middle (`lower`: its lower
/// right), as plotters lays it out (the labels in a 14 px font, a 30 px marker column, 10 px
/// margins), a few pixels wider all round: what the point names must keep out of.
fn legend_box<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    plot: (std::ops::Range<i32>, std::ops::Range<i32>),
    labels: &[&str],
    lower: bool,
) -> Result<Rect, DrawingAreaErrorKind<DB::ErrorType>> {
    let style: TextStyle = ("sans-serif", 14).into();
    let mut w = 0;
    for l in labels {
        w = w.max(root.estimate_text_size(l, &style)?.0 as i32);
    }
    // Measured on the ViT-B/16 sample's chart: 108 x 85 px for four entries.
    let (w, h) = (w + 30 + 20, labels.len() as i32 * 18 + 14);
    let (xs, ys) = plot;
    let x = xs.end - 10 - w;
    let y = if lower {
        ys.end - 10 - h
    } else {
        (ys.start + ys.end) / 2 - h / 2
    };
    Ok(Rect::new(x - 2, y - 2, w + 4, h + 4))
}

/// The `n` points of most `value` named by `name`, the most first (ties: the first given).
pub(super) fn top_labels<T>(
    items: &[T],
    n: usize,
    value: impl Fn(&T) -> f64,
    point: impl Fn(&T) -> (f64, f64),
    name: impl Fn(&T) -> String,
) -> Vec<(f64, f64, String)> {
    let mut idx: Vec<usize> = (0..items.len())
        .filter(|&i| value(&items[i]) > 0.0)
        .collect();
    idx.sort_by(|&p, &q| {
        value(&items[q])
            .total_cmp(&value(&items[p]))
            .then(p.cmp(&q))
    });
    idx.truncate(n);
    idx.into_iter()
        .map(|i| {
            let (x, y) = point(&items[i]);
            (x, y, name(&items[i]))
        })
        .collect()
}

/// A node's name short enough to write beside its point: its module and op, without the
/// phase and the outer modules (`forward:ResNet_0/Sequential_5/Conv2d_16/aten::conv2d#0` is
/// `Conv2d_16/aten::conv2d#0`).
pub(super) fn short_node_name(name: &str) -> String {
    // A phase prefix is one word and one colon (an op's `aten::` has two).
    let name = match name.split_once(':') {
        Some((p, rest)) if !p.contains('/') && !rest.starts_with(':') => rest,
        _ => name,
    };
    let parts: Vec<&str> = name.rsplitn(3, '/').collect();
    match parts.as_slice() {
        [op, module, _] | [op, module] => format!("{module}/{op}"),
        _ => name.to_owned(),
    }
}

/// Activation sizes and inactive times.
pub struct Activations {
    /// (creation rank, MiB, inactive ms).
    pub points: Vec<(u32, f64, f64)>,
    /// Title.
    pub title: String,
}

pub(super) fn draw_activations<DB: DrawingBackend>(
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
            .x_desc("made by the node, in execution order")
            .y_desc(ydesc)
            .x_label_formatter(&tick)
            .y_label_formatter(&tick)
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

/// What a [`Bars`] chart's values are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarScale {
    /// Milliseconds per iteration.
    MsPerIteration,
    /// Mebibytes.
    Mib,
}

impl BarScale {
    /// The value axis' label.
    pub fn axis(self) -> &'static str {
        match self {
            BarScale::MsPerIteration => "ms per iteration",
            BarScale::Mib => "MiB",
        }
    }

    /// The unit written after each value.
    pub fn unit(self) -> &'static str {
        match self {
            BarScale::MsPerIteration => "ms",
            BarScale::Mib => "MiB",
        }
    }
}

/// Labelled horizontal bars, the first at the top, each with its value written beside it
/// (memory at the peak by category; time per iteration by phase).
pub struct Bars {
    /// (label, value, colour).
    pub bars: Vec<(String, f64, RGBAColor)>,
    /// What the values are.
    pub scale: BarScale,
    /// Decimals of the values written.
    pub digits: usize,
    /// Title.
    pub title: String,
}

pub(super) fn draw_bars<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &Bars) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let n = d.bars.len().max(1);
    let xmax = d.bars.iter().map(|b| b.1).fold(0.0, f64::max).max(1e-9) * 1.25;
    let mut c = ChartBuilder::on(root)
        .caption(&d.title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(150)
        // `a..b` segmented holds b - a + 1 slots: one per bar, the first bar at the top.
        .build_cartesian_2d(0f64..xmax, (0..n - 1).into_segmented())?;
    let slot = |i: usize| n - 1 - i;
    let labels: Vec<String> = d.bars.iter().rev().map(|b| b.0.clone()).collect();
    c.configure_mesh()
        .disable_y_mesh()
        .x_desc(d.scale.axis())
        .x_label_formatter(&tick)
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .label_style(("sans-serif", 14))
        .draw()?;
    c.draw_series(d.bars.iter().enumerate().map(|(i, b)| {
        Rectangle::new(
            [
                (0.0, SegmentValue::Exact(slot(i))),
                (b.1, SegmentValue::Exact(slot(i) + 1)),
            ],
            b.2.filled(),
        )
    }))?;
    c.draw_series(d.bars.iter().enumerate().map(|(i, b)| {
        Text::new(
            format!("{:.*} {}", d.digits, b.1, d.scale.unit()),
            (b.1, SegmentValue::CenterOf(slot(i))),
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
    /// Points named on the chart: (intensity, TFLOP/s, name).
    pub labels: Vec<(f64, f64, String)>,
    /// Title.
    pub title: String,
}

pub(super) fn draw_roofline<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    d: &Roofline,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let xmin = d
        .points
        .iter()
        .map(|p| p.0)
        .filter(|v| *v > 0.0)
        .fold(0.1, f64::min)
        * 0.5;
    let xmax = d.points.iter().map(|p| p.0).fold(1.0, f64::max).max(1e3) * 2.0;
    let peak = d.ceilings.iter().map(|c| c.1).fold(1.0, f64::max);
    let ymin = d
        .points
        .iter()
        .map(|p| p.1)
        .filter(|v| *v > 0.0)
        .fold(1e-2, f64::min)
        // Below the least point: none sits on the axis (a floor of 1e-6 put them there).
        * 0.5;
    let mut c = chart(
        root,
        &d.title,
        (xmin..xmax).log_scale(),
        (ymin..peak * 2.0).log_scale(),
    )?;
    c.configure_mesh()
        .x_desc("arithmetic intensity (FLOP/byte)")
        .y_desc("TFLOP/s")
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
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
            .label(ceiling_label(dt, *p))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
    }
    c.draw_series(
        d.points
            .iter()
            .filter(|p| p.0 > 0.0 && p.1 > 0.0)
            .map(|p| Circle::new((p.0, p.1), 3, BLACK.mix(0.6).filled())),
    )?;
    let at: Vec<((i32, i32), &str)> = d
        .labels
        .iter()
        .filter(|p| p.0 > 0.0 && p.1 > 0.0)
        .map(|(x, y, name)| (c.backend_coord(&(*x, *y)), name.as_str()))
        .collect();
    // The legend sits below the roofline, at the lower right.
    let names: Vec<String> = match d.bandwidth_tbs {
        Some(_) => d
            .ceilings
            .iter()
            .map(|(dt, p)| ceiling_label(dt, *p))
            .collect(),
        None => Vec::new(),
    };
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let plot = c.plotting_area().get_pixel_range();
    let legend = (!names.is_empty())
        .then(|| legend_box(root, plot, &names, true))
        .transpose()?;
    place_labels(root, &at, legend)?;
    legend_at(&mut c, SeriesLabelPosition::LowerRight)?;
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
        title: format!("{}: memory vs execution order of the nodes", a.summary.name),
    }
}

#[cfg(test)]
mod tests {

    /// Issue 76: no point's name is written over another's or over the legend (ViT-B/16's
    /// optimizer names sat against the legend at the right middle).
    #[test]
    fn issue76_point_names_keep_out_of_each_other_and_the_legend() {
        let legend = Rect::new(900, 280, 200, 100);
        let at = [
            ((1190, 300), 150), // its name would sit on the legend
            ((1190, 300), 150), // the same point twice: a line lower
            ((100, 50), 200),
            ((110, 52), 200), // overlapping the one before
        ];
        let boxes = label_boxes(&at, 1270, Some(legend));
        assert_eq!(boxes.len(), at.len());
        for (i, b) in boxes.iter().enumerate() {
            assert!(!b.meets(&legend), "{b:?}");
            for c in &boxes[..i] {
                assert!(!b.meets(c), "{b:?} meets {c:?}");
            }
        }
        // Left of its point at the right edge, right of it elsewhere.
        assert_eq!(boxes[0].0, 1190 - 6 - 150);
        assert_eq!(boxes[2].0, 106);
    }

    use super::*;

    #[test]
    fn points_are_named_by_module_and_op_without_phase_or_outer_modules() {
        assert_eq!(
            short_node_name("forward:ResNet_0/Sequential_5/Conv2d_16/aten::conv2d#0"),
            "Conv2d_16/aten::conv2d#0"
        );
        assert_eq!(
            short_node_name("backward:AddmmBackward0#3"),
            "AddmmBackward0#3"
        );
        assert_eq!(short_node_name("aten::mm#1"), "aten::mm#1");
        assert_eq!(short_node_name("optimizer:A/aten::add_"), "A/aten::add_");
    }

    #[test]
    fn the_labelled_points_are_those_of_most_value_first_given_first_on_ties() {
        let items = [("a", 1.0), ("b", 3.0), ("c", 0.0), ("d", 3.0), ("e", 2.0)];
        let got = top_labels(&items, 3, |x| x.1, |x| (0.0, x.1), |x| x.0.to_owned());
        let names: Vec<&str> = got.iter().map(|g| g.2.as_str()).collect();
        assert_eq!(names, ["b", "d", "e"]);
        // None of no value, whatever `n`.
        assert_eq!(
            top_labels(&items, 9, |x| x.1, |x| (0.0, x.1), |x| x.0.to_owned()).len(),
            4
        );
    }
}
