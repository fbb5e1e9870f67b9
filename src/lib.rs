//! # swa-zoo
//!
//! A model zoo of windowed attention on Burn. This facade re-exports the member crates:
//! [`attention`] (the windowed core), [`models`] and [`training`].

pub use swa_attention as attention;
pub use swa_models as models;
pub use swa_training as training;
