//! Saving and loading the weights of a [`Decoder`], in two formats:
//!
//! - **Burn records** ([`save_record`], [`load_record`]): Burn's named MessagePack at full
//!   precision, as written by `NamedMpkFileRecorder<FullPrecisionSettings>`, in a `.mpk` file.
//!   It keeps parameter ids, for going on with training in Burn, and the modules' current
//!   layout only ([`crate::records`]).
//! - **safetensors** ([`export_safetensors`], [`import_safetensors`]): the weights under the
//!   stable names below, for other tools.
//!
//! Saving writes a temporary file in the target's directory and renames it over the target, so
//! a failed save leaves an existing file as it was. Loading builds the model from the caller's
//! [`DecoderConfig`] and accepts the file only when it holds exactly that model's weights, with
//! the same shapes; otherwise it fails with [`ModelError::Weights`], naming the file and the
//! problem: the file is missing or corrupt, or a weight is missing, unexpected or of another
//! shape. Fields that hold no weights (window sizes, RoPE base, …) come from the configuration.
//!
//! # Tensor names
//!
//! A weight's name is its module path, with two exceptions ([`crate::stored`]): the model
//! computes q, k and v with one product, and the MLP's gate and up projections with another,
//! so its parameters `….qkv.weight` and `mlp.gate_up.weight` are each several of the tensors
//! below, which files hold apart under the names they have always had; and the modules of the
//! windowed mechanisms (`mixer.Windowed`, `mixer.Longformer`) are named as one,
//! `mixer.Windowed`, with the sink logits and Transformer-XL's terms under the layer. `{l}` is the block
//! index from 0; `d` the model width, `d_h = d/H` the head width, `F` the hidden width of the
//! MLP, `d_f` the feature dimension of linear attention. A linear layer's weight is stored as
//! Burn keeps it, `[d_in, d_out]` (the transpose of PyTorch's), and has no bias. Tensors keep
//! the backend's float type (f32 on the reference backend).
//!
//! | name | shape | present |
//! |------|-------|---------|
//! | `embedding.weight` | `[vocab, d]` | always |
//! | `blocks.{l}.attention_norm.gamma` | `[d]` | always |
//! | `blocks.{l}.attention.mixer.Windowed.local.query.weight` | `[d, H·d_h]` | windowed kinds |
//! | `blocks.{l}.attention.mixer.Windowed.local.{key,value}.weight` | `[d, H_kv·d_h]` | windowed kinds |
//! | `blocks.{l}.attention.mixer.Windowed.global.query.weight` | `[d, H·d_h]` | Longformer with globals |
//! | `blocks.{l}.attention.mixer.Windowed.global.{key,value}.weight` | `[d, H_kv·d_h]` | Longformer with globals |
//! | `blocks.{l}.attention.mixer.Windowed.output.weight` | `[H·d_h, d]` | windowed kinds |
//! | `blocks.{l}.attention.mixer.Linear.{query,key}.weight` | `[d, H·d_f]` | `Linear` kind |
//! | `blocks.{l}.attention.mixer.Linear.{value,output}.weight` | `[d, d]` | `Linear` kind |
//! | `blocks.{l}.attention.{query,key}_norm.gamma` | `[d_h]` | with `qk_norm` |
//! | `blocks.{l}.attention.sinks` | `[H]` | with `sink_logits` |
//! | `blocks.{l}.attention.relative.projection.weight` | `[d, H·d_h]` | with `relative_positions` |
//! | `blocks.{l}.attention.relative.{content,position}_bias` | `[H, d_h]` | with `relative_positions` |
//! | `blocks.{l}.mlp_norm.gamma` | `[d]` | always |
//! | `blocks.{l}.mlp.{gate,up}.weight` | `[d, F]` | always |
//! | `blocks.{l}.mlp.down.weight` | `[F, d]` | always |
//! | `norm.gamma` | `[d]` | always |
//! | `head.weight` | `[d, vocab]` | untied embeddings |
//!
//! "Windowed kinds" are every [`AttentionKind`](crate::layers::AttentionKind) but
//! `Linear`. The variants of the layer's [`Mixer`](crate::layers::Mixer) are a segment of each
//! module path, and of a Burn record's layout.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleVisitor, Param};
use burn::record::{BurnRecord, FullPrecisionSettings, Record, Recorder, RecorderError};
use burn::tensor::{DType, Tensor, backend::Backend};

use crate::decoder::{Decoder, DecoderConfig, DecoderRecord, Materialize};
use crate::error::ModelError;
use crate::layers::MixerRecord;
use crate::panics::without_panics;
use crate::records::{MpkRecorder, RECORD_EXTENSION, write_record_item};
use crate::safetensors::SafetensorsFile;
use crate::stored::{self, Keep, Layout, Load, LoadProblem, WeightFile};

/// Saves `model` as a Burn record at `path` with its extension set to `.mpk`, as Burn's file
/// recorders do, and returns that path.
pub fn save_record<B: Backend>(model: &Decoder<B>, path: &Path) -> Result<PathBuf, ModelError> {
    let file = path.with_extension(RECORD_EXTENSION);
    model.visit(&mut Materialize);
    write_atomically(&file, |temp| {
        let item = model.clone().into_record().into_item::<FullPrecisionSettings>();
        write_record_item(&BurnRecord::<_, B>::new::<MpkRecorder>(item), temp)
    })?;
    Ok(file)
}

/// Loads a model of `config` from the Burn record at `path` with its extension set to `.mpk`.
pub fn load_record<B: Backend>(
    config: &DecoderConfig,
    path: &Path,
    device: &B::Device,
) -> Result<Decoder<B>, ModelError> {
    let file = path.with_extension(RECORD_EXTENSION);
    let fail = |problem| weights_error(&file, problem);
    let model = config.init::<B>(device)?;
    let expected = parameter_shapes(&model);
    let record: DecoderRecord<B> =
        without_panics("Burn's record loader", || MpkRecorder.load(file.clone(), device))
            .map_err(fail)?
            .map_err(|e| weights_error_from(&file, recorder_problem(&e), e))?;
    check_record_structure(&record, config, &expected).map_err(fail)?;
    // Burn's `load_record` takes every tensor as it is; the shapes are checked afterwards.
    let model = model.load_record(record);
    let stored = |shapes: &Shapes| stored_shapes(shapes, (config.heads, config.kv_heads()));
    compare_shapes(&stored(&expected), &stored(&parameter_shapes(&model))).map_err(fail)?;
    Ok(model)
}

/// Writes the weights of `model` to the safetensors file `path`, under the names of the module
/// documentation.
pub fn export_safetensors<B: Backend>(model: &Decoder<B>, path: &Path) -> Result<(), ModelError> {
    let heads = model.blocks().first().map_or((1, 1), |b| b.attention().head_counts());
    let metadata = [("format", "burn"), ("producer", "swa-zoo")];
    write_atomically(path, |temp| {
        stored::write(model, heads, &stable_layout(), None, &metadata, temp)
    })
}

/// Loads a model of `config` from the safetensors file `path`.
pub fn import_safetensors<B: Backend>(
    config: &DecoderConfig,
    path: &Path,
    device: &B::Device,
) -> Result<Decoder<B>, ModelError> {
    let fail = |problem| weights_error(path, problem);
    let unreadable = |problem: String| {
        let text = format!("not a readable safetensors file: {problem}");
        weights_error_from(path, text, std::io::Error::other(problem))
    };
    if let Err(e) = std::fs::metadata(path) {
        return Err(weights_error_from(path, format!("cannot read: {e}"), e));
    }
    let file = SafetensorsFile::open(path).map_err(unreadable)?;
    let found = file.tensors.iter().map(|(name, t)| (name.clone(), t.shape.clone())).collect();
    let model = config.init_lazy::<B>(device)?;
    let heads = (config.heads, config.kv_heads());
    compare_shapes(&stored_shapes(&parameter_shapes(&model), heads), &found).map_err(fail)?;
    let float: DType = burn::tensor::get_device_settings::<B>(device).float_dtype.into();
    let holder = file.tensors.keys().map(|name| (name.clone(), 0)).collect();
    let mut load = Load {
        files: vec![(path.to_path_buf(), WeightFile::Safetensors(file))],
        holder,
        layout: stable_layout(),
        heads,
        keep: &|_, _| Keep::Float(float),
        pack: |_, _, _, _| None,
        path: Vec::new(),
        error: None,
    };
    let model = model.map(&mut load);
    match load.error {
        None => Ok(model),
        Some(LoadProblem::Missing(name)) => {
            Err(fail(format!("weight `{name}` is missing from the file")))
        }
        Some(LoadProblem::Unreadable(_, problem)) => Err(unreadable(problem)),
        Some(LoadProblem::Packed) => Err(fail("holds packed weights, which runs never do".into())),
    }
}

/// Our safetensors files: every tensor under its stable name, in Burn's layout.
fn stable_layout() -> Layout<'static> {
    Layout { name: &|part| Some(part.to_string()), transposed: false }
}

/// `shapes` (by module path) under the stable names of weight files, the joined products
/// split ([`crate::stored`]), for a model of `heads` (query, key/value).
pub fn stored_shapes(shapes: &Shapes, heads: (usize, usize)) -> Shapes {
    stable_layout().file_shapes(shapes, heads)
}

fn weights_error(path: &Path, problem: String) -> ModelError {
    ModelError::Weights { path: path.to_path_buf(), problem, source: None }
}

/// [`weights_error`] of a read that failed in a library, keeping its error as the source.
fn weights_error_from(
    path: &Path,
    problem: String,
    source: impl std::error::Error + Send + Sync + 'static,
) -> ModelError {
    ModelError::Weights { path: path.to_path_buf(), problem, source: Some(Box::new(source)) }
}

/// What a failed read of a Burn record means, in one line. Burn appends a note on the record
/// format of its version 0.14 to every decoding error, whatever the cause (a truncated file
/// too); only the decoder's own first line is kept.
pub fn recorder_problem(error: &RecorderError) -> String {
    match error {
        RecorderError::FileNotFound(e) => format!("cannot open: {e}"),
        RecorderError::DeserializeError(e) | RecorderError::Unknown(e) => format!(
            "truncated or corrupt, not a readable Burn record ({})",
            e.lines().next().unwrap_or_default()
        ),
    }
}

/// [`crate::files::write_atomically`], its failure a [`ModelError::Write`].
pub(crate) fn write_atomically(
    target: &Path,
    write: impl FnOnce(&Path) -> std::io::Result<()>,
) -> Result<(), ModelError> {
    crate::files::write_atomically(target, write).map_err(ModelError::Write)
}

/// Parameter shapes by dotted module path.
type Shapes = BTreeMap<String, Vec<usize>>;

/// Collects [`Shapes`] without initialising lazily initialised parameters.
#[derive(Default)]
struct ShapeVisitor {
    path: Vec<String>,
    shapes: Shapes,
}

impl<B: Backend> ModuleVisitor<B> for ShapeVisitor {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.shapes.insert(self.path.join("."), param.lazy_shape().to_vec());
    }
}

/// Every float parameter of `module` by its dotted name (as in the module documentation), with
/// its shape; reads no lazily initialised parameter.
pub fn parameter_shapes<B: Backend, M: Module<B>>(module: &M) -> BTreeMap<String, Vec<usize>> {
    let mut visitor = ShapeVisitor::default();
    module.visit(&mut visitor);
    visitor.shapes
}

/// Names the first weight, in name order, that is missing from `found` (a file's), unexpected
/// in it, or of another shape than in `expected` (the configuration's).
pub fn compare_shapes(
    expected: &BTreeMap<String, Vec<usize>>,
    found: &BTreeMap<String, Vec<usize>>,
) -> Result<(), String> {
    for (name, shape) in expected {
        match found.get(name) {
            None => return Err(format!("weight `{name}` is missing from the file")),
            Some(got) if got != shape => {
                return Err(format!(
                    "weight `{name}` has shape {got:?} in the file but {shape:?} in the configuration"
                ));
            }
            Some(_) => {}
        }
    }
    match found.keys().find(|name| !expected.contains_key(*name)) {
        Some(name) => {
            Err(format!("the file has weight `{name}`, which the configuration does not have"))
        }
        None => Ok(()),
    }
}

/// What Burn's `load_record` does not check without panicking or losing weights: it panics on
/// another number of blocks and on a layer's mixer of another variant (a windowed layer's
/// weights for linear attention, say), and drops an optional part that the configured model
/// lacks (the untied LM head, the q and k norms, the sink logits, Transformer-XL's terms). Parts that the file lacks are caught by [`compare_shapes`] after
/// loading. `expected` is the configured model's [`parameter_shapes`].
pub fn check_record_structure<B: Backend>(
    record: &DecoderRecord<B>,
    config: &DecoderConfig,
    expected: &BTreeMap<String, Vec<usize>>,
) -> Result<(), String> {
    if record.blocks.len() != config.layers {
        let blocks = record.blocks.len();
        return Err(format!(
            "the file has {blocks} blocks; the configuration has `layers` = {}",
            config.layers
        ));
    }
    let mut parts = vec![("head".to_string(), record.head.is_some())];
    for (l, block) in record.blocks.iter().enumerate() {
        let attention = &block.attention;
        let (variant, sinks, relative) = match &attention.mixer {
            MixerRecord::Windowed(w) => ("Windowed", w.sinks.is_some(), w.relative.is_some()),
            MixerRecord::Longformer(_) => ("Longformer", false, false),
            MixerRecord::Linear(_) => ("Linear", false, false),
        };
        let part = |name: &str| format!("blocks.{l}.attention.{name}");
        parts.push((part(&format!("mixer.{variant}")), true));
        parts.push((part("mixer.Windowed.sinks"), sinks));
        parts.push((part("mixer.Windowed.relative"), relative));
        parts.push((part("query_norm"), attention.query_norm.is_some()));
        parts.push((part("key_norm"), attention.key_norm.is_some()));
    }
    for (part, in_file) in parts {
        let prefix = format!("{part}.");
        let configured = expected.keys().any(|name| *name == part || name.starts_with(&prefix));
        if in_file && !configured {
            return Err(format!(
                "the file has `{part}` weights, which the configuration does not have"
            ));
        }
    }
    Ok(())
}
