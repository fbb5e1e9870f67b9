//! A GGUF file's header: its metadata and its tensors' descriptions, every size checked against
//! the file's length before anything is allocated, then each tensor's data read on its own
//! and dequantized ([`super::quants`]).
//!
//! The layout (ggml's `docs/gguf.md`, versions 2 and 3): the magic `GGUF`, a `u32` version, the
//! tensor and metadata counts (`u64`), the metadata as key/typed-value pairs, then per tensor
//! its name, dimensions (innermost first), ggml type and offset; the data starts at the next
//! multiple of `general.alignment` (32 unless set). All little-endian.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use burn::tensor::{DType, TensorData};
use burn::tensor::{bf16, f16};

use super::quants::{self, GgmlType};

/// The most dimensions a tensor may have (ggml's `GGML_MAX_DIMS`).
const MAX_DIMS: u32 = 4;

/// Bytes dequantized per read while a tensor is loaded (a whole number of blocks).
const CHUNK: usize = 1 << 20;

/// Why a GGUF file cannot be read.
#[derive(Debug)]
pub enum GgufFault {
    /// It is not a GGUF file, or it is truncated or corrupt: what is wrong.
    Corrupt(String),
    /// It is a well-formed GGUF file that holds what this reader does not read (a version or a
    /// tensor type): which.
    Unsupported(String),
}

impl From<String> for GgufFault {
    fn from(problem: String) -> Self {
        GgufFault::Corrupt(problem)
    }
}

impl From<&str> for GgufFault {
    fn from(problem: &str) -> Self {
        GgufFault::Corrupt(problem.into())
    }
}

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    /// Any unsigned integer type.
    Unsigned(u64),
    /// Any signed integer type.
    Signed(i64),
    /// `f32` or `f64`.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A UTF-8 string.
    Text(String),
    /// An array of values of one type.
    Array(Vec<MetaValue>),
}

impl MetaValue {
    /// The value as an unsigned integer, if it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::Unsigned(v) => Some(v),
            MetaValue::Signed(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, if it is a number.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::Float(v) => Some(v),
            MetaValue::Unsigned(v) => Some(v as f64),
            MetaValue::Signed(v) => Some(v as f64),
            _ => None,
        }
    }

    /// The value as a string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::Text(text) => Some(text),
            _ => None,
        }
    }
}

/// One tensor's description.
#[derive(Clone, Debug)]
pub struct GgufTensor {
    /// Its shape, outermost first (row-major, as torch and safetensors name it: the reverse of
    /// ggml's innermost-first dimensions).
    pub shape: Vec<usize>,
    /// How its values are stored.
    pub kind: GgmlType,
    /// Where its data starts, from the start of the file.
    offset: u64,
}

/// An open GGUF file: its metadata and its tensors by name.
pub struct GgufFile {
    file: File,
    /// The metadata by key (`general.architecture`, `llama.block_count`, …).
    pub metadata: BTreeMap<String, MetaValue>,
    /// The tensors by their GGUF names (`blk.0.attn_q.weight`, …).
    pub tensors: BTreeMap<String, GgufTensor>,
}

/// A reader that knows how many bytes of the file are left, so that no count read from the
/// file allocates more than the file could hold.
struct Header {
    reader: BufReader<File>,
    left: u64,
}

impl Header {
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut bytes = [0; N];
        self.take(N as u64)?;
        self.reader.read_exact(&mut bytes).map_err(|e| e.to_string())?;
        Ok(bytes)
    }

    /// Counts `n` bytes as read; fails when the file has fewer left.
    fn take(&mut self, n: u64) -> Result<(), String> {
        self.left = self.left.checked_sub(n).ok_or("the header runs past the end of the file")?;
        Ok(())
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    /// A count of items of at least `min_bytes` each, checked against the bytes left.
    fn count(&mut self, what: &str, min_bytes: u64) -> Result<usize, String> {
        let n = self.u64()?;
        if n.saturating_mul(min_bytes) > self.left {
            return Err(format!("{n} {what} cannot fit in the {} bytes left", self.left));
        }
        Ok(n as usize)
    }

    fn string(&mut self) -> Result<String, String> {
        let len = self.count("string bytes", 1)?;
        let mut bytes = vec![0; len];
        self.take(len as u64)?;
        self.reader.read_exact(&mut bytes).map_err(|e| e.to_string())?;
        String::from_utf8(bytes).map_err(|_| "a string is not UTF-8".to_string())
    }

    /// A value of metadata type `kind` (gguf_type: 0–12).
    fn value(&mut self, kind: u32, depth: usize) -> Result<MetaValue, String> {
        Ok(match kind {
            0 => MetaValue::Unsigned(self.bytes::<1>()?[0] as u64),
            1 => MetaValue::Signed(self.bytes::<1>()?[0] as i8 as i64),
            2 => MetaValue::Unsigned(u16::from_le_bytes(self.bytes()?) as u64),
            3 => MetaValue::Signed(i16::from_le_bytes(self.bytes()?) as i64),
            4 => MetaValue::Unsigned(self.u32()? as u64),
            5 => MetaValue::Signed(i32::from_le_bytes(self.bytes()?) as i64),
            6 => MetaValue::Float(f32::from_le_bytes(self.bytes()?) as f64),
            7 => MetaValue::Bool(self.bytes::<1>()?[0] != 0),
            8 => MetaValue::Text(self.string()?),
            9 if depth == 0 => {
                let inner = self.u32()?;
                let n = self.count("array items", 1)?;
                let items = (0..n).map(|_| self.value(inner, depth + 1));
                MetaValue::Array(items.collect::<Result<_, _>>()?)
            }
            10 => MetaValue::Unsigned(self.u64()?),
            11 => MetaValue::Signed(i64::from_le_bytes(self.bytes()?)),
            12 => MetaValue::Float(f64::from_le_bytes(self.bytes()?)),
            9 => return Err("an array of arrays in the metadata".into()),
            other => return Err(format!("unknown metadata type {other}")),
        })
    }
}

impl GgufFile {
    /// Opens `path` and reads its header; fails, saying what is wrong, on an unreadable file,
    /// another format, a version other than 2 or 3, a corrupt header, a tensor type this reader
    /// cannot dequantize, or data that runs past the end (a truncated file).
    pub fn open(path: &Path) -> Result<Self, GgufFault> {
        let file = File::open(path).map_err(|e| e.to_string())?;
        let len = file.metadata().map_err(|e| e.to_string())?.len();
        let reader = BufReader::new(file.try_clone().map_err(|e| e.to_string())?);
        let mut header = Header { reader, left: len };
        if &header.bytes::<4>().map_err(|_| "not a GGUF file")? != b"GGUF" {
            return Err("not a GGUF file (no `GGUF` magic)".into());
        }
        let version = header.u32()?;
        if !(2..=3).contains(&version) {
            let problem = format!("GGUF version {version} is not supported (2, 3)");
            return Err(GgufFault::Unsupported(problem));
        }
        // A tensor's description takes at least 8 + 4 + 4 + 8 bytes; a key/value pair 8 + 4.
        let tensor_count = header.count("tensors", 24)?;
        let kv_count = header.count("metadata entries", 12)?;
        let mut metadata = BTreeMap::new();
        for _ in 0..kv_count {
            let key = header.string()?;
            let kind = header.u32()?;
            let value = header.value(kind, 0).map_err(|e| format!("metadata `{key}`: {e}"))?;
            metadata.insert(key, value);
        }
        let mut described = Vec::with_capacity(tensor_count);
        for _ in 0..tensor_count {
            let name = header.string()?;
            let at = |e: String| format!("tensor `{name}`: {e}");
            let dims = header.u32()?;
            if dims == 0 || dims > MAX_DIMS {
                return Err(at(format!("{dims} dimensions (1 to {MAX_DIMS})")).into());
            }
            let mut shape = (0..dims).map(|_| header.u64()).collect::<Result<Vec<_>, _>>()?;
            shape.reverse();
            let kind =
                GgmlType::from_id(header.u32()?).map_err(|e| GgufFault::Unsupported(at(e)))?;
            let offset = header.u64()?;
            described.push((name, shape, kind, offset));
        }
        let alignment = metadata.get("general.alignment").and_then(MetaValue::as_u64).unwrap_or(32);
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(format!("`general.alignment` is {alignment}, not a power of two").into());
        }
        let data_start = (len - header.left).next_multiple_of(alignment);
        let mut tensors = BTreeMap::new();
        for (name, shape, kind, offset) in described {
            let at = |e: String| format!("tensor `{name}`: {e}");
            let (&row, outer) = shape.split_last().expect("at least one dimension");
            let rows = outer.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
            let bytes = (rows.zip(kind.row_bytes(row))).and_then(|(n, r)| n.checked_mul(r));
            let bytes = bytes.ok_or_else(|| {
                at(format!("rows of {row} values are not whole {} blocks", kind.name()))
            })?;
            let start = data_start.checked_add(offset).filter(|s| s.is_multiple_of(alignment));
            let start = start.ok_or_else(|| at(format!("offset {offset} is not aligned")))?;
            if start.saturating_add(bytes) > len {
                return Err(at("its data runs past the end of the file".into()).into());
            }
            let shape = shape.into_iter().map(|d| d as usize).collect();
            tensors.insert(name, GgufTensor { shape, kind, offset: start });
        }
        Ok(Self { file, metadata, tensors })
    }

    /// The data of the tensor `name` (which must be in [`Self::tensors`]) as `dtype` (F32,
    /// F16 or BF16), dequantized a chunk of blocks at a time: no f32 copy of the whole tensor
    /// is made on the way to a half-precision one.
    pub fn read(&mut self, name: &str, dtype: DType) -> Result<TensorData, String> {
        let tensor = &self.tensors[name];
        let (kind, shape) = (tensor.kind, tensor.shape.clone());
        let count: usize = shape.iter().product();
        self.file.seek(SeekFrom::Start(tensor.offset)).map_err(|e| e.to_string())?;
        let file = &mut self.file;
        Ok(match dtype {
            DType::F16 => TensorData::new(decode(file, kind, count, f16::from_f32)?, shape),
            DType::BF16 => TensorData::new(decode(file, kind, count, bf16::from_f32)?, shape),
            _ => TensorData::new(decode(file, kind, count, |v| v)?, shape),
        })
    }
}

impl GgufFile {
    /// The stored bytes of the tensor `name` (which must be in [`Self::tensors`]), as they are.
    pub fn read_stored(&mut self, name: &str) -> Result<Vec<u8>, String> {
        let tensor = &self.tensors[name];
        let (&row, outer) = tensor.shape.split_last().expect("at least one dimension");
        let rows: usize = outer.iter().product();
        let row_bytes = tensor.kind.row_bytes(row as u64).expect("checked on open") as usize;
        let mut bytes = vec![0; rows * row_bytes];
        self.file.seek(SeekFrom::Start(tensor.offset)).map_err(|e| e.to_string())?;
        self.file.read_exact(&mut bytes).map_err(|e| e.to_string())?;
        Ok(bytes)
    }
}

/// `count` values of type `kind` from `file`, each dequantized to f32 and stored by `store`.
fn decode<T>(
    file: &mut File,
    kind: GgmlType,
    count: usize,
    store: impl Fn(f32) -> T,
) -> Result<Vec<T>, String> {
    let (block, block_bytes) = (kind.block_len(), kind.block_bytes());
    let blocks_per_chunk = (CHUNK / block_bytes).max(1);
    let mut values = Vec::with_capacity(count);
    let mut bytes = vec![0; blocks_per_chunk * block_bytes];
    let mut floats = vec![0.0; blocks_per_chunk * block];
    let mut left = count / block;
    while left > 0 {
        let blocks = left.min(blocks_per_chunk);
        let (bytes, floats) = (&mut bytes[..blocks * block_bytes], &mut floats[..blocks * block]);
        file.read_exact(bytes).map_err(|e| e.to_string())?;
        quants::dequantize(kind, bytes, floats);
        values.extend(floats.iter().map(|&v| store(v)));
        left -= blocks;
    }
    Ok(values)
}
