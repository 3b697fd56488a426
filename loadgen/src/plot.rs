//! `plot`: an SVG percentile-distribution chart, one curve per run, drawn by
//! hand (SVG is text).
//!
//! The x axis is HdrHistogram's "nines" scale: a point at percentile `p`
//! (a fraction) sits at `log10(1 / (1 - p))`, so 0 %, 90 %, 99 %, 99.9 %, ...
//! are equally spaced and the tail gets the room it deserves. The y axis is
//! latency in µs, logarithmic by default (runs differ by decades), linear on
//! request. The 100 % point (the max) cannot sit on a nines axis; it is drawn
//! as a dot on the right edge.
//!
//! ```text
//!  µs ^
//! 10^4|                          .-o  run B
//! 10^3|              ___.----''
//! 10^2|----''''''                .-o  run A
//!     +----+----+----+----+----+---->
//!     0%  90%  99% 99.9% ...          percentile
//! ```
//!
//! # Invariants
//!
//! - Every coordinate written lies inside the plot area.
//! - Run names are XML-escaped.

use std::fmt::Write as _;

use crate::hgrm::PercentilePoint;

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 540.0;
const MARGIN_LEFT: f64 = 80.0;
const MARGIN_RIGHT: f64 = 60.0;
const MARGIN_TOP: f64 = 50.0;
const MARGIN_BOTTOM: f64 = 60.0;
/// The most nines the x axis shows (99.99999 %); finer points are clipped.
pub const NINES_MAX: u32 = 7;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// One run's curve.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// The percentile distribution, in increasing percentile order.
    pub points: Vec<PercentilePoint>,
}

/// How the y axis is scaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YScale {
    /// Logarithmic (powers of ten).
    Log,
    /// Linear from zero.
    Linear,
}

/// The nines of a percentile fraction: `log10(1 / (1 - p))`, or `None` at 1.
pub fn nines(percentile: f64) -> Option<f64> {
    if percentile >= 1.0 {
        None
    } else {
        Some((1.0 / (1.0 - percentile)).log10())
    }
}

/// The tick label of a whole number of nines: 0%, 90%, 99%, 99.9%, ...
pub fn nines_label(nines: u32) -> String {
    match nines {
        0 => "0%".to_string(),
        1 => "90%".to_string(),
        2 => "99%".to_string(),
        n => format!("99.{}%", "9".repeat(n as usize - 2)),
    }
}

struct Frame {
    x_max: f64,
    y_scale: YScale,
    y_low: f64,
    y_high: f64,
}

impl Frame {
    fn x(&self, nines: f64) -> f64 {
        let plot_width = WIDTH - MARGIN_LEFT - MARGIN_RIGHT;
        MARGIN_LEFT + nines.clamp(0.0, self.x_max) / self.x_max * plot_width
    }

    fn y(&self, value_us: f64) -> f64 {
        let plot_height = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM;
        let fraction = match self.y_scale {
            YScale::Log => {
                let value = value_us.max(self.y_low);
                (value.log10() - self.y_low.log10()) / (self.y_high.log10() - self.y_low.log10())
            }
            YScale::Linear => value_us / self.y_high,
        };
        HEIGHT - MARGIN_BOTTOM - fraction.clamp(0.0, 1.0) * plot_height
    }
}

fn frame(series: &[Series], y_scale: YScale) -> Frame {
    let finite_nines = series
        .iter()
        .flat_map(|s| s.points.iter().filter_map(|p| nines(p.percentile)))
        .fold(0.0_f64, f64::max);
    // 0.999 maps to 3.0000000000000004; the epsilon keeps it on 3 nines.
    let x_max = (finite_nines - 1e-9)
        .ceil()
        .clamp(1.0, f64::from(NINES_MAX));
    let values = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.value_us));
    let (low, high) = values.fold((f64::MAX, 0.0_f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (y_low, y_high) = match y_scale {
        YScale::Log => {
            let low = if low == f64::MAX { 1.0 } else { low.max(1.0) };
            let high = high.max(low * 10.0);
            (
                10_f64.powf(low.log10().floor()),
                10_f64.powf(high.log10().ceil()),
            )
        }
        YScale::Linear => (0.0, nice_ceiling(high.max(1.0))),
    };
    Frame {
        x_max,
        y_scale,
        y_low,
        y_high,
    }
}

/// The smallest 1, 2 or 5 times a power of ten at or above `value`.
fn nice_ceiling(value: f64) -> f64 {
    let power = 10_f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|&c| c >= value)
        .unwrap_or(value)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Draws `series` as an SVG document.
pub fn svg(series: &[Series], title: &str, y_scale: YScale) -> String {
    let frame = frame(series, y_scale);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(
        out,
        "<rect width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"white\"/>"
    );
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">{}</text>",
        WIDTH / 2.0,
        escape(title)
    );
    draw_axes(&mut out, &frame);
    for (index, run) in series.iter().enumerate() {
        draw_series(&mut out, &frame, run, COLORS[index % COLORS.len()]);
    }
    draw_legend(&mut out, series);
    out.push_str("</svg>\n");
    out
}

fn draw_axes(out: &mut String, frame: &Frame) {
    let (left, right) = (MARGIN_LEFT, WIDTH - MARGIN_RIGHT);
    let (top, bottom) = (MARGIN_TOP, HEIGHT - MARGIN_BOTTOM);
    for nines in 0..=frame.x_max as u32 {
        let x = frame.x(f64::from(nines));
        let _ = writeln!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{top}\" x2=\"{x:.1}\" y2=\"{bottom}\" stroke=\"#ddd\"/>\n\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            bottom + 18.0,
            nines_label(nines)
        );
    }
    let y_ticks: Vec<f64> = match frame.y_scale {
        YScale::Log => {
            let (low, high) = (frame.y_low.log10() as i32, frame.y_high.log10() as i32);
            (low..=high).map(|power| 10_f64.powi(power)).collect()
        }
        YScale::Linear => (0..=5)
            .map(|step| frame.y_high * f64::from(step) / 5.0)
            .collect(),
    };
    for value in y_ticks {
        let y = frame.y(value);
        let _ = writeln!(
            out,
            "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{right}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 6.0,
            y + 4.0,
            format_value(value)
        );
    }
    let _ = writeln!(
        out,
        "<polyline fill=\"none\" stroke=\"black\" points=\"{left},{top} {left},{bottom} \
         {right},{bottom}\"/>"
    );
    let y_label = match frame.y_scale {
        YScale::Log => "latency (µs, log scale)",
        YScale::Linear => "latency (µs)",
    };
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">percentile (log scale of nines)</text>",
        (left + right) / 2.0,
        bottom + 42.0
    );
    let _ = writeln!(
        out,
        "<text x=\"20\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 20 {:.1})\">\
         {y_label}</text>",
        (top + bottom) / 2.0,
        (top + bottom) / 2.0
    );
}

fn format_value(value: f64) -> String {
    if value >= 1_000_000.0 && value % 1_000_000.0 == 0.0 {
        format!("{}M", value / 1_000_000.0)
    } else if value >= 1000.0 && value % 1000.0 == 0.0 {
        format!("{}k", value / 1000.0)
    } else {
        format!("{value}")
    }
}

fn draw_series(out: &mut String, frame: &Frame, run: &Series, color: &str) {
    let mut coordinates = String::new();
    for point in &run.points {
        if let Some(nines) = nines(point.percentile)
            && nines <= frame.x_max + 1e-9
        {
            let _ = write!(
                coordinates,
                "{:.1},{:.1} ",
                frame.x(nines),
                frame.y(point.value_us)
            );
        }
    }
    let _ = writeln!(
        out,
        "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
        coordinates.trim_end()
    );
    if let Some(max) = run.points.iter().map(|p| p.value_us).reduce(f64::max) {
        let _ = writeln!(
            out,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"><title>max {max} µs</title></circle>",
            frame.x(frame.x_max),
            frame.y(max)
        );
    }
}

fn draw_legend(out: &mut String, series: &[Series]) {
    for (index, run) in series.iter().enumerate() {
        let y = MARGIN_TOP + 16.0 + index as f64 * 18.0;
        let x = MARGIN_LEFT + 14.0;
        let color = COLORS[index % COLORS.len()];
        let _ = writeln!(
            out,
            "<line x1=\"{x}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"{color}\" stroke-width=\"3\"/>\n\
             <text x=\"{}\" y=\"{}\">{}</text>",
            x + 24.0,
            x + 30.0,
            y + 4.0,
            escape(&run.name)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, scale: f64) -> Series {
        let points = [0.0, 0.5, 0.9, 0.99, 0.999, 1.0]
            .iter()
            .enumerate()
            .map(|(i, &percentile)| PercentilePoint {
                value_us: scale * (i as f64 + 1.0),
                percentile,
                total_count: i as u64,
            })
            .collect();
        Series {
            name: name.into(),
            points,
        }
    }

    #[test]
    fn nines_places_ninety_nine_at_two() {
        assert!((nines(0.99).unwrap() - 2.0).abs() < 1e-9);
        assert_eq!(nines(0.0), Some(0.0));
        assert_eq!(nines(1.0), None);
        assert_eq!(nines_label(4), "99.99%");
        assert_eq!(nines_label(1), "90%");
    }

    #[test]
    fn svg_has_one_curve_and_legend_entry_per_run() {
        let text = svg(
            &[series("ringmq", 10.0), series("peer <rust>", 100.0)],
            "t",
            YScale::Log,
        );
        assert_eq!(text.matches("stroke-width=\"2\" points=").count(), 2);
        assert!(text.contains(">ringmq</text>"));
        assert!(text.contains(">peer &lt;rust&gt;</text>"));
        assert!(text.contains(">99.9%</text>"));
        assert!(text.contains("latency (µs, log scale)"));
        assert!(text.starts_with("<svg ") && text.ends_with("</svg>\n"));
    }

    #[test]
    fn coordinates_stay_inside_the_plot_area() {
        let text = svg(
            &[series("a", 3.0), series("b", 50_000.0)],
            "t",
            YScale::Linear,
        );
        let curves = text
            .lines()
            .filter(|l| l.contains("stroke-width=\"2\" points="));
        for line in curves {
            let points = line
                .split("points=\"")
                .nth(1)
                .unwrap()
                .trim_end_matches("\"/>");
            for pair in points.split(' ') {
                let (x, y) = pair.split_once(',').unwrap();
                let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
                assert!((MARGIN_LEFT..=WIDTH - MARGIN_RIGHT).contains(&x), "{x}");
                assert!((MARGIN_TOP..=HEIGHT - MARGIN_BOTTOM).contains(&y), "{y}");
            }
        }
    }

    #[test]
    fn higher_latency_curve_is_drawn_higher() {
        let frame = frame(&[series("a", 10.0), series("b", 1000.0)], YScale::Log);
        assert!(frame.y(1000.0) < frame.y(10.0));
        assert_eq!(frame.x_max, 3.0);
        assert_eq!((frame.y_low, frame.y_high), (10.0, 10_000.0));
    }

    #[test]
    fn nice_ceiling_rounds_to_one_two_five() {
        assert_eq!(nice_ceiling(3.2), 5.0);
        assert_eq!(nice_ceiling(120.0), 200.0);
        assert_eq!(nice_ceiling(1000.0), 1000.0);
    }
}
