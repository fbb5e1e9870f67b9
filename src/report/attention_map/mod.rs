//! Attention maps as figures for a paper: the weights of one head over a prompt (row = query,
//! column = key) with the query and key positions on the axes (the tokens themselves on short
//! prompts), a colour bar with its values, a title naming the layer, head, attention kind and
//! window, an optional log scale, and the edge of the head's visible band drawn over the map.
//!
//! [`AttentionFigure`] holds what one figure shows; [`draw`] writes it as PNG (drawn pixel by
//! pixel, with the crate's bitmap font) or SVG (with plotters). Both share one [`FigureLayout`].
//! Which keys a query sees is asked of [`WindowSpec::visible`], the project's one definition.

mod layout;
mod raster;
mod scale;
mod svg;

use std::path::Path;

use swa_attention::AttentionError;
use swa_attention::WindowSpec;
use swa_models::DecoderConfig;

pub use layout::FigureLayout;
pub use scale::{LOG_FLOOR, colour};

use super::{ReportError, write_atomic};

/// Prompts of at most this many tokens have the tokens as tick labels; longer ones, positions.
pub const MAX_TOKEN_TICKS: usize = 48;

/// The colour of the window's edge: a red that the map's colour ramp never takes.
pub const EDGE_COLOUR: [u8; 3] = [230, 20, 60];

/// A tick label holds at most this many characters; longer tokens are cut, ending in `..`.
const MAX_LABEL_CHARS: usize = 8;

/// A line segment `((x0, y0), (x1, y1))` on a map's cell grid, horizontal or vertical.
type Segment = ((usize, usize), (usize, usize));

/// The file formats of a figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ImageFormat {
    /// A PNG image drawn with the crate's bitmap font.
    Png,
    /// An SVG drawing (text left to the viewer's fonts), for papers that scale figures.
    Svg,
}

impl ImageFormat {
    /// The file extension: `png` or `svg`.
    pub fn extension(self) -> &'static str {
        match self {
            ImageFormat::Png => "png",
            ImageFormat::Svg => "svg",
        }
    }
}

/// One head's attention weights over a prompt, and what its figure says about them.
#[derive(Clone, Debug)]
pub struct AttentionFigure {
    /// The weights, `[n, n]` row-major: row `i` holds query `i`'s weight on each key.
    pub weights: Vec<f32>,
    /// The text of each of the `n` tokens; the tick labels when `n ≤` [`MAX_TOKEN_TICKS`].
    pub tokens: Vec<String>,
    /// The layer, from 0.
    pub layer: usize,
    /// The query head, from 0.
    pub head: usize,
    /// The attention kind and window, briefly ([`swa_models::layers::AttentionKind::label`]), e.g. `sliding W=16`.
    pub kind: String,
    /// The window specs whose union is the head's visible band (several for LongNet's
    /// branches); the band's edge is drawn where [`WindowSpec::visible`] changes between
    /// neighbouring cells. Empty: no edge.
    pub windows: Vec<WindowSpec>,
    /// Colour by `log10` of the weight, floored at [`LOG_FLOOR`], rather than by the weight.
    pub log: bool,
}

impl AttentionFigure {
    /// The figure of `head` of `layer` of a model of `config`: its kind's description and
    /// window specs from [`DecoderConfig::kind_of`], over `tokens` (`n` texts) with `weights`
    /// (`[n, n]`), on a linear scale. Fails when the kind's windows do not fit the config.
    pub fn for_layer(
        config: &DecoderConfig,
        layer: usize,
        head: usize,
        weights: Vec<f32>,
        tokens: Vec<String>,
    ) -> Result<Self, AttentionError> {
        let kind = config.kind_of(layer);
        let windows = kind.specs(config.heads, config.kv_heads(), tokens.len())?;
        let kind = kind.label(head);
        Ok(Self { weights, tokens, layer, head, kind, windows, log: false })
    }

    /// The title: layer, head, and kind with its window.
    pub fn title(&self) -> String {
        format!("Layer {}, head {}: {}", self.layer, self.head, self.kind)
    }

    /// The number of tokens, `n`.
    fn n(&self) -> usize {
        self.tokens.len()
    }

    /// The weight of query `i` on key `j`.
    fn weight(&self, i: usize, j: usize) -> f32 {
        self.weights[i * self.n() + j]
    }

    /// Whether the head's query `i` sees key `j` in any of [`AttentionFigure::windows`].
    fn visible(&self, i: usize, j: usize) -> bool {
        self.windows.iter().any(|spec| spec.visible(self.head, i, j, self.n()))
    }

    /// The tick labels of both axes, `(position, label)`: every token on a short prompt,
    /// otherwise round positions, at most about 16.
    fn ticks(&self) -> Vec<(usize, String)> {
        let n = self.n();
        if n <= MAX_TOKEN_TICKS {
            return self.tokens.iter().map(|t| label(t)).enumerate().collect();
        }
        let step = [1, 2, 5]
            .into_iter()
            .flat_map(|m| (0..10).map(move |e| m * 10usize.pow(e)))
            .filter(|step| n.div_ceil(*step) <= 16)
            .min()
            .unwrap_or(n);
        (0..n).step_by(step).map(|p| (p, p.to_string())).collect()
    }

    /// The window's edge: where visibility changes between neighbouring cells, as segments on
    /// the cell grid (x = key, y = query; cell `(i, j)` spans `[j, j+1] × [i, i+1]`), each the
    /// longest run of changes along its line. The map's border is not an edge.
    fn edges(&self) -> Vec<Segment> {
        let n = self.n();
        if self.windows.is_empty() {
            return Vec::new();
        }
        let visible: Vec<bool> = (0..n * n).map(|c| self.visible(c / n, c % n)).collect();
        let mut segments = Vec::new();
        // Down the line x = c, between keys c−1 and c; along y = r, between queries r−1 and r.
        for c in 1..n {
            let changes = runs(n, |i| visible[i * n + c - 1] != visible[i * n + c]);
            segments.extend(changes.into_iter().map(|(i0, i1)| ((c, i0), (c, i1))));
        }
        for r in 1..n {
            let changes = runs(n, |j| visible[(r - 1) * n + j] != visible[r * n + j]);
            segments.extend(changes.into_iter().map(|(j0, j1)| ((j0, r), (j1, r))));
        }
        segments
    }

    /// Checks that the figure can be drawn: tokens, `n × n` weights, a head every window spec
    /// has.
    fn check(&self, path: &Path) -> Result<(), ReportError> {
        let problem = match (self.n(), self.weights.len()) {
            (0, _) => "no tokens".to_string(),
            (n, len) if len != n * n => format!("{len} weights for {n} tokens (need {n} × {n})"),
            _ => match self.windows.iter().find(|s| self.head >= s.num_heads()) {
                Some(spec) => format!("head {} of {} heads", self.head, spec.num_heads()),
                None => return Ok(()),
            },
        };
        Err(ReportError::Input { path: path.to_path_buf(), problem })
    }
}

/// Writes `figure` to `path` as `format`, atomically. Fails, naming the file, when the figure
/// has no tokens, its weights are not `n × n`, its head is not in its window specs, or the
/// file cannot be written.
pub fn draw(figure: &AttentionFigure, path: &Path, format: ImageFormat) -> Result<(), ReportError> {
    figure.check(path)?;
    match format {
        ImageFormat::Png => {
            let bytes = raster::render(figure).map_err(|e| ReportError::Draw {
                path: path.to_path_buf(),
                problem: e.to_string(),
            })?;
            write_atomic(path, &bytes)
        }
        ImageFormat::Svg => svg::draw(figure, path),
    }
}

/// A token's tick label: whitespace shown (`␣` for spaces, `\n`, `\t`), at most
/// [`MAX_LABEL_CHARS`] characters.
fn label(token: &str) -> String {
    let shown: String = token
        .chars()
        .map(|c| match c {
            ' ' => "␣".to_string(),
            '\n' => "\\n".to_string(),
            '\t' => "\\t".to_string(),
            c => c.to_string(),
        })
        .collect();
    match shown.chars().count() > MAX_LABEL_CHARS {
        true => shown.chars().take(MAX_LABEL_CHARS - 2).chain("..".chars()).collect(),
        false => shown,
    }
}

/// The runs `[start, end)` of `0 … n−1` over which `holds` is true.
fn runs(n: usize, holds: impl Fn(usize) -> bool) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut start = None;
    for k in 0..=n {
        match (start, k < n && holds(k)) {
            (None, true) => start = Some(k),
            (Some(s), false) => {
                runs.push((s, k));
                start = None;
            }
            _ => {}
        }
    }
    runs
}
