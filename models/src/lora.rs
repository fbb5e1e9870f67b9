//! LoRA (Hu et al., 2021): low-rank adapters on a pretrained model's projections, the way MSWA
//! §5.2 fine-tunes a pretrained model into windows (Appendix B.2.2: r = 8, α = 16 on the
//! attention's projections, norms and embeddings trainable, as LongLoRA).
//!
//! An adapted projection `W: [in, out]` (Burn's layout) becomes `W + (α/r)·A·B`, with
//! `A: [in, r]` drawn as PEFT draws it (uniform in `±1/√in`) and `B: [r, out]` zero, so that
//! training starts at the pretrained model. Projections are named as in the model's weight files
//! ([`crate::stored::parts`]): q, k and v are columns of the joined q|k|v product, gate and up of
//! gate|up, each with an adapter of its own. The adapters are a module of their own ([`Lora`]):
//! [`Lora::apply`] gives the model whose adapted weights are tensors the gradient flows through
//! to `A` and `B`, the same call on the inner backend gives the merged model to save, and
//! [`LoraConfig::freeze`] leaves only the norms and the embedding table trainable beside them.

use std::fmt;
use std::str::FromStr;

use burn::config::Config;
use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use serde::{Deserialize, Serialize};

use crate::error::ModelError;
use crate::stored::{EMBEDDING, parts};
use crate::weights::parameter_shapes;
use crate::{Decoder, DecoderConfig};

/// A projection LoRA can adapt, named as in Hugging Face's checkpoints (and PEFT's
/// `target_modules`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoraTarget {
    /// `q_proj`.
    QProj,
    /// `k_proj`.
    KProj,
    /// `v_proj`.
    VProj,
    /// `o_proj`.
    OProj,
    /// `gate_proj`.
    GateProj,
    /// `up_proj`.
    UpProj,
    /// `down_proj`.
    DownProj,
}

/// Every target with its checkpoint name and the end of its stable part name.
const TARGETS: [(LoraTarget, &str, &str); 7] = [
    (LoraTarget::QProj, "q_proj", ".attention.mixer.Windowed.local.query.weight"),
    (LoraTarget::KProj, "k_proj", ".attention.mixer.Windowed.local.key.weight"),
    (LoraTarget::VProj, "v_proj", ".attention.mixer.Windowed.local.value.weight"),
    (LoraTarget::OProj, "o_proj", ".attention.mixer.Windowed.output.weight"),
    (LoraTarget::GateProj, "gate_proj", ".mlp.gate.weight"),
    (LoraTarget::UpProj, "up_proj", ".mlp.up.weight"),
    (LoraTarget::DownProj, "down_proj", ".mlp.down.weight"),
];

impl LoraTarget {
    /// The checkpoint's name, `q_proj` … `down_proj`.
    pub fn name(self) -> &'static str {
        TARGETS.iter().find(|(t, ..)| *t == self).map_or("", |(_, name, _)| name)
    }

    /// The target whose stable part name ends `part`'s, if any.
    fn of_part(part: &str) -> Option<Self> {
        TARGETS.iter().find(|(.., suffix)| part.ends_with(suffix)).map(|(t, ..)| *t)
    }
}

impl fmt::Display for LoraTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LoraTarget {
    type Err = String;

    /// `q_proj` or `q` (and so on for each target).
    fn from_str(s: &str) -> Result<Self, String> {
        let short = |name: &str| name.trim_end_matches("_proj").to_string();
        let found = TARGETS.iter().find(|(_, name, _)| *name == s || short(name) == s);
        found.map(|(t, ..)| *t).ok_or_else(|| {
            let names: Vec<&str> = TARGETS.iter().map(|(_, name, _)| *name).collect();
            format!("no projection `{s}`: one of {}", names.join(", "))
        })
    }
}

/// Configuration of [`Lora`].
#[derive(Config, Debug)]
pub struct LoraConfig {
    /// The rank `r` of every adapter; at most the smaller side of each adapted projection.
    #[config(default = 8)]
    pub rank: usize,
    /// `α`: the adapters' products are scaled by `α / r`.
    #[config(default = 16.0)]
    pub alpha: f64,
    /// The projections adapted, in every block (MSWA's Appendix B.2.2: the attention's four).
    #[config(
        default = "vec![LoraTarget::QProj, LoraTarget::KProj, LoraTarget::VProj, LoraTarget::OProj]"
    )]
    pub targets: Vec<LoraTarget>,
    /// Whether the norms and the embedding table train beside the adapters (LongLoRA's setup,
    /// which MSWA follows); every other weight of the model stays frozen either way.
    #[config(default = true)]
    pub train_norms_and_embeddings: bool,
}

/// One adapter: `(α/r)·A·B` added to columns `start .. start + width` of the parameter at
/// `path`.
#[derive(Module, Debug)]
pub struct Adapter<B: Backend> {
    /// `A: [in, r]`.
    pub a: Param<Tensor<B, 2>>,
    /// `B: [r, width]`, zero at the start.
    pub b: Param<Tensor<B, 2>>,
}

/// Where an adapter goes.
#[derive(Clone, Debug)]
struct Place {
    path: String,
    start: usize,
    width: usize,
}

/// The adapters of a model, in the order of its parameters' paths.
#[derive(Module, Debug)]
pub struct Lora<B: Backend> {
    /// The adapters.
    pub adapters: Vec<Adapter<B>>,
    /// Where each adapter goes; rebuilt from the model by [`LoraConfig::init`], not saved.
    #[module(skip)]
    places: Vec<Place>,
    /// `α / r`.
    scale: f64,
}

impl LoraConfig {
    /// Adapters for `model` (built from `config`), `A` random and `B` zero. Fails, naming the
    /// field, on a rank of 0 or one larger than a projection it adapts, or on no target.
    pub fn init<B: Backend>(
        &self,
        model: &Decoder<B>,
        config: &DecoderConfig,
        device: &B::Device,
    ) -> Result<Lora<B>, ModelError> {
        let field = |field, problem: String| ModelError::Config { field, problem };
        if self.targets.is_empty() {
            return Err(field("LoraConfig.targets", "no projection to adapt".into()));
        }
        if self.rank == 0 {
            return Err(field("LoraConfig.rank", "must be at least 1".into()));
        }
        let (heads, kv_heads) = (config.heads, config.kv_heads());
        let mut found = Vec::new();
        for (path, shape) in parameter_shapes(model).into_iter().filter(|(_, s)| s.len() == 2) {
            for part in parts(&path, &shape, heads, kv_heads) {
                let Some(target) = LoraTarget::of_part(&part.name) else { continue };
                if self.targets.contains(&target) {
                    let place = Place { path: path.clone(), start: part.start, width: part.width };
                    found.push((place, target, shape[0]));
                }
            }
        }
        let (mut adapters, mut places) = (Vec::new(), Vec::new());
        for (place, target, inputs) in found {
            let largest = inputs.min(place.width);
            if self.rank > largest {
                let block = place.path.split('.').nth(1).unwrap_or("?");
                let problem = format!(
                    "rank {} is larger than {target} of block {block} ({inputs} × {}), which \
                     allows at most {largest}",
                    self.rank, place.width
                );
                return Err(field("LoraConfig.rank", problem));
            }
            let bound = 1.0 / (inputs as f64).sqrt();
            let a =
                Tensor::random([inputs, self.rank], Distribution::Uniform(-bound, bound), device);
            let b = Tensor::zeros([self.rank, place.width], device);
            adapters.push(Adapter { a: Param::from_tensor(a), b: Param::from_tensor(b) });
            places.push(place);
        }
        if adapters.is_empty() {
            let problem = format!("the model has none of {:?}", self.targets);
            return Err(field("LoraConfig.targets", problem));
        }
        let scale = self.alpha / self.rank as f64;
        Ok(Lora { adapters, places, scale })
    }

    /// `model` with every weight frozen but the norms and the embedding table (when
    /// [`LoraConfig::train_norms_and_embeddings`]), for training beside the adapters.
    pub fn freeze<B: Backend>(&self, model: Decoder<B>) -> Decoder<B> {
        let train = self.train_norms_and_embeddings;
        model.map(&mut Freeze { path: Vec::new(), trains: &|path| train && trains(path) })
    }
}

/// Whether a weight trains beside the adapters: a norm's scale or the embedding table.
fn trains(path: &str) -> bool {
    path == EMBEDDING || path.ends_with(".gamma")
}

impl<B: Backend> Lora<B> {
    /// `model` with `(α/r)·A·B` added to each adapted projection: tensors the gradient flows
    /// through to `A` and `B` on an autodiff backend, plain merged weights on another.
    pub fn apply(&self, model: Decoder<B>) -> Decoder<B> {
        model.map(&mut Apply { lora: self, path: Vec::new() })
    }

    /// Adapters in all.
    pub fn len(&self) -> usize {
        self.adapters.len()
    }

    /// Whether there is none (never, once built by [`LoraConfig::init`]).
    pub fn is_empty(&self) -> bool {
        self.adapters.is_empty()
    }

    /// The update of the parameter at `path` of `shape` (`[in, out]`), or `None` when no
    /// adapter goes there: each adapter's `(α/r)·A·B` in its columns, zeros elsewhere.
    fn update(&self, path: &str, [inputs, out]: [usize; 2]) -> Option<Tensor<B, 2>> {
        let here: Vec<usize> =
            (0..self.places.len()).filter(|&i| self.places[i].path == path).collect();
        let first = *here.first()?;
        let device = self.adapters[first].a.val().device();
        let (mut columns, mut pieces) = (0, Vec::new());
        for i in here {
            let (place, adapter) = (&self.places[i], &self.adapters[i]);
            if place.start > columns {
                pieces.push(Tensor::zeros([inputs, place.start - columns], &device));
            }
            pieces.push(adapter.a.val().matmul(adapter.b.val()).mul_scalar(self.scale));
            columns = place.start + place.width;
        }
        if columns < out {
            pieces.push(Tensor::zeros([inputs, out - columns], &device));
        }
        Some(Tensor::cat(pieces, 1))
    }
}

/// Adds each adapter's update to its parameter.
struct Apply<'a, B: Backend> {
    lora: &'a Lora<B>,
    path: Vec<String>,
}

impl<B: Backend> ModuleMapper<B> for Apply<'_, B> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let shape = param.lazy_shape();
        let [inputs, out] = match shape.to_vec()[..] {
            [inputs, out] if D == 2 => [inputs, out],
            _ => return param,
        };
        match self.lora.update(&self.path.join("."), [inputs, out]) {
            Some(update) => param.map(|w| w + update.reshape(shape)),
            None => param,
        }
    }
}

/// Sets which weights train: those `trains` names, by module path.
struct Freeze<'a> {
    path: Vec<String>,
    trains: &'a dyn Fn(&str) -> bool,
}

impl<B: Backend> ModuleMapper<B> for Freeze<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        param.set_require_grad((self.trains)(&self.path.join(".")))
    }
}
