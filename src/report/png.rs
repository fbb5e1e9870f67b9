//! Heat maps as PNG images (attention maps): one square cell per matrix entry, colour from a
//! perceptually even dark-to-light ramp (viridis' end points and three stops between), written
//! with the `png` crate.

use std::path::Path;

use crate::report::{ReportError, write_atomic};

/// Viridis at 0, ¼, ½, ¾ and 1.
const RAMP: [[f32; 3]; 5] = [
    [68.0, 1.0, 84.0],
    [59.0, 82.0, 139.0],
    [33.0, 145.0, 140.0],
    [94.0, 201.0, 98.0],
    [253.0, 231.0, 37.0],
];

/// Writes `values` (`rows × cols`, row-major, each in `[0, max]`) to `path` as a PNG image of
/// at least 512 pixels a side where the matrix is smaller: row 0 at the top, 0 dark, `max`
/// light.
pub fn heat_map_png(
    path: &Path,
    values: &[f32],
    rows: usize,
    cols: usize,
) -> Result<(), ReportError> {
    let input = |problem: String| ReportError::Input { path: path.to_path_buf(), problem };
    if rows == 0 || cols == 0 || values.len() != rows * cols {
        return Err(input(format!("{} values for a {rows} × {cols} map", values.len())));
    }
    let cell = (512 / rows.max(cols)).max(1);
    let (width, height) = (cols * cell, rows * cell);
    let max = values.iter().copied().filter(|v| v.is_finite()).fold(0.0f32, f32::max);
    let mut pixels = Vec::with_capacity(width * height * 3);
    for r in 0..rows {
        let line: Vec<u8> = (0..cols)
            .flat_map(|c| {
                let colour = colour(values[r * cols + c] / max.max(f32::MIN_POSITIVE));
                std::iter::repeat_n(colour, cell).flatten()
            })
            .collect();
        for _ in 0..cell {
            pixels.extend_from_slice(&line);
        }
    }
    let mut bytes = Vec::new();
    let draw = |e: png::EncodingError| ReportError::Draw {
        path: path.to_path_buf(),
        problem: e.to_string(),
    };
    {
        let mut encoder = png::Encoder::new(&mut bytes, width as u32, height as u32);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(draw)?;
        writer.write_image_data(&pixels).map_err(draw)?;
        writer.finish().map_err(draw)?;
    }
    write_atomic(path, &bytes)
}

/// The ramp's colour at `t ∈ [0, 1]` (clamped; NaN is 0).
pub fn colour(t: f32) -> [u8; 3] {
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) } * (RAMP.len() - 1) as f32;
    let low = (t.floor() as usize).min(RAMP.len() - 2);
    let f = t - low as f32;
    std::array::from_fn(|k| (RAMP[low][k] * (1.0 - f) + RAMP[low + 1][k] * f).round() as u8)
}
