//! PNG images drawn pixel by pixel: an RGB canvas with filled rectangles and text in the
//! crate's bitmap font ([`super::font`]), encoded with the `png` crate. The attention maps draw
//! their PNG figures on it; plotters' bitmap backend would bring the `image` crate and fonts.

use super::font;

/// A colour: red, green, blue.
pub type Rgb = [u8; 3];

/// Which way text runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Left to right, upright.
    Across,
    /// Bottom to top: turned a quarter anticlockwise, as the labels of a vertical axis or of the
    /// columns of a matrix.
    Up,
}

/// An RGB image being drawn, row 0 at the top.
pub struct Canvas {
    width: usize,
    height: usize,
    pixels: Vec<u8>,
}

impl Canvas {
    /// A `width × height` canvas filled with `background`.
    pub fn new(width: usize, height: usize, background: Rgb) -> Self {
        Self { width, height, pixels: background.repeat(width * height) }
    }

    /// Fills the rectangle of `w × h` pixels whose top-left pixel is `(x, y)`; the part outside
    /// the canvas is left out.
    pub fn fill(&mut self, x: usize, y: usize, w: usize, h: usize, colour: Rgb) {
        let (x1, y1) = ((x + w).min(self.width), (y + h).min(self.height));
        for row in y.min(y1)..y1 {
            let line =
                &mut self.pixels[(row * self.width + x.min(x1)) * 3..(row * self.width + x1) * 3];
            for pixel in line.chunks_exact_mut(3) {
                pixel.copy_from_slice(&colour);
            }
        }
    }

    /// Writes `text` with glyphs `scale` times the font's size, the top-left corner of its box
    /// at `(x, y)`. The box is [`font::width`] wide and `scale · font::HEIGHT` high when the
    /// text runs across; turned up, the two are swapped and the text ends at the box's top.
    pub fn text(
        &mut self,
        x: usize,
        y: usize,
        text: &str,
        scale: usize,
        colour: Rgb,
        direction: Direction,
    ) {
        let length = font::width(text, scale);
        for (k, c) in text.chars().enumerate() {
            for (row, bits) in font::glyph(c).iter().enumerate() {
                for column in (0..font::WIDTH).filter(|&b| (bits >> (font::WIDTH - 1 - b)) & 1 == 1)
                {
                    // The square's top-left corner along the text (u) and across it (v).
                    let (u, v) = ((k * font::ADVANCE + column) * scale, row * scale);
                    match direction {
                        Direction::Across => self.fill(x + u, y + v, scale, scale, colour),
                        Direction::Up => {
                            self.fill(x + v, y + length - u - scale, scale, scale, colour)
                        }
                    }
                }
            }
        }
    }

    /// The image as a PNG file's bytes (8-bit RGB).
    pub fn encode(&self) -> Result<Vec<u8>, png::EncodingError> {
        let mut bytes = Vec::new();
        let mut encoder = png::Encoder::new(&mut bytes, self.width as u32, self.height as u32);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header()?;
        writer.write_image_data(&self.pixels)?;
        writer.finish()?;
        Ok(bytes)
    }
}
