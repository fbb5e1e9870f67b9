//! Mixed-precision training: the model computes in f16 or bf16 while AdamW steps an f32 master
//! copy of every parameter, and f16 losses are scaled so that small gradients do not underflow.
//!
//! Pure f16 training does not learn: AdamW's second moment (the gradient squared) and updates
//! of `lr × step` much smaller than a weight vanish in f16. Here the half-precision weights are
//! only a copy of the f32 master, refreshed after every update, and gradients, clipping and the
//! AdamW moments are all f32 (Burn's own [`AdamW`] and [`GradientClipping`], run on f32
//! tensors, so the update is the f32 run's).
//!
//! f16 needs dynamic loss scaling as well: the loss is multiplied by [`LossScale::factor`]
//! before backward (by [`crate::language_model::LanguageModel`]), gradients are divided by
//! it in f32, and a step whose gradients are not finite is skipped and halves the scale, while
//! [`GROWTH_INTERVAL`] good steps in a row double it. bf16 has f32's exponent range and runs
//! with a fixed scale of 1.
//!
//! Burn 0.21 keeps one default float type per device, but a tensor carries its own dtype: f32
//! tensors cast from f16 ones compute in f32 on an f16 device, and new tensors would be f16, so
//! every f32 tensor here comes from a cast or from [`F32Tensor`]'s record.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

use burn::grad_clipping::GradientClipping;
use burn::module::{AutodiffModule, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::adaptor::GradAdaptor;
use burn::optim::{
    AdamW, AdamWState, AdaptiveMomentumState, GradientsParams, LearningRate, MultiGradientsParams,
    Optimizer, SimpleOptimizer,
};
use burn::record::{PrecisionSettings, Record};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Tensor, TensorData};

/// The first loss scale of an f16 run: 2^12 keeps a loss of ln 256 times the scale, and the
/// seed gradient (the scale itself), inside f16's range (65504).
pub const INITIAL_SCALE: f32 = 4096.0;

/// Good steps in a row after which an f16 run doubles its loss scale.
pub const GROWTH_INTERVAL: usize = 1000;

/// The loss scale's rule: fixed, or dynamic (halve on overflow, double after a run of good
/// steps).
#[derive(Clone, Debug, PartialEq)]
pub struct LossScaler {
    scale: f32,
    good_steps: usize,
    growth_interval: Option<usize>,
}

impl LossScaler {
    /// Dynamic scaling from `initial`, doubling after `growth_interval` good steps in a row.
    pub fn dynamic(initial: f32, growth_interval: usize) -> Self {
        Self { scale: initial, good_steps: 0, growth_interval: Some(growth_interval.max(1)) }
    }

    /// A scale that never changes (1 for bf16).
    pub fn fixed(scale: f32) -> Self {
        Self { scale, good_steps: 0, growth_interval: None }
    }

    /// The scaler of a run whose model computes in `dtype`: dynamic for f16, 1 otherwise.
    pub fn for_dtype(dtype: DType) -> Self {
        match dtype {
            DType::F16 => Self::dynamic(INITIAL_SCALE, GROWTH_INTERVAL),
            _ => Self::fixed(1.0),
        }
    }

    /// The factor the loss is multiplied by.
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// Good steps since the scale last changed.
    pub fn good_steps(&self) -> usize {
        self.good_steps
    }

    /// Takes a step's verdict on its gradients and says whether its update applies: a
    /// non-finite step is skipped (and halves a dynamic scale), a finite one counts towards
    /// doubling it.
    pub fn update(&mut self, finite: bool) -> bool {
        if !finite {
            if self.growth_interval.is_some() {
                self.scale /= 2.0;
            }
            self.good_steps = 0;
            return false;
        }
        self.good_steps += 1;
        if self.growth_interval == Some(self.good_steps) {
            self.scale *= 2.0;
            self.good_steps = 0;
        }
        true
    }
}

/// The loss scaler shared by the model, which scales its loss, and the optimizer, which
/// unscales the gradients and updates the scale. Clones share one scaler.
#[derive(Clone)]
pub struct LossScale(Arc<Mutex<LossScaler>>);

/// Shown in the model's summary as the current factor.
impl std::fmt::Debug for LossScale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LossScale({})", self.factor())
    }
}

impl LossScale {
    /// A shared handle on `scaler`.
    pub fn new(scaler: LossScaler) -> Self {
        Self(Arc::new(Mutex::new(scaler)))
    }

    /// The factor the loss is multiplied by now.
    pub fn factor(&self) -> f32 {
        self.scaler().scale
    }

    /// A copy of the scaler's state.
    pub fn scaler(&self) -> LossScaler {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn with<T>(&self, f: impl FnOnce(&mut LossScaler) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// AdamW on f32 master weights for a half-precision model, with loss scaling (see the module
/// documentation). Its record holds the master weights, the AdamW moments and the loss scale.
#[derive(Clone)]
pub struct MixedPrecision<M, B: AutodiffBackend> {
    adamw: AdamW,
    clipping: Option<GradientClipping>,
    masters: HashMap<ParamId, Master<B::InnerBackend>>,
    loss_scale: LossScale,
    module: PhantomData<M>,
}

/// One parameter's f32 master weights, flattened, and its AdamW state.
#[derive(Clone)]
struct Master<B: Backend> {
    weights: Tensor<B, 1>,
    state: Option<AdamWState<B, 1>>,
}

impl<M, B: AutodiffBackend> MixedPrecision<M, B> {
    /// `adamw` (from [`burn::optim::AdamWConfig::build`]) with optional gradient clipping,
    /// scaling losses by `loss_scale`, which the model must share.
    pub fn new(adamw: AdamW, clipping: Option<GradientClipping>, loss_scale: LossScale) -> Self {
        Self { adamw, clipping, masters: HashMap::new(), loss_scale, module: PhantomData }
    }
}

impl<M: AutodiffModule<B>, B: AutodiffBackend> MixedPrecision<M, B> {
    /// Unscales the gradients into f32, skips the update when one is not finite, and otherwise
    /// steps the masters and refreshes the model from them.
    fn step_common(&mut self, lr: LearningRate, module: M, mut grads: GradAdaptor) -> M {
        let mut unscale = Unscale::<B> {
            grads: &mut grads,
            scale: self.loss_scale.factor(),
            found: HashMap::new(),
        };
        module.visit(&mut unscale);
        let found = unscale.found;
        let finite = all_finite(&found);
        if !self.loss_scale.with(|s| s.update(finite)) {
            return module;
        }
        module.map(&mut Refresh { optimizer: self, grads: found, lr })
    }
}

impl<M, B> Optimizer<M, B> for MixedPrecision<M, B>
where
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    type Record = MixedPrecisionRecord<B>;

    fn step(&mut self, lr: LearningRate, module: M, grads: GradientsParams) -> M {
        self.step_common(lr, module, grads.into())
    }

    fn step_multi(&mut self, lr: LearningRate, module: M, grads: MultiGradientsParams) -> M {
        self.step_common(lr, module, grads.into())
    }

    fn to_record(&self) -> Self::Record {
        let masters = self
            .masters
            .iter()
            .map(|(id, master)| MasterRecord::new(*id, master.clone()))
            .collect();
        let scaler = self.loss_scale.scaler();
        MixedPrecisionRecord { masters, loss_scale: scaler.scale, good_steps: scaler.good_steps }
    }

    fn load_record(mut self, record: Self::Record) -> Self {
        self.masters = record.masters.into_iter().map(MasterRecord::into_master).collect();
        self.loss_scale.with(|s| {
            s.scale = record.loss_scale;
            s.good_steps = record.good_steps;
        });
        self
    }
}

/// First pass over the parameters: each gradient taken out, cast to f32, unscaled and
/// flattened, with the device it is on.
struct Unscale<'a, B: AutodiffBackend> {
    grads: &'a mut GradAdaptor,
    scale: f32,
    found: HashMap<ParamId, (Tensor<B::InnerBackend, 1>, B::Device)>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Unscale<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some((grad, device)) = self.grads.remove::<B::InnerBackend, D>(param.id) {
            let grad = grad.cast(DType::F32).flatten::<1>(0, D - 1).div_scalar(self.scale);
            self.found.insert(param.id, (grad, device));
        }
    }
}

/// Whether every gradient is finite, read back in one transfer: the sum of a tensor is finite
/// exactly when its elements are (short of an f32 overflow, which is as unusable).
fn all_finite<B: Backend>(grads: &HashMap<ParamId, (Tensor<B, 1>, B::Device)>) -> bool {
    let Some((_, device)) = grads.values().next() else { return true };
    let sums: Vec<_> = grads.values().map(|(g, _)| g.clone().sum().to_device(device)).collect();
    let total = Tensor::cat(sums, 0).sum().into_data();
    total.iter::<f32>().all(f32::is_finite)
}

/// Second pass: each parameter with a gradient gets its master stepped by AdamW and its
/// weights replaced by the master cast to the parameter's dtype.
struct Refresh<'a, M, B: AutodiffBackend> {
    optimizer: &'a mut MixedPrecision<M, B>,
    grads: HashMap<ParamId, (Tensor<B::InnerBackend, 1>, B::Device)>,
    lr: LearningRate,
}

impl<M, B: AutodiffBackend> ModuleMapper<B> for Refresh<'_, M, B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let Some((grad, device)) = self.grads.remove(&id) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let (dims, dtype, require_grad) = (tensor.dims(), tensor.dtype(), tensor.is_require_grad());
        let Master { weights, state } = match self.optimizer.masters.remove(&id) {
            Some(master) => master,
            None => {
                Master { weights: tensor.inner().cast(DType::F32).flatten(0, D - 1), state: None }
            }
        };
        let grad = match &self.optimizer.clipping {
            Some(clipping) => clipping.clip_gradient(grad),
            None => grad,
        };
        let state =
            state.map(|s| <AdamW as SimpleOptimizer<B::InnerBackend>>::to_device(s, &device));
        let (weights, state) =
            self.optimizer.adamw.step(self.lr, weights.to_device(&device), grad, state);
        let mut refreshed = Tensor::from_inner(weights.clone().reshape(dims).cast(dtype));
        if require_grad {
            refreshed = refreshed.require_grad();
        }
        self.optimizer.masters.insert(id, Master { weights, state });
        Param::from_mapped_value(id, refreshed, mapper)
    }
}

/// The optimizer's record: master weights and AdamW moments of each parameter, and the loss
/// scaler's state.
#[derive(Record)]
pub struct MixedPrecisionRecord<B: AutodiffBackend> {
    masters: Vec<MasterRecord<B>>,
    loss_scale: f32,
    good_steps: usize,
}

/// One parameter's master weights and AdamW moments, saved in f32, under its parameter id.
#[derive(Record)]
pub struct MasterRecord<B: AutodiffBackend> {
    id: String,
    weights: F32Tensor<B>,
    moments: Option<MomentsRecord<B>>,
}

/// AdamW's step count and moments of one parameter.
#[derive(Record)]
pub struct MomentsRecord<B: AutodiffBackend> {
    time: usize,
    first: F32Tensor<B>,
    second: F32Tensor<B>,
}

impl<B: AutodiffBackend> MasterRecord<B> {
    fn new(id: ParamId, master: Master<B::InnerBackend>) -> Self {
        let moments = master.state.map(|s| MomentsRecord {
            time: s.momentum.time,
            first: F32Tensor(s.momentum.moment_1),
            second: F32Tensor(s.momentum.moment_2),
        });
        Self { id: id.serialize(), weights: F32Tensor(master.weights), moments }
    }

    fn into_master(self) -> (ParamId, Master<B::InnerBackend>) {
        let state = self
            .moments
            .map(|m| AdamWState::new(AdaptiveMomentumState::new(m.time, m.first.0, m.second.0)));
        (ParamId::deserialize(&self.id), Master { weights: self.weights.0, state })
    }
}

/// An f32 tensor (of the inner backend of `B`, where the masters live) whose record loads back
/// in f32. Burn's own tensor record converts to the backend's float type on loading, which on
/// an f16 device would round the master weights and moments, so a resumed run would not
/// continue the same run.
pub struct F32Tensor<B: AutodiffBackend>(Tensor<B::InnerBackend, 1>);

impl<B: AutodiffBackend> Record<B> for F32Tensor<B> {
    type Item<S: PrecisionSettings> = TensorData;

    fn into_item<S: PrecisionSettings>(self) -> TensorData {
        self.0.into_data().convert::<f32>()
    }

    fn from_item<S: PrecisionSettings>(item: TensorData, device: &B::Device) -> Self {
        Self(Tensor::from_data(item.convert::<f32>(), (device, DType::F32)))
    }
}
