//! Segment memory of a decoder (Transformer-XL §3.2; docs/semantics.md §10): what every layer
//! keeps of a stream read segment by segment ([`DecoderMemory`]), and reading the next segment
//! with it ([`Decoder::forward_in_stream`]).

use crate::layers::{LayerMemory, LayerMemoryData};
use burn::tensor::{Int, Tensor, backend::Backend};
use serde::{Deserialize, Serialize};
use swa_attention::ModelBackend;

use crate::decoder::Decoder;
use crate::error::{ModelError, in_layer};

/// What every layer keeps of a stream read segment by segment (Transformer-XL's memory,
/// docs/semantics.md §10), made by [`Decoder::memory`]. A clone is an independent copy.
#[derive(Clone, Debug)]
pub struct DecoderMemory<B: Backend> {
    layers: Vec<LayerMemory<B>>,
    /// Streams read side by side (batch rows).
    rows: usize,
}

/// A [`DecoderMemory`] on the host, as a checkpoint saves it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecoderMemoryData {
    /// Streams read side by side (batch rows).
    pub rows: usize,
    /// Each layer's memory.
    pub layers: Vec<LayerMemoryData>,
}

impl<B: Backend> DecoderMemory<B> {
    /// The memory of each layer, in order.
    pub fn layers(&self) -> &[LayerMemory<B>] {
        &self.layers
    }

    /// Every layer's memory on the host, as a checkpoint saves it.
    pub fn to_data(&self) -> DecoderMemoryData {
        let layers = self.layers.iter().map(LayerMemory::to_data).collect();
        DecoderMemoryData { rows: self.rows, layers }
    }

    /// The memory saved by [`DecoderMemory::to_data`], on `device`.
    pub fn from_data(data: DecoderMemoryData, device: &B::Device) -> Self {
        let layers = data.layers.into_iter().map(|l| LayerMemory::from_data(l, device)).collect();
        Self { layers, rows: data.rows }
    }

    /// Streams read side by side (batch rows).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The stream position of the next segment's first token.
    pub fn start(&self) -> usize {
        self.layers.first().map_or(0, LayerMemory::start)
    }

    /// The memory of streams whose next segment starts at `start`, of which nothing earlier is
    /// kept ([`LayerMemory::starting_at`]).
    pub fn starting_at(self, start: usize) -> Self {
        let layers = self.layers.into_iter().map(|l| l.starting_at(start)).collect();
        Self { layers, ..self }
    }

    /// The positions each windowed layer keeps now (`None` for linear attention).
    pub fn kept_positions(&self) -> Vec<Option<usize>> {
        self.layers.iter().map(LayerMemory::kept_positions).collect()
    }

    /// Bytes held by every layer's memory, layer by layer: what the memory costs.
    pub fn layer_bytes(&self) -> Vec<usize> {
        self.layers.iter().map(LayerMemory::bytes).collect()
    }
}

impl<B: ModelBackend> Decoder<B> {
    /// An empty memory for `batch` streams read segment by segment (docs/semantics.md §10):
    /// windowed layers keep their widest window's reach, full layers `full_memory` positions
    /// (Transformer-XL's memory length). Fails, naming the layer, for a kind that cannot keep a
    /// bounded memory (Longformer's global tokens, an encoder).
    pub fn memory(
        &self,
        batch: usize,
        full_memory: usize,
        device: &B::Device,
    ) -> Result<DecoderMemory<B>, ModelError> {
        let layers = self
            .blocks()
            .iter()
            .enumerate()
            .map(|(l, b)| b.attention().memory(batch, full_memory, device).map_err(in_layer(l)))
            .collect::<Result<_, _>>()?;
        Ok(DecoderMemory { layers, rows: batch })
    }

    /// Whether every layer can read a stream in segments of `segment` tokens with memory
    /// (docs/semantics.md §10): fails, naming the layer, where [`Decoder::memory`] or
    /// [`Decoder::forward_in_stream`] would.
    pub fn check_stream(&self, segment: usize) -> Result<(), ModelError> {
        for (l, block) in self.blocks().iter().enumerate() {
            block.attention().check_stream(segment).map_err(in_layer(l))?;
        }
        Ok(())
    }
}

impl<B: ModelBackend> Decoder<B> {
    /// The next segment of `batch` streams, `tokens: [batch, N]` at stream positions
    /// `memory.start() …` → logits `[batch, N, vocab]`, every layer seeing what `memory` kept
    /// of the earlier segments (docs/semantics.md §10); then `memory` keeps this segment's
    /// part. With memories that hold every window's reach, the logits are those of one
    /// [`Decoder::forward`] over the whole stream. On an error `memory` is left as it was.
    pub fn forward_in_stream(
        &self,
        tokens: Tensor<B, 2, Int>,
        memory: &mut DecoderMemory<B>,
    ) -> Result<Tensor<B, 3>, ModelError> {
        let mut next = memory.clone();
        let mut x = self.embed(tokens);
        for (l, (block, layer)) in self.blocks().iter().zip(&mut next.layers).enumerate() {
            x = block.forward_in_stream(x, layer).map_err(in_layer(l))?;
        }
        *memory = next;
        Ok(self.logits(x))
    }
}
