//! The configuration of a training run (`train.json`) and its checks before any work.

use std::path::Path;
use std::sync::Arc;

use burn::config::Config;
use swa_models::hf::Pretrained;
use swa_models::lora::{Lora, LoraConfig};
use swa_models::{Decoder, DecoderConfig};

use crate::corpus::{Corpus, GENESIS};
use crate::error::TrainingError;
use crate::eval::rebuild;
use crate::synthetic::SyntheticTask;
use crate::tokenized::{tokenized_file, tokenized_text};

/// Configuration of a training run, saved as `train.json` in the run's folder.
#[derive(Config, Debug)]
pub struct TrainConfig {
    /// The model.
    pub model: DecoderConfig,
    /// Training sequence length, independent of the windows (SWAT's sliding-window training
    /// uses 4·W).
    pub seq_len: usize,
    /// Sequences per step.
    #[config(default = 8)]
    pub batch_size: usize,
    /// Training steps (batches) in all, rounded up to whole epochs of `checkpoint_every`.
    #[config(default = 1000)]
    pub steps: usize,
    /// Steps between checkpoints (one Learner epoch).
    #[config(default = 100)]
    pub checkpoint_every: usize,
    /// Checkpoints kept; older ones are deleted.
    #[config(default = 3)]
    pub keep_checkpoints: usize,
    /// Batches whose gradients are summed before one optimizer update.
    #[config(default = 1)]
    pub grad_accumulation: usize,
    /// Peak learning rate of AdamW.
    #[config(default = 1e-3)]
    pub learning_rate: f64,
    /// Final learning rate, as a fraction of the peak.
    #[config(default = 0.1)]
    pub min_lr_ratio: f64,
    /// Linear warmup, in steps (batches).
    #[config(default = 100)]
    pub warmup_steps: usize,
    /// AdamW's decoupled weight decay.
    #[config(default = 0.1)]
    pub weight_decay: f32,
    /// Gradient norm clipping.
    #[config(default = 1.0)]
    pub grad_clip: f32,
    /// Validation batches at the end of each epoch.
    #[config(default = 8)]
    pub valid_batches: usize,
    /// Seed of the data order and of the initial weights (the backend's generator is seeded with
    /// it before the model is built).
    #[config(default = 42)]
    pub seed: u64,
    /// The text file trained on; `None` is the embedded corpus.
    #[config(default = "None")]
    pub corpus: Option<String>,
    /// Word-level vocabulary of the words seen at least this often; `None` is byte-level.
    #[config(default = "None")]
    pub word_min_count: Option<usize>,
    /// A synthetic task to train on instead of the corpus; `None` is language modelling.
    #[config(default = "None")]
    pub task: Option<SyntheticTask>,
    /// Transformer-XL's segment memory (docs/semantics.md §10): each batch row reads a stream of
    /// consecutive segments of `seq_len` tokens, training and validation alike, and each layer
    /// keeps what its windows reach of the earlier segments. Off (the default): independent
    /// random windows.
    #[config(default = false)]
    pub segment_memory: bool,
    /// With segment memory, the positions full-attention layers keep (Transformer-XL's memory
    /// length); `None` is `seq_len`.
    #[config(default = "None")]
    pub full_memory: Option<usize>,
    /// The pretrained checkpoint the run fine-tunes (a GGUF file or a Hugging Face directory):
    /// its weights start the model (`model` is its configuration, with this run's attention
    /// kinds), and its tokenizer reads `corpus`. `None`: random weights from `seed`.
    #[config(default = "None")]
    pub pretrained: Option<String>,
    /// LoRA adapters trained beside the norms and the embedding table, the other weights frozen
    /// and the adapters merged into them when the run saves its model (`swa_models::lora`);
    /// `None`: every weight trains.
    #[config(default = "None")]
    pub lora: Option<LoraConfig>,
    /// The token every training and validation window starts with, as the pretrained model saw
    /// its sequences (its tokenizer's BOS); `None`: windows of the text alone.
    #[config(default = "None")]
    pub bos: Option<u32>,
}

impl TrainConfig {
    /// Checks the run before any work, naming the field at fault.
    pub fn validate(&self) -> Result<(), TrainingError> {
        self.model.validate()?;
        let positive = [
            ("TrainConfig.seq_len", self.seq_len),
            ("TrainConfig.batch_size", self.batch_size),
            ("TrainConfig.steps", self.steps),
            ("TrainConfig.checkpoint_every", self.checkpoint_every),
            ("TrainConfig.keep_checkpoints", self.keep_checkpoints),
            ("TrainConfig.grad_accumulation", self.grad_accumulation),
        ];
        if let Some((field, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(TrainingError::field(field, "must be at least 1"));
        }
        if !(self.learning_rate > 0.0 && self.learning_rate.is_finite()) {
            return Err(TrainingError::field(
                "TrainConfig.learning_rate",
                "must be positive and finite",
            ));
        }
        if self.pretrained.is_some() && (self.task.is_some() || self.word_min_count.is_some()) {
            return Err(TrainingError::field(
                "TrainConfig.pretrained",
                "fine-tunes on text in the checkpoint's own tokens: no task or word vocabulary",
            ));
        }
        if self.lora.is_some() && self.pretrained.is_none() {
            return Err(TrainingError::field(
                "TrainConfig.lora",
                "adapts a pretrained model: set TrainConfig.pretrained",
            ));
        }
        if let Some(task) = &self.task {
            task.validate(self.seq_len)?;
            if self.segment_memory {
                return Err(TrainingError::field(
                    "TrainConfig.segment_memory",
                    "needs a text corpus: a synthetic task's examples are not one stream",
                ));
            }
        }
        for l in 0..self.model.layers {
            if let Some(w) = self.model.kind_of(l).windows().and_then(|w| w.iter().copied().min())
                && w > self.seq_len
            {
                return Err(TrainingError::field(
                    "TrainConfig.seq_len",
                    format!(
                        "layer {l}'s window of {w} keys is larger than the training length {}, so \
                         it never slides; train with --seq-len {w} or more, or use full attention",
                        self.seq_len
                    ),
                ));
            }
            let spec = self.model.kind_of(l).spec(self.model.heads, self.model.kv_heads());
            let globals = spec.map(|spec| spec.globals().to_vec()).unwrap_or_default();
            if let Some(g) = globals.iter().find(|&&g| g >= self.seq_len) {
                return Err(TrainingError::field(
                    "TrainConfig.seq_len",
                    format!("layer {l} has global position {g}, past the sequence"),
                ));
            }
        }
        Ok(())
    }

    /// The corpus this run trains on: in the pretrained checkpoint's tokens when there is one.
    pub fn load_corpus(&self) -> Result<Corpus, TrainingError> {
        let file = self.corpus.as_deref().map(Path::new);
        let Some(checkpoint) = &self.pretrained else {
            return Corpus::load(file, self.word_min_count);
        };
        let vocab = self.model.vocab_size;
        let tokenizer = Arc::new(swa_models::hf::load_tokenizer(Path::new(checkpoint), vocab)?);
        match file {
            Some(file) => tokenized_file(file, tokenizer, vocab),
            None => tokenized_text("genesis".into(), GENESIS, tokenizer, vocab),
        }
    }

    /// The model the run starts from, with its LoRA adapters: at a fresh start, the pretrained
    /// checkpoint's weights under the run's configuration (the attention kinds it fine-tunes
    /// into); otherwise fresh weights, which a resumed run's checkpoint replaces. Under LoRA the
    /// model's weights are frozen but the norms and the embedding table, beside new adapters.
    pub fn initial_model<B: swa_attention::LayerOpsBackend>(
        &self,
        fresh: bool,
        device: &B::Device,
    ) -> Result<(Decoder<B>, Option<Lora<B>>), TrainingError> {
        let mut decoder = self.model.init::<B>(device)?;
        if let (Some(checkpoint), true) = (&self.pretrained, fresh) {
            let pretrained = Pretrained::<B>::load(checkpoint, device)?;
            decoder = rebuild(&pretrained.model, &self.model, device)?;
        }
        let Some(lora) = &self.lora else { return Ok((decoder, None)) };
        let decoder = lora.freeze(decoder);
        let adapters = lora.init(&decoder, &self.model, device)?;
        Ok((decoder, Some(adapters)))
    }

    /// The positions full-attention layers keep with segment memory.
    pub fn full_memory(&self) -> usize {
        self.full_memory.unwrap_or(self.seq_len)
    }

    /// Learner epochs: `steps / checkpoint_every`, rounded up.
    pub fn epochs(&self) -> usize {
        self.steps.div_ceil(self.checkpoint_every)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swa_models::layers::AttentionKind;

    fn config(window: usize, seq_len: usize) -> TrainConfig {
        let model = DecoderConfig::new(vec![AttentionKind::Sliding { window }])
            .with_d_model(16)
            .with_layers(2)
            .with_heads(2);
        TrainConfig::new(model, seq_len).with_steps(250).with_checkpoint_every(100)
    }

    #[test]
    fn epochs_round_the_steps_up() {
        assert_eq!(config(8, 16).epochs(), 3);
    }

    #[test]
    fn validation_names_the_field_at_fault() {
        assert!(config(8, 16).validate().is_ok());
        let message = |config: TrainConfig| config.validate().unwrap_err().to_string();
        assert!(message(config(32, 16)).starts_with("TrainConfig.seq_len: layer 0's window of 32"));
        assert!(message(config(8, 16).with_batch_size(0)).starts_with("TrainConfig.batch_size"));
        assert!(message(config(8, 16).with_learning_rate(f64::NAN)).contains("learning_rate"));
        let task = config(8, 16).with_task(Some(SyntheticTask::mqar(8)));
        assert!(message(task).starts_with("Mqar.seq_len"));
        let lora = config(8, 16).with_lora(Some(LoraConfig::new()));
        assert!(message(lora).starts_with("TrainConfig.lora: adapts a pretrained model"));
        let pretrained = config(8, 16).with_pretrained(Some("model.gguf".into()));
        let words = pretrained.with_word_min_count(Some(2));
        assert!(message(words).starts_with("TrainConfig.pretrained: fine-tunes on text"));
    }
}
