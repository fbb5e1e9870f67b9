//! Unit tests of the kernel's own helpers: the schedule's claim about class rows, the
//! vectorised `exp`, the decode step against a scalar reference and its two schedules (threads or
//! one thread), and the fused append, the layout of heads and the reading of strided views. The
//! kernel's outputs and gradients are tested against the dense reference through the backend seam, where they run
//! (`attention/tests/attention/flex.rs`: the spec matrix, random specs, f16; `models/tests/models`:
//! decoding on flex; `tests/zoo/backends`: training on flex), and timed by
//! `benches/cpu_attention.rs`.

use super::schedule::groups;
use crate::{HeadWindow, WindowSpec};

/// Specs that exercise every kind of key list, each with and without sinks, globals, the other
/// causality, and a decoding offset over padded keys, at lengths below, at and above a tile:
/// `(spec, keys)`.
fn schedule_specs() -> Vec<(WindowSpec, usize)> {
    let mut specs = Vec::new();
    for n in [5, 37, 64, 130] {
        let windows = [
            vec![HeadWindow::sliding(7); 2],
            vec![HeadWindow::sliding(n + 3); 2],
            (1..=4).map(|d| HeadWindow::dilated([3, 5, 2, 4][d - 1], d)).collect(),
            vec![HeadWindow::longformer(3, 1), HeadWindow::longformer(2, 2)],
            (0..4).map(|h| HeadWindow::longnet(16, 4, h)).collect(),
            (0..3).map(|h| HeadWindow::longnet(10, 3, h)).collect(),
            vec![HeadWindow::full(); 2],
        ];
        for heads in windows {
            let spec = WindowSpec::new(heads, 1).expect("a valid spec");
            let padded = spec.clone().with_query_offset(n / 3).with_kv_len(n);
            specs.extend([
                (spec.clone().with_causal(!spec.is_causal()), n),
                (spec.clone().with_sinks(3), n),
                (spec.clone().with_causal(false).with_sinks(70), n),
                (spec.clone().with_globals([0, n / 2]), n),
                (padded, n + 2),
                (spec, n),
            ]);
        }
    }
    specs
}

/// The claim of `super::schedule`: a class row sees, among the keys of its class list, exactly
/// those of its interval, and every other key it sees is an extra key.
#[test]
fn class_rows_see_their_intervals() {
    for (spec, keys) in schedule_specs() {
        let kv_len = spec.valid_keys(keys);
        let q_len = keys - spec.query_offset().min(keys);
        for group in groups(&spec, q_len, kv_len) {
            let extras = &group.keys[group.classes];
            for (class, rows) in group.queries[..group.classes].iter().enumerate() {
                let intervals = rows.intervals.as_ref().expect("class rows have intervals");
                for (&i, &(start, end)) in rows.queries.iter().zip(intervals) {
                    let p = spec.query_offset() + i;
                    for &h in &group.heads {
                        let seen = |j: usize| spec.visible(h, p, j, kv_len);
                        for (index, &j) in group.keys[class].iter().enumerate() {
                            assert_eq!(
                                (start..end).contains(&index),
                                seen(j),
                                "{spec:?} h={h} p={p} j={j}"
                            );
                        }
                        for j in (0..keys).filter(|&j| seen(j)) {
                            assert!(
                                group.keys[class].contains(&j) || extras.contains(&j),
                                "{spec:?} p={p} j={j}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn exp_is_within_an_ulp_or_two_of_std() {
    use super::math::exp;
    assert_eq!(exp(f32::NEG_INFINITY), 0.0);
    assert_eq!(exp(-100.0), 0.0);
    for step in -40_000..=40_000 {
        let x = step as f32 * 2.2e-3;
        let (got, want) = (exp(x), x.exp());
        assert!(
            (got - want).abs() <= 2.5e-7 * want + 2.0 * f32::MIN_POSITIVE,
            "exp({x}) = {got}, want {want}"
        );
    }
}

/// The decode step's two schedules agree: a cache above `decode::PARALLEL_FLOATS` runs its jobs
/// on rayon's threads, and each head alone (a cache of one kv head, under the threshold) runs on
/// one thread; the outputs are bit for bit the same.
#[test]
fn decode_rows_on_threads_equal_rows_on_one_thread() {
    use super::decode::{DecodeBuffer, PARALLEL_FLOATS, decode};
    use crate::ScoreOptions;
    use crate::decode::DecodeStep;
    let (heads, slots, dim) = (8, 1000, 16);
    assert!(2 * heads * slots * dim >= PARALLEL_FLOATS && 2 * slots * dim < PARALLEL_FLOATS);
    let value = |i: usize| ((i * 7919 % 1000) as f32 / 500.0) - 1.0;
    let q: Vec<f32> = (0..heads * dim).map(value).collect();
    let keys: Vec<f32> = (0..heads * slots * dim).map(|i| value(3 * i + 1)).collect();
    let values: Vec<f32> = (0..heads * slots * dim).map(|i| value(5 * i + 2)).collect();
    let positions: Vec<usize> = (0..slots).collect();
    let windows = (0..heads).map(|h| HeadWindow::sliding(200 + 300 * h)).collect();
    let spec = WindowSpec::new(windows, heads).expect("a valid spec");
    let opts = ScoreOptions::default();
    let t = slots - 1;
    let all_heads: Vec<usize> = (0..heads).collect();
    let buffer =
        DecodeBuffer { keys: &keys, values: &values, kv_heads: &all_heads, positions: &positions };
    let step =
        DecodeStep { specs: std::slice::from_ref(&spec), opts: &opts, position: t, rope: None };
    let together = decode(&q, &[buffer], 1, dim, &step);
    for h in 0..heads {
        let one = WindowSpec::new(vec![spec.heads()[h]], 1).expect("a valid spec");
        let slab = h * slots * dim..(h + 1) * slots * dim;
        let buffer = DecodeBuffer {
            keys: &keys[slab.clone()],
            values: &values[slab],
            kv_heads: &[0],
            positions: &positions,
        };
        let (specs, rope) = (std::slice::from_ref(&one), None);
        let step = DecodeStep { specs, opts: &opts, position: t, rope };
        let alone = decode(&q[h * dim..(h + 1) * dim], &[buffer], 1, dim, &step);
        assert_eq!(alone, together[h * dim..(h + 1) * dim], "head {h}");
    }
}

/// The decode step against a scalar reference written here, on a ring of three chunks of
/// `decode::CHUNK_SLOTS` (the last one short) in ring order, then a growing ring's reserve of
/// empty slots whose keys and values are NaN (never read), with 3 query heads per kv head,
/// sinks, and each score option: softmax with softcap and ALiBi, sigmoid with β, and two
/// LongNet branches mixed by their log-normalisers. Tolerance 2e-5, relative above 1 (f32 sums
/// over thousands of slots in another order; sigmoid's outputs are not normalised).
#[test]
fn decode_in_chunks_matches_a_scalar_reference() {
    use super::decode::{CHUNK_SLOTS, DecodeBuffer, decode};
    use crate::decode::DecodeStep;
    use crate::{ScoreFn, ScoreOptions};
    let (heads, kv_heads, dim, t) = (6, 2, 8, 9000);
    // Sinks 0 … 3 and the last 2·CHUNK_SLOTS + 300 positions, in a ring whose oldest slot is 300.
    let held = 2 * CHUNK_SLOTS + 300;
    let recent: Vec<usize> = (t + 1 - held..=t).collect();
    let ring = recent[held - 300..].iter().chain(&recent[..held - 300]).copied();
    let (empty, reserve) = (usize::MAX, 100);
    let positions: Vec<usize> = (0..4).chain(ring).chain([empty; 100]).collect();
    let slots = positions.len();
    assert!(slots - reserve > 2 * CHUNK_SLOTS && !slots.is_multiple_of(CHUNK_SLOTS));
    let value = |i: usize| ((i * 7919 % 1000) as f32 / 500.0) - 1.0;
    let q: Vec<f32> = (0..heads * dim).map(|i| 2.0 * value(i + 11)).collect();
    let cached = |stride: usize, i: usize| match positions[i / dim % slots] {
        j if j == empty => f32::NAN,
        _ => value(stride * i + 1),
    };
    let keys: Vec<f32> = (0..kv_heads * slots * dim).map(|i| cached(3, i)).collect();
    let values: Vec<f32> = (0..kv_heads * slots * dim).map(|i| cached(5, i)).collect();
    let windows = (0..heads).map(|h| HeadWindow::sliding([100, 2500, held][h % 3])).collect();
    let sliding = WindowSpec::new(windows, kv_heads).expect("a valid spec").with_sinks(4);
    let longnet = |segment, dilation| {
        WindowSpec::longnet_branch(heads, kv_heads, segment, dilation).expect("a valid spec")
    };
    let alibi = (0..heads).map(|h| 0.01 / (h + 1) as f32).collect();
    let cases = [
        (vec![sliding.clone()], ScoreOptions::softmax().with_softcap(3.0).with_alibi(alibi)),
        (vec![sliding], ScoreOptions::sigmoid(-2.0)),
        (vec![longnet(512, 1), longnet(4096, 4)], ScoreOptions::softmax()),
    ];
    let kv_all: Vec<usize> = (0..kv_heads).collect();
    let buffer =
        DecodeBuffer { keys: &keys, values: &values, kv_heads: &kv_all, positions: &positions };
    for (specs, opts) in cases {
        let step = DecodeStep { specs: &specs, opts: &opts, position: t, rope: None };
        let got = decode(&q, &[buffer], 1, dim, &step);
        for h in 0..heads {
            let kv = h / (heads / kv_heads);
            let (mut outputs, mut lses) = (Vec::new(), Vec::new());
            for spec in &specs {
                let mut o = vec![0.0f64; dim];
                let mut total = 0.0f64;
                let mut top = f64::NEG_INFINITY;
                let mut scored = Vec::new();
                for (slot, &j) in
                    positions.iter().enumerate().filter(|(_, j)| spec.visible(h, t, **j, t + 1))
                {
                    let key = &keys[(kv * slots + slot) * dim..][..dim];
                    let dot: f64 = (0..dim).map(|c| (q[h * dim + c] * key[c]) as f64).sum();
                    let mut s = dot * opts.scale_for(dim) as f64;
                    if let Some(cap) = opts.softcap {
                        s = cap as f64 * (s / cap as f64).tanh();
                    }
                    let slope = opts.alibi.as_ref().map_or(0.0, |a| a[h] as f64);
                    s -= slope * (t - j) as f64;
                    top = top.max(s);
                    scored.push((slot, s));
                }
                for (slot, s) in scored {
                    let w = match opts.score_fn {
                        ScoreFn::Softmax => (s - top).exp(),
                        ScoreFn::Sigmoid { beta } => 1.0 / (1.0 + (-(s + beta as f64)).exp()),
                    };
                    total += w;
                    let v = &values[(kv * slots + slot) * dim..][..dim];
                    o.iter_mut().zip(v).for_each(|(o, &x)| *o += w * x as f64);
                }
                let (shift, norm) = match opts.score_fn {
                    ScoreFn::Softmax => (top, total),
                    ScoreFn::Sigmoid { .. } => (0.0, 1.0),
                };
                // A branch that sees no key weighs nothing in the mixture.
                let norm = if total == 0.0 { 1.0 } else { norm };
                outputs.push(o.into_iter().map(|x| x / norm).collect::<Vec<_>>());
                lses.push(total.ln() + shift);
            }
            let top = lses.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
            let weights: Vec<f64> = lses.iter().map(|l| (l - top).exp()).collect();
            let sum: f64 = weights.iter().sum();
            for c in 0..dim {
                let want: f64 = weights.iter().zip(&outputs).map(|(w, o)| w / sum * o[c]).sum();
                let error = (got[h * dim + c] as f64 - want).abs();
                let bound = 2e-5 * want.abs().max(1.0);
                assert!(error < bound, "{:?}, head {h}: {error}", opts.score_fn);
            }
        }
    }
}

/// The fused append writes exactly the slot of the buffer's own kv heads, in every batch row.
#[test]
fn write_slot_writes_its_heads_slot_and_nothing_else() {
    let (batch, dim, slots) = (2, 3, 4);
    // The new position of 3 kv heads; the buffer holds heads 0 and 2.
    let new: Vec<f32> = (0..batch * 3 * dim).map(|x| 100.0 + x as f32).collect();
    let mut buffer = vec![0.0; batch * 2 * slots * dim];
    super::write_slot(&mut buffer, &new, &[0, 2], 1, batch, dim);
    for b in 0..batch {
        for (local, kv) in [0, 2].into_iter().enumerate() {
            for slot in 0..slots {
                let at = ((b * 2 + local) * slots + slot) * dim;
                let want: Vec<f32> = match slot {
                    1 => new[(b * 3 + kv) * dim..(b * 3 + kv + 1) * dim].to_vec(),
                    _ => vec![0.0; dim],
                };
                assert_eq!(buffer[at..at + dim], want, "batch {b}, head {kv}, slot {slot}");
            }
        }
    }
}

/// `with_threads_awake` returns what its work returns, runs the work's parallel parts, and
/// hands a panic of the work on (the pool's looking threads stop: no hang), from outside the
/// pool and from one of its threads.
#[test]
fn threads_kept_awake_return_the_work_and_its_panics() {
    use crate::LayerOpsBackend;
    use burn::backend::Flex;
    use rayon::prelude::*;
    let sum = || (0..10_000u64).into_par_iter().map(|i| i * i).sum::<u64>();
    let want = sum();
    assert_eq!(Flex::with_threads_awake(sum), want);
    assert_eq!(rayon::scope(|_| Flex::with_threads_awake(sum)), want);
    let panicked = std::panic::catch_unwind(|| Flex::with_threads_awake(|| panic!("in the work")));
    assert!(panicked.is_err());
    assert_eq!(Flex::with_threads_awake(sum), want, "the pool works after a panic");
}

/// The heads of the projections' `[B, N, H, d]` memory, alone or one part of a wider product
/// (q of q|k|v), are heads-inner; a contiguous `[B, H, N, d]` tensor is heads-outer.
#[test]
fn views_of_heads_in_rows_keep_their_order() {
    use crate::cpu::layout::{HEADS_INNER, HEADS_OUTER, order_of};
    use burn::backend::flex::FlexTensor;
    let (b, n, d) = (2, 3, 4);
    let rows = |heads: usize| {
        let values: Vec<f32> = (0..b * n * heads * d).map(|i| i as f32).collect();
        FlexTensor::from_data(burn::tensor::TensorData::new(values, [b, n, heads, d]))
    };
    let heads_of =
        |t: FlexTensor, first: usize, count: usize| t.narrow(2, first, count).transpose(1, 2);
    assert_eq!(order_of(&heads_of(rows(2), 0, 2)), HEADS_INNER);
    assert_eq!(order_of(&heads_of(rows(4), 1, 2)), HEADS_INNER, "k of q|k|v");
    assert_eq!(order_of(&rows(2)), HEADS_OUTER);
}

/// Strided views of every rank read as their logical row-major values: a half of a joined
/// gate|up product (3-D), a part of the q|k|v heads seen heads-first (4-D), and a view with a
/// zero-length axis.
#[test]
fn strided_views_read_in_logical_order() {
    use crate::cpu::layout::read;
    use burn::backend::flex::FlexTensor;
    let values = |n: usize| (0..n).map(|i| i as f32).collect::<Vec<_>>();
    let tensor = |n: usize, shape: Vec<usize>| {
        FlexTensor::from_data(burn::tensor::TensorData::new(values(n), shape))
    };
    let logical = |t: &FlexTensor| t.clone().into_data().into_vec::<f32>().expect("f32");
    let both = tensor(2 * 3 * 10, vec![2, 3, 10]);
    for half in [both.clone().narrow(2, 0, 5), both.narrow(2, 5, 5)] {
        assert_eq!(read(&half).into_owned(), logical(&half), "a half of gate|up");
    }
    let qkv = tensor(2 * 3 * 4 * 2, vec![2, 3, 4, 2]);
    let k = qkv.narrow(2, 2, 1).transpose(1, 2);
    assert_eq!(read(&k).into_owned(), logical(&k), "k of q|k|v");
    let empty = tensor(0, vec![2, 0, 4]).narrow(2, 1, 2);
    assert!(read(&empty).is_empty());
}
