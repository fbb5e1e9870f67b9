//! The flex backend: the fused CPU kernel (`swa_attention::cpu`, what `windowed_attention`
//! runs on `Flex`) and the blocked path on flex, outputs and gradients through `Autodiff<Flex>`,
//! against the dense reference on ndarray.

#[cfg(feature = "flex")]
mod on_flex {
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::DType;

    use crate::cases::{LENGTHS, extra_cases, matrix, random_case, relative_cases};
    use crate::common::{Case, F16, F32, Path, Rng, check_kernel_cases};

    type Backend = Autodiff<Flex>;

    /// Every case of the matrix (global tokens included) and the extra cases at `n`.
    fn cases(n: usize) -> Vec<(String, Case)> {
        let mut cases: Vec<(String, Case)> = matrix(n)
            .into_iter()
            .map(|(label, spec, opts)| (label.to_string(), Case::new(n, 8, spec, opts)))
            .collect();
        cases.extend(extra_cases(n, 8));
        cases
    }

    #[test]
    fn fused_kernel_on_flex_matches_dense() {
        let cases: Vec<_> = LENGTHS.iter().flat_map(|&n| cases(n)).collect();
        check_kernel_cases::<Backend>(
            "fused CPU kernel on Autodiff<Flex>",
            &cases,
            Path::Dispatch,
            F32,
            &Default::default(),
        );
        let wide: Vec<_> = cases_at(70, 128);
        let name = "fused CPU kernel, head dim 128";
        check_kernel_cases::<Backend>(name, &wide, Path::Dispatch, F32, &Default::default());
    }

    /// The matrix at head dim `dim`, for the kernel's wider rows.
    fn cases_at(n: usize, dim: usize) -> Vec<(String, Case)> {
        cases(n).into_iter().map(|(label, case)| (label, Case { dim, ..case })).collect()
    }

    /// q, k, v as a layer's projections give them (`[batch, N, H, d]` memory viewed as `[batch,
    /// H, N, d]`), which the kernel reads in place and whose gradients it returns in that order.
    #[test]
    fn fused_kernel_on_flex_reads_and_returns_the_projections_layout() {
        let cases: Vec<_> = [1, 17, 64]
            .iter()
            .flat_map(|&n| cases(n))
            .map(|(label, case)| (label, Case { batch: 2, heads_inner: true, ..case }))
            .collect();
        let name = "fused CPU kernel, [batch, N, H, d] inputs";
        check_kernel_cases::<Backend>(name, &cases, Path::Dispatch, F32, &Default::default());
    }

    #[test]
    fn fused_kernel_on_flex_matches_dense_on_random_specs() {
        let mut rng = Rng::new(0xF1E7_2026);
        let cases: Vec<_> = (0..150)
            .map(|i| {
                let n = rng.pick(&[1, 2, 5, 17, 40, 63, 64, 65, 100]);
                (format!("random case {i}"), random_case(&mut rng, n))
            })
            .collect();
        check_kernel_cases::<Backend>(
            "fused CPU kernel, random specs",
            &cases,
            Path::Dispatch,
            F32,
            &Default::default(),
        );
    }

    /// f16 tensors into the kernel, which computes in f32: against the dense reference in f32
    /// on the same f16-rounded inputs.
    #[test]
    fn fused_kernel_on_flex_takes_f16() {
        let cases: Vec<_> = [5, 65]
            .iter()
            .flat_map(|&n| cases(n))
            .map(|(label, case)| (label, Case { half: true, dtype: Some(DType::F16), ..case }))
            .collect();
        let name = "fused CPU kernel, f16 tensors";
        check_kernel_cases::<Backend>(name, &cases, Path::Dispatch, F16, &Default::default());
    }

    /// The blocked path stays a reference on flex too (and runs what a user forces with
    /// `SWA_FUSED_OPS=off`).
    #[test]
    fn blocked_on_flex_matches_dense() {
        let cases: Vec<_> = [5, 65].iter().flat_map(|&n| cases(n)).collect();
        let name = "blocked path on Autodiff<Flex>";
        check_kernel_cases::<Backend>(name, &cases, Path::Blocked, F32, &Default::default());
    }

    /// Relative scores (docs/semantics.md §4) through the fused CPU kernel on flex, global
    /// tokens included: outputs and the gradients of q, k, v and the table.
    #[test]
    fn relative_scores_on_flex_match_dense() {
        let cases: Vec<_> = [5, 65].iter().flat_map(|&n| relative_cases(n, 8)).collect();
        let name = "relative scores on Autodiff<Flex>";
        check_kernel_cases::<Backend>(name, &cases, Path::Dispatch, F32, &Default::default());
    }
}

#[cfg(not(feature = "flex"))]
#[test]
fn flex_tests_need_flex() {
    eprintln!("skipped: built without the `flex` feature (cargo test --features flex)");
}
