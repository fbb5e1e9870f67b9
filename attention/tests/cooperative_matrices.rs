//! CubeCL's cooperative matrices (tensor cores, `cmma`) on the Vulkan device, the ground the
//! tensor-core kernels stand on: the device lists its tile shapes, and one tile product of
//! every f16·f16→f32 shape it lists matches the CPU exactly.
//!
//! Built with `--features vulkan` (Burn's SPIR-V compiler; the WGSL compiler has no `cmma`),
//! for this crate alone: `cargo test -p swa-attention --features vulkan --test
//! cooperative_matrices`. `.ci/run` runs it inside the Debian 13 root of `.ci/vulkan-root`,
//! whose lavapipe (Mesa 26) lists 8×8×8 tiles on a plane of 8, with `SWA_REQUIRE_CMMA=1`: a
//! device without cooperative matrices then fails the test instead of skipping it.
#![cfg(feature = "vulkan")]

use burn::backend::wgpu::{WgpuDevice, WgpuRuntime};
use burn::tensor::f16;
use cubecl::ir::features::MmaConfig;
use cubecl::ir::{ElemType, FloatKind};
use cubecl::prelude::*;

/// `out = lhs · rhs` for one `m × k` by `k × n` tile, both row-major, on one plane.
#[cube(launch)]
fn tile_product(
    lhs: &Array<f16>,
    rhs: &Array<f16>,
    out: &mut Array<f32>,
    #[comptime] m: usize,
    #[comptime] n: usize,
    #[comptime] k: usize,
    #[comptime] k_stride: u32,
    #[comptime] n_stride: u32,
) {
    let a = cmma::Matrix::<f16>::from_slice(
        cmma::MatrixIdent::A,
        m,
        n,
        k,
        cmma::MatrixLayout::RowMajor,
        &lhs.to_slice(),
        k_stride,
    );
    let b = cmma::Matrix::<f16>::from_slice(
        cmma::MatrixIdent::B,
        m,
        n,
        k,
        cmma::MatrixLayout::RowMajor,
        &rhs.to_slice(),
        n_stride,
    );
    let c = cmma::Matrix::<f32>::from_value(
        cmma::MatrixIdent::Accumulator,
        m,
        n,
        k,
        cmma::MatrixLayout::Undefined,
        0.0,
    );
    cmma::execute::<f16, f16, f32, f32>(&a, &b, &c, &c);
    cmma::store(&mut out.to_slice_mut(), &c, n_stride, cmma::MatrixLayout::RowMajor);
}

/// The device's f16·f16→f32 tile shapes, or `None` (after saying why) when it has none and
/// `SWA_REQUIRE_CMMA` is unset.
fn f16_shapes(client: &ComputeClient<WgpuRuntime>) -> Option<Vec<MmaConfig>> {
    let (f16_type, f32_type) =
        (ElemType::Float(FloatKind::F16).into(), ElemType::Float(FloatKind::F32).into());
    let all = &client.properties().features.matmul.cmma;
    let shapes: Vec<MmaConfig> = all
        .iter()
        .filter(|c| c.a_type == f16_type && c.b_type == f16_type && c.cd_type == f32_type)
        .copied()
        .collect();
    eprintln!(
        "cooperative matrices: {} shapes, f16·f16→f32 {:?}; plane {}–{}",
        all.len(),
        shapes.iter().map(|c| [c.m, c.n, c.k]).collect::<Vec<_>>(),
        client.properties().hardware.plane_size_min,
        client.properties().hardware.plane_size_max,
    );
    if shapes.is_empty() {
        assert!(
            std::env::var_os("SWA_REQUIRE_CMMA").is_none(),
            "SWA_REQUIRE_CMMA is set but the Vulkan device lists no f16·f16→f32 cooperative \
             matrix (run inside .ci/vulkan-root, whose lavapipe has them)"
        );
        eprintln!("skipped: the Vulkan device has no f16·f16→f32 cooperative matrices");
        return None;
    }
    Some(shapes)
}

#[test]
fn every_f16_tile_shape_multiplies_exactly() {
    let client = WgpuRuntime::client(&WgpuDevice::DefaultDevice);
    let Some(shapes) = f16_shapes(&client) else {
        return;
    };
    for shape in shapes {
        let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
        // Small integers: every product and sum is exact in f16 inputs and f32 sums.
        let lhs: Vec<f32> = (0..m * k).map(|i| ((i * 7 + 3) % 11) as f32 - 5.0).collect();
        let rhs: Vec<f32> = (0..k * n).map(|i| ((i * 5 + 1) % 9) as f32 - 4.0).collect();
        let want: Vec<f32> = (0..m * n)
            .map(|at| (0..k).map(|p| lhs[at / n * k + p] * rhs[p * n + at % n]).sum())
            .collect();
        let halves = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
        let lhs_buffer = client.create_from_slice(f16::as_bytes(&halves(&lhs)));
        let rhs_buffer = client.create_from_slice(f16::as_bytes(&halves(&rhs)));
        let out = client.empty(std::mem::size_of::<f32>() * m * n);
        let plane = client.properties().hardware.plane_size_max;
        // SAFETY: each buffer holds exactly the elements its array argument declares.
        unsafe {
            tile_product::launch::<WgpuRuntime>(
                &client,
                CubeCount::Static(1, 1, 1),
                CubeDim::new_1d(plane),
                ArrayArg::from_raw_parts(lhs_buffer, m * k),
                ArrayArg::from_raw_parts(rhs_buffer, k * n),
                ArrayArg::from_raw_parts(out.clone(), m * n),
                m,
                n,
                k,
                k as u32,
                n as u32,
            );
        }
        let got = f32::from_bytes(&client.read_one_unchecked(out)).to_vec();
        assert_eq!(got, want, "the {m}×{n}×{k} tile product");
    }
}
