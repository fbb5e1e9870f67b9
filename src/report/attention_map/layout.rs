//! Where the parts of an attention figure lie, in pixels: the same for PNG and SVG, sized from
//! the bitmap font's text (the SVG's text, in the viewer's sans-serif, is no wider).

use super::AttentionFigure;
use super::scale::RampScale;
use crate::report::font;

/// Blank space around the figure.
pub(super) const MARGIN: usize = 16;
/// Space between neighbouring parts (labels, their ticks, axis titles).
pub(super) const GAP: usize = 8;
/// The length of a tick mark.
pub(super) const TICK: usize = 5;
/// The colour bar's width.
pub(super) const BAR: usize = 20;
/// The bitmap font's scale for labels (16 pixels high, descenders included).
pub(super) const TEXT: usize = 2;
/// The bitmap font's scale for the title (24 pixels high).
pub(super) const TITLE: usize = 3;
/// The map is at least this many pixels a side: cells are `⌈768 / n⌉` pixels.
const SIDE: usize = 768;

/// Where a figure's parts lie, in pixels from its top-left corner. The map's cell `(i, j)`
/// (query `i`, key `j`) covers `cell` pixels a side from `(left + j·cell, top + i·cell)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FigureLayout {
    /// The figure's width.
    pub width: usize,
    /// The figure's height.
    pub height: usize,
    /// The map's left edge: the first pixel column of key 0.
    pub left: usize,
    /// The map's top edge: the first pixel row of query 0.
    pub top: usize,
    /// Pixels a side per cell.
    pub cell: usize,
    /// The map's side, `n · cell`.
    pub(super) side: usize,
    /// Pixels the longest tick label takes along its text.
    pub(super) labels: usize,
    /// The colour bar's left edge; it runs from the map's top to its bottom.
    pub(super) bar_left: usize,
    /// The left edge of the colour bar's caption (turned up).
    pub(super) caption_left: usize,
}

impl AttentionFigure {
    /// The figure's layout (the PNG's pixels; the SVG's user units).
    pub fn layout(&self) -> FigureLayout {
        let labels = widest(&self.ticks());
        let bar_labels = widest(&RampScale::new(&self.weights, self.log).ticks());
        let text = font::HEIGHT * TEXT;
        let cell = SIDE.div_ceil(self.n().max(1));
        let side = self.n() * cell;
        // Left of the map: the axis title (turned up), the labels, the tick marks.
        let left = MARGIN + text + GAP + labels + GAP + TICK;
        let top = MARGIN + font::HEIGHT * TITLE + 2 * GAP;
        let bar_left = left + side + 3 * GAP;
        let caption_left = bar_left + BAR + TICK + GAP + bar_labels + GAP;
        let width =
            (caption_left + text + MARGIN).max(font::width(&self.title(), TITLE) + 2 * MARGIN);
        let height = top + side + TICK + GAP + labels + GAP + text + MARGIN;
        FigureLayout { width, height, left, top, cell, side, labels, bar_left, caption_left }
    }
}

/// The width of the widest of `ticks`' labels.
fn widest<P>(ticks: &[(P, String)]) -> usize {
    ticks.iter().map(|(_, text)| font::width(text, TEXT)).max().unwrap_or(0)
}
