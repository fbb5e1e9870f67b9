//! The CPU kernel against the dense reference ([`crate::dense_attention`] on ndarray, its
//! gradients through Burn's autodiff): `o`, `lse`, and `dq`, `dk`, `dv` for a loss on both `o`
//! and `lse`, over a matrix of specs and over seeded random specs.
//!
//! Tolerances, max-abs on inputs in [−1, 1): 1e-5 for `o` and `lse`, 1e-4 for the gradients.
//! Both sides compute in f32 and differ in summation order (and the kernel's `exp` is within
//! about 1 ulp of the reference's): errors measured here stay below 2e-6 for `o` and `lse` and
//! below 1e-5 for gradients, which sum over up to N pairs of score gradients.

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Tensor, TensorData};

use super::schedule::groups;
use super::{BackwardInputs, Dims, backward, forward};
use crate::{HeadWindow, ScoreOptions, WindowSpec, alibi, dense_attention};

type Reference = Autodiff<NdArray<f32>>;

const O_TOLERANCE: f32 = 1e-5;
const GRAD_TOLERANCE: f32 = 1e-4;

/// SplitMix64: a seeded generator, so every case is reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// `n` values uniform in [−1, 1).
    fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0).collect()
    }
}

/// One call: sizes, spec and options, and the seed of its inputs.
#[derive(Clone, Debug)]
struct Case {
    dims: Dims,
    spec: WindowSpec,
    opts: ScoreOptions,
    seed: u64,
}

impl Case {
    fn new(n: usize, dim: usize, spec: WindowSpec, opts: ScoreOptions) -> Self {
        let (heads, kv_heads) = (spec.num_heads(), spec.kv_heads());
        let dims = Dims { batch: 1, heads, kv_heads, q_len: n, keys: n, dim };
        Self { dims, spec, opts, seed: n as u64 }
    }
}

/// What a run produced: `o`, `lse`, and the gradients of `L = Σ o·g_o + Σ_{finite lse} lse·g_l`.
struct Run {
    o: Vec<f32>,
    lse: Vec<f32>,
    grads: [Vec<f32>; 3],
}

/// The inputs `q, k, v` and the loss weights `g_o, g_l` of a case.
fn inputs(case: &Case) -> [Vec<f32>; 5] {
    let dims = case.dims;
    let mut rng = Rng(case.seed);
    let (queries, keys) = (dims.query_elements(), dims.key_elements());
    [queries, keys, keys, queries, dims.rows()].map(|n| rng.values(n))
}

fn reference(case: &Case) -> Run {
    let [q, k, v, g_o, g_l] = inputs(case);
    let Dims { batch, heads, kv_heads, q_len, keys, dim } = case.dims;
    let device = Default::default();
    let tensor = |values: Vec<f32>, shape: [usize; 4]| {
        Tensor::<Reference, 4>::from_data(TensorData::new(values, shape), &device)
    };
    let q = tensor(q, [batch, heads, q_len, dim]).require_grad();
    let k = tensor(k, [batch, kv_heads, keys, dim]).require_grad();
    let v = tensor(v, [batch, kv_heads, keys, dim]).require_grad();
    let g_o = tensor(g_o, [batch, heads, q_len, dim]);
    let g_l = tensor(g_l, [batch, heads, q_len, 1]).squeeze_dim::<3>(3);
    let (o, lse) = dense_attention(q.clone(), k.clone(), v.clone(), &case.spec, &case.opts)
        .unwrap_or_else(|e| panic!("{case:?}: {e}"));
    let finite = lse.clone().mask_fill(lse.clone().equal_elem(f32::NEG_INFINITY), 0.0);
    let grads = ((o.clone() * g_o).sum() + (finite * g_l).sum()).backward();
    let values = |t: Tensor<Reference, 4>| t.into_data().to_vec::<f32>().expect("f32");
    let grad = |t: &Tensor<Reference, 4>| {
        t.grad(&grads)
            .map_or(vec![0.0; t.shape().num_elements()], |g| g.into_data().to_vec().expect("f32"))
    };
    let lse = lse.into_data().to_vec::<f32>().expect("f32");
    Run { grads: [grad(&q), grad(&k), grad(&v)], o: values(o), lse }
}

fn kernel(case: &Case) -> Run {
    let [q, k, v, d_o, g_l] = inputs(case);
    let out = forward(&q, &k, &v, case.dims, &case.spec, &case.opts)
        .unwrap_or_else(|e| panic!("{case:?}: {e}"));
    // The reference's loss leaves out the lse of rows that see no key.
    let d_lse: Vec<f32> =
        out.lse.iter().zip(&g_l).map(|(&l, &g)| if l.is_finite() { g } else { 0.0 }).collect();
    let inputs = BackwardInputs {
        q: &q,
        k: &k,
        v: &v,
        o: &out.o,
        lse: &out.lse,
        d_o: &d_o,
        d_lse: Some(&d_lse),
    };
    let grads = backward(&inputs, case.dims, &case.spec, &case.opts)
        .unwrap_or_else(|e| panic!("{case:?}: {e}"));
    Run { o: out.o, lse: out.lse, grads: [grads.dq, grads.dk, grads.dv] }
}

/// The largest absolute difference; equal infinities count as none, NaN as infinite.
fn max_error(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "length");
    let diff = |(a, b): (&f32, &f32)| if a == b { 0.0 } else { (a - b).abs() };
    got.iter()
        .zip(want)
        .map(diff)
        .fold(0.0, |m, d| if d.is_nan() { f32::INFINITY } else { m.max(d) })
}

/// Checks the kernel against the reference on `case`; returns the largest `o`/`lse` and
/// gradient errors.
fn check(name: &str, case: &Case) -> (f32, f32) {
    let (got, want) = (kernel(case), reference(case));
    let out = max_error(&got.o, &want.o).max(max_error(&got.lse, &want.lse));
    let grad = (0..3).map(|i| max_error(&got.grads[i], &want.grads[i])).fold(0.0, f32::max);
    assert!(out <= O_TOLERANCE, "{name}: o/lse error {out:e} for {case:?}");
    assert!(grad <= GRAD_TOLERANCE, "{name}: gradient error {grad:e} for {case:?}");
    (out, grad)
}

/// Named specs at length `n`: every mechanism and edge case of docs/semantics.md §2–§5, as
/// the core tests' matrix, plus the kernel's own edges.
fn matrix(n: usize) -> Vec<(&'static str, WindowSpec, ScoreOptions)> {
    let soft = ScoreOptions::softmax;
    let balanced = alibi::balanced(4, alibi::SlopeMagnitudes::Code).unwrap();
    let recency = alibi::recency(4, alibi::SlopeMagnitudes::Paper).unwrap();
    let spec = |r: Result<WindowSpec, _>| r.expect("valid spec");
    vec![
        ("full causal", spec(WindowSpec::full(4, 4)), soft()),
        ("full bidirectional", spec(WindowSpec::full(2, 1)).with_causal(false), soft()),
        ("sliding W=1", spec(WindowSpec::sliding(4, 2, 1)), soft()),
        ("sliding W=7", spec(WindowSpec::sliding(4, 1, 7)), soft()),
        ("sliding W>=N", spec(WindowSpec::sliding(2, 2, n + 3)), soft()),
        ("sliding bidirectional", spec(WindowSpec::sliding(2, 2, 7)).with_causal(false), soft()),
        ("per-head windows", spec(WindowSpec::per_head(&[1, 2, 7, 33], 2)), soft()),
        ("one head", spec(WindowSpec::sliding(1, 1, 7)), soft()),
        ("dilated 1-4", spec(WindowSpec::dilated(&[3, 5, 2, 4], &[1, 2, 3, 4], 4)), soft()),
        ("sinks", spec(WindowSpec::sliding(4, 2, 7)).with_sinks(3), soft()),
        (
            "bidirectional, more sinks than a key tile",
            spec(WindowSpec::sliding(2, 1, 5)).with_causal(false).with_sinks(70),
            soft(),
        ),
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
        ("longnet w=16 r=4", spec(WindowSpec::longnet_branch(4, 2, 16, 4)), soft()),
        ("longnet w=10 r=3", spec(WindowSpec::longnet_branch(4, 4, 10, 3)), soft()),
        ("softcap", spec(WindowSpec::sliding(4, 2, 7)), soft().with_softcap(0.5)),
        ("sigmoid", spec(WindowSpec::sliding(4, 4, 7)), ScoreOptions::sigmoid(0.0)),
        (
            "sigmoid + balanced ALiBi (SWAT)",
            spec(WindowSpec::sliding(4, 4, 7)),
            ScoreOptions::sigmoid(-(7f32).ln()).with_alibi(balanced.clone()),
        ),
        ("recency ALiBi", spec(WindowSpec::sliding(4, 2, 7)), soft().with_alibi(recency)),
        (
            "everything",
            spec(WindowSpec::dilated(&[4, 4, 9, 9], &[2, 2, 1, 3], 2))
                .with_sinks(2)
                .with_globals([n / 3]),
            soft().with_softcap(2.0).with_alibi(balanced),
        ),
    ]
}

#[test]
fn matches_the_dense_reference_on_the_matrix() {
    let (mut out, mut grad) = (0f32, 0f32);
    for n in [1, 5, 63, 64, 65, 257] {
        for (name, spec, opts) in matrix(n) {
            let (o, g) = check(name, &Case::new(n, 8, spec, opts));
            (out, grad) = (out.max(o), grad.max(g));
        }
    }
    eprintln!("largest errors: o/lse {out:e}, gradients {grad:e}");
}

#[test]
fn batches_gqa_and_wide_heads() {
    let spec = WindowSpec::per_head(&[3, 17, 64, 300], 2).unwrap().with_sinks(2);
    let mut case = Case::new(300, 64, spec, ScoreOptions::softmax().with_softcap(3.0));
    case.dims.batch = 3;
    check("batch 3, GQA, d=64", &case);
}

#[test]
fn decoding_offsets_padded_keys_and_empty_rows() {
    // Queries at positions 10…14 over 12 key rows of which 8 are valid: with W = 1 no query
    // sees a key, with W = 5 the first rows see a few and the last none.
    for w in [1, 5] {
        let spec = WindowSpec::sliding(2, 1, w).unwrap().with_query_offset(10).with_kv_len(8);
        let mut case = Case::new(5, 8, spec, ScoreOptions::softmax());
        case.dims.keys = 12;
        check("decoding past the valid keys", &case);
    }
    // One decoding step after 200 tokens, the last 3 key rows padding.
    let spec = WindowSpec::sliding(4, 2, 64).unwrap().with_query_offset(200).with_kv_len(201);
    let mut case = Case::new(1, 16, spec, ScoreOptions::sigmoid(-1.0));
    case.dims.keys = 204;
    check("one decoding step", &case);
}

/// A random case at length `n`: heads, GQA, windows, dilations, LongNet branches, sinks,
/// globals, causality, score function, softcap, ALiBi, scale, decoding offsets and padding.
fn random_case(rng: &mut Rng, n: usize) -> Case {
    let heads: usize = rng.pick(&[1, 2, 3, 4, 6, 8]);
    let divisors: Vec<usize> = (1..=heads).filter(|&d| heads.is_multiple_of(d)).collect();
    let kv_heads = rng.pick(&divisors);
    let window = |rng: &mut Rng| rng.pick(&[1, 2, 3, 7, 16, n, n + 5]);
    let windows: Vec<HeadWindow> = match rng.below(5) {
        0 => vec![HeadWindow::sliding(window(rng)); heads],
        1 => (0..heads).map(|_| HeadWindow::dilated(window(rng), 1 + rng.below(4))).collect(),
        2 => vec![HeadWindow::longformer(rng.below(6), 1 + rng.below(3)); heads],
        3 => {
            let (segment, dilation) = (1 + rng.below(20), 1 + rng.below(4));
            (0..heads).map(|h| HeadWindow::longnet(segment, dilation, h % dilation)).collect()
        }
        _ => vec![HeadWindow::full(); heads],
    };
    let mut spec = WindowSpec::new(windows, kv_heads).unwrap().with_causal(rng.below(10) < 7);
    let keys = n + if rng.below(5) == 0 { 1 + rng.below(4) } else { 0 };
    if keys > n {
        spec = spec.with_kv_len(n);
    }
    if rng.below(10) < 3 {
        spec = spec.with_sinks(1 + rng.below(4));
    }
    if rng.below(10) < 3 {
        spec = spec.with_globals((0..1 + rng.below(3)).map(|_| rng.below(n)).collect::<Vec<_>>());
    }
    let q_len = if rng.below(5) == 0 { 1 + rng.below(n) } else { n };
    spec = spec.with_query_offset(n - q_len);
    let mut opts = match rng.below(10) < 3 {
        true => ScoreOptions::sigmoid(rng.pick(&[0.0, -2.0])),
        false => ScoreOptions::softmax(),
    };
    if rng.below(10) < 3 {
        opts = opts.with_softcap(rng.pick(&[0.5, 5.0]));
    }
    if rng.below(10) < 3 {
        let magnitudes = rng.pick(&[alibi::SlopeMagnitudes::Code, alibi::SlopeMagnitudes::Paper]);
        let distance = rng.below(heads + 1);
        opts =
            opts.with_alibi(alibi::split(heads - distance, distance, heads, magnitudes).unwrap());
    }
    if rng.below(5) == 0 {
        opts = opts.with_scale(0.3);
    }
    let dims = Dims {
        batch: 1 + rng.below(2),
        heads,
        kv_heads,
        q_len,
        keys,
        dim: rng.pick(&[1, 4, 9, 16]),
    };
    Case { dims, spec, opts, seed: rng.next() }
}

#[test]
fn matches_the_dense_reference_on_random_specs() {
    let mut rng = Rng(0x5EED_C0DE);
    for _ in 0..300 {
        let n = 1 + rng.below(90);
        check("random", &random_case(&mut rng, n));
    }
}

/// The claim of `super::schedule`: a class row sees, among the keys of its class list, exactly
/// those of its interval, and every other key it sees is an extra key.
#[test]
fn class_rows_see_their_intervals() {
    let mut rng = Rng(7);
    let mut specs: Vec<(WindowSpec, usize)> = [5, 64, 130]
        .iter()
        .flat_map(|&n| matrix(n).into_iter().map(move |(_, s, _)| (s, n)))
        .collect();
    specs.extend((0..300).map(|_| {
        let n = 1 + rng.below(90);
        let case = random_case(&mut rng, n);
        (case.spec, case.dims.keys)
    }));
    for (spec, keys) in specs {
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

/// Forward, and forward + backward, at B=1, H=8, d=64, causal W=256, N=16384, counting
/// `4·N·W·d` flops per head for the forward and 2.5 times that for the backward:
/// `cargo test --release -p swa-attention --features flex -- --ignored --nocapture cpu_speed`.
#[test]
#[ignore = "timing; run in release"]
fn cpu_speed() {
    let (n, w, heads, dim) = (16_384, 256, 8, 64);
    let spec = WindowSpec::sliding(heads, heads, w).unwrap();
    let case = Case::new(n, dim, spec, ScoreOptions::softmax());
    let [q, k, v, d_o, _] = inputs(&case);
    let flops = (4 * n * w * dim * heads) as f64;
    let time = |f: &mut dyn FnMut()| {
        f();
        (0..3)
            .map(|_| {
                let start = std::time::Instant::now();
                f();
                start.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let mut out = None;
    let fwd =
        time(&mut || out = Some(forward(&q, &k, &v, case.dims, &case.spec, &case.opts).unwrap()));
    let out = out.expect("ran");
    let inputs =
        BackwardInputs { q: &q, k: &k, v: &v, o: &out.o, lse: &out.lse, d_o: &d_o, d_lse: None };
    let bwd = time(&mut || drop(backward(&inputs, case.dims, &case.spec, &case.opts).unwrap()));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!("threads {}, load {}", rayon::current_num_threads(), load.trim());
    eprintln!("forward {:.1} ms, {:.1} GFLOP/s", fwd * 1e3, flops / fwd / 1e9);
    let total = fwd + bwd;
    eprintln!(
        "backward {:.1} ms; forward + backward {:.1} ms, {:.1} GFLOP/s",
        bwd * 1e3,
        total * 1e3,
        3.5 * flops / total / 1e9
    );
}
