//! What models and training both lean on that is not about models: files written atomically
//! ([`files`]), panics of libraries made errors ([`panics`]) and the seeded generator
//! ([`SplitMix64`]). They live in the lowest crate that writes files and draws numbers, so that
//! swa-models and swa-training share one of each.

pub mod files;
pub mod panics;
mod rng;

pub use rng::SplitMix64;
