//! The CubeCL kernels of the core (`swa_attention::kernel`) on wgpu against the dense reference
//! on ndarray, and their visibility rule against `WindowSpec::visible`. Each test runs only when
//! the `wgpu` feature is compiled in and an adapter answers (lavapipe counts); otherwise it says
//! why it skipped.

#[cfg(feature = "wgpu")]
mod on_wgpu {
    use burn::backend::wgpu::{CubeBackend, WgpuRuntime};
    use burn::backend::{Autodiff, Wgpu};
    use burn::tensor::backend::Backend;
    use burn::tensor::{DType, f16};
    use swa_attention::WindowSpec;
    use swa_attention::kernel::probe_visibility;

    use crate::cases::{LENGTHS, kernel_cases, matrix, random_case, relative_cases};
    use crate::common::{Case, F16, F32, Path, Rng, check_kernel_cases};
    use crate::wgpu_devices::lease;

    /// Burn's wgpu backend without the fusion wrapper.
    type Cube = CubeBackend<WgpuRuntime, f32, i32, u32>;

    #[test]
    fn kernel_visibility_is_window_spec_visible() {
        let Some(device) = lease() else {
            return;
        };
        let mut specs: Vec<(WindowSpec, usize, usize)> = Vec::new();
        for n in 1..=12 {
            for (_, spec, _) in matrix(n) {
                specs.push((spec.clone().with_causal(!spec.is_causal()), n, n));
                specs.push((spec, n, n));
            }
        }
        let mut rng = Rng::new(0x0B5E_55ED);
        while specs.len() < 800 {
            let n = 1 + rng.below(16);
            let case = random_case(&mut rng, n);
            specs.push((case.spec, case.q_len, case.keys));
        }
        let mut pairs = 0;
        for (spec, q_len, keys) in specs {
            let got = probe_visibility::<WgpuRuntime>(&device, &spec, q_len, keys).unwrap();
            let kv_len = spec.valid_keys(keys);
            let mut index = 0;
            for h in 0..spec.num_heads() {
                for i in 0..q_len {
                    let p = spec.query_offset() + i;
                    for j in 0..keys {
                        let global = spec.is_global(p) || spec.is_global(j);
                        let want = spec.visible(h, p, j, kv_len);
                        let [query_side, key_side] = got[index];
                        assert!(
                            global || (query_side == want && key_side == want),
                            "head {h}, query {p}, key {j}: kernel {query_side} (query's side), \
                             {key_side} (key's side) vs visible {want} for {spec:?}"
                        );
                        index += 1;
                    }
                }
            }
            pairs += index;
        }
        eprintln!(
            "kernel visibility matched WindowSpec::visible on {pairs} (head, query, key) triples"
        );
    }

    /// The kernel cases at each of `lengths` (head dim 8), plus head dims of 128 and 192 (smaller
    /// shared tiles: 16 keys at 192).
    fn gradient_cases(lengths: &[usize]) -> Vec<(String, Case)> {
        let mut cases: Vec<(String, Case)> =
            lengths.iter().flat_map(|&n| kernel_cases(n, 8)).collect();
        let wide = |n, dim, name: &str| {
            kernel_cases(n, dim).into_iter().filter(|(label, _)| label.starts_with(name)).collect()
        };
        cases.extend::<Vec<_>>(wide(70, 128, "sliding W=7"));
        cases.extend::<Vec<_>>(wide(70, 192, "bidirectional, more sinks"));
        cases
    }

    /// The kernels launched directly on `CubeBackend`, every compiled variant at a length past
    /// two blocks. The same kernels behind Burn's fusion, the type users get, are checked at
    /// every length and head dim below; the two differ only in how the launch is reached, and
    /// without fusion every op of the test's loss compiles on its own, which lavapipe does
    /// slowly (seconds per new shape), so one shape covers this route. Ignored in the test
    /// command for CI's time (164 s of one core): the kernels are the fusion test's, and the
    /// FlashAttention-2 test launches on `CubeBackend` directly.
    /// Inputs come as a layer's projections give them (`[batch, N, H, d]` memory viewed as
    /// `[batch, H, N, d]`), which the kernels read in place and whose order their outputs and
    /// gradients keep.
    #[test]
    #[ignore = "about 3 minutes of lavapipe's shader compiles: `-- --ignored cube_backend`"]
    fn kernel_gradients_on_cube_backend_match_dense() {
        let Some(device) = lease() else {
            return;
        };
        let cases: Vec<_> = kernel_cases(65, 8)
            .into_iter()
            .map(|(label, case)| (label, Case { batch: 2, heads_inner: true, ..case }))
            .collect();
        let name = "kernel on Autodiff<CubeBackend<Wgpu>>, [batch, N, H, d] inputs";
        check_kernel_cases::<Autodiff<Cube>>(name, &cases, Path::Dispatch, F32, &device);
    }

    #[test]
    fn kernel_gradients_on_fusion_wgpu_match_dense() {
        let Some(device) = lease() else {
            return;
        };
        let (name, cases) = ("kernel on Autodiff<Wgpu> (fusion)", gradient_cases(&LENGTHS));
        check_kernel_cases::<Autodiff<Wgpu>>(name, &cases, Path::Dispatch, F32, &device);
    }

    /// Relative scores (docs/semantics.md §4) through the portable CubeCL kernels on wgpu
    /// (fusion): outputs and the gradients of q, k, v and the table.
    #[test]
    fn relative_scores_on_fusion_wgpu_match_dense() {
        let Some(device) = lease() else {
            return;
        };
        // The kernels take no global tokens (their cases run on the blocked path elsewhere).
        let cases: Vec<_> = relative_cases(65, 8)
            .into_iter()
            .filter(|(label, _)| !label.contains("globals"))
            .collect();
        let name = "relative scores on Autodiff<Wgpu> (fusion)";
        check_kernel_cases::<Autodiff<Wgpu>>(name, &cases, Path::Dispatch, F32, &device);
    }

    /// f16 tensors, f32 accumulation: the kernels on `Wgpu<f16>` (fusion) against the dense
    /// reference in f32 on the same f16-rounded inputs, where the adapter offers f16 shaders
    /// (lavapipe does). wgpu has no bf16. Ignored in the test command for CI's time (71 s of one
    /// core): f16 through fusion and the kernels runs in swa-training's half-precision training
    /// test on wgpu, and the portable kernels' f16 arithmetic in CI's tensor-core phase (relative
    /// scores in F16 on Vulkan).
    #[test]
    #[ignore = "about 70 s of lavapipe's shader compiles: `-- --ignored kernel_in_f16`"]
    fn kernel_in_f16_matches_dense() {
        type Half = Wgpu<f16, i32>;
        let Some(device) = lease() else {
            return;
        };
        if !Half::supports_dtype(&device, DType::F16) {
            eprintln!("skipped: this wgpu adapter has no f16 shaders");
            return;
        }
        // Every compiled variant of the score (softmax, sigmoid, softcap, ALiBi, dilation, sinks)
        // at a length past two blocks; each f16 variant compiles anew, which lavapipe does slowly.
        let mut cases: Vec<(String, Case)> = kernel_cases(65, 8)
            .into_iter()
            .filter(|(label, _)| {
                ["sliding W=7", "everything", "bidirectional sigmoid", "sigmoid + balanced"]
                    .iter()
                    .any(|name| label.starts_with(name))
            })
            .collect();
        cases.iter_mut().for_each(|(_, case)| case.half = true);
        check_kernel_cases::<Autodiff<Half>>(
            "kernel on Autodiff<Wgpu<f16>>",
            &cases,
            Path::Dispatch,
            F16,
            &device,
        );
    }
}

#[cfg(not(feature = "wgpu"))]
#[test]
fn kernel_tests_need_wgpu() {
    eprintln!("skipped: built without the `wgpu` feature");
}
