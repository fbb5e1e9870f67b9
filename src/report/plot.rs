//! Figures of results: SVG plots drawn with plotters' SVG backend (text is left to the viewer's
//! fonts, so no font files are needed).
//!
//! - [`heat_map`]: a value per (y, x) cell, e.g. bits per byte per evaluation window and length,
//!   in the manner of SWAT's Figure 2;
//! - [`line_plot`]: one line per series with a legend, e.g. loss curves, or latency against
//!   sequence length on log-log axes.

use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{ReportError, write_atomic};

pub(super) type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// What drawing on an SVG area can fail with.
pub(super) type DrawError = DrawingAreaErrorKind<std::io::Error>;

/// Draws an SVG of `size` pixels with `draw`, then writes it to `path`.
pub(super) fn render(
    path: &Path,
    size: (u32, u32),
    draw: impl FnOnce(&Area) -> Result<(), DrawError>,
) -> Result<(), ReportError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        let drawn = root.fill(&WHITE).and_then(|_| draw(&root)).and_then(|_| root.present());
        drawn
            .map_err(|e| ReportError::Draw { path: path.to_path_buf(), problem: e.to_string() })?;
    }
    write_atomic(path, svg.as_bytes())
}

/// The colour of `t` in `[0, 1]` on a yellow-orange-red ramp (ColorBrewer YlOrRd): light yellow
/// for low values, dark red for high ones.
fn ramp(t: f64) -> RGBColor {
    const STOPS: [(u8, u8, u8); 5] =
        [(255, 255, 204), (254, 217, 118), (253, 141, 60), (227, 26, 28), (128, 0, 38)];
    let x = t.clamp(0.0, 1.0) * (STOPS.len() - 1) as f64;
    let (i, f) = ((x as usize).min(STOPS.len() - 2), x - (x as usize).min(STOPS.len() - 2) as f64);
    let mix = |a: u8, b: u8| (a as f64 + (b as f64 - a as f64) * f).round() as u8;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// Draws a heat map of `cells[y][x]` (one row per `y_values` entry, top to bottom; one column per
/// `x_values` entry, left to right) with each value written in its cell to 2 decimals, coloured
/// from light yellow (lowest finite value) to dark red (highest), and a colour bar titled
/// `value_label`. Non-finite cells (NaN, e.g. a length that could not be evaluated) are grey.
#[allow(clippy::too_many_arguments)]
pub fn heat_map(
    path: impl AsRef<Path>,
    title: &str,
    x_label: &str,
    x_values: &[usize],
    y_label: &str,
    y_values: &[usize],
    cells: &[Vec<f64>],
    value_label: &str,
) -> Result<(), ReportError> {
    let path = path.as_ref();
    let input = |problem: String| Err(ReportError::Input { path: path.to_path_buf(), problem });
    if x_values.is_empty() || y_values.is_empty() {
        return input("no x or no y values".into());
    }
    if cells.len() != y_values.len() {
        return input(format!("{} rows of cells for {} y values", cells.len(), y_values.len()));
    }
    if let Some(y) = cells.iter().position(|row| row.len() != x_values.len()) {
        return input(format!(
            "row {y} has {} cells for {} x values",
            cells[y].len(),
            x_values.len()
        ));
    }
    let finite = cells.iter().flatten().copied().filter(|v| v.is_finite());
    let (lo, hi) =
        finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let scale = |v: f64| if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
    let (cw, ch, left, top) = (72i32, 40i32, 110i32, 56i32);
    let (nx, ny) = (x_values.len() as i32, y_values.len() as i32);
    let size = ((left + nx * cw + 150) as u32, (top + ny * ch + 60) as u32);
    render(path, size, |root| {
        let text = |size: f64, h: HPos, v: VPos| {
            ("sans-serif", size).into_font().color(&BLACK).pos(Pos::new(h, v))
        };
        root.draw_text(title, &text(20.0, HPos::Center, VPos::Top), (size.0 as i32 / 2, 12))?;
        for (y, row) in cells.iter().enumerate() {
            for (x, &v) in row.iter().enumerate() {
                let (x0, y0) = (left + x as i32 * cw, top + y as i32 * ch);
                let (fill, label) = match v.is_finite() {
                    true => (ramp(scale(v)), format!("{v:.2}")),
                    false => (RGBColor(190, 190, 190), format!("{v}")),
                };
                root.draw(&Rectangle::new([(x0, y0), (x0 + cw, y0 + ch)], fill.filled()))?;
                root.draw(&Rectangle::new([(x0, y0), (x0 + cw, y0 + ch)], WHITE.stroke_width(1)))?;
                let ink = if v.is_finite() && scale(v) > 0.6 { WHITE } else { BLACK };
                let style = text(13.0, HPos::Center, VPos::Center).color(&ink);
                root.draw_text(&label, &style, (x0 + cw / 2, y0 + ch / 2))?;
            }
        }
        for (x, v) in x_values.iter().enumerate() {
            root.draw_text(
                &v.to_string(),
                &text(13.0, HPos::Center, VPos::Top),
                (left + x as i32 * cw + cw / 2, top + ny * ch + 6),
            )?;
        }
        for (y, v) in y_values.iter().enumerate() {
            root.draw_text(
                &v.to_string(),
                &text(13.0, HPos::Right, VPos::Center),
                (left - 8, top + y as i32 * ch + ch / 2),
            )?;
        }
        root.draw_text(
            x_label,
            &text(15.0, HPos::Center, VPos::Top),
            (left + nx * cw / 2, top + ny * ch + 32),
        )?;
        let rotated = text(15.0, HPos::Center, VPos::Center).transform(FontTransform::Rotate270);
        root.draw_text(y_label, &rotated, (24, top + ny * ch / 2))?;
        if hi >= lo {
            // The colour bar: highest value at the top.
            let (bx, height, steps) = (left + nx * cw + 24, ny * ch, 50);
            for s in 0..steps {
                let (y0, y1) = (top + height * s / steps, top + height * (s + 1) / steps);
                let colour = ramp(1.0 - (s as f64 + 0.5) / steps as f64);
                root.draw(&Rectangle::new([(bx, y0), (bx + 18, y1)], colour.filled()))?;
            }
            for (value, y) in [(hi, top), ((lo + hi) / 2.0, top + height / 2), (lo, top + height)] {
                root.draw_text(
                    &format!("{value:.2}"),
                    &text(12.0, HPos::Left, VPos::Center),
                    (bx + 24, y),
                )?;
            }
            root.draw_text(value_label, &text(13.0, HPos::Left, VPos::Bottom), (bx, top - 6))?;
        }
        Ok(())
    })
}

/// Draws one line per `(name, points)` series with a legend, on linear or logarithmic axes
/// (`log_x`, `log_y`: log-log for scaling plots). Points with a non-finite coordinate, or a
/// non-positive one on a log axis, are left out; series with at most 50 points get markers.
pub fn line_plot(
    path: impl AsRef<Path>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
    log_x: bool,
    log_y: bool,
) -> Result<(), ReportError> {
    let path = path.as_ref();
    let keep = |&(x, y): &(f64, f64)| {
        x.is_finite() && y.is_finite() && (!log_x || x > 0.0) && (!log_y || y > 0.0)
    };
    let series: Vec<(&str, Vec<(f64, f64)>)> = series
        .iter()
        .map(|(n, p)| (n.as_str(), p.iter().copied().filter(keep).collect()))
        .collect();
    let all = || series.iter().flat_map(|(_, p)| p.iter().copied());
    if all().next().is_none() {
        let problem = format!(
            "no point to draw{}",
            if log_x || log_y { " (log axes need positive values)" } else { "" }
        );
        return Err(ReportError::Input { path: path.to_path_buf(), problem });
    }
    let bounds = |v: Vec<f64>, log: bool, pad: bool| {
        let (lo, hi) =
            v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        match (log, hi > lo) {
            (true, false) => (lo / 2.0, hi * 2.0),
            (true, true) if pad => (lo / 1.15, hi * 1.15),
            (false, false) => (lo - lo.abs().max(1.0) * 0.1, hi + hi.abs().max(1.0) * 0.1),
            (false, true) if pad => (lo - (hi - lo) * 0.05, hi + (hi - lo) * 0.05),
            _ => (lo, hi),
        }
    };
    let (x0, x1) = bounds(all().map(|p| p.0).collect(), log_x, false);
    let (y0, y1) = bounds(all().map(|p| p.1).collect(), log_y, true);
    render(path, (900, 560), |root| match (log_x, log_y) {
        (false, false) => lines(root, title, x_label, y_label, &series, x0..x1, y0..y1),
        (true, false) => {
            lines(root, title, x_label, y_label, &series, (x0..x1).log_scale(), y0..y1)
        }
        (false, true) => {
            lines(root, title, x_label, y_label, &series, x0..x1, (y0..y1).log_scale())
        }
        (true, true) => lines(
            root,
            title,
            x_label,
            y_label,
            &series,
            (x0..x1).log_scale(),
            (y0..y1).log_scale(),
        ),
    })
}

/// An axis label: whole numbers without decimals, others to at most 3 decimals, very large or
/// small magnitudes in scientific notation.
pub fn tidy(v: &f64) -> String {
    let v = *v;
    if v != 0.0 && !(1e-3..1e6).contains(&v.abs()) {
        format!("{v:.1e}")
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}").trim_end_matches('0').to_string()
    }
}

/// The chart of [`line_plot`] on the axes `x` and `y`.
fn lines<X, Y>(
    root: &Area,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(&str, Vec<(f64, f64)>)],
    x: X,
    y: Y,
) -> Result<(), DrawError>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&tidy)
        .y_label_formatter(&tidy)
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    for (i, (name, points)) in series.iter().enumerate() {
        let colour = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points.iter().copied(), colour.stroke_width(2)))?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
        if points.len() <= 50 {
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled())))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
