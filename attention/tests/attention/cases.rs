//! The spec matrix of the core tests and a generator of random specs over the same space.

use swa_attention::{HeadWindow, ScoreOptions, WindowSpec, alibi};

use crate::common::{Case, Rng};

/// The lengths every mechanism is checked at: 1, below, at and above a block, and long.
pub const LENGTHS: [usize; 6] = [1, 5, 63, 64, 65, 257];

/// Named specs for `heads` heads sharing `kv_heads` kv heads at length `n`: every mechanism
/// and edge case of docs/semantics.md §2–§5 at least once.
pub fn matrix(n: usize) -> Vec<(&'static str, WindowSpec, ScoreOptions)> {
    let soft = ScoreOptions::softmax;
    let balanced = alibi::balanced(4, alibi::SlopeMagnitudes::Code).unwrap();
    let recency = alibi::recency(4, alibi::SlopeMagnitudes::Paper).unwrap();
    let spec = |r: Result<WindowSpec, _>| r.expect("valid spec");
    vec![
        ("full causal", spec(WindowSpec::full(4, 4)), soft()),
        ("full bidirectional", spec(WindowSpec::full(2, 1)).with_causal(false), soft()),
        ("sliding W=1", spec(WindowSpec::sliding(4, 2, 1)), soft()),
        ("sliding W=2", spec(WindowSpec::sliding(4, 4, 2)), soft()),
        ("sliding W=7", spec(WindowSpec::sliding(4, 1, 7)), soft()),
        ("sliding W>=N", spec(WindowSpec::sliding(2, 2, n + 3)), soft()),
        (
            "sliding W=7 bidirectional",
            spec(WindowSpec::sliding(2, 2, 7)).with_causal(false),
            soft(),
        ),
        ("per-head windows (MSWA)", spec(WindowSpec::per_head(&[1, 2, 7, 33], 2)), soft()),
        ("one head", spec(WindowSpec::sliding(1, 1, 7)), soft()),
        ("dilated 1-4", spec(WindowSpec::dilated(&[3, 5, 2, 4], &[1, 2, 3, 4], 4)), soft()),
        ("sinks", spec(WindowSpec::sliding(4, 2, 7)).with_sinks(3), soft()),
        (
            "globals causal",
            spec(WindowSpec::sliding(4, 4, 7))
                .with_globals([0, 9, n / 2].into_iter().filter(|&g| g < n)),
            soft(),
        ),
        (
            "longformer encoder + globals",
            spec(WindowSpec::longformer(3, &[1, 1, 2, 3], 2, false)).with_globals([0, n - 1]),
            soft(),
        ),
        ("longformer decoder", spec(WindowSpec::longformer(4, &[1, 2, 1, 2], 4, true)), soft()),
        ("longnet branch w=16 r=4", spec(WindowSpec::longnet_branch(4, 2, 16, 4)), soft()),
        ("longnet branch w=10 r=3", spec(WindowSpec::longnet_branch(4, 4, 10, 3)), soft()),
        ("softcap", spec(WindowSpec::sliding(4, 2, 7)), soft().with_softcap(0.5)),
        ("sigmoid", spec(WindowSpec::sliding(4, 4, 7)), ScoreOptions::sigmoid(0.0)),
        (
            "sigmoid + balanced ALiBi (SWAT)",
            spec(WindowSpec::sliding(4, 4, 7)),
            ScoreOptions::sigmoid(-(7f32).ln()).with_alibi(balanced.clone()),
        ),
        ("softmax + recency ALiBi", spec(WindowSpec::sliding(4, 2, 7)), soft().with_alibi(recency)),
        (
            "everything",
            spec(WindowSpec::dilated(&[4, 4, 9, 9], &[2, 2, 1, 3], 2))
                .with_sinks(2)
                .with_globals([n / 3]),
            soft().with_softcap(2.0).with_alibi(balanced),
        ),
    ]
}

/// The specs of [`matrix`] and [`extra_cases`] that the kernels take (no global tokens), at
/// length `n` and head dim `dim`.
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
pub fn kernel_cases(n: usize, dim: usize) -> Vec<(String, Case)> {
    let mut cases: Vec<(String, Case)> = matrix(n)
        .into_iter()
        .filter(|(_, spec, _)| spec.globals().is_empty())
        .map(|(label, spec, opts)| (label.to_string(), Case::new(n, dim, spec, opts)))
        .collect();
    cases.extend(extra_cases(n, dim));
    cases
}

/// Cases the matrix lacks, at length `n` and head dim `dim`: everything but globals at once,
/// decoding offsets with padded keys, bidirectional sigmoid, and a bidirectional band with more
/// sinks than one block of keys, in a batch of two (sinks past a query block's band).
pub fn extra_cases(n: usize, dim: usize) -> Vec<(String, Case)> {
    let mut cases = Vec::new();
    let balanced = alibi::balanced(4, alibi::SlopeMagnitudes::Code).unwrap();
    let everything = WindowSpec::dilated(&[4, 4, 9, 9], &[2, 2, 1, 3], 2).unwrap().with_sinks(2);
    let opts = ScoreOptions::softmax().with_softcap(2.0).with_alibi(balanced);
    cases.push(("everything but globals".into(), Case::new(n, dim, everything, opts)));
    let offset = n / 2;
    let decode = WindowSpec::sliding(4, 2, 5)
        .unwrap()
        .with_sinks(1)
        .with_query_offset(offset)
        .with_kv_len(n);
    let decode = Case {
        q_len: n - offset,
        keys: n + 3,
        ..Case::new(n, dim, decode, ScoreOptions::softmax())
    };
    cases.push(("decoding offset + padded keys".into(), decode));
    let windows = vec![HeadWindow::longformer(2, 1), HeadWindow::longformer(3, 2)];
    let encoder = WindowSpec::new(windows, 1).unwrap().with_causal(false).with_sinks(1);
    let sigmoid = ScoreOptions::sigmoid(-1.0).with_alibi(vec![0.5, -0.25]).with_softcap(3.0);
    cases.push((
        "bidirectional sigmoid + ALiBi + softcap".into(),
        Case::new(n, dim, encoder, sigmoid),
    ));
    let band = WindowSpec::new(vec![HeadWindow::longformer(3, 1); 2], 2).unwrap();
    let sinks = band.with_causal(false).with_sinks(n.min(100));
    let sinks = Case { batch: 2, ..Case::new(n, dim, sinks, ScoreOptions::softmax()) };
    cases.push(("bidirectional, more sinks than a key block, batch 2".into(), sinks));
    cases
}

/// A random case at length `n`: heads, GQA, windows, dilations, LongNet branches, sinks,
/// globals, causality, score function, softcap, ALiBi, decoding offsets and padding.
pub fn random_case(rng: &mut Rng, n: usize) -> Case {
    let heads: usize = rng.pick(&[1, 2, 3, 4, 6, 8]);
    let divisors: Vec<usize> = (1..=heads).filter(|&d| heads.is_multiple_of(d)).collect();
    let kv_heads = rng.pick(&divisors);
    let causal = rng.coin(0.7);
    let window = |rng: &mut Rng| rng.pick(&[1, 2, 3, 7, 16, n, n + 5]);
    let windows: Vec<HeadWindow> = match rng.below(5) {
        0 => vec![HeadWindow::sliding(window(rng)); heads],
        1 => (0..heads).map(|_| HeadWindow::dilated(window(rng), 1 + rng.below(4))).collect(),
        2 => {
            let (w, d) = (rng.below(6), 1 + rng.below(3));
            (0..heads).map(|_| HeadWindow::longformer(w, d)).collect()
        }
        3 => {
            let (segment, dilation) = (1 + rng.below(20), 1 + rng.below(4));
            (0..heads).map(|h| HeadWindow::longnet(segment, dilation, h % dilation)).collect()
        }
        _ => vec![HeadWindow::full(); heads],
    };
    let mut spec = WindowSpec::new(windows, kv_heads).unwrap().with_causal(causal);
    let keys = n + if rng.coin(0.2) { 1 + rng.below(4) } else { 0 };
    if keys > n {
        spec = spec.with_kv_len(n);
    }
    if rng.coin(0.3) {
        spec = spec.with_sinks(1 + rng.below(4));
    }
    if rng.coin(0.3) {
        spec = spec.with_globals((0..1 + rng.below(3)).map(|_| rng.below(n)));
    }
    let q_len = if rng.coin(0.2) { 1 + rng.below(n) } else { n };
    spec = spec.with_query_offset(n - q_len);
    let mut opts = match rng.coin(0.3) {
        true => ScoreOptions::sigmoid(rng.pick(&[0.0, -2.0])),
        false => ScoreOptions::softmax(),
    };
    if rng.coin(0.3) {
        opts = opts.with_softcap(rng.pick(&[0.5, 5.0]));
    }
    if rng.coin(0.3) {
        let magnitudes = rng.pick(&[alibi::SlopeMagnitudes::Code, alibi::SlopeMagnitudes::Paper]);
        let distance = rng.below(heads + 1);
        opts =
            opts.with_alibi(alibi::split(heads - distance, distance, heads, magnitudes).unwrap());
    }
    if rng.coin(0.2) {
        opts = opts.with_scale(0.3);
    }
    let dim = rng.pick(&[1, 4, 8, 16]);
    Case {
        batch: 1 + rng.below(2),
        q_len,
        keys,
        dim,
        spec,
        opts,
        seed: rng.next_u64(),
        half: false,
        dtype: None,
        heads_inner: false,
        relative: None,
    }
}

/// Causal cases with relative scores (docs/semantics.md §4) at length `n`, head dim `dim`: each
/// table exactly as long as the spec needs (its reach, or back to key 0), and once longer.
pub fn relative_cases(n: usize, dim: usize) -> Vec<(String, Case)> {
    let spec = |r: Result<WindowSpec, _>| r.expect("valid spec");
    let soft = ScoreOptions::softmax;
    let balanced = alibi::balanced(4, alibi::SlopeMagnitudes::Code).unwrap();
    let offset = n / 2;
    let decode = spec(WindowSpec::sliding(4, 2, 5)).with_query_offset(offset).with_kv_len(n);
    let decode = Case { q_len: n - offset, keys: n + 3, ..Case::new(n, dim, decode, soft()) };
    let mut cases = vec![
        ("MSWA", Case::new(n, dim, spec(WindowSpec::per_head(&[1, 2, 7, 33], 2)), soft()), 33),
        ("full", Case::new(n, dim, spec(WindowSpec::full(4, 4)), soft()), n),
        (
            "sliding + sinks",
            Case::new(n, dim, spec(WindowSpec::sliding(4, 1, 7)).with_sinks(2), soft()),
            n,
        ),
        (
            "dilated",
            Case::new(n, dim, spec(WindowSpec::dilated(&[3, 5, 2, 4], &[1, 2, 3, 4], 4)), soft()),
            13,
        ),
        (
            "LongNet branch",
            Case::new(n, dim, spec(WindowSpec::longnet_branch(4, 2, 16, 4)), soft()),
            16,
        ),
        (
            "SWAT: sigmoid + ALiBi + softcap",
            Case::new(
                n,
                dim,
                spec(WindowSpec::sliding(4, 4, 7)),
                ScoreOptions::sigmoid(-1.0).with_alibi(balanced).with_softcap(2.0),
            ),
            7,
        ),
        ("decoding offset + padded keys", decode, 5),
        (
            "sliding, longer table",
            Case::new(n, dim, spec(WindowSpec::sliding(4, 2, 7)), soft()),
            7 + n,
        ),
    ];
    if n > 2 {
        let globals =
            spec(WindowSpec::longformer(2, &[1, 2, 1, 2], 4, true)).with_globals([0, n / 2]);
        cases.push(("Longformer decoder + globals", Case::new(n, dim, globals, soft()), n));
    }
    cases
        .into_iter()
        .map(|(label, case, len)| (label.to_string(), Case { batch: 2, ..case }.with_relative(len)))
        .collect()
}
