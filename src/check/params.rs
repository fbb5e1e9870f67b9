//! The weights of a case, drawn once on the host and loaded bit for bit onto any backend, and
//! the parameters and gradients of a model read back by name.
//!
//! Weights travel as [`TensorData`] through `burn::store`'s snapshots (`ModuleSnapshot::apply`),
//! which match tensors by module path and build each from the same f32 values on the target
//! device: no file, no conversion. The suite checks that what a backend holds afterwards is
//! exactly what was drawn.

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::store::{ModuleSnapshot, TensorSnapshot};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use swa_attention::rng::SplitMix64;
use swa_models::{Decoder, DecoderConfig};

use crate::error::AppError;

/// A tensor's values under its module path (`blocks.0.attention.mixer.Windowed.local.qkv.weight`).
#[derive(Clone, Debug, PartialEq)]
pub struct Named {
    /// The module path.
    pub name: String,
    /// The values, flattened in row-major order, as f32.
    pub values: Vec<f32>,
}

/// The weights of a model of one configuration, on the host.
#[derive(Clone, Debug)]
pub struct Weights(Vec<(String, TensorData)>);

impl Weights {
    /// Weights for `config` from `seed`: every matrix uniform in `±1/√rows` (`rows` is `d_in`
    /// for Burn's `[d_in, d_out]` linear weights), every norm gain `1 ± 0.1`, so that the
    /// norms' gradients are not all alike. Burn's own initialisers draw from a generator shared
    /// by the whole process, which concurrent tests would make irreproducible.
    pub fn seeded(config: &DecoderConfig, seed: u64) -> Result<Self, AppError> {
        let shapes = config
            .init::<burn::backend::NdArray<f32>>(&Default::default())?
            .collect(None, None, false);
        let mut stream = SplitMix64::new(seed);
        let tensors = shapes
            .into_iter()
            .map(|snapshot| {
                let shape = snapshot.shape.to_vec();
                let count = shape.iter().product();
                let values: Vec<f32> = match shape[..] {
                    [_] => (0..count).map(|_| 1.0 + 0.1 * stream.next_signed_f32()).collect(),
                    _ => {
                        let scale = 1.0 / (shape[0] as f32).sqrt();
                        (0..count).map(|_| scale * stream.next_signed_f32()).collect()
                    }
                };
                (snapshot.full_path(), TensorData::new(values, shape))
            })
            .collect();
        Ok(Self(tensors))
    }

    /// A model of `config` on `device` holding exactly these weights.
    pub fn load<B: Backend>(
        &self,
        config: &DecoderConfig,
        device: &B::Device,
    ) -> Result<Decoder<B>, AppError> {
        let mut model = config.init::<B>(device)?;
        let snapshots = self
            .0
            .iter()
            .map(|(name, data)| {
                let path = name.split('.').map(str::to_string).collect();
                TensorSnapshot::from_data(data.clone(), path, Vec::new(), ParamId::new())
            })
            .collect();
        let result = model.apply(snapshots, None, None, false);
        match result.errors.is_empty() && result.missing.is_empty() && result.unused.is_empty() {
            true => Ok(model),
            false => Err(AppError::WeightsMismatch { problem: format!("{result:?}") }),
        }
    }

    /// The weights as [`Named`] values, in module order.
    pub fn named(&self) -> Vec<Named> {
        let values =
            |data: &TensorData| data.clone().convert::<f32>().to_vec().expect("f32 weights");
        self.0
            .iter()
            .map(|(name, data)| Named { name: name.clone(), values: values(data) })
            .collect()
    }
}

/// Every float parameter of `module`, in module order.
pub fn parameters<B: Backend, M: Module<B>>(module: &M) -> Vec<Named> {
    let mut reader = ValueReader { path: Vec::new(), read: Vec::new() };
    module.visit(&mut reader);
    reader.read
}

/// The gradient of every float parameter of `module` in `grads`, in module order; a parameter
/// without a gradient reads as zeros.
pub fn gradients<B: AutodiffBackend, M: Module<B>>(module: &M, grads: &B::Gradients) -> Vec<Named> {
    let mut reader = GradientReader { path: Vec::new(), read: Vec::new(), grads };
    module.visit(&mut reader);
    reader.read
}

/// The values of a tensor, as f32.
pub fn values<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Vec<f32> {
    tensor.into_data().convert::<f32>().to_vec().expect("f32 values")
}

struct ValueReader {
    path: Vec<String>,
    read: Vec<Named>,
}

impl<B: Backend> ModuleVisitor<B> for ValueReader {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.read.push(Named { name: self.path.join("."), values: values(param.val()) });
    }
}

struct GradientReader<'a, B: AutodiffBackend> {
    path: Vec<String>,
    read: Vec<Named>,
    grads: &'a B::Gradients,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for GradientReader<'_, B> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let value = param.val();
        let values = match value.grad(self.grads) {
            Some(grad) => values(grad),
            None => vec![0.0; value.shape().num_elements()],
        };
        self.read.push(Named { name: self.path.join("."), values });
    }
}
