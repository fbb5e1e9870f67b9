//! Kernel launches of a decoding step and of a training step on wgpu, bounded so that a change
//! that adds launches fails here; and the kernels compiled on the way, which must not grow with
//! the model's depth (a cold start on CUDA is mostly NVRTC compiling them). On a GPU a small
//! model's step is bound by launching its small ops (docs/architecture/kernels.md, launches per layer), so
//! launches per layer are the figure to bring down.
//!
//! CubeCL's profiling log at its "minimal" level writes a line `Executing <kernel>` for every
//! launch, without timing it or adding a synchronisation. The log is process-wide and fixed
//! before the first device is used, and the other tests' launches would mix in, so the count
//! runs in a process of its own: this test binary again, with one ignored test selected.
//!
//! The logs are written by a thread of CubeCL's own, fed through a queue, and may lag behind the
//! launches by any time on a loaded machine. So each count is bounded by a marker: a kernel of
//! this file's, launched after a sync, whose line in the log says that every launch and
//! compilation before it has been written.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use burn::backend::wgpu::{WgpuDevice, WgpuRuntime};
use burn::backend::{Autodiff, Wgpu};
use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use swa_attention::cubecl;
use swa_attention::cubecl::config::cache::CacheConfig;
use swa_attention::cubecl::config::compilation::CompilationLogLevel;
use swa_attention::cubecl::config::{
    CubeClRuntimeConfig, RuntimeConfig, profiling::ProfilingLogLevel,
};
use swa_attention::cubecl::prelude::*;
use swa_models::layers::{AttentionKind, CachePositions};
use swa_training::batch::TokenBatch;
use swa_training::language_model::LanguageModel;
use swa_training::stream_memory::Stream;

use crate::decoding::{config, token_ids};

/// The variable that names the launch log for the counting process.
const LOG_VARIABLE: &str = "SWA_LAUNCH_LOG";

/// Launches a step may take on wgpu, per layer and outside the layers (embedding, final norm,
/// head; for training also the loss and the optimizer's), by attention kind and step: the
/// counts measured when the bound was set (on lavapipe, 2026-11-28), which later changes must
/// not exceed, counted as under fusion's broadcast plan for the norms ([`norm_plan_extra`]).
/// `(kind and step, per layer, outside)`.
const BOUNDS: [(&str, usize, usize); 5] = [
    ("sliding decoding", 9, 4),
    ("mswa decoding", 9, 4),
    ("sliding training", 62, 41),
    ("mswa training", 62, 41),
    ("growing decoding", 9, 4),
];

/// The launches that fusion's other plan for the RMSNorms adds to `launches` (by kernel):
/// fusion's autotune times two plans for each norm, the reduction
/// broadcast back into the norm's product (`ReduceKernelBroadcasted`, one launch) or a fused
/// reduction beside an elementwise kernel (`ReduceKernelFused` and one more `ElemwiseFuse`),
/// and which is faster on lavapipe changes from run to run with the machine's load. Each
/// `ReduceKernelFused` is one launch more than the broadcast plan would take, and no more: any
/// other launch a change adds still counts.
fn norm_plan_extra(per_layer: &Kernels) -> usize {
    per_layer.get("ReduceKernelFused").copied().unwrap_or(0)
}

/// Each kind's launches per decoding step and per training step, per layer and outside the
/// layers, stay within [`BOUNDS`].
#[test]
fn launches_per_layer_stay_bounded_on_wgpu() {
    if crate::wgpu_devices().is_none() {
        return;
    }
    let log = std::env::temp_dir().join(format!("swa-launches-{}.log", std::process::id()));
    let output = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "backends::launches::count_launches", "--ignored"])
        .args(["--nocapture", "--test-threads=1"])
        .env(LOG_VARIABLE, &log)
        .output()
        .expect("the test binary runs again");
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(log.with_extension("compiled"));
    let _ = std::fs::remove_dir_all(log.with_extension("autotune"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    let count = |what: &str, kind: &str| {
        let label = format!("launches {what}, {kind}: ");
        stdout
            .lines()
            .find_map(|line| line.split_once(label.as_str()).map(|(_, count)| count))
            .and_then(|count| count.trim().parse::<usize>().ok())
            .unwrap_or_else(|| panic!("no count of launches {what} for {kind} in: {stdout}"))
    };
    for (kind, per_layer, outside) in BOUNDS {
        for (what, bound) in [("per layer", per_layer), ("outside the layers", outside)] {
            let counted = count(what, kind);
            assert!(
                counted <= bound,
                "{kind}: {counted} launches {what} per step, more than the {bound} allowed\n\
                 {stdout}"
            );
        }
        // Kernels are shared by the layers: a deeper model compiles nothing new (a kernel
        // variant or an autotune key per layer would multiply a cold start with the depth).
        let deeper = format!("kernels compiled, {kind}: ");
        let more = stdout.lines().find_map(|line| line.split_once(deeper.as_str()));
        let more = more.and_then(|(_, counts)| counts.split(", then ").nth(1));
        assert_eq!(more, Some("0 more"), "{kind}: the deeper model compiled kernels\n{stdout}");
    }
}

/// The counting process: for each kind, models of 2 and 4 layers decode a few tokens and train
/// a few AdamW steps (autotuning, shader compilation and fusion's plans happen there), then more
/// decoding steps and training steps are counted, each between two syncs, until their launches
/// settle ([`settled`]); the difference of the two models gives the launches per layer. Prints
/// `launches per layer, <kind> <step>: <count>` (as under the norms' broadcast plan,
/// [`norm_plan_extra`]), `launches outside the layers, <kind> <step>:
/// <count>`, the launches per layer by kernel (which the failure message shows), and `kernels
/// compiled, <kind> <step>: <by the 2-layer model>, then <by the 4-layer one> more` (CubeCL's
/// compilation log, `[Compiling kernel] <name>` per compilation: shader compiles, NVRTC on
/// CUDA, autotune candidates included).
#[test]
#[ignore = "run in a process of its own by launches_per_layer_stay_bounded_on_wgpu"]
fn count_launches() {
    let Some(log) = std::env::var_os(LOG_VARIABLE) else {
        return;
    };
    let log = Path::new(&log);
    let compile_log = log.with_extension("compiled");
    let mut runtime = CubeClRuntimeConfig::default();
    runtime.profiling.logger.level = ProfilingLogLevel::Minimal;
    runtime.profiling.logger.file = Some(log.to_path_buf());
    runtime.compilation.logger.level = CompilationLogLevel::Basic;
    runtime.compilation.logger.file = Some(compile_log.clone());
    // A cache of its own, empty at the start, as on a fresh checkout: the counts must not
    // depend on what earlier runs tuned.
    runtime.autotune.cache = CacheConfig::File(log.with_extension("autotune"));
    CubeClRuntimeConfig::set(runtime);
    let device = WgpuDevice::DefaultDevice;
    // A window of 64 is still filling at the counted step: its ring grows.
    let kinds = [
        ("sliding", AttentionKind::Sliding { window: 4 }, true),
        ("mswa", AttentionKind::MultiScale { windows: vec![1, 2, 4, 7] }, true),
        ("growing", AttentionKind::Sliding { window: 64 }, false),
    ];
    for (name, kind, train) in kinds {
        let steps: [(&str, Count); 2] =
            [("decoding", decoding_launches), ("training", training_launches)];
        for (step, launches) in steps.into_iter().filter(|(step, _)| train || *step == "decoding") {
            // A count ends on a marker ([`counted`]): the compilation log is complete here.
            let [(two, compiled_two), (four, compiled_four)] = [2, 4].map(|layers| {
                let before = named_lines(&compile_log, COMPILING).len();
                let counts = launches(vec![kind.clone(); layers], &device, log);
                (counts, named_lines(&compile_log, COMPILING).len() - before)
            });
            println!("kernels compiled, {name} {step}: {compiled_two}, then {compiled_four} more");
            let total = |counts: &Kernels| counts.values().sum::<usize>();
            let (two_total, four_total) = (total(&two), total(&four));
            // Each kernel's launches in the two layers the 4-layer model adds.
            let two_layers: Kernels = four
                .iter()
                .map(|(kernel, &n)| {
                    (kernel.clone(), n.saturating_sub(two.get(kernel).map_or(0, |&m| m)))
                })
                .filter(|(_, n)| *n > 0)
                .collect();
            let extra = norm_plan_extra(&two_layers) / 2;
            println!("launches per layer, {name} {step}: {}", (four_total - two_total) / 2 - extra);
            println!("launches outside the layers, {name} {step}: {}", 2 * two_total - four_total);
            let by_kernel =
                two_layers.iter().map(|(kernel, &n)| format!("{kernel} {}", n as f64 / 2.0));
            println!("  per layer by kernel: {}", by_kernel.collect::<Vec<_>>().join(", "));
        }
    }
}

/// Counts the launches of one step of a model of the given layers on a device, in a log.
type Count = fn(Vec<AttentionKind>, &WgpuDevice, &Path) -> Kernels;

/// Launches by kernel name.
type Kernels = BTreeMap<String, usize>;

/// The launches of one decoding step of a model of `attention`'s layers, after 11 steps, once
/// they have settled.
fn decoding_launches(attention: Vec<AttentionKind>, device: &WgpuDevice, log: &Path) -> Kernels {
    let model = config(attention).init::<Wgpu>(device).unwrap();
    let mut cache = model.cache(1, CachePositions::Absolute, device).unwrap();
    let token = |id: i64| Tensor::<Wgpu, 1, Int>::from_data(TensorData::new(vec![id], [1]), device);
    let ids = token_ids(11 + MOST_COUNTED);
    for &id in &ids[..11] {
        model.step(token(id), &mut cache).into_data();
    }
    let mut next = ids[11..].iter();
    settled(device, log, || {
        let id = *next.next().expect("a token for each counted step");
        model.step(token(id), &mut cache).into_data();
    })
}

/// The launches of one AdamW step (forward, backward, update) of a language model of
/// `attention`'s layers on a batch of 2 rows of 16 tokens, after 3 steps, once they have settled.
fn training_launches(attention: Vec<AttentionKind>, device: &WgpuDevice, log: &Path) -> Kernels {
    type A = Autodiff<Wgpu>;
    let mut model = LanguageModel::new(config(attention).init::<A>(device).unwrap());
    let mut optim = AdamWConfig::new().init();
    let ids = Tensor::<A, 2, Int>::from_data(TensorData::new(token_ids(34), [2, 17]), device);
    let batch = || TokenBatch {
        inputs: ids.clone().narrow(1, 0, 16),
        targets: ids.clone().narrow(1, 1, 16),
        scored: None,
        stream_start: None,
    };
    let mut step = |model: LanguageModel<A>| {
        let loss = model.loss(batch(), Stream::Train).loss;
        loss.clone().into_data();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        optim.step(1e-3, model, grads)
    };
    for _ in 0..3 {
        model = step(model);
    }
    let mut model = Some(model);
    settled(device, log, || {
        model = model.take().map(&mut step);
    })
}

/// Most steps [`settled`] counts before it gives up.
const MOST_COUNTED: usize = 8;

/// The launches of `step` once they have settled: `step` runs, counted, until two runs in a row
/// launch the same kernels. Fusion settles its plans and autotune benchmarks each new key over
/// the first runs (in the run that meets it, so its candidates' launches are counted there), and
/// how many runs that takes depends on the machine: with a cold autotune cache, as on CI, the
/// 2-layer model's 4th training step still tuned a fused reduction.
fn settled(device: &WgpuDevice, log: &Path, mut step: impl FnMut()) -> Kernels {
    let mut last = counted(device, log, &mut step);
    for _ in 1..MOST_COUNTED {
        let next = counted(device, log, &mut step);
        if next == last {
            return next;
        }
        last = next;
    }
    panic!("launches still change after {MOST_COUNTED} steps, the last: {last:?}")
}

/// The launches of `work` by kernel, between two syncs of `device`, each followed by a marker.
fn counted(device: &WgpuDevice, log: &Path, work: impl FnOnce()) -> Kernels {
    <Wgpu as Backend>::sync(device).expect("the device syncs");
    mark(device, log);
    let before = named_lines(log, EXECUTING).len();
    work();
    <Wgpu as Backend>::sync(device).expect("the device syncs");
    mark(device, log);
    let mut kernels = Kernels::new();
    for kernel in &named_lines(log, EXECUTING)[before..] {
        *kernels.entry(kernel.clone()).or_default() += 1;
    }
    kernels
}

/// How the profiling log starts a launch's line, and the compilation log a compilation's.
const EXECUTING: &str = "Executing ";
const COMPILING: &str = "[Compiling kernel] ";

/// The marker's kernel: one thread writes one word, so that its launch shows in the log.
#[cube(launch)]
fn launch_log_marker(flag: &mut Array<u32>) {
    if ABSOLUTE_POS == 0 {
        flag[0] = 1;
    }
}

/// The marker's name in the logs.
const MARKER: &str = "LaunchLogMarker";

/// Markers launched so far by this process.
static MARKERS: AtomicUsize = AtomicUsize::new(0);

/// Launches a marker on `device` and waits until `log` shows it: every launch and compilation
/// before it is then written, in `log` and in the compilation log next to it (the same writer
/// fills both, in order).
fn mark(device: &WgpuDevice, log: &Path) {
    let client = WgpuRuntime::client(device);
    let flag = client.empty(size_of::<u32>());
    // SAFETY: the handle holds one u32, the length given.
    let flag = unsafe { ArrayArg::from_raw_parts(flag, 1) };
    let (one, single) = (CubeCount::new_single(), CubeDim::new_1d(1));
    launch_log_marker::launch::<WgpuRuntime>(&client, one, single, flag);
    client.flush().expect("the marker is submitted");
    let markers = MARKERS.fetch_add(1, Ordering::Relaxed) + 1;
    let started = Instant::now();
    let logged = || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        text.lines().filter(|line| named(line, EXECUTING) == Some(MARKER)).count()
    };
    while logged() < markers {
        let waited = started.elapsed();
        assert!(
            waited < Duration::from_secs(300),
            "marker {markers} not in {log:?} after {waited:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The kernels named so far by the lines of `path` that start with `prefix`, markers left out.
fn named_lines(path: &Path, prefix: &str) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let names = text.lines().filter_map(|line| named(line, prefix));
    names.filter(|&name| name != MARKER).map(str::to_string).collect()
}

/// The kernel a log line that starts with `prefix` names, without its module path (which the
/// compilation log writes and the launch log does not) and its generic arguments.
fn named<'a>(line: &'a str, prefix: &str) -> Option<&'a str> {
    let name = line.strip_prefix(prefix)?.split(['<', ' ']).next()?;
    name.rsplit("::").next()
}
