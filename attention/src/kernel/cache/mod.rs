//! The kernels of the bounded caches: [`decode`], one new query of each head against its
//! cache (the fused decode step), and [`write`], the step's keys and values appended.

pub(crate) mod decode;
pub(crate) mod write;
