//! Which instruction set the linear products' kernels use: the best this CPU has, unless
//! [`ISA_VARIABLE`] caps it, so that an AVX-512 machine can measure and test what an AVX2-only
//! one runs (Zen 2 and 3, Intel's client CPUs). Detected once.

use std::sync::OnceLock;

/// The environment variable that caps the products' instruction set: `SWA_CPU_ISA=avx2` runs
/// the AVX2 kernels on an AVX-512 machine, `SWA_CPU_ISA=plain` the portable code; unset (or
/// `avx512`), the best the CPU has.
pub const ISA_VARIABLE: &str = "SWA_CPU_ISA";

/// An instruction set the products have kernels for, in order: each implies the ones before.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// Portable code, vectorised by the compiler under `pulp`'s dispatch.
    Plain,
    /// AVX2 with FMA and F16C (Haswell, Zen 1 and later).
    Avx2,
    /// AVX-512F (and BW), with the above (Skylake-SP, Zen 4 and later).
    Avx512,
}

impl Isa {
    /// Whether this CPU runs kernels written for `self`.
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let avx2 = has!("avx2") && has!("fma") && has!("f16c");
            match self {
                Isa::Plain => true,
                Isa::Avx2 => avx2,
                Isa::Avx512 => avx2 && has!("avx512f") && has!("avx512bw"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Isa::Plain
        }
    }
}

/// The instruction set the products use: the best available, capped by [`ISA_VARIABLE`].
pub fn isa() -> Isa {
    static CHOSEN: OnceLock<Isa> = OnceLock::new();
    *CHOSEN.get_or_init(|| {
        let cap = match std::env::var(ISA_VARIABLE).as_deref() {
            Ok("plain") => Isa::Plain,
            Ok("avx2") => Isa::Avx2,
            _ => Isa::Avx512,
        };
        [Isa::Avx512, Isa::Avx2]
            .into_iter()
            .find(|isa| *isa <= cap && isa.available())
            .unwrap_or(Isa::Plain)
    })
}
