//! The model sizes of the training comparison: their models (a preset, or MSWA's geometric
//! windows over every layer and head) and the run as the anchor script reads it.

use burn::backend::Flex;
use burn::module::Module;
use serde_json::{Value, json};
use swa_zoo::attention::ScoreFn;
use swa_zoo::models::layers::AttentionKind;
use swa_zoo::models::layers::mswa::{MswaStrategy, MswaVariant, mswa_windows};
use swa_zoo::models::{DecoderConfig, Preset};
use swa_zoo::training::train::TrainConfig;

/// One model size of the comparison.
pub struct Size {
    /// What `--sizes` calls it.
    pub name: &'static str,
    /// The preset it is, if any (then the widths below are the preset's).
    preset: Option<&'static str>,
    layers: usize,
    d_model: usize,
    heads: usize,
    /// Training sequence length.
    pub seq_len: usize,
    /// The base window of MSWA's geometric windows (unused with a preset).
    window: usize,
    /// Sequences per step.
    pub batch: usize,
}

/// The sizes, as the module documentation of `main.rs` lists them.
const SIZES: [Size; 5] = [
    Size {
        name: "default",
        preset: Some("mswa-table2-mswa-tiny"),
        layers: 4,
        d_model: 64,
        heads: 4,
        seq_len: 128,
        window: 16,
        batch: 8,
    },
    Size {
        name: "medium",
        preset: None,
        layers: 6,
        d_model: 256,
        heads: 8,
        seq_len: 512,
        window: 128,
        batch: 8,
    },
    Size {
        name: "larger",
        preset: None,
        layers: 12,
        d_model: 512,
        heads: 8,
        seq_len: 1024,
        window: 256,
        batch: 4,
    },
    Size {
        name: "table2",
        preset: Some("mswa-table2-mswa"),
        layers: 12,
        d_model: 512,
        heads: 8,
        seq_len: 1024,
        window: 256,
        batch: 16,
    },
    Size {
        name: "swat-340m",
        preset: Some("swat-340m"),
        layers: 24,
        d_model: 1024,
        heads: 16,
        seq_len: 1024,
        window: 256,
        batch: 8,
    },
];

/// The size called `name`; exits with a one-line error naming the sizes otherwise.
pub fn size(name: &str) -> &'static Size {
    SIZES.iter().find(|s| s.name == name).unwrap_or_else(|| {
        eprintln!(
            "train_step: no size {name}; the sizes are default, medium, larger, table2, swat-340m"
        );
        std::process::exit(2)
    })
}

impl Size {
    /// The model: its preset (the `train` command's for `default`), else MSWA's geometric
    /// windows over every layer and head (docs/semantics.md §3).
    pub fn config(&self) -> DecoderConfig {
        if let Some(preset) = self.preset {
            return Preset::by_name(preset, 256).expect("a preset").config;
        }
        let windows = mswa_windows(
            MswaVariant::Both,
            MswaStrategy::Geometric,
            self.window,
            self.layers,
            self.heads,
        )
        .expect("four groups of layers and heads");
        let kinds = windows.into_iter().map(|windows| AttentionKind::MultiScale { windows });
        DecoderConfig::new(kinds.collect())
            .with_d_model(self.d_model)
            .with_layers(self.layers)
            .with_heads(self.heads)
    }

    /// Timed steps when none are asked for: about 15 s of ours at each size.
    pub fn default_steps(&self) -> usize {
        match self.name {
            "default" => 200,
            "medium" | "table2" | "swat-340m" => 20,
            _ => 6,
        }
    }

    /// The run as the anchor script reads it (`benches/anchors/train_step.py`).
    pub fn spec(&self, config: &DecoderConfig) -> Value {
        let train = TrainConfig::new(config.clone(), self.seq_len).with_batch_size(self.batch);
        let heads = config.heads;
        let windows: Vec<Vec<usize>> = (0..config.layers)
            .map(|l| match config.kind_of(l).windows().expect("windowed layers") {
                one if one.len() == 1 => vec![one[0]; heads],
                each => each,
            })
            .collect();
        let scores: Vec<Value> = (0..config.layers)
            .map(|l| {
                let kind = config.kind_of(l);
                let opts = kind.score_options(heads).expect("valid score options");
                assert!(opts.softcap.is_none(), "the anchor has no softcap");
                let beta = match opts.score_fn {
                    ScoreFn::Sigmoid { beta } => Some(beta),
                    _ => None,
                };
                json!({ "rope": kind.rotates(), "sigmoid_beta": beta, "alibi": opts.alibi })
            })
            .collect();
        json!({
            "name": self.name, "vocab": config.vocab_size, "d_model": config.d_model,
            "layers": config.layers, "heads": heads, "kv_heads": config.kv_heads(),
            "mlp_hidden": config.mlp().hidden_width(), "windows": windows, "scores": scores,
            "seq_len": self.seq_len, "batch": self.batch, "lr": train.learning_rate,
            "min_lr_ratio": train.min_lr_ratio, "warmup_steps": train.warmup_steps,
            "total_steps": train.steps, "weight_decay": train.weight_decay,
            "grad_clip": train.grad_clip, "adam_eps": 1e-5, "beta1": 0.9, "beta2": 0.999,
            "norm_eps": 1e-6, "rope_base": config.rope_base, "seed": train.seed,
            "checkpoint_every": train.checkpoint_every, "valid_batches": train.valid_batches,
            "corpus": "training/data/genesis.txt", "params": params(config),
        })
    }
}

/// Parameters of the model `config` builds.
fn params(config: &DecoderConfig) -> usize {
    config.init::<Flex>(&Default::default()).expect("a valid model").num_params()
}
