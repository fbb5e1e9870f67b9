//! The fragment seam of the kernels (`swa_attention::kernel::probe_fragments`: tile copies,
//! fragment loads, two accumulating `m16n8k16` products, row maxima and sums across a quad,
//! the store) against the product on the host of the same inputs rounded to the fragments'
//! type, and its fragment layout against PTX's table. Emulated on wgpu (lavapipe in CI) in f16;
//! on CUDA, both paths in f16 and bf16. Each test skips, saying why, where its feature or
//! device is missing.

/// The host side: inputs, the product and the layout to compare with.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod host {
    use burn::tensor::{DType, bf16, f16};
    use swa_attention::kernel::FragmentProbe;

    use crate::common::Rng;

    /// Warps of the probe: two, so that each warp's own share of the cube is exercised.
    const WARPS: usize = 2;
    /// Columns of A, rows of B (two `k` steps of 16).
    const DEPTH: usize = 32;
    /// Columns of B and C.
    const COLS: usize = 8;

    /// `C` within this fraction of the sum of the absolute products `Σ|a·b|` of each element: the
    /// inputs are exact in the fragments' type and their products exact in f32, so only the f32
    /// sums differ (the emulation's order, the tensor cores' adders), about 1e-6 of it.
    const RELATIVE: f64 = 1e-3;
    /// The row sums within this fraction of `Σ|c|` of the row of `C` the probe returned (8 values
    /// summed in f32 across the quad).
    const SUM_RELATIVE: f64 = 1e-5;

    /// `a: [16·WARPS, 32]`, `b: [32, 8]`, uniform in [−2, 2).
    pub fn inputs(seed: u64) -> (Vec<f32>, Vec<f32>) {
        let mut rng = Rng::new(seed);
        let mut draw = |len: usize| -> Vec<f32> {
            (0..len).map(|_| (rng.next_u64() >> 40) as f32 / (1 << 24) as f32 * 4.0 - 2.0).collect()
        };
        (draw(16 * WARPS * DEPTH), draw(DEPTH * COLS))
    }

    /// `values` rounded to `dtype`, as f64.
    fn rounded(values: &[f32], dtype: DType) -> Vec<f64> {
        let round = |v: f32| match dtype {
            DType::BF16 => bf16::from_f32(v).to_f64(),
            _ => f16::from_f32(v).to_f64(),
        };
        values.iter().map(|&v| round(v)).collect()
    }

    /// `[row, column]` of each element of each lane's A (8), B (4) and C (4) fragments, lane after
    /// lane, as PTX ISA's "Matrix Fragments for mma.m16n8k16 with floating point type" tabulates
    /// them (groupID = lane >> 2, threadID_in_group = lane % 4).
    fn ptx_layout() -> Vec<[u32; 2]> {
        let mut out = Vec::new();
        for lane in 0..32u32 {
            let (group, thread) = (lane >> 2, lane % 4);
            for i in 0..8u32 {
                let row = if i < 2 || (4..6).contains(&i) { group } else { group + 8 };
                let col = thread * 2 + (i & 1) + if i < 4 { 0 } else { 8 };
                out.push([row, col]);
            }
            for i in 0..4u32 {
                let row = thread * 2 + (i & 1) + if i < 2 { 0 } else { 8 };
                out.push([row, group]);
            }
            for i in 0..4u32 {
                let row = if i < 2 { group } else { group + 8 };
                out.push([row, thread * 2 + (i & 1)]);
            }
        }
        out
    }

    /// Checks `probe` of `a` and `b` in `dtype`: the layout is PTX's, `C` the host product within
    /// [`RELATIVE`], each row maximum exactly the largest of its row of `C`, each row sum its sum
    /// within [`SUM_RELATIVE`]. Prints the largest relative error under `label`.
    pub fn check(label: &str, probe: &FragmentProbe, a: &[f32], b: &[f32], dtype: DType) {
        assert_eq!(probe.layout, ptx_layout(), "{label}: fragment layout");
        let (a, b) = (rounded(a, dtype), rounded(b, dtype));
        let rows = a.len() / DEPTH;
        assert_eq!(probe.c.len(), rows * COLS, "{label}: size of C");
        let mut worst = 0f64;
        for r in 0..rows {
            for j in 0..COLS {
                let products = (0..DEPTH).map(|k| a[r * DEPTH + k] * b[k * COLS + j]);
                let (want, scale) = products.fold((0.0, 0.0), |(s, m), p| (s + p, m + p.abs()));
                let got = f64::from(probe.c[r * COLS + j]);
                let error = (got - want).abs() / scale;
                assert!(error <= RELATIVE, "{label}: C[{r}, {j}] = {got}, host {want}");
                worst = worst.max(error);
            }
            let row = &probe.c[r * COLS..(r + 1) * COLS];
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(probe.row_max[r], max, "{label}: maximum of row {r}");
            let sum: f64 = row.iter().map(|&v| f64::from(v)).sum();
            let scale: f64 = row.iter().map(|&v| f64::from(v).abs()).sum();
            let got = f64::from(probe.row_sum[r]);
            assert!(
                (got - sum).abs() <= SUM_RELATIVE * scale,
                "{label}: sum of row {r}: {got}, {sum}"
            );
        }
        eprintln!("{label} ({:?} path): largest error of C {worst:e} of Σ|a·b|", probe.path);
    }
}

/// The emulated path on wgpu in f16 (wgpu has no bf16 and no manual MMA, so the device's own
/// path is the emulation), through lavapipe in CI.
#[test]
fn fragments_on_wgpu_match_host_product() {
    #[cfg(feature = "wgpu")]
    {
        use burn::backend::Wgpu;
        use burn::backend::wgpu::WgpuRuntime;
        use burn::tensor::backend::Backend;
        use burn::tensor::{DType, f16};
        use host::{check, inputs};
        use swa_attention::kernel::{FragmentPath, probe_fragments};
        let Some(device) = crate::wgpu_devices::lease() else {
            return;
        };
        if !Wgpu::<f16>::supports_dtype(&device, DType::F16) {
            eprintln!("skipped: this wgpu adapter has no f16 shaders");
            return;
        }
        let (a, b) = inputs(0xF4A6_0001);
        let probe = probe_fragments::<WgpuRuntime>(&device, &a, &b, DType::F16, false).unwrap();
        assert_eq!(probe.path, FragmentPath::Emulated, "wgpu has no manual MMA");
        check("fragments on wgpu, f16", &probe, &a, &b, DType::F16);
    }
    #[cfg(not(feature = "wgpu"))]
    eprintln!("skipped: built without the `wgpu` feature");
}

/// Both paths on CUDA, f16 and bf16: the native one (MMA instructions, plane shuffles) where the
/// device lists `m16n8k16` (sm_80 and later), and the emulation forced on the same device.
#[test]
fn fragments_on_cuda_match_host_product() {
    #[cfg(feature = "cuda")]
    {
        use burn::backend::Cuda;
        use burn::tensor::DType;
        use host::{check, inputs};
        use swa_attention::kernel::{CudaRuntime, FragmentPath, probe_fragments};
        if !crate::common::device_answers::<Cuda>("cuda") {
            return;
        }
        let device = Default::default();
        for (dtype, seed) in [(DType::F16, 0xF4A6_0002), (DType::BF16, 0xF4A6_0003)] {
            let (a, b) = inputs(seed);
            for emulate in [false, true] {
                let probe = probe_fragments::<CudaRuntime>(&device, &a, &b, dtype, emulate);
                let probe = probe.unwrap();
                if emulate {
                    assert_eq!(probe.path, FragmentPath::Emulated);
                }
                check(&format!("fragments on CUDA, {dtype:?}"), &probe, &a, &b, dtype);
            }
        }
    }
    #[cfg(not(feature = "cuda"))]
    eprintln!("skipped: built without the `cuda` feature");
}
