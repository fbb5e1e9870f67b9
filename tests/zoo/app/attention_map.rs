//! Attention maps as figures (`swa_zoo::report::attention_map`): the title, the tick labels
//! (tokens on a short prompt, positions on a long one), the colour bar's values on the linear
//! and log scales, and the window's edge where `WindowSpec::visible` says, in SVG and PNG.

use std::path::{Path, PathBuf};

use swa_zoo::attention::WindowSpec;
use swa_zoo::models::DecoderConfig;
use swa_zoo::models::layers::AttentionKind;
use swa_zoo::report::ReportError;
use swa_zoo::report::attention_map::{
    AttentionFigure, EDGE_COLOUR, ImageFormat, LOG_FLOOR, colour, draw,
};

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("swa-attention-figure-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Weights that halve with each key further back among the keys `spec` lets `head` see (each
/// row sums to 1), 0 elsewhere: query 0 puts 1 on itself.
fn halving(n: usize, spec: &WindowSpec, head: usize) -> Vec<f32> {
    let mut weights = vec![0.0; n * n];
    for i in 0..n {
        let keys: Vec<usize> = (0..n).filter(|&j| spec.visible(head, i, j, n)).collect();
        let total: f32 = keys.iter().map(|&j| 0.5f32.powi((i - j) as i32)).sum();
        for j in keys {
            weights[i * n + j] = 0.5f32.powi((i - j) as i32) / total;
        }
    }
    weights
}

/// Halving weights over a sliding window of `w` keys (4 heads sharing 2 kv heads), head 0.
fn sliding_weights(n: usize, w: usize) -> Vec<f32> {
    halving(n, &WindowSpec::sliding(4, 2, w).unwrap(), 0)
}

/// Head 2 of layer 1 over `n` tokens with a sliding window of 4 keys.
fn sliding(n: usize) -> AttentionFigure {
    let tokens = (0..n).map(|i| if i == 3 { " ".into() } else { format!("t{i}") }).collect();
    let spec = WindowSpec::sliding(4, 2, 4).unwrap();
    AttentionFigure {
        weights: halving(n, &spec, 2),
        tokens,
        layer: 1,
        head: 2,
        kind: AttentionKind::Sliding { window: 4 }.label(2),
        windows: vec![spec],
        log: false,
    }
}

/// The texts of an SVG's `<text>` elements.
fn svg_texts(path: &Path) -> (String, Vec<String>) {
    let svg = std::fs::read_to_string(path).unwrap();
    assert!(svg.trim_end().ends_with("</svg>"));
    let texts = svg.split("<text").skip(1).map(|t| {
        let body = &t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()];
        body.trim().to_string()
    });
    let texts = texts.collect();
    (svg, texts)
}

#[test]
fn the_svg_names_the_head_labels_tokens_and_values_and_draws_the_window_edge() {
    let path = temp("sliding.svg");
    draw(&sliding(10), &path, ImageFormat::Svg).unwrap();
    let (svg, texts) = svg_texts(&path);
    let has = |text: &str| texts.iter().any(|t| t == text);
    for text in ["Layer 1, head 2: sliding W=4", "key position", "query position"] {
        assert!(has(text), "missing {text}: {texts:?}");
    }
    // Every token twice (both axes), the space shown; the colour bar from 0 to the largest
    // weight, 1 (query 0 on itself).
    for token in ["t0", "t2", "␣", "t9"] {
        assert_eq!(texts.iter().filter(|t| *t == token).count(), 2, "{token}: {texts:?}");
    }
    for value in ["0", "0.25", "0.5", "0.75", "1", "attention weight"] {
        assert!(has(value), "missing {value}: {texts:?}");
    }
    // The band's edge over 10 queries: 9 steps along the diagonal (a side and a top each),
    // and 6 along the window's far end (queries 4 … 9).
    let [r, g, b] = EDGE_COLOUR;
    let edge = format!("stroke=\"#{r:02X}{g:02X}{b:02X}\"");
    assert_eq!(svg.matches(&edge).count(), 2 * 9 + 2 * 6, "{svg}");
}

#[test]
fn the_log_scale_states_its_floor_and_long_prompts_show_positions() {
    let n = 60;
    let figure = AttentionFigure { log: true, ..sliding(n) };
    let path = temp("long_log.svg");
    draw(&figure, &path, ImageFormat::Svg).unwrap();
    let (_, texts) = svg_texts(&path);
    let has = |text: &str| texts.iter().any(|t| t == text);
    assert_eq!(LOG_FLOOR, 1e-4);
    for text in ["≤1e-4", "1e-3", "1e-2", "1e-1", "1", "attention weight, log scale (floor 1e-4)"]
    {
        assert!(has(text), "missing {text}: {texts:?}");
    }
    for position in ["0", "5", "55"] {
        assert!(has(position), "missing position {position}: {texts:?}");
    }
    assert!(!has("t7"), "60 tokens are labelled by position");
}

/// The PNG's pixel at the middle of cell `(i, j)`.
fn pixel(png: &(Vec<u8>, usize), figure: &AttentionFigure, (i, j): (usize, usize)) -> [u8; 3] {
    let layout = figure.layout();
    let (x, y) = (layout.left + j * layout.cell, layout.top + i * layout.cell);
    at(png, (x + layout.cell / 2, y + layout.cell / 2))
}

fn at((pixels, width): &(Vec<u8>, usize), (x, y): (usize, usize)) -> [u8; 3] {
    let k = (y * width + x) * 3;
    [pixels[k], pixels[k + 1], pixels[k + 2]]
}

/// Decodes the PNG at `path`, checking its size against the figure's layout: its RGB pixels
/// and width.
fn decode(path: &Path, figure: &AttentionFigure) -> (Vec<u8>, usize) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    let layout = figure.layout();
    assert_eq!((info.width as usize, info.height as usize), (layout.width, layout.height));
    assert!(layout.cell * figure.tokens.len() >= 768, "{layout:?}");
    pixels.truncate(info.buffer_size());
    (pixels, layout.width)
}

#[test]
fn the_png_draws_the_window_edge_and_colours_by_weight_or_its_log() {
    let figure = sliding(10);
    let linear_path = temp("sliding.png");
    draw(&figure, &linear_path, ImageFormat::Png).unwrap();
    let linear = decode(&linear_path, &figure);
    let layout = figure.layout();
    // Query 6 sees keys 3 … 6: the edge runs down the borders at keys 3 and 7 of its row.
    let row = layout.top + 6 * layout.cell + layout.cell / 2;
    for key in [3, 7] {
        assert_eq!(at(&linear, (layout.left + key * layout.cell, row)), EDGE_COLOUR, "key {key}");
    }
    assert_ne!(at(&linear, (layout.left + 5 * layout.cell, row)), EDGE_COLOUR);
    // Query 0's weight on itself is the largest, 1: the lightest colour; query 6's on key 3
    // is 1/15, near the darkest on the linear scale and a third of the way on the log one.
    let w = figure.weights[6 * 10 + 3];
    assert_eq!(pixel(&linear, &figure, (0, 0)), colour(1.0));
    assert_eq!(pixel(&linear, &figure, (6, 3)), colour(w));
    let log = AttentionFigure { log: true, ..figure };
    let log_path = temp("sliding_log.png");
    draw(&log, &log_path, ImageFormat::Png).unwrap();
    let log_pixels = decode(&log_path, &log);
    assert_eq!(pixel(&log_pixels, &log, (6, 3)), colour((w.log10() + 4.0) / 4.0));
    assert_eq!(pixel(&log_pixels, &log, (6, 0)), colour(0.0), "a masked key is at the floor");
    assert_ne!(linear.0, log_pixels.0);
}

/// Black pixels where the PNG's title and labels go: text was drawn there.
#[test]
fn the_png_has_text_and_a_colour_bar() {
    let figure = sliding(10);
    let path = temp("text.png");
    draw(&figure, &path, ImageFormat::Png).unwrap();
    let png = decode(&path, &figure);
    let layout = figure.layout();
    let black = |xs: std::ops::Range<usize>, ys: std::ops::Range<usize>| {
        ys.flat_map(|y| xs.clone().map(move |x| (x, y))).filter(|&p| at(&png, p) == [0; 3]).count()
    };
    let (left, top, side) = (layout.left, layout.top, 10 * layout.cell);
    assert!(black(0..layout.width, 0..top - 8) > 100, "the title");
    assert!(black(0..left - 8, top..top + side) > 100, "query labels");
    assert!(black(left + side + 1..layout.width, top..top + side) > 100, "colour bar values");
    // The colour bar: the ramp's light end at its top, its dark end at its bottom.
    let near = |a: [u8; 3], b: [u8; 3]| a.iter().zip(b).all(|(&a, b)| a.abs_diff(b) <= 2);
    let bar = (left + side..layout.width).find(|&x| near(at(&png, (x, top)), colour(1.0)));
    let bar = bar.expect("a colour bar right of the map");
    assert!(near(at(&png, (bar + 2, top + side - 1)), colour(0.0)));
}

#[test]
fn a_figure_for_a_layer_describes_its_kind_and_window() {
    let kinds = vec![AttentionKind::MultiScale { windows: vec![2, 4, 8, 16] }, AttentionKind::Full];
    let config = DecoderConfig::new(kinds).with_d_model(16).with_layers(2).with_kv_heads(Some(2));
    let figure =
        AttentionFigure::for_layer(&config, 0, 2, sliding_weights(5, 8), vec!["a".into(); 5])
            .unwrap();
    assert_eq!(figure.title(), "Layer 0, head 2: MSWA head window 8");
    let full =
        AttentionFigure::for_layer(&config, 1, 0, sliding_weights(5, 5), vec!["a".into(); 5]);
    assert_eq!(full.unwrap().title(), "Layer 1, head 0: full causal");
    // LongNet's band is the union of its branches': it has an edge, and the figure draws.
    let longnet = AttentionKind::LongNet { segments: vec![4, 8], dilations: vec![1, 2] };
    let config =
        DecoderConfig::new(vec![longnet]).with_d_model(16).with_layers(1).with_kv_heads(Some(2));
    let figure =
        AttentionFigure::for_layer(&config, 0, 1, sliding_weights(12, 4), vec!["a".into(); 12])
            .unwrap();
    assert_eq!(figure.title(), "Layer 0, head 1: LongNet w=4,8 r=1,2");
    let path = temp("longnet.svg");
    draw(&figure, &path, ImageFormat::Svg).unwrap();
    let [r, g, b] = EDGE_COLOUR;
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.contains(&format!("stroke=\"#{r:02X}{g:02X}{b:02X}\"")));
    let sinks = AttentionKind::Sinks { sinks: 4, window: 16 };
    assert_eq!(sinks.label(0), "sliding W=16 + 4 sinks");
    assert_eq!(AttentionKind::swat(16).label(3), "SWAT W=16");
}

#[test]
fn figures_that_cannot_be_drawn_are_errors_naming_the_file() {
    let path = temp("bad.png");
    let cases = [
        (AttentionFigure { tokens: Vec::new(), weights: Vec::new(), ..sliding(3) }, "no tokens"),
        (AttentionFigure { weights: vec![0.0; 5], ..sliding(3) }, "5 weights for 3 tokens"),
        (AttentionFigure { head: 4, ..sliding(3) }, "head 4 of 4 heads"),
    ];
    for (figure, problem) in cases {
        for format in [ImageFormat::Png, ImageFormat::Svg] {
            let error = draw(&figure, &path, format).unwrap_err();
            assert!(matches!(&error, ReportError::Input { .. }), "{error}");
            assert!(error.to_string().contains(problem), "{error}");
            assert!(error.to_string().contains("bad.png"), "{error}");
        }
    }
    assert!(!path.exists());
}
