//! The wgpu devices the tests spread over, shared by the test binaries.
//!
//! CubeCL serves each device from one thread, and lavapipe (CI's CPU Vulkan driver) compiles the
//! shaders of one Vulkan device one at a time; compiling is most of the wgpu tests' time there,
//! so on one device they queue behind each other while the machine's other core idles. Where
//! the default adapter is a CPU one, the tests therefore run on two Vulkan devices of it: the
//! default device and a second one of their own. A test takes one through [`lease`], which
//! hands out the device fewer running tests hold: the harness runs as many tests at once as
//! the machine has cores, in an order of its own, and with a fixed device per test two long
//! ones could queue on one device while the other idled.

use std::collections::HashSet;
use std::ops::Deref;
use std::panic::catch_unwind;
use std::sync::{Mutex, Once, OnceLock, PoisonError};

use burn::backend::Wgpu;
use burn::backend::wgpu::graphics::AutoGraphicsApi;
use burn::backend::wgpu::{RuntimeOptions, WgpuDevice, init_device, init_setup};
use burn::tensor::{Tensor, backend::Backend};

/// `[the default device, a second device]`, or `None` when no wgpu adapter answers: then the
/// calling test skips (counted, and summed up in one line when the test binary exits), or
/// fails under `SWA_REQUIRE_WGPU` (CI, which installs lavapipe).
///
/// The second device is a Vulkan device of its own on the CPU adapter when the machine has no
/// GPU adapter (lavapipe is then the default adapter too); with a GPU it is the default device.
/// It is made from the CPU adapter's setup, which registers `WgpuDevice::Cpu` (left untouched,
/// for a test that sets a device's float type before its first tensor), so every wgpu test
/// asks here before it touches a device.
pub fn wgpu_devices() -> Option<[WgpuDevice; 2]> {
    static DEVICES: OnceLock<Option<[WgpuDevice; 2]>> = OnceLock::new();
    let devices = DEVICES.get_or_init(|| {
        let default = WgpuDevice::DefaultDevice;
        catch_unwind(|| Tensor::<Wgpu, 1>::zeros([1], &default).into_data()).ok()?;
        // Discrete, integrated and virtual GPUs (CubeCL's device type ids 0, 1, 2).
        let gpus: usize = (0..3).map(<Wgpu as Backend>::device_count).sum();
        let second = match gpus {
            0 => catch_unwind(|| {
                let options = RuntimeOptions::default;
                let setup = init_setup::<AutoGraphicsApi>(&WgpuDevice::Cpu, options());
                let device = init_device(setup, options());
                Tensor::<Wgpu, 1>::zeros([1], &device).into_data();
                device
            })
            .unwrap_or(default.clone()),
            _ => default.clone(),
        };
        Some([default, second])
    });
    if devices.is_none() {
        assert!(
            std::env::var_os("SWA_REQUIRE_WGPU").is_none(),
            "SWA_REQUIRE_WGPU is set but no wgpu adapter answers (install mesa-vulkan-drivers)"
        );
        count_skip();
    }
    devices.clone()
}

/// How many running tests hold each of [`wgpu_devices`] through a [`Lease`].
static HELD: Mutex<[usize; 2]> = Mutex::new([0, 0]);

/// A wgpu device held by the calling test until the lease drops; it derefs to the device.
pub struct Lease {
    index: usize,
    device: WgpuDevice,
}

/// The one of [`wgpu_devices`] that fewer running tests hold (the default device on a tie), or
/// `None` as [`wgpu_devices`] says: two wgpu tests running at once compile on different devices.
pub fn lease() -> Option<Lease> {
    hold(|held| usize::from(held[1] < held[0]))
}

/// The default device (which the library's own jobs use), held as [`lease`] holds one, or `None`
/// as [`wgpu_devices`] says.
#[allow(dead_code, reason = "only the zoo binary has a test on the default device")]
pub fn lease_default() -> Option<Lease> {
    hold(|_| 0)
}

/// Holds the device that `choose` picks from the counts of [`HELD`], counted under one lock.
fn hold(choose: impl FnOnce(&[usize; 2]) -> usize) -> Option<Lease> {
    let devices = wgpu_devices()?;
    let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
    let index = choose(&held);
    held[index] += 1;
    Some(Lease { index, device: devices[index].clone() })
}

impl Deref for Lease {
    type Target = WgpuDevice;

    fn deref(&self) -> &WgpuDevice {
        &self.device
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        HELD.lock().unwrap_or_else(PoisonError::into_inner)[self.index] -= 1;
    }
}

/// The tests of this binary that skipped for want of a wgpu adapter, by name (the harness runs
/// each test on a thread named after it; a test that asks twice counts once).
static SKIPPED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Counts the calling test as skipped; the first registers [`summary`] to run when the process
/// exits, after the harness's own result line (Rust's std has no exit hook: C's `atexit` is the
/// one every platform's C runtime has).
pub fn count_skip() {
    static REGISTER: Once = Once::new();
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("unnamed").to_string();
    let mut skipped = SKIPPED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let names = skipped.get_or_insert_with(HashSet::new);
    let index = names.len();
    // One thread for every test (`--test-threads 1`): count each call.
    names.insert(if name == "main" { format!("main {index}") } else { name });
    unsafe extern "C" {
        fn atexit(callback: extern "C" fn()) -> std::ffi::c_int;
    }
    // SAFETY: `summary` is a plain function that lives as long as the process.
    REGISTER.call_once(|| unsafe {
        atexit(summary);
    });
}

/// The one line that says how many wgpu tests this binary skipped, and why.
extern "C" fn summary() {
    let skipped = SKIPPED.lock().map_or(0, |names| names.as_ref().map_or(0, HashSet::len));
    eprintln!(
        "note: {skipped} wgpu kernel tests of this binary skipped: no wgpu adapter answers on \
         this machine (install mesa-vulkan-drivers for lavapipe to run them; SWA_REQUIRE_WGPU=1 \
         makes a missing adapter fail)"
    );
}
