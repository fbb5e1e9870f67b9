//! Safetensors files read and written one tensor at a time. Reading takes the header (names,
//! dtypes, shapes, byte ranges) when the file is opened, then each tensor's bytes on request,
//! through a small buffer: the checkpoint is never mapped or held whole, so importing a model
//! takes its weights' memory and little more (docs/benchmarks.md, "Decoding a pretrained-format
//! model"). Writing takes the header first, then each tensor's data in its order.
//!
//! The format: an 8-byte little-endian header length, a JSON header mapping each tensor's name
//! to `{"dtype", "shape", "data_offsets": [begin, end]}` (offsets relative to the end of the
//! header; an optional `__metadata__` entry), then the little-endian data.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use burn::tensor::{DType, TensorData, bf16, f16};
use serde_json::Value;

/// The largest header read (the format's own limit is 100 MB).
const MAX_HEADER: u64 = 100 << 20;

/// Bytes decoded per read while a tensor is loaded.
const CHUNK: usize = 1 << 20;

/// One tensor of the file.
pub struct Entry {
    /// Its element type: F32, F16 or BF16.
    pub dtype: DType,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Where its data starts, from the start of the file.
    offset: u64,
}

/// An open safetensors file and its header.
pub struct SafetensorsFile {
    file: File,
    /// The tensors by name.
    pub tensors: BTreeMap<String, Entry>,
}

impl SafetensorsFile {
    /// Opens `path` and reads its header; fails, saying what is wrong, on an unreadable file, a
    /// corrupt header, an unsupported dtype, or data that runs past the end (a truncated file).
    pub fn open(path: &Path) -> Result<Self, String> {
        let mut file = File::open(path).map_err(|e| e.to_string())?;
        let file_len = file.metadata().map_err(|e| e.to_string())?.len();
        let truncated = || "the header runs past the end of the file".to_string();
        let mut prefix = [0; 8];
        file.read_exact(&mut prefix).map_err(|_| truncated())?;
        let header_len = u64::from_le_bytes(prefix);
        if header_len > MAX_HEADER || 8 + header_len > file_len {
            return Err(truncated());
        }
        let mut header = vec![0; header_len as usize];
        file.read_exact(&mut header).map_err(|_| truncated())?;
        let json: Value =
            serde_json::from_slice(&header).map_err(|e| format!("the header is not JSON ({e})"))?;
        let object = json.as_object().ok_or("the header is not a JSON object")?;
        let data_start = 8 + header_len;
        let mut tensors = BTreeMap::new();
        for (name, info) in object.iter().filter(|(name, _)| *name != "__metadata__") {
            let entry = Entry::parse(info, data_start, file_len)
                .map_err(|problem| format!("tensor `{name}`: {problem}"))?;
            tensors.insert(name.clone(), entry);
        }
        Ok(Self { file, tensors })
    }

    /// The data of the tensor `name` (which must be in [`Self::tensors`]), in its file dtype.
    pub fn read(&mut self, name: &str) -> Result<TensorData, String> {
        let entry = &self.tensors[name];
        let (shape, count) = (entry.shape.clone(), entry.shape.iter().product::<usize>());
        self.file.seek(SeekFrom::Start(entry.offset)).map_err(|e| e.to_string())?;
        let file = &mut self.file;
        let data = match entry.dtype {
            DType::F32 => TensorData::new(decode(file, count, f32::from_le_bytes)?, shape),
            DType::F16 => {
                let values = decode(file, count, |b| f16::from_bits(u16::from_le_bytes(b)))?;
                TensorData::new(values, shape)
            }
            _ => {
                let values = decode(file, count, |b| bf16::from_bits(u16::from_le_bytes(b)))?;
                TensorData::new(values, shape)
            }
        };
        Ok(data)
    }
}

/// A safetensors file being written: the header is written when it is created, then each
/// tensor's data by [`SafetensorsWriter::append`], in the header's order.
pub struct SafetensorsWriter {
    file: BufWriter<File>,
    /// The byte length still expected of each tensor, in order.
    expected: std::vec::IntoIter<usize>,
}

impl SafetensorsWriter {
    /// Creates `path` with the header of `tensors` (name, dtype, shape; F32, F16 or BF16) and
    /// `metadata`, their data to follow in that order. The header is padded with spaces to a
    /// multiple of 8 bytes, as the format's own writer does.
    pub fn create(
        path: &Path,
        tensors: &[(String, DType, Vec<usize>)],
        metadata: &[(&str, &str)],
    ) -> io::Result<Self> {
        let mut header = serde_json::Map::new();
        let metadata = metadata.iter().map(|(k, v)| (k.to_string(), Value::from(*v)));
        header.insert("__metadata__".into(), Value::Object(metadata.collect()));
        let (mut offset, mut expected) = (0, Vec::new());
        for (name, dtype, shape) in tensors {
            let (tag, size) = match dtype {
                DType::F32 => ("F32", 4),
                DType::F16 => ("F16", 2),
                DType::BF16 => ("BF16", 2),
                other => return Err(io::Error::other(format!("{name}: {other:?} is not written"))),
            };
            let bytes = size * shape.iter().product::<usize>();
            let entry = serde_json::json!({
                "dtype": tag, "shape": shape, "data_offsets": [offset, offset + bytes],
            });
            header.insert(name.clone(), entry);
            expected.push(bytes);
            offset += bytes;
        }
        let mut text = Value::Object(header).to_string();
        text.push_str(&" ".repeat(text.len().next_multiple_of(8) - text.len()));
        let mut file = BufWriter::new(File::create(path)?);
        file.write_all(&(text.len() as u64).to_le_bytes())?;
        file.write_all(text.as_bytes())?;
        Ok(Self { file, expected: expected.into_iter() })
    }

    /// Writes the next tensor's data, which must have the header's dtype and shape, in the
    /// machine's byte order (little-endian on every target Burn's backends run on).
    pub fn append(&mut self, data: &TensorData) -> io::Result<()> {
        let bytes = data.as_bytes();
        match self.expected.next() {
            Some(expected) if expected == bytes.len() => self.file.write_all(bytes),
            _ => Err(io::Error::other("a tensor's data differs from the header")),
        }
    }

    /// Flushes the file, once every tensor of the header is written.
    pub fn finish(mut self) -> io::Result<()> {
        if self.expected.next().is_some() {
            return Err(io::Error::other("tensors of the header were not written"));
        }
        self.file.flush()
    }
}

impl Entry {
    /// The header's entry `info`, checked against the file's length.
    fn parse(info: &Value, data_start: u64, file_len: u64) -> Result<Self, String> {
        let (dtype, size) = match info["dtype"].as_str() {
            Some("F32") => (DType::F32, 4),
            Some("F16") => (DType::F16, 2),
            Some("BF16") => (DType::BF16, 2),
            Some(other) => return Err(format!("dtype {other} is not a float type swa-zoo reads")),
            None => return Err("no dtype".into()),
        };
        let numbers = |key: &str| -> Option<Vec<u64>> {
            info[key].as_array()?.iter().map(Value::as_u64).collect()
        };
        let shape = numbers("shape").ok_or("no shape")?;
        let (begin, end) = match numbers("data_offsets").as_deref() {
            Some(&[begin, end]) if begin <= end => (begin, end),
            _ => return Err("no valid data_offsets".into()),
        };
        let bytes = shape.iter().try_fold(size, |n: u64, &d| n.checked_mul(d));
        if bytes != Some(end - begin) {
            return Err(format!("{} bytes for shape {shape:?}", end - begin));
        }
        if data_start.saturating_add(end) > file_len {
            return Err("its data runs past the end of the file".into());
        }
        let shape = shape.into_iter().map(|d| d as usize).collect();
        Ok(Self { dtype, shape, offset: data_start + begin })
    }
}

/// `count` little-endian values of `N` bytes each from `file`, decoded by `value`.
fn decode<T, const N: usize>(
    file: &mut File,
    count: usize,
    value: impl Fn([u8; N]) -> T,
) -> Result<Vec<T>, String> {
    let mut values = Vec::with_capacity(count);
    let mut buffer = vec![0; CHUNK.min(count * N)];
    while values.len() < count {
        let bytes = &mut buffer[..(count - values.len()).min(CHUNK / N) * N];
        file.read_exact(bytes).map_err(|e| e.to_string())?;
        let chunks = bytes.chunks_exact(N);
        values.extend(chunks.map(|b| value(b.try_into().expect("chunks of N bytes"))));
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::PathBuf;

    use serde_json::json;

    use super::*;

    /// A safetensors file of `header` (JSON) and `data` under the temporary directory.
    fn file(tag: &str, header: &str, data: &[u8]) -> PathBuf {
        let path = std::env::temp_dir().join(format!("swa-zoo-st-{tag}-{}", std::process::id()));
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(data);
        fs::write(&path, bytes).unwrap();
        path
    }

    fn open(tag: &str, header: serde_json::Value, data: &[u8]) -> Result<SafetensorsFile, String> {
        let path = file(tag, &header.to_string(), data);
        let opened = SafetensorsFile::open(&path);
        fs::remove_file(path).unwrap();
        opened
    }

    #[test]
    fn every_float_dtype_reads_back_exactly() {
        let a = [1.5f32, -2.0, 3.25, 0.0, 7.0, -0.5];
        let b = [f16::from_f32(0.5), f16::from_f32(-3.0)];
        let c = [bf16::from_f32(2.0), bf16::from_f32(-0.25), bf16::from_f32(8.0)];
        let mut data: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
        data.extend(b.iter().flat_map(|v| v.to_bits().to_le_bytes()));
        data.extend(c.iter().flat_map(|v| v.to_bits().to_le_bytes()));
        let header = json!({
            "__metadata__": {"format": "pt"},
            "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
            "b": {"dtype": "F16", "shape": [2], "data_offsets": [24, 28]},
            "c": {"dtype": "BF16", "shape": [3, 1], "data_offsets": [28, 34]},
        });
        let mut file = open("dtypes", header, &data).unwrap();
        assert_eq!(file.tensors.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(file.read("a").unwrap(), TensorData::new(a.to_vec(), [2, 3]));
        assert_eq!(file.read("b").unwrap(), TensorData::new(b.to_vec(), [2]));
        assert_eq!(file.read("c").unwrap(), TensorData::new(c.to_vec(), [3, 1]));
    }

    #[test]
    fn a_bad_header_is_named() {
        let entry = |dtype: &str, shape: [u64; 1], end: u64| json!({"t": {"dtype": dtype, "shape": shape, "data_offsets": [0, end]}});
        let fails = |tag, header, data: &[u8], what: &str| {
            let problem = open(tag, header, data).err().expect("an error");
            assert!(problem.contains(what), "{tag}: {problem}");
        };
        fails("past-end", entry("F32", [4], 16), &[0; 8], "tensor `t`: its data runs past the end");
        fails("shape", entry("F32", [3], 8), &[0; 8], "8 bytes for shape [3]");
        fails("dtype", entry("I64", [1], 8), &[0; 8], "dtype I64 is not a float type");
        fails(
            "offsets",
            json!({"t": {"dtype": "F32", "shape": [1]}}),
            &[0; 4],
            "no valid data_offsets",
        );
        let path = file("json", "{not json", &[]);
        assert!(SafetensorsFile::open(&path).err().unwrap().contains("the header is not JSON"));
        fs::write(&path, 1000u64.to_le_bytes()).unwrap();
        let problem = SafetensorsFile::open(&path).err().unwrap();
        assert!(problem.contains("the header runs past the end"), "{problem}");
        fs::remove_file(path).unwrap();
    }
}
