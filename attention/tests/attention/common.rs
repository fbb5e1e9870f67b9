//! Helpers shared by the core tests: a seeded generator, random inputs, a runner for every
//! implementation of the core, and the error measures and tolerances.

use burn::backend::{Autodiff, NdArray};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Tensor, TensorData};
use swa_attention::blocked::MAX_CHUNK_SCORES;
use swa_attention::rng::SplitMix64;
use swa_attention::{
    ModelBackend, ScoreOptions, WindowSpec, WindowedAttentionBackend, blocked_attention_relative,
    dense_attention_relative, windowed_attention_relative,
};

/// The reference backend of every comparison: ndarray, f32.
pub type Reference = Autodiff<NdArray<f32>>;

/// Max-abs tolerances against the dense reference on inputs in [−1, 1).
#[derive(Clone, Copy, Debug)]
pub struct Tolerance {
    /// Outputs `o`.
    pub out: f32,
    /// Log-normalisers `lse`.
    pub lse: f32,
    /// Gradients of q, k and v.
    pub grad: f32,
}

/// f32 computed in f32 (ndarray, flex, wgpu).
pub const F32: Tolerance = Tolerance { out: 2e-5, lse: 2e-5, grad: 1e-4 };

/// f32 tensors whose matmuls run on TF32 tensor cores (CUDA): inputs rounded to 10 mantissa
/// bits, about 5e-4 relative.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub const TF32: Tolerance = Tolerance { out: 4e-3, lse: 4e-3, grad: 1e-2 };

/// f16 tensors with f32 accumulation, on inputs already rounded to f16 (`Case::half`), so only
/// the rounding of the outputs to f16 differs. `o` and the gradients are f16: about two f16 ulps
/// of their largest values (outputs up to 2, gradients up to 2), twice the largest errors
/// measured on lavapipe and flex (o 9.7e-4, gradients 9.9e-4). `lse` is f32 whatever the
/// inputs' type (docs/semantics.md §1), so it is held to the f32 tolerance (measured 1.9e-6).
/// When `lse` was f16 the errors were lse 7.2e-3 and gradients 1.2e-2, above this tolerance.
pub const F16: Tolerance = Tolerance { out: 2e-3, lse: 2e-5, grad: 2e-3 };

/// Whether a first tensor op on `B`'s default device succeeds (no device or driver panics);
/// prints why the calling test skips when not. (The wgpu tests ask `crate::wgpu_devices`.)
#[cfg(feature = "cuda")]
pub fn device_answers<B: Backend>(name: &str) -> bool {
    let answers = std::panic::catch_unwind(|| {
        Tensor::<B, 1>::zeros([1], &Default::default()).into_data();
    })
    .is_ok();
    if !answers {
        eprintln!("skipped: no {name} device answers on this machine");
    }
    answers
}

/// The draws of the random cases, from a [`SplitMix64`], so every case is reproducible from its
/// seed.
pub struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(SplitMix64::new(seed))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in `0..n`, by the remainder (the cases' seeds were drawn this way).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    pub fn coin(&mut self, p: f64) -> bool {
        self.0.next_f64() <= p
    }
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
    /// `n` values uniform in [−1, 1).
    pub fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.0.next_signed_f32()).collect()
    }
}

/// One call of the core: shapes, spec and options, and a seed for its inputs.
#[derive(Clone, Debug)]
pub struct Case {
    pub batch: usize,
    pub q_len: usize,
    pub keys: usize,
    pub dim: usize,
    pub spec: WindowSpec,
    pub opts: ScoreOptions,
    pub seed: u64,
    /// Round every input to f16 first, so that an f32 reference sees exactly what a half
    /// precision backend sees.
    pub half: bool,
    /// The dtype of the tested backend's tensors, when not its own float type (the reference
    /// always runs in its own f32).
    pub dtype: Option<burn::tensor::DType>,
    /// Make q, k, v and the output's gradient as a layer's projections give them: `[batch, N,
    /// H, d]` memory viewed as `[batch, H, N, d]` (the same values as without).
    pub heads_inner: bool,
    /// A relative-score table of this many distances (docs/semantics.md §4), drawn with the
    /// other inputs; `None` for none.
    pub relative: Option<usize>,
}

impl Case {
    pub fn new(n: usize, dim: usize, spec: WindowSpec, opts: ScoreOptions) -> Self {
        Self {
            batch: 1,
            q_len: n,
            keys: n,
            dim,
            spec,
            opts,
            seed: n as u64,
            half: false,
            dtype: None,
            heads_inner: false,
            relative: None,
        }
    }

    /// The case with a relative-score table of `distances` columns.
    pub fn with_relative(self, distances: usize) -> Self {
        Self { relative: Some(distances), ..self }
    }
}

/// Which implementation runs a case.
#[derive(Clone, Copy, Debug)]
pub enum Path {
    Dense,
    Blocked,
    /// The blocked path holding at most this many scores at once, so that it runs in chunks.
    Chunked(usize),
    /// [`windowed_attention`]: the backend's own choice.
    Dispatch,
}

/// What a call produced: `o`, `lse`, and the gradients of q, k, v and of the relative table
/// (empty without one) for a fixed random loss.
pub struct Outputs {
    pub out: Vec<f32>,
    pub lse: Vec<f32>,
    pub grads: [Vec<f32>; 4],
}

/// Runs `case` through `path` on backend `B` and differentiates
/// `L = Σ o·g_o + Σ_{finite lse} lse·g_l` for random `g_o, g_l`.
pub fn run<B>(case: &Case, path: Path, device: &B::Device) -> Outputs
where
    B: AutodiffBackend + ModelBackend,
{
    let heads = case.spec.num_heads();
    let kv_heads = case.spec.kv_heads();
    let mut rng = Rng::new(case.seed);
    // Burn 0.21 keeps one default float dtype per device, shared by every backend type on it
    // (`Wgpu<f16>` and `Wgpu<f32>` alike): ask for the backend's own float type explicitly, or
    // the case's own (Flex holds any dtype in its one backend type).
    let dtype = case.dtype.unwrap_or(<B::FloatElem as burn::tensor::Element>::dtype());
    let mut tensor = |shape: [usize; 4]| {
        let mut values = rng.values(shape.iter().product());
        if case.half {
            values.iter_mut().for_each(|x| *x = burn::tensor::f16::from_f32(*x).to_f32());
        }
        if !case.heads_inner {
            return Tensor::<B, 4>::from_data(TensorData::new(values, shape), (device, dtype));
        }
        let data =
            TensorData::new(heads_inner(&values, shape), [shape[0], shape[2], shape[1], shape[3]]);
        Tensor::<B, 4>::from_data(data, (device, dtype)).swap_dims(1, 2)
    };
    let q = tensor([case.batch, heads, case.q_len, case.dim]).require_grad();
    let k = tensor([case.batch, kv_heads, case.keys, case.dim]).require_grad();
    let v = tensor([case.batch, kv_heads, case.keys, case.dim]).require_grad();
    let g_out = tensor([case.batch, heads, case.q_len, case.dim]);
    let g_lse = tensor([case.batch, heads, case.q_len, 1]).squeeze_dim::<3>(3);
    let table =
        case.relative.map(|len| tensor([case.batch, heads, case.q_len, len]).require_grad());
    let (qc, kc, vc, tc) = (q.clone(), k.clone(), v.clone(), table.clone());
    let (spec, opts) = (&case.spec, &case.opts);
    let result = match path {
        Path::Dense => dense_attention_relative(qc, kc, vc, tc, spec, opts),
        Path::Blocked => blocked_attention_relative(qc, kc, vc, tc, spec, opts, MAX_CHUNK_SCORES),
        Path::Chunked(scores) => blocked_attention_relative(qc, kc, vc, tc, spec, opts, scores),
        Path::Dispatch => windowed_attention_relative(qc, kc, vc, tc, spec, opts),
    };
    let (out, lse) = result.unwrap_or_else(|e| panic!("{case:?}: {e}"));
    assert_eq!(out.dtype(), dtype, "the output keeps the inputs' float type");
    if matches!(path, Path::Dispatch) {
        assert_eq!(lse.dtype(), DType::F32, "the core's lse is f32 whatever the inputs' type");
    }
    let g_lse = g_lse.cast(lse.dtype());
    let finite_lse = lse.clone().mask_fill(lse.clone().equal_elem(f32::NEG_INFINITY), 0.0);
    let loss = (out.clone() * g_out).sum() + (finite_lse * g_lse).sum().cast(dtype);
    let grads = loss.backward();
    // An input the loss does not reach (every key padded) has a zero gradient.
    let grad = |t: &Tensor<B, 4>| {
        t.grad(&grads).map_or_else(|| vec![0.0; t.shape().num_elements()], values)
    };
    let table_grad = table.as_ref().map_or_else(Vec::new, grad);
    Outputs {
        out: values(out),
        lse: values(lse),
        grads: [grad(&q), grad(&k), grad(&v), table_grad],
    }
}

/// `values` of a row-major `[batch, H, N, d]` tensor stored as `[batch, N, H, d]`, as a
/// layer's projections store q, k and v.
pub fn heads_inner(values: &[f32], [b, h, n, d]: [usize; 4]) -> Vec<f32> {
    (0..b * n * h)
        .flat_map(|r| {
            let (bi, ni, hi) = (r / (n * h), r / h % n, r % h);
            values[((bi * h + hi) * n + ni) * d..][..d].to_vec()
        })
        .collect()
}

pub fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec().expect("f32 data")
}

/// Max-abs error and relative RMS error (`‖a − b‖ / ‖b‖`), the way FlashAttention and fla
/// compare against their references. Equal infinities count as no error.
pub fn errors(got: &[f32], want: &[f32]) -> (f32, f32) {
    assert_eq!(got.len(), want.len(), "length");
    let (mut max, mut diff2, mut norm2) = (0f32, 0f64, 0f64);
    for (&a, &b) in got.iter().zip(want) {
        let d = if a == b { 0.0 } else { (a - b).abs() };
        let d = if d.is_nan() { f32::INFINITY } else { d };
        max = max.max(d);
        diff2 += (d as f64).powi(2);
        if b.is_finite() {
            norm2 += (b as f64).powi(2);
        }
    }
    (max, (diff2 / norm2.max(1e-30)).sqrt() as f32)
}

/// Asserts `got` matches `want` within `tol` max-abs, naming the case and quantity on failure.
pub fn assert_close(what: &str, case: &Case, got: &[f32], want: &[f32], tol: f32) {
    assert!(got.iter().all(|x| !x.is_nan()), "{what} has NaN for {case:?}");
    let (max, rel) = errors(got, want);
    assert!(max <= tol, "{what}: max-abs {max:e} (rel-rms {rel:e}) > {tol:e} for {case:?}");
}

/// Asserts that two runs agree on every output and gradient within `tol`; returns the largest
/// error of each quantity.
pub fn assert_outputs_close(
    case: &Case,
    got: &Outputs,
    want: &Outputs,
    tol: Tolerance,
) -> [f32; 3] {
    assert_close("o", case, &got.out, &want.out, tol.out);
    assert_close("lse", case, &got.lse, &want.lse, tol.lse);
    let mut grad = 0f32;
    let names = ["dq", "dk", "dv", "d(relative)"];
    for (name, (g, w)) in names.iter().zip(got.grads.iter().zip(&want.grads)) {
        assert_close(name, case, g, w, tol.grad);
        grad = grad.max(errors(g, w).0);
    }
    [errors(&got.out, &want.out).0, errors(&got.lse, &want.lse).0, grad]
}

/// Checks `path` on `B` against the dense reference on ndarray within the f32 tolerances.
pub fn check_against_reference<B>(case: &Case, path: Path, device: &B::Device)
where
    B: AutodiffBackend + ModelBackend,
{
    check_within::<B>(case, path, device, F32);
}

/// Checks `path` on `B` against the dense reference on ndarray within `tol`; returns the largest
/// errors of `o`, `lse` and the gradients.
pub fn check_within<B>(case: &Case, path: Path, device: &B::Device, tol: Tolerance) -> [f32; 3]
where
    B: AutodiffBackend + ModelBackend,
{
    let reference = Case { dtype: None, heads_inner: false, ..case.clone() };
    let want = run::<Reference>(&reference, Path::Dense, &Default::default());
    let got = run::<B>(case, path, device);
    assert_outputs_close(case, &got, &want, tol)
}

/// Runs `cases` through `path` on `B`'s `device` against the dense reference within `tol`,
/// asserting that the inner backend's fused kernel takes each call when `path` is the dispatch;
/// prints the largest errors of `o`, `lse` and the gradients under `name`.
pub fn check_kernel_cases<B>(
    name: &str,
    cases: &[(String, Case)],
    path: Path,
    tol: Tolerance,
    device: &B::Device,
) where
    B: AutodiffBackend<InnerBackend: swa_attention::ModelBackend> + swa_attention::ModelBackend,
{
    let start = std::time::Instant::now();
    let kernel = B::InnerBackend::windowed_kernel().expect("the backend has fused kernels");
    let mut worst = [0f32; 3];
    for (label, case) in cases {
        let dims = |heads, len| burn::tensor::Shape::new([case.batch, heads, len, case.dim]);
        let q = dims(case.spec.num_heads(), case.q_len);
        let k = dims(case.spec.kv_heads(), case.keys);
        let runs = (kernel.runs)(&case.spec, &q, &k, &k);
        assert!(runs || !matches!(path, Path::Dispatch), "the kernel must run {label}");
        let errors = check_within::<B>(case, path, device, tol);
        worst = std::array::from_fn(|i| worst[i].max(errors[i]));
    }
    eprintln!(
        "{name}: {} cases, largest max-abs errors o {:e}, lse {:e}, gradients {:e} ({:.1}s)",
        cases.len(),
        worst[0],
        worst[1],
        worst[2],
        start.elapsed().as_secs_f32()
    );
}
