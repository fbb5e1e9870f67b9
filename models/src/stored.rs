//! How a model's parameters lie in weight files (safetensors, ours and Hugging Face's): each
//! under its module path ([`crate::weights`]' table), the windowed mechanisms' modules named as
//! one (`mixer.Windowed`, with `sinks` and `relative` under the layer), except the two products
//! that one launch computes, which files hold as the separate tensors other tools (Hugging
//! Face's checkpoints) have:
//!
//! | parameter | in files |
//! |---|---|
//! | `….{local,global}.qkv.{weight,bias}`, `[d, (H + 2·H_kv)·d_h]` | `….query.*` `[d, H·d_h]`, `….key.*`, `….value.*` `[d, H_kv·d_h]` |
//! | `blocks.{l}.mlp.gate_up.weight`, `[d, 2F]` | `blocks.{l}.mlp.gate.weight`, `blocks.{l}.mlp.up.weight`, `[d, F]` |
//!
//! A joined parameter is its parts side by side along its output axis (the last in Burn's
//! `[in, out]` layout). Exporting ([`write()`]) splits it; importing ([`Load`]) joins the parts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Device, Tensor, TensorData, TensorPrimitive};
use swa_attention::packed::{BLOCK, Packing};

use crate::gguf::{GgmlType, GgufCheckpoint};
use crate::safetensors::{SafetensorsFile, SafetensorsWriter};

/// One tensor of a file that is all or part of a parameter: its stable name (a module path
/// with the joined products split) and its columns `start .. start + width` of the
/// parameter's output axis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The stable name, before any file's own naming.
    pub name: String,
    /// The first column of the output axis.
    pub start: usize,
    /// The columns.
    pub width: usize,
}

/// The parts of the parameter at `path` of `shape` in a model of `heads` query heads and
/// `kv_heads` key/value heads: three for q|k|v, two for gate|up, the parameter itself
/// otherwise.
pub fn parts(path: &str, shape: &[usize], heads: usize, kv_heads: usize) -> Vec<Part> {
    let path = &stored_path(path);
    let out = shape.last().copied().unwrap_or(0);
    let split = |prefix: &str, suffix: &str, names: &[&str], widths: &[usize]| {
        let mut start = 0;
        let parts = names.iter().zip(widths).map(|(name, &width)| {
            let part = Part { name: format!("{prefix}{name}{suffix}"), start, width };
            start += width;
            part
        });
        parts.collect()
    };
    if let Some((prefix, suffix)) = path.split_once(".qkv.") {
        let head = out / (heads + 2 * kv_heads).max(1);
        let widths = [heads * head, kv_heads * head, kv_heads * head];
        return split(&format!("{prefix}."), &format!(".{suffix}"), &QKV, &widths);
    }
    if let Some(prefix) = path.strip_suffix("mlp.gate_up.weight") {
        return split(&format!("{prefix}mlp."), ".weight", &GATE_UP, &[out / 2, out / 2]);
    }
    vec![Part { name: path.to_string(), start: 0, width: out }]
}

/// The stable name of the parameter at module path `path`: the path, except under the modules
/// of the windowed mechanisms, which files name as one (`mixer.Windowed`), with the sink
/// logits and Transformer-XL's terms directly under the layer.
fn stored_path(path: &str) -> String {
    const RENAMES: [(&str, &str); 4] = [
        (".attention.mixer.Windowed.sinks", ".attention.sinks"),
        (".attention.mixer.Windowed.relative.", ".attention.relative."),
        (".attention.mixer.Longformer.local.", ".attention.mixer.Windowed."),
        (".attention.mixer.Longformer.", ".attention.mixer.Windowed."),
    ];
    match RENAMES.iter().find(|(module, _)| path.contains(module)) {
        Some((module, stored)) => path.replacen(module, stored, 1),
        None => path.to_string(),
    }
}

/// The parts of q|k|v, in order.
const QKV: [&str; 3] = ["query", "key", "value"];

/// The parts of gate|up, in order.
const GATE_UP: [&str; 2] = ["gate", "up"];

/// How one file format names and lays out the parts.
pub struct Layout<'a> {
    /// The file's name of a part's stable name; `None`: the format has no such tensor.
    pub name: &'a dyn Fn(&str) -> Option<String>,
    /// Whether the file holds linear weights `[out, in]` (PyTorch's) rather than `[in, out]`.
    pub transposed: bool,
}

impl Layout<'_> {
    /// Whether the tensor `path` of `shape` is stored transposed: a linear layer's weight in a
    /// transposed layout.
    fn transposes(&self, path: &str, shape: &[usize]) -> bool {
        self.transposed && is_linear_weight(path, shape)
    }

    /// Every tensor the file holds for parameters of `shapes` (by module path): its file name
    /// and its shape there. A part the format does not name is left out.
    pub fn file_shapes(
        &self,
        shapes: &BTreeMap<String, Vec<usize>>,
        (heads, kv_heads): (usize, usize),
    ) -> BTreeMap<String, Vec<usize>> {
        let mut files = BTreeMap::new();
        for (path, shape) in shapes {
            for part in parts(path, shape, heads, kv_heads) {
                let Some(name) = (self.name)(&part.name) else { continue };
                let mut shape = shape.clone();
                *shape.last_mut().expect("a parameter has an axis") = part.width;
                if self.transposes(path, &shape) {
                    shape.reverse();
                }
                files.insert(name, shape);
            }
        }
        files
    }
}

/// The module path of the embedding table.
pub const EMBEDDING: &str = "embedding.weight";

/// Whether the parameter `path` of `shape` is a linear layer's weight (2-D, named `weight`),
/// which PyTorch stores transposed, `[out, in]`; the embedding table is not one.
pub fn is_linear_weight(path: &str, shape: &[usize]) -> bool {
    shape.len() == 2 && path.ends_with(".weight") && path != EMBEDDING
}

/// Writes every float parameter of `module` (of `heads` query and `kv_heads` key/value heads)
/// into the safetensors file `path` under `layout`, with `metadata`: each part in its
/// parameter's dtype, or in `dtype` when set. The data are read and written one part at a
/// time.
pub fn write<B: Backend, M: Module<B>>(
    module: &M,
    heads: (usize, usize),
    layout: &Layout,
    dtype: Option<DType>,
    metadata: &[(&str, &str)],
    path: &Path,
) -> std::io::Result<()> {
    let mut walk = Walk { heads, layout, dtype, path: Vec::new(), header: Vec::new(), out: None };
    module.visit(&mut walk);
    let mut writer = SafetensorsWriter::create(path, &walk.header, metadata)?;
    walk.out = Some((&mut writer, Ok(())));
    module.visit(&mut walk);
    let (_, written) = walk.out.take().expect("set above");
    written?;
    writer.finish()
}

/// The two walks of [`write`]: the first lists each part's name, dtype and shape (`header`),
/// the second, with `out` set, writes each part's data in the same order.
struct Walk<'a, 'w> {
    heads: (usize, usize),
    layout: &'a Layout<'a>,
    dtype: Option<DType>,
    path: Vec<String>,
    header: Vec<(String, DType, Vec<usize>)>,
    out: Option<(&'w mut SafetensorsWriter, std::io::Result<()>)>,
}

impl<B: Backend> ModuleVisitor<B> for Walk<'_, '_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let (path, shape) = (self.path.join("."), param.lazy_shape().to_vec());
        let (heads, kv_heads) = self.heads;
        for part in parts(&path, &shape, heads, kv_heads) {
            let Some(name) = (self.layout.name)(&part.name) else { continue };
            let tensor = param.val().narrow(D - 1, part.start, part.width);
            let tensor = match self.layout.transposes(&path, &shape) {
                true => tensor.transpose(),
                false => tensor,
            };
            let dtype = self.dtype.unwrap_or(tensor.dtype());
            match &mut self.out {
                None => self.header.push((name, dtype, tensor.dims().to_vec())),
                Some((writer, written @ Ok(()))) => {
                    *written = writer.append(&tensor.into_data().convert_dtype(dtype));
                }
                Some(_) => {}
            }
        }
    }
}

/// A file of weights: safetensors, or a GGUF checkpoint read under transformers' names.
pub enum WeightFile {
    /// A safetensors file (ours, or one of a Hugging Face checkpoint).
    Safetensors(SafetensorsFile),
    /// A GGUF file, its tensors dequantized as they are read.
    Gguf(Box<GgufCheckpoint>),
}

/// How a loaded parameter holds its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// In this float type.
    Float(DType),
    /// Packed in this block format ([`swa_attention::packed`]), by the backend's
    /// `swa_attention::LayerOpsBackend::pack`.
    Packed(Packing),
    /// As its file stores it ([`WeightFile::stored`]).
    AsStored,
}

impl WeightFile {
    /// How the tensor `name` is stored: a safetensors tensor in its float type; a GGUF tensor
    /// packed where products read its format, in its float type where it is one, else
    /// (K-quants, Q5_0, Q5_1) in bf16.
    pub fn stored(&self, name: &str) -> Keep {
        match self {
            WeightFile::Safetensors(file) => Keep::Float(file.tensors[name].dtype),
            WeightFile::Gguf(file) => match (file.packing(name), file.kind(name)) {
                (Some(packing), _) => Keep::Packed(packing),
                (None, GgmlType::F32) => Keep::Float(DType::F32),
                (None, GgmlType::F16) => Keep::Float(DType::F16),
                (None, _) => Keep::Float(DType::BF16),
            },
        }
    }

    /// The tensor `name`, `[rows, in]` with `in` a multiple of 32, packed in `packing`: a GGUF
    /// file's own blocks where it stores them so, else the values packed on load.
    pub fn read_packed(&mut self, name: &str, packing: Packing) -> Result<Vec<u8>, String> {
        match self {
            WeightFile::Gguf(file) => file.read_packed(name, packing),
            WeightFile::Safetensors(file) => {
                let data = file.read(name)?.convert::<f32>();
                let values = data.to_vec::<f32>().map_err(|e| format!("{e:?}"))?;
                let mut bytes = Vec::with_capacity(packing.row_bytes(values.len()));
                packing.pack(&values, &mut bytes);
                Ok(bytes)
            }
        }
    }

    /// Every tensor's shape, by name.
    pub fn shapes(&self) -> BTreeMap<String, Vec<usize>> {
        match self {
            WeightFile::Safetensors(file) => file
                .tensors
                .iter()
                .map(|(name, entry)| (name.clone(), entry.shape.clone()))
                .collect(),
            WeightFile::Gguf(file) => file.shapes(),
        }
    }

    /// The tensor `name`, in its file's float type (safetensors) or dequantized into `dtype`
    /// (GGUF).
    pub fn read(&mut self, name: &str, dtype: DType) -> Result<TensorData, String> {
        match self {
            WeightFile::Safetensors(file) => file.read(name),
            WeightFile::Gguf(file) => file.read(name, dtype),
        }
    }
}

/// Replaces every float parameter of a model by its tensors from weight files, read when
/// it is reached and joined where the parameter is several ([`parts`]). The first failure is
/// kept and the parameters after it are left as they are.
pub struct Load<'a, B: Backend> {
    /// The weight files, each with its path.
    pub files: Vec<(PathBuf, WeightFile)>,
    /// The index in `files` of the file holding each tensor.
    pub holder: BTreeMap<String, usize>,
    /// How the files name and lay out the tensors.
    pub layout: Layout<'a>,
    /// The model's query and key/value heads.
    pub heads: (usize, usize),
    /// How each parameter holds its values, by module path and shape.
    pub keep: &'a dyn Fn(&str, &[usize]) -> Keep,
    /// The backend's packed tensor of rows of bytes
    /// ([`swa_attention::LayerOpsBackend::pack`]), `None` where it keeps none.
    pub pack: Pack<B>,
    /// The module path being visited.
    pub path: Vec<String>,
    /// The first failure: the file's tensor and what is wrong, or a missing tensor's name.
    pub error: Option<LoadProblem>,
}

/// `bytes`, rows `[rows, in]` packed in a block format, as a backend's packed float tensor.
pub type Pack<B> = fn(Vec<u8>, Packing, [usize; 2], &Device<B>) -> Option<FloatTensor<B>>;

/// Why [`Load`] stopped.
#[derive(Debug)]
pub enum LoadProblem {
    /// The files have no tensor of this name (the file's name where the format has one).
    Missing(String),
    /// The file at this path could not be read: why.
    Unreadable(PathBuf, String),
    /// Weights were asked to be kept packed on a backend that keeps none (only flex does).
    Packed,
}

impl<B: Backend> Load<'_, B> {
    /// The tensors of the parameter at `path` of `shape`, joined, on `device`.
    fn tensor<const D: usize>(
        &mut self,
        path: &str,
        shape: &[usize],
        device: &B::Device,
    ) -> Result<Tensor<B, D>, LoadProblem> {
        let (heads, kv_heads) = self.heads;
        let transposed = self.layout.transposes(path, shape);
        let mut pieces = Vec::new();
        for part in parts(path, shape, heads, kv_heads) {
            let missing = || LoadProblem::Missing(part.name.clone());
            let name = (self.layout.name)(&part.name).ok_or_else(missing)?;
            let index = *self.holder.get(&name).ok_or(LoadProblem::Missing(name.clone()))?;
            pieces.push((name, index));
        }
        let keep = self.resolve(path, shape, &pieces);
        if let Keep::Packed(packing) = keep {
            let mut bytes = Vec::new();
            for (name, index) in &pieces {
                let (file, reader) = &mut self.files[*index];
                let part = reader.read_packed(name, packing);
                bytes.extend(part.map_err(|p| LoadProblem::Unreadable(file.clone(), p))?);
            }
            let [rows, k] = match transposed {
                true => [shape[1], shape[0]],
                false => [shape[0], shape[1]],
            };
            let packed =
                (self.pack)(bytes, packing, [rows, k], device).ok_or(LoadProblem::Packed)?;
            let tensor = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(packed));
            let tensor = if transposed { tensor.transpose() } else { tensor };
            return Ok(Tensor::from_primitive(tensor.into_primitive()));
        }
        let dtype = match keep {
            Keep::Float(dtype) => dtype,
            _ => DType::F32,
        };
        let mut tensors = Vec::new();
        for (name, index) in &pieces {
            let (file, reader) = &mut self.files[*index];
            let data =
                reader.read(name, dtype).map_err(|p| LoadProblem::Unreadable(file.clone(), p))?;
            tensors.push(Tensor::<B, D>::from_data(data, (device, dtype)));
        }
        // `[out, in]` parts stack along their first axis: the joined storage stays `[out, in]`
        // and the parameter is its transposed view, as one part's would be.
        Ok(match transposed {
            true => Tensor::cat(tensors, 0).transpose(),
            false => Tensor::cat(tensors, D - 1),
        })
    }

    /// How the parameter at `path` of `shape`, read from `pieces` (file names and files),
    /// holds its values: as [`Load::keep`] says, its parts' own way for [`Keep::AsStored`]
    /// (f32 where they differ). Packed only where it can be: a linear layer's weight stored
    /// `[out, in]` or the embedding table, rows of whole blocks; else in the first float
    /// type asked (f32 for a packing).
    fn resolve(&self, path: &str, shape: &[usize], pieces: &[(String, usize)]) -> Keep {
        let asked = (self.keep)(path, shape);
        let stored = |(name, index): &(String, usize)| self.files[*index].1.stored(name);
        let keep = match asked {
            Keep::AsStored => {
                let mut kinds = pieces.iter().map(stored);
                let first = kinds.next().unwrap_or(Keep::Float(DType::F32));
                if kinds.all(|kind| kind == first) { first } else { Keep::Float(DType::F32) }
            }
            keep => keep,
        };
        let rows_along_in = self.layout.transposes(path, shape) || path == EMBEDDING;
        let whole_blocks = shape.len() == 2 && shape.iter().all(|d| d % BLOCK == 0);
        match keep {
            Keep::Packed(_) if !(rows_along_in && whole_blocks) => Keep::Float(DType::F32),
            keep => keep,
        }
    }
}

impl<B: Backend> ModuleMapper<B> for Load<'_, B> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        if self.error.is_some() {
            return param;
        }
        let (path, shape) = (self.path.join("."), param.lazy_shape().to_vec());
        match self.tensor::<D>(&path, &shape, &param.lazy_device()) {
            Ok(tensor) => {
                let id = param.id;
                param.transform_for_load(tensor, id)
            }
            Err(problem) => {
                self.error = Some(problem);
                param
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joined_parameters_split_into_their_parts() {
        let names = |parts: Vec<Part>| -> Vec<(String, usize, usize)> {
            parts.into_iter().map(|p| (p.name, p.start, p.width)).collect()
        };
        let qkv = parts("blocks.1.attention.mixer.Windowed.global.qkv.bias", &[32], 4, 2);
        let at = |name: &str| format!("blocks.1.attention.mixer.Windowed.global.{name}.bias");
        let expected = vec![(at("query"), 0, 16), (at("key"), 16, 8), (at("value"), 24, 8)];
        assert_eq!(names(qkv), expected);
        let mlp = parts("blocks.0.mlp.gate_up.weight", &[16, 128], 4, 2);
        let gate = ("blocks.0.mlp.gate.weight".to_string(), 0, 64);
        assert_eq!(names(mlp), vec![gate, ("blocks.0.mlp.up.weight".to_string(), 64, 64)]);
        let other = parts("blocks.0.mlp.down.weight", &[64, 16], 4, 2);
        assert_eq!(names(other), vec![("blocks.0.mlp.down.weight".to_string(), 0, 16)]);
    }
}
