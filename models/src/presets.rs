//! Presets: the configurations of the seed papers as named constructors, each with a tiny
//! variant (well under a few million parameters) for CPU work.

use crate::layers::AttentionKind;
use crate::layers::mswa::{MswaStrategy, MswaVariant, mswa_windows};
use swa_attention::AttentionError;

use crate::decoder::DecoderConfig;

/// Paper-sized or tiny.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PresetSize {
    /// The dimensions of the cited table.
    Paper,
    /// A few hundred thousand parameters, for CPU tests and examples.
    Tiny,
}

/// A named model configuration with the sequence length it is trained at.
#[derive(Clone, Debug)]
pub struct Preset {
    /// The preset's name, as the CLI spells it (`mswa-table2-mswa`, `…-tiny`).
    pub name: String,
    /// The model.
    pub config: DecoderConfig,
    /// Training sequence length.
    pub train_len: usize,
    /// Where the configuration comes from.
    pub source: &'static str,
}

/// Width, heads, layers and base window of a scale.
struct Dims {
    d_model: usize,
    heads: usize,
    layers: usize,
    window: usize,
}

/// The cited models the presets are built from, one row of [`CITED`] each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Model {
    /// MSWA's Table 2 model (and the vanilla baseline's size).
    MswaTable2,
    /// MSWA's Table 3 hybrids.
    MswaTable3,
    /// SWAT's 340M model (its Table 1).
    Swat340m,
    /// SWAT's analysis model (its Table 3).
    SwatAnalysis,
    /// LongNet's decoder.
    LongNet,
    /// Longformer, encoder or decoder.
    Longformer,
}

/// A cited model's numbers: its size at each scale, the sequence lengths it trains at (paper,
/// tiny) and where it comes from.
struct Cited {
    /// Which model the row is.
    model: Model,
    /// The cited table's size.
    paper: Dims,
    /// A few hundred thousand parameters, for CPU work.
    tiny: Dims,
    /// Training sequence lengths, paper then tiny.
    train_len: [usize; 2],
    /// Where the numbers come from.
    source: &'static str,
}

/// Every cited model's numbers, so that the presets differ in data, not in code.
const CITED: [Cited; 6] = [
    // MSWA's Table 2 model: 12 layers, 8 heads, d = 512, base window 128, trained on sequences
    // of 1024 (docs/semantics.md §3).
    Cited {
        model: Model::MswaTable2,
        paper: Dims { d_model: 512, heads: 8, layers: 12, window: 128 },
        tiny: Dims { d_model: 64, heads: 4, layers: 4, window: 16 },
        train_len: [1024, 128],
        source: "MSWA (Xu et al., 2025), Table 2",
    },
    // MSWA's Table 3 hybrids: Table 2's size; the tiny one has two "linear, local, local"
    // triples.
    Cited {
        model: Model::MswaTable3,
        paper: Dims { d_model: 512, heads: 8, layers: 12, window: 128 },
        tiny: Dims { d_model: 64, heads: 4, layers: 6, window: 16 },
        train_len: [1024, 128],
        source: "MSWA (Xu et al., 2025), Table 3",
    },
    // SWAT's 340M model (Table 1: d = 1024, 16 heads, 24 layers, W = 256), trained on sequences
    // of 4W, the best setting of its Table 2 (docs/semantics.md §4).
    Cited {
        model: Model::Swat340m,
        paper: Dims { d_model: 1024, heads: 16, layers: 24, window: 256 },
        tiny: Dims { d_model: 64, heads: 4, layers: 2, window: 16 },
        train_len: [4 * 256, 4 * 16],
        source: "SWAT (Fu et al., 2025), Table 1",
    },
    // SWAT's analysis model (Table 3: 12 heads, d = 768, 12 layers), W = 256, trained at 4W.
    Cited {
        model: Model::SwatAnalysis,
        paper: Dims { d_model: 768, heads: 12, layers: 12, window: 256 },
        tiny: Dims { d_model: 48, heads: 6, layers: 2, window: 16 },
        train_len: [4 * 256, 4 * 16],
        source: "SWAT (Fu et al., 2025), Table 3",
    },
    // LongNet: 12 heads, so that every offset of its largest dilation r = 12 has a head,
    // trained at its largest segment (docs/semantics.md §5); its branches have no base window.
    Cited {
        model: Model::LongNet,
        paper: Dims { d_model: 768, heads: 12, layers: 12, window: 0 },
        tiny: Dims { d_model: 48, heads: 6, layers: 2, window: 0 },
        train_len: [32768, 128],
        source: "LongNet (Ding et al., 2023), §2.4 and §4",
    },
    // Longformer with one-sided window 256 (Hugging Face's 512), trained at 4096
    // (docs/semantics.md §2).
    Cited {
        model: Model::Longformer,
        paper: Dims { d_model: 768, heads: 12, layers: 12, window: 256 },
        tiny: Dims { d_model: 64, heads: 4, layers: 2, window: 8 },
        train_len: [4096, 128],
        source: "Longformer (Beltagy et al., 2020), §3 and §4",
    },
];

impl Model {
    /// The model's row of [`CITED`].
    fn cited(self) -> &'static Cited {
        CITED.iter().find(|row| row.model == self).expect("every cited model has a row")
    }
}

impl Cited {
    /// The model's size at `scale`.
    fn dims(&self, scale: PresetSize) -> &Dims {
        match scale {
            PresetSize::Paper => &self.paper,
            PresetSize::Tiny => &self.tiny,
        }
    }

    /// The sequence length the model trains at, at `scale`.
    fn train_len(&self, scale: PresetSize) -> usize {
        match scale {
            PresetSize::Paper => self.train_len[0],
            PresetSize::Tiny => self.train_len[1],
        }
    }

    /// The preset `base` (`base-tiny` at the tiny scale) of this model's size at `scale`, its
    /// layers `attention`.
    fn preset(
        &self,
        base: &str,
        scale: PresetSize,
        vocab: usize,
        attention: Vec<AttentionKind>,
    ) -> Preset {
        Preset {
            name: named(base, scale),
            config: decoder(vocab, self.dims(scale), attention),
            train_len: self.train_len(scale),
            source: self.source,
        }
    }
}

/// `base` at `scale`: itself at the paper's scale, `base-tiny` at the tiny one.
fn named(base: &str, scale: PresetSize) -> String {
    match scale {
        PresetSize::Paper => base.to_string(),
        PresetSize::Tiny => format!("{base}-tiny"),
    }
}

/// A decoder of `dims` over `vocab` tokens whose layers are `attention`.
fn decoder(vocab: usize, dims: &Dims, attention: Vec<AttentionKind>) -> DecoderConfig {
    DecoderConfig::new(attention)
        .with_vocab_size(vocab)
        .with_d_model(dims.d_model)
        .with_layers(dims.layers)
        .with_heads(dims.heads)
}

impl Preset {
    /// MSWA Table 2: SWA, MSWA-h, MSWA-l or MSWA (geometric allocation) at base window 128,
    /// trained on sequences of 1024 (docs/semantics.md §3).
    pub fn mswa(
        variant: MswaVariant,
        scale: PresetSize,
        vocab: usize,
    ) -> Result<Self, AttentionError> {
        let cited = Model::MswaTable2.cited();
        let dims = cited.dims(scale);
        let windows =
            mswa_windows(variant, MswaStrategy::Geometric, dims.window, dims.layers, dims.heads)?;
        let suffix = match variant {
            MswaVariant::Swa => "swa",
            MswaVariant::Heads => "mswa-h",
            MswaVariant::Layers => "mswa-l",
            MswaVariant::Both => "mswa",
        };
        let attention =
            windows.into_iter().map(|windows| AttentionKind::MultiScale { windows }).collect();
        Ok(cited.preset(&format!("mswa-table2-{suffix}"), scale, vocab, attention))
    }

    /// MSWA Table 2's full-attention baselines, trained at `train_len` 1024 or 2048.
    pub fn mswa_full(train_len: usize, scale: PresetSize, vocab: usize) -> Self {
        let name = format!("mswa-table2-full-{train_len}");
        let preset =
            Model::MswaTable2.cited().preset(&name, scale, vocab, vec![AttentionKind::Full]);
        let train_len = if scale == PresetSize::Paper { train_len } else { train_len / 8 };
        Self { train_len, ..preset }
    }

    /// MSWA Table 3 hybrids: every consecutive triple of layers is "linear, local, local"
    /// (docs/semantics.md §3, §6). `local` is `None` for all-linear, SWA or MSWA for the local layers;
    /// the multi-scale allocation runs over the local layers alone.
    pub fn mswa_hybrid(
        local: Option<MswaVariant>,
        scale: PresetSize,
        vocab: usize,
    ) -> Result<Self, AttentionError> {
        let cited = Model::MswaTable3.cited();
        let dims = cited.dims(scale);
        let linear = AttentionKind::Linear { feature_dim: 16 };
        let (name, attention) = match local {
            None => ("linear", vec![linear]),
            Some(variant) => {
                let local_layers = dims.layers - dims.layers.div_ceil(3);
                let windows = mswa_windows(
                    variant,
                    MswaStrategy::Geometric,
                    dims.window,
                    local_layers,
                    dims.heads,
                )?;
                let mut locals =
                    windows.into_iter().map(|windows| AttentionKind::MultiScale { windows });
                let kinds = (0..dims.layers)
                    .map(|l| {
                        if l % 3 == 0 {
                            linear.clone()
                        } else {
                            locals.next().expect("one per local layer")
                        }
                    })
                    .collect();
                (if variant == MswaVariant::Swa { "linear-swa" } else { "linear-mswa" }, kinds)
            }
        };
        Ok(cited.preset(&format!("mswa-table3-{name}"), scale, vocab, attention))
    }

    /// SWAT's 340M model (Table 1: d = 1024, 16 heads, 24 layers, W = 256), trained on
    /// sequences of 4W, the best setting of its Table 2 (docs/semantics.md §4).
    pub fn swat_340m(scale: PresetSize, vocab: usize) -> Self {
        Self::swat(Model::Swat340m, "swat-340m", scale, vocab)
    }

    /// SWAT's analysis model (Table 3: 12 heads, d = 768, 12 layers), W = 256, trained at 4W.
    pub fn swat_analysis(scale: PresetSize, vocab: usize) -> Self {
        Self::swat(Model::SwatAnalysis, "swat-analysis", scale, vocab)
    }

    /// The SWAT preset `base` of `model`'s size: SWAT attention at its window on every layer.
    fn swat(model: Model, base: &str, scale: PresetSize, vocab: usize) -> Self {
        let cited = model.cited();
        let window = cited.dims(scale).window;
        cited.preset(base, scale, vocab, vec![AttentionKind::swat(window)])
    }

    /// A LongNet decoder with the paper's branches `w = (2048 … 32768)`, `r = (1, 2, 4, 6, 12)`
    /// (docs/semantics.md §5), 12 heads so that every offset of `r = 12` has a head.
    pub fn longnet(scale: PresetSize, vocab: usize) -> Self {
        let (segments, dilations) = match scale {
            PresetSize::Paper => (vec![2048, 4096, 8192, 16384, 32768], vec![1, 2, 4, 6, 12]),
            PresetSize::Tiny => (vec![16, 32, 64], vec![1, 2, 4]),
        };
        let kind = AttentionKind::LongNet { segments, dilations };
        Model::LongNet.cited().preset("longnet", scale, vocab, vec![kind])
    }

    /// Longformer with one-sided window 256 (Hugging Face's 512), dilation 1 on all heads but
    /// the last two (dilation 2, as in its character-LM setting), and a global token at 0;
    /// `causal` selects the decoder, else the encoder (docs/semantics.md §2).
    pub fn longformer(causal: bool, scale: PresetSize, vocab: usize) -> Self {
        let cited = Model::Longformer.cited();
        let dims = cited.dims(scale);
        let dilations = (0..dims.heads).map(|h| if h + 2 >= dims.heads { 2 } else { 1 }).collect();
        let kind =
            AttentionKind::Longformer { window: dims.window, dilations, globals: vec![0], causal };
        let base = if causal { "longformer-decoder" } else { "longformer-encoder" };
        cited.preset(base, scale, vocab, vec![kind])
    }

    /// The vanilla Transformer++ baseline with full causal attention (SWAT Table 1 and MSWA
    /// Appendix B.2.1), at MSWA's Table 2 size.
    pub fn vanilla(scale: PresetSize, vocab: usize) -> Self {
        let preset =
            Model::MswaTable2.cited().preset("vanilla", scale, vocab, vec![AttentionKind::Full]);
        Self { source: "Transformer++ baseline (SWAT Table 1; MSWA Appendix B.2.1)", ..preset }
    }

    /// Every preset at `scale`, in a fixed order.
    pub fn all(scale: PresetSize, vocab: usize) -> Result<Vec<Self>, AttentionError> {
        let mut presets = Vec::new();
        for variant in
            [MswaVariant::Swa, MswaVariant::Heads, MswaVariant::Layers, MswaVariant::Both]
        {
            presets.push(Self::mswa(variant, scale, vocab)?);
        }
        presets.push(Self::mswa_full(1024, scale, vocab));
        presets.push(Self::mswa_full(2048, scale, vocab));
        for local in [None, Some(MswaVariant::Swa), Some(MswaVariant::Both)] {
            presets.push(Self::mswa_hybrid(local, scale, vocab)?);
        }
        presets.push(Self::swat_340m(scale, vocab));
        presets.push(Self::swat_analysis(scale, vocab));
        presets.push(Self::longnet(scale, vocab));
        presets.push(Self::longformer(false, scale, vocab));
        presets.push(Self::longformer(true, scale, vocab));
        presets.push(Self::vanilla(scale, vocab));
        Ok(presets)
    }

    /// The preset called `name` (paper or `-tiny`), for a vocabulary of `vocab` tokens.
    pub fn by_name(name: &str, vocab: usize) -> Option<Self> {
        [PresetSize::Paper, PresetSize::Tiny]
            .into_iter()
            .flat_map(|scale| Self::all(scale, vocab).unwrap_or_default())
            .find(|p| p.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tiny_preset_is_valid_and_named_tiny() {
        let presets = Preset::all(PresetSize::Tiny, 256).unwrap();
        assert_eq!(presets.len(), 15);
        for preset in presets {
            preset.config.validate().unwrap_or_else(|e| panic!("{}: {e}", preset.name));
            assert!(preset.name.ends_with("-tiny"), "{}", preset.name);
        }
    }

    #[test]
    fn mswa_layers_have_a_window_per_head() {
        let dims = Model::MswaTable2.cited().dims(PresetSize::Tiny);
        for variant in
            [MswaVariant::Swa, MswaVariant::Heads, MswaVariant::Layers, MswaVariant::Both]
        {
            let config = Preset::mswa(variant, PresetSize::Tiny, 256).unwrap().config;
            assert_eq!(config.attention.len(), dims.layers);
            for kind in &config.attention {
                let windows = kind.windows().expect("MSWA layers are windowed");
                assert_eq!(windows.len(), dims.heads, "{variant:?}");
                if variant == MswaVariant::Swa {
                    assert!(windows.iter().all(|&w| w == dims.window));
                }
            }
        }
    }

    #[test]
    fn hybrids_are_linear_then_two_local_layers() {
        let config =
            Preset::mswa_hybrid(Some(MswaVariant::Both), PresetSize::Tiny, 256).unwrap().config;
        for (l, kind) in config.attention.iter().enumerate() {
            let linear = matches!(kind, AttentionKind::Linear { .. });
            assert_eq!(linear, l % 3 == 0, "layer {l}: {kind:?}");
            assert_eq!(kind.windows().is_some(), !linear);
        }
    }

    #[test]
    fn swat_trains_at_four_windows() {
        for scale in [PresetSize::Paper, PresetSize::Tiny] {
            for preset in [Preset::swat_340m(scale, 256), Preset::swat_analysis(scale, 256)] {
                let window = preset.config.kind_of(0).windows().unwrap()[0];
                assert_eq!(preset.train_len, 4 * window, "{}", preset.name);
            }
        }
    }
}
