//! The CUDA C++ of the core's kernels, made on a machine without a GPU (feature `cuda-check`),
//! for the offline CUDA check (`.ci/cuda-check`, docs/testing.md): a fixed list of kernel
//! variants, each expanded into a kernel definition and compiled by CubeCL's C++ compiler with
//! CUDA's dialect, as cubecl-cuda compiles it on an sm_90 device. The check then compiles the
//! C++ to PTX and SASS and reads registers, spills, shared memory and the main loop's
//! instructions.
//!
//! A `#[cube(launch)]` kernel's own definition wants a compute client (a device), so each
//! kernel is expanded here by hand, as the macro's `define` does: a [`KernelBuilder`] with
//! CUDA's target properties and those of an H100 ([`hopper`]), each runtime argument expanded
//! in the signature's order (`expand_output` for outputs), then the kernel's `expand` with its
//! compile-time arguments. The tiles and variants come from the launches' own functions
//! ([`tile_for`], [`tile_rows`], [`Variant`]), so the list checks what a launch would run.

mod definitions;

use std::fmt::Write as _;
use std::path::Path;

use burn::tensor::DType;
use cubecl::ir::features::Plane;
use cubecl::ir::{DeviceProperties, HardwareProperties, MemoryDeviceProperties, VectorSize};
use cubecl::prelude::*;
use cubecl::{Compiler, ExecutionMode};
use cubecl_cpp::cuda::CudaDialect;
use cubecl_cpp::cuda::arch::CudaArchitecture;
use cubecl_cpp::cuda::mma::CudaWmmaCompiler;
use cubecl_cpp::shared::{
    CompilationOptions, CppCompiler, CppSupportedFeatures, register_mma_features,
    register_wmma_features,
};
use cubecl_cpp::{DialectWmmaCompiler, register_supported_types};

use crate::kernel::cmma::tile_for;
use crate::kernel::config::{ROWS, Variant, tile_rows};
use crate::kernel::fragment::FragmentPath;

/// The compiler cubecl-cuda uses (`CudaCompiler`, without the `ptx-wmma` feature).
type Cuda = CppCompiler<CudaDialect<CudaWmmaCompiler>>;

/// The architecture whose properties the kernels are expanded for: sm_90 (H100, H200).
const ARCH: u32 = 90;

/// One kernel variant as CUDA C++, with what the check needs to judge it.
pub struct KernelSource {
    /// The kernel (`forward_cmma`, `key_grads`, …).
    pub kernel: &'static str,
    /// Its compile-time variant in words (`bf16 d64 softmax causal`).
    pub variant: String,
    /// The `__global__` function's name.
    pub entry: String,
    /// The CUDA C++ source.
    pub source: String,
    /// Threads per cube.
    pub threads: u32,
    /// Shared memory per cube, in bytes (CubeCL declares it dynamic: ptxas does not see it).
    pub shared_bytes: usize,
    /// The kernel runs its products on tensor cores: its main loop must hold their instructions.
    pub tensor_core: bool,
    /// A kernel of the training or decoding hot path: no spills, no stack frame.
    pub hot: bool,
    /// Judge the whole function, not its main loop: a probe is straight-line code around its
    /// copies (its two product steps unrolled), whose only loops are the copies.
    pub whole: bool,
    /// The fewest cubes per multiprocessor the kernel needs to hide its latencies (the floor
    /// of the check's occupancy: registers and shared memory must allow at least this many).
    pub min_cubes_per_sm: u32,
    /// Ceilings on the SASS instructions its tensor-core loops issue per `m16n8k16` product,
    /// on the whole-tile path and on the masked path (`.ci/cuda-check/sass_paths.py`).
    pub max_per_mma: Option<[f64; 2]>,
    /// Its fragments come through the native fragment seam: no 1- or 2-byte shared loads in
    /// its tensor-core loops (fragments by `ldmatrix`).
    pub native_fragments: bool,
}

/// The kernels of the list, with the floors they state.
#[derive(Clone, Copy, Debug)]
enum Kernel {
    Forward,
    ForwardCmma,
    /// FlashAttention-2's forward on the native fragment path (`kernel::flash::forward`).
    ForwardFlash,
    RowTerms,
    QueryGrads,
    QueryGradsCmma,
    /// FlashAttention-2's dQ on the native fragment path (`kernel::flash::backward_queries`).
    QueryGradsFlash,
    KeyGrads,
    KeyGradsCmma,
    /// FlashAttention-2's dK/dV on the native fragment path (`kernel::flash::backward_keys`).
    KeyGradsFlash,
    Decode,
    CacheWrite,
    /// RoPE (`kernel::rope`).
    Rope,
    /// The fragment seam's probe on the native path (`kernel::fragment::probe`).
    FragmentProbe,
}

impl Kernel {
    fn name(self) -> &'static str {
        match self {
            Kernel::Forward => "forward",
            Kernel::ForwardCmma => "forward_cmma",
            Kernel::ForwardFlash => "forward_flash",
            Kernel::RowTerms => "row_terms",
            Kernel::QueryGrads => "query_grads",
            Kernel::QueryGradsCmma => "query_grads_cmma",
            Kernel::QueryGradsFlash => "query_grads_flash",
            Kernel::KeyGrads => "key_grads",
            Kernel::KeyGradsCmma => "key_grads_cmma",
            Kernel::KeyGradsFlash => "key_grads_flash",
            Kernel::Decode => "decode",
            Kernel::CacheWrite => "cache_write",
            Kernel::Rope => "rope",
            Kernel::FragmentProbe => "fragment_probe",
        }
    }

    fn tensor_core(self) -> bool {
        matches!(
            self,
            Kernel::ForwardCmma
                | Kernel::ForwardFlash
                | Kernel::QueryGradsCmma
                | Kernel::QueryGradsFlash
                | Kernel::KeyGradsCmma
                | Kernel::KeyGradsFlash
                | Kernel::FragmentProbe
        )
    }

    /// Cubes per multiprocessor the kernel needs: a one-warp tensor-core cube needs 8 (8 warps,
    /// two per scheduler), a 32-thread portable cube as many; FlashAttention-2's four-warp cubes
    /// need 2 (8 warps, as FlashAttention-2 runs at d = 128); the row terms and the append are
    /// memory-bound passes that need 16; RoPE (256-thread cubes, also memory-bound) needs 4,
    /// half of an SM's threads; the probe (one cube, a test) states none.
    fn floor(self) -> u32 {
        match self {
            Kernel::ForwardFlash | Kernel::QueryGradsFlash | Kernel::KeyGradsFlash => 2,
            Kernel::RowTerms | Kernel::CacheWrite => 16,
            Kernel::Rope => 4,
            Kernel::FragmentProbe => 0,
            _ => 8,
        }
    }

    /// How the launches launch it: the tensor-core kernels unchecked (`launch_unchecked`: no
    /// bounds check on each access), the others checked.
    fn mode(self) -> ExecutionMode {
        match self.tensor_core() && !matches!(self, Kernel::FragmentProbe) {
            true => ExecutionMode::Unchecked,
            false => ExecutionMode::Checked,
        }
    }

    /// The ceilings of [`KernelSource::max_per_mma`]: FlashAttention-2's forward within 6.5
    /// instructions per product on a whole tile and 9 on a cut one, its backward within 5 and
    /// 9 (Triton's FlashAttention-2 issues 4.4–5.7 and 3.1–3.6 on whole tiles on sm_80:
    /// `benches/anchors/triton_flash.py`, docs/benchmarks.md).
    fn max_per_mma(self) -> Option<[f64; 2]> {
        match self {
            Kernel::ForwardFlash => Some([6.5, 9.0]),
            Kernel::QueryGradsFlash | Kernel::KeyGradsFlash => Some([5.0, 9.0]),
            _ => None,
        }
    }

    fn hot(self) -> bool {
        !matches!(
            self,
            Kernel::RowTerms | Kernel::CacheWrite | Kernel::Rope | Kernel::FragmentProbe
        )
    }
}

/// The list: every kernel at bf16, d = 64 and 128, softmax, causal; the tensor-core kernels also
/// in f16 and with each scoring option (sigmoid with ALiBi, softcap, bidirectional); the
/// decode step with one and two branches (LongNet); the append and RoPE; the fragment seam's probe,
/// native, in bf16 and f16 (the path an sm_90 device gets). Sinks and windows are run-time values:
/// every variant takes them.
pub fn cuda_sources() -> Result<Vec<KernelSource>, String> {
    let device = hopper();
    let mut out = Vec::new();
    let base = Options::default();
    for (dtype, dim) in [(DType::BF16, 64), (DType::BF16, 128)] {
        for kernel in [
            Kernel::Forward,
            Kernel::ForwardCmma,
            Kernel::ForwardFlash,
            Kernel::RowTerms,
            Kernel::QueryGrads,
            Kernel::QueryGradsCmma,
            Kernel::KeyGrads,
            Kernel::KeyGradsCmma,
            Kernel::Decode,
        ] {
            out.push(expand(&device, kernel, dtype, dim, base)?);
        }
    }
    for (kernel, dim) in [Kernel::QueryGradsFlash, Kernel::KeyGradsFlash]
        .into_iter()
        .flat_map(|kernel| [(kernel, 64), (kernel, 128)])
    {
        out.push(expand(&device, kernel, DType::BF16, dim, base)?);
    }
    let options = [
        Options { sigmoid: true, alibi: true, ..base },
        Options { softcap: true, ..base },
        Options { causal: false, ..base },
    ];
    for kernel in
        [Kernel::ForwardCmma, Kernel::ForwardFlash, Kernel::KeyGradsCmma, Kernel::KeyGradsFlash]
    {
        out.push(expand(&device, kernel, DType::F16, 64, base)?);
        for options in options {
            out.push(expand(&device, kernel, DType::BF16, 64, options)?);
        }
    }
    out.push(expand(&device, Kernel::Decode, DType::BF16, 64, Options { branches: 2, ..base })?);
    out.push(expand(&device, Kernel::CacheWrite, DType::BF16, 64, base)?);
    out.push(expand(&device, Kernel::Rope, DType::BF16, 128, base)?);
    for dtype in [DType::BF16, DType::F16] {
        out.push(expand(&device, Kernel::FragmentProbe, dtype, 16, base)?);
    }
    Ok(out)
}

/// Writes [`cuda_sources`] into `dir`: one `.cu` file per variant and `manifest.json` (what
/// `.ci/cuda-check/analyse.py` reads). Returns how many it wrote.
pub fn write_cuda_sources(dir: &Path) -> Result<usize, String> {
    let sources = cuda_sources()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut manifest = String::from("[\n");
    for (index, s) in sources.iter().enumerate() {
        let file = format!("{index:02}_{}.cu", s.kernel);
        let path = dir.join(&file);
        std::fs::write(&path, &s.source).map_err(|e| format!("{}: {e}", path.display()))?;
        let comma = if index + 1 < sources.len() { "," } else { "" };
        let _ = writeln!(
            manifest,
            "  {{\"kernel\": \"{}\", \"variant\": \"{}\", \"file\": \"{file}\", \"entry\": \"{}\", \
             \"threads\": {}, \"shared_bytes\": {}, \"tensor_core\": {}, \"hot\": {}, \
             \"whole\": {}, \"min_cubes_per_sm\": {}, \"max_per_mma\": {}, \
             \"native_fragments\": {}}}{comma}",
            s.kernel,
            s.variant,
            s.entry,
            s.threads,
            s.shared_bytes,
            s.tensor_core,
            s.hot,
            s.whole,
            s.min_cubes_per_sm,
            s.max_per_mma.map_or("null".into(), |[w, m]| format!("[{w}, {m}]")),
            s.native_fragments
        );
    }
    manifest.push_str("]\n");
    let path = dir.join("manifest.json");
    std::fs::write(&path, manifest).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(sources.len())
}

/// The compile-time options of a variant besides its type and head dim.
#[derive(Clone, Copy, Debug)]
struct Options {
    causal: bool,
    sigmoid: bool,
    alibi: bool,
    softcap: bool,
    /// Branches of a decode step (LongNet's dilations).
    branches: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { causal: true, sigmoid: false, alibi: false, softcap: false, branches: 1 }
    }
}

impl Options {
    fn words(self, dtype: DType, dim: usize) -> String {
        let mut words = vec![format!("{dtype:?}").to_lowercase(), format!("d{dim}")];
        words.push(if self.sigmoid { "sigmoid" } else { "softmax" }.into());
        words.push(if self.causal { "causal" } else { "bidirectional" }.into());
        if self.alibi {
            words.push("alibi".into());
        }
        if self.softcap {
            words.push("softcap".into());
        }
        if self.branches > 1 {
            words.push(format!("{} branches", self.branches));
        }
        words.join(" ")
    }
}

/// One kernel variant expanded and compiled to CUDA C++.
fn expand(
    device: &DeviceProperties,
    kernel: Kernel,
    dtype: DType,
    dim: usize,
    options: Options,
) -> Result<KernelSource, String> {
    let tile = tile_rows(dim, device.hardware.max_shared_memory_size);
    let variant = Variant {
        head_dim: dim,
        tile,
        causal: options.causal,
        sigmoid: options.sigmoid,
        softcap: options.softcap,
        alibi: options.alibi,
        relative: false,
        // As the launches set it: the native FlashAttention-2 kernels read the plain windows
        // of the list (every variant but LongNet's decode) as spans (`flash::flash_variant`).
        plain: matches!(
            kernel,
            Kernel::ForwardFlash | Kernel::QueryGradsFlash | Kernel::KeyGradsFlash
        ),
        // As `Variant::new` sets it at the default scale `1/√d`.
        scaled_dots: !options.sigmoid && !options.softcap && !options.alibi,
    };
    let words = match kernel {
        Kernel::FragmentProbe => format!("{dtype:?} native, 2 warps").to_lowercase(),
        _ => options.words(dtype, dim),
    };
    let mma = || tile_for(device, dtype, dim).ok_or(format!("{} {words}: no tile", kernel.name()));
    let storage: StorageType = dtype.into();
    let (definition, threads) = match kernel {
        Kernel::Forward => (definitions::forward(device, variant, storage), ROWS),
        Kernel::ForwardCmma => {
            let mma = mma()?;
            (definitions::forward_cmma(device, variant, mma, storage), mma.plane)
        }
        Kernel::ForwardFlash => match flash_path_for(device, dtype) {
            Some(path) => definitions::forward_flash(device, variant, path, storage),
            None => return Err(format!("forward_flash {words}: not native")),
        },
        Kernel::QueryGradsFlash => match flash_path_for(device, dtype) {
            Some(path) => definitions::query_grads_flash(device, variant, path, storage),
            None => return Err(format!("query_grads_flash {words}: not native")),
        },
        Kernel::KeyGradsFlash => match flash_path_for(device, dtype) {
            Some(path) => definitions::key_grads_flash(device, variant, path, storage),
            None => return Err(format!("key_grads_flash {words}: not native")),
        },
        Kernel::RowTerms => (definitions::row_terms(device, variant, storage), ROWS),
        Kernel::QueryGrads => (definitions::query_grads(device, variant, storage), ROWS),
        Kernel::QueryGradsCmma => {
            let mma = mma()?;
            (definitions::query_grads_cmma(device, variant, mma, storage), mma.plane)
        }
        Kernel::KeyGrads => (definitions::key_grads(device, variant, storage), ROWS),
        Kernel::KeyGradsCmma => {
            let mma = mma()?;
            (definitions::key_grads_cmma(device, variant, mma, storage), mma.plane)
        }
        Kernel::Decode => {
            let variant = Variant { tile: 1, ..variant };
            definitions::decode(device, variant, options.branches, storage)
        }
        Kernel::CacheWrite => definitions::cache_write(device, storage),
        Kernel::Rope => definitions::rope(device, storage),
        Kernel::FragmentProbe => match flash_path_for(device, dtype) {
            Some(path) => definitions::fragment_probe(device, path, storage),
            None => return Err(format!("fragment_probe {words}: not native")),
        },
    };
    let (entry, source, shared_bytes) = compile(kernel.name(), definition, kernel.mode())?;
    Ok(KernelSource {
        kernel: kernel.name(),
        variant: words,
        entry,
        source,
        threads: threads as u32,
        shared_bytes,
        tensor_core: kernel.tensor_core(),
        hot: kernel.hot(),
        whole: matches!(kernel, Kernel::FragmentProbe),
        min_cubes_per_sm: kernel.floor(),
        // The ceilings are the grid's (softmax, no softcap or ALiBi); the score options' own
        // arithmetic per pair (a precise `tanh`, the sigmoid) is reported, not bounded.
        max_per_mma: kernel
            .max_per_mma()
            .filter(|_| !options.softcap && !options.sigmoid && !options.alibi),
        native_fragments: matches!(
            kernel,
            Kernel::ForwardFlash | Kernel::QueryGradsFlash | Kernel::KeyGradsFlash
        ),
    })
}

/// The native fragment path, where a CUDA device with `device`'s properties has it for `dtype`.
fn flash_path_for(device: &DeviceProperties, dtype: DType) -> Option<FragmentPath> {
    let path = FragmentPath::for_device("cuda", device, dtype);
    (path == FragmentPath::Native).then_some(path)
}

/// Compiles a definition to CUDA C++ with cubecl-cuda's options on sm_90 (fast math, grid
/// constants, clusters), in the mode its launch uses → (entry name, source, shared bytes).
fn compile(
    name: &str,
    definition: KernelDefinition,
    mode: ExecutionMode,
) -> Result<(String, String, usize), String> {
    let options = CompilationOptions {
        warp_size: 32,
        supports_features: CppSupportedFeatures {
            grid_constants: true,
            clusters: true,
            fast_math: true,
            fast_tanh: true,
            elect_sync: true,
        },
    };
    let entry = definition.options.kernel_name.clone();
    let kernel = Cuda::default()
        .compile(definition, &options, mode, AddressType::U32.unsigned_type())
        .map_err(|e| format!("{name}: {e:?}"))?;
    Ok((entry, kernel.to_string(), kernel.shared_memory_size()))
}

/// The properties cubecl-cuda reads off an H100 (sm_90, 227 KB of shared memory per cube at
/// most, 132 multiprocessors), as far as kernel expansion reads them.
fn hopper() -> DeviceProperties {
    let hardware = HardwareProperties {
        load_width: 128,
        plane_size_min: 32,
        plane_size_max: 32,
        max_bindings: 1024,
        max_shared_memory_size: 227 * 1024,
        max_cube_count: (i32::MAX as u32, 65535, 65535),
        max_units_per_cube: 1024,
        max_cube_dim: (1024, 1024, 64),
        num_streaming_multiprocessors: Some(132),
        num_cpu_cores: None,
        num_tensor_cores: Some(4),
        min_tensor_cores_dim: Some(8),
        max_vector_size: VectorSize::MAX,
    };
    let memory = MemoryDeviceProperties { max_page_size: 20 << 30, alignment: 512 };
    let timing = cubecl::profile::TimingMethod::System;
    let mut properties = DeviceProperties::new(Default::default(), memory, hardware, timing);
    register_supported_types(&mut properties);
    let arch = CudaArchitecture { version: ARCH };
    register_wmma_features(CudaWmmaCompiler::supported_wmma_combinations(&arch), &mut properties);
    register_mma_features(CudaWmmaCompiler::supported_mma_combinations(&arch), &mut properties);
    properties.features.plane.insert(Plane::Ops);
    properties.features.plane.insert(Plane::Sync);
    properties.features.plane.insert(Plane::NonUniformControlFlow);
    properties.features.copy_async = true;
    properties
}
