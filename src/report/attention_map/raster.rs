//! An attention figure as a PNG image, drawn on the crate's canvas ([`crate::report::png`])
//! with its bitmap font.

use super::layout::{BAR, FigureLayout, GAP, MARGIN, TEXT, TICK, TITLE};
use super::scale::RampScale;
use super::{AttentionFigure, EDGE_COLOUR};
use crate::report::font;
use crate::report::png::{Canvas, Direction, Rgb};

const WHITE: Rgb = [255, 255, 255];
const BLACK: Rgb = [0, 0, 0];

/// The figure's PNG file, as bytes.
pub(super) fn render(figure: &AttentionFigure) -> Result<Vec<u8>, png::EncodingError> {
    let layout = figure.layout();
    let scale = RampScale::new(&figure.weights, figure.log);
    let mut canvas = Canvas::new(layout.width, layout.height, WHITE);
    let FigureLayout { left, top, cell, .. } = layout;
    for i in 0..figure.n() {
        for j in 0..figure.n() {
            let colour = scale.colour(figure.weight(i, j));
            canvas.fill(left + j * cell, top + i * cell, cell, cell, colour);
        }
    }
    edges(&mut canvas, figure, &layout);
    axes(&mut canvas, figure, &layout);
    colour_bar(&mut canvas, &scale, &layout);
    canvas.encode()
}

/// The window's edge: lines 2 pixels wide along cell borders (1 where cells are under 8
/// pixels), each reaching half its width past its ends so that a staircase's corners join.
fn edges(canvas: &mut Canvas, figure: &AttentionFigure, layout: &FigureLayout) {
    let FigureLayout { left, top, cell, .. } = *layout;
    let width = if cell >= 8 { 2 } else { 1 };
    for ((x0, y0), (x1, y1)) in figure.edges() {
        let (x, y) = (left + x0 * cell - width / 2, top + y0 * cell - width / 2);
        let (w, h) = ((x1 - x0) * cell + width, (y1 - y0) * cell + width);
        match x0 == x1 {
            true => canvas.fill(x, y, width, h, EDGE_COLOUR),
            false => canvas.fill(x, y, w, width, EDGE_COLOUR),
        }
    }
}

/// A 1-pixel frame just outside the `w × h` box at `(x, y)`.
fn frame(canvas: &mut Canvas, (x, y): (usize, usize), (w, h): (usize, usize)) {
    canvas.fill(x - 1, y - 1, w + 2, 1, BLACK);
    canvas.fill(x - 1, y + h, w + 2, 1, BLACK);
    canvas.fill(x - 1, y, 1, h, BLACK);
    canvas.fill(x + w, y, 1, h, BLACK);
}

/// The title, the map's frame, the tick marks and labels of both axes, and the axis titles.
fn axes(canvas: &mut Canvas, figure: &AttentionFigure, layout: &FigureLayout) {
    let FigureLayout { left, top, cell, side, labels, width, .. } = *layout;
    let text = font::HEIGHT * TEXT;
    let title = figure.title();
    canvas.text(
        (width - font::width(&title, TITLE)) / 2,
        MARGIN,
        &title,
        TITLE,
        BLACK,
        Direction::Across,
    );
    frame(canvas, (left, top), (side, side));
    let below = top + side + 1;
    for (p, label) in figure.ticks() {
        let centre = p * cell + cell / 2;
        // Keys along the bottom, labels turned up and ending at the tick.
        canvas.fill(left + centre, below, 1, TICK, BLACK);
        canvas.text(
            left + centre - text / 2,
            below + TICK + GAP / 2,
            &label,
            TEXT,
            BLACK,
            Direction::Up,
        );
        // Queries down the left, labels ending at the tick.
        canvas.fill(left - 1 - TICK, top + centre, TICK, 1, BLACK);
        let x = left - 1 - TICK - GAP / 2 - font::width(&label, TEXT);
        canvas.text(x, top + centre - text / 2, &label, TEXT, BLACK, Direction::Across);
    }
    let key = "key position";
    let y = below + TICK + GAP + labels + GAP;
    canvas.text(left + (side - font::width(key, TEXT)) / 2, y, key, TEXT, BLACK, Direction::Across);
    let query = "query position";
    let y = top + side.saturating_sub(font::width(query, TEXT)) / 2;
    canvas.text(MARGIN, y, query, TEXT, BLACK, Direction::Up);
}

/// The colour bar beside the map, lightest at the top, with its values and caption.
fn colour_bar(canvas: &mut Canvas, scale: &RampScale, layout: &FigureLayout) {
    let FigureLayout { top, side, bar_left, caption_left, .. } = *layout;
    for y in 0..side {
        let t = 1.0 - (y as f32 + 0.5) / side as f32;
        canvas.fill(bar_left, top + y, BAR, 1, super::colour(t));
    }
    frame(canvas, (bar_left, top), (BAR, side));
    let text = font::HEIGHT * TEXT;
    for (p, label) in scale.ticks() {
        let y = top + ((1.0 - p.clamp(0.0, 1.0)) * (side - 1) as f32).round() as usize;
        canvas.fill(bar_left + BAR + 1, y, TICK, 1, BLACK);
        let y = y - text / 2;
        canvas.text(bar_left + BAR + 1 + TICK + GAP / 2, y, &label, TEXT, BLACK, Direction::Across);
    }
    let caption = scale.caption();
    let y = top + side.saturating_sub(font::width(&caption, TEXT)) / 2;
    canvas.text(caption_left, y, &caption, TEXT, BLACK, Direction::Up);
}
