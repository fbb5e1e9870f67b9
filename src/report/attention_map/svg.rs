//! An attention figure as an SVG drawing, with plotters' SVG backend (as [`crate::report::plot`]):
//! the PNG's layout, with the text left to the viewer's sans-serif font. Cells of one colour
//! next to each other in a row are drawn as one rectangle, which keeps the masked part of a
//! windowed map small.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::layout::{BAR, FigureLayout, GAP, MARGIN, TEXT, TICK};
use super::scale::RampScale;
use super::{AttentionFigure, EDGE_COLOUR};
use crate::report::ReportError;
use crate::report::font;
use crate::report::plot::{Area, DrawError, render};

/// The labels' font size (plotters' units), about the bitmap font's height in the PNG.
const LABEL_SIZE: f64 = 20.0;
/// The title's font size.
const TITLE_SIZE: f64 = 28.0;

/// The colour bar is drawn in this many bands.
const BAR_BANDS: usize = 128;

/// Writes the figure's SVG drawing to `path`.
pub(super) fn draw(figure: &AttentionFigure, path: &Path) -> Result<(), ReportError> {
    let layout = figure.layout();
    let scale = RampScale::new(&figure.weights, figure.log);
    render(path, (layout.width as u32, layout.height as u32), |root| {
        cells(root, figure, &scale, &layout)?;
        edges(root, figure, &layout)?;
        axes(root, figure, &layout)?;
        colour_bar(root, &scale, &layout)
    })
}

/// A pixel position as plotters' coordinates.
fn at(x: usize, y: usize) -> (i32, i32) {
    (x as i32, y as i32)
}

/// Text of `size`, anchored at `h` and `v`, turned up when `up`.
fn style(size: f64, h: HPos, v: VPos, up: bool) -> TextStyle<'static> {
    let style = ("sans-serif", size).into_font().color(&BLACK).pos(Pos::new(h, v));
    match up {
        true => style.transform(FontTransform::Rotate270),
        false => style,
    }
}

/// The map: each row's runs of one colour as one rectangle.
fn cells(
    root: &Area,
    figure: &AttentionFigure,
    scale: &RampScale,
    layout: &FigureLayout,
) -> Result<(), DrawError> {
    let FigureLayout { left, top, cell, .. } = *layout;
    let n = figure.n();
    for i in 0..n {
        let mut start = 0;
        for j in 1..=n {
            let colour = scale.colour(figure.weight(i, start));
            if j < n && scale.colour(figure.weight(i, j)) == colour {
                continue;
            }
            let [r, g, b] = colour;
            let corners = [
                at(left + start * cell, top + i * cell),
                at(left + j * cell, top + (i + 1) * cell),
            ];
            root.draw(&Rectangle::new(corners, RGBColor(r, g, b).filled()))?;
            start = j;
        }
    }
    Ok(())
}

/// The window's edge, one line per merged segment along cell borders.
fn edges(root: &Area, figure: &AttentionFigure, layout: &FigureLayout) -> Result<(), DrawError> {
    let FigureLayout { left, top, cell, .. } = *layout;
    let [r, g, b] = EDGE_COLOUR;
    let pen = RGBColor(r, g, b).stroke_width(2);
    for ((x0, y0), (x1, y1)) in figure.edges() {
        let ends =
            vec![at(left + x0 * cell, top + y0 * cell), at(left + x1 * cell, top + y1 * cell)];
        root.draw(&PathElement::new(ends, pen))?;
    }
    Ok(())
}

/// The title, the map's frame, the tick marks and labels of both axes, and the axis titles.
fn axes(root: &Area, figure: &AttentionFigure, layout: &FigureLayout) -> Result<(), DrawError> {
    let FigureLayout { left, top, cell, side, labels, width, .. } = *layout;
    let title = style(TITLE_SIZE, HPos::Center, VPos::Top, false);
    root.draw_text(&figure.title(), &title, at(width / 2, MARGIN))?;
    root.draw(&Rectangle::new(
        [at(left, top), at(left + side, top + side)],
        BLACK.stroke_width(1),
    ))?;
    let below = top + side + 1;
    for (p, label) in figure.ticks() {
        let centre = p * cell + cell / 2;
        let tick = vec![at(left + centre, below), at(left + centre, below + TICK)];
        root.draw(&PathElement::new(tick, BLACK.stroke_width(1)))?;
        let key = style(LABEL_SIZE, HPos::Right, VPos::Center, true);
        root.draw_text(&label, &key, at(left + centre, below + TICK + GAP / 2))?;
        let tick = vec![at(left - 1 - TICK, top + centre), at(left - 1, top + centre)];
        root.draw(&PathElement::new(tick, BLACK.stroke_width(1)))?;
        let query = style(LABEL_SIZE, HPos::Right, VPos::Center, false);
        root.draw_text(&label, &query, at(left - 1 - TICK - GAP / 2, top + centre))?;
    }
    let key = style(LABEL_SIZE, HPos::Center, VPos::Top, false);
    root.draw_text("key position", &key, at(left + side / 2, below + TICK + GAP + labels + GAP))?;
    let query = style(LABEL_SIZE, HPos::Center, VPos::Center, true);
    root.draw_text("query position", &query, at(MARGIN + font::HEIGHT * TEXT / 2, top + side / 2))
}

/// The colour bar beside the map, lightest at the top, with its values and caption.
fn colour_bar(root: &Area, scale: &RampScale, layout: &FigureLayout) -> Result<(), DrawError> {
    let FigureLayout { top, side, bar_left, caption_left, .. } = *layout;
    for band in 0..BAR_BANDS {
        let (y0, y1) = (top + side * band / BAR_BANDS, top + side * (band + 1) / BAR_BANDS);
        let [r, g, b] = super::colour(1.0 - (band as f32 + 0.5) / BAR_BANDS as f32);
        root.draw(&Rectangle::new(
            [at(bar_left, y0), at(bar_left + BAR, y1)],
            RGBColor(r, g, b).filled(),
        ))?;
    }
    let corners = [at(bar_left, top), at(bar_left + BAR, top + side)];
    root.draw(&Rectangle::new(corners, BLACK.stroke_width(1)))?;
    for (p, label) in scale.ticks() {
        let y = top + ((1.0 - p.clamp(0.0, 1.0)) * side as f32).round() as usize;
        let tick = vec![at(bar_left + BAR, y), at(bar_left + BAR + TICK, y)];
        root.draw(&PathElement::new(tick, BLACK.stroke_width(1)))?;
        let value = style(LABEL_SIZE, HPos::Left, VPos::Center, false);
        root.draw_text(&label, &value, at(bar_left + BAR + TICK + GAP / 2, y))?;
    }
    let caption = style(LABEL_SIZE, HPos::Center, VPos::Center, true);
    root.draw_text(
        &scale.caption(),
        &caption,
        at(caption_left + font::HEIGHT * TEXT / 2, top + side / 2),
    )
}
