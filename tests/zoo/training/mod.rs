//! `swa-training`: runs with Burn's Learner (exact resume, checkpoints, evaluation), their
//! errors, several devices and half precision, the synthetic tasks, mixed precision's
//! mechanics, and the CubeCL kernels inside training.

mod distributed;
mod kernel_training;
mod mixed_precision;
mod run;
mod tasks_training;
mod training_devices;
mod training_errors;
