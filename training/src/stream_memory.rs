//! Segment memory in training and validation (Transformer-XL §3.2; docs/semantics.md §10).
//!
//! With memory on, each batch row reads its own stream in consecutive segments
//! ([`crate::loader::Sampling::Streams`]), and each layer keeps what its windows reach of the
//! earlier segments. The Learner's steps take the model by reference, so the memories live in a
//! cell that every copy of the model shares ([`StreamMemory`], a field of
//! [`crate::language_model::LanguageModel`]): one memory for the training stream and one for
//! validation's. The training memory is part of the model's record, so a checkpoint keeps it
//! (written by the project's atomic checkpoint writer) and a resumed run continues the stream
//! with the same memory, exactly.

use std::any::Any;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use burn::module::{
    AutodiffModule, Content, Devices, Module, ModuleDisplay, ModuleDisplayDefault, ModuleMapper,
    ModuleVisitor,
};
use burn::record::{PrecisionSettings, Record};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Int, Tensor};
use serde::{Deserialize, Serialize};
use swa_attention::ModelBackend;
use swa_models::{Decoder, DecoderMemory, DecoderMemoryData, ModelError};

/// The stream a batch belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stream {
    /// The training stream, whose memory a checkpoint keeps.
    Train,
    /// The validation stream, read again from its start at every validation.
    Valid,
}

/// One stream's memory: none yet, restored from a checkpoint (on the host), or in use (a
/// [`DecoderMemory`] of the backend that reads the stream, whose type only that backend knows).
enum Slot {
    Host(DecoderMemoryData),
    Device(Box<dyn Any + Send>),
}

/// The memories of a run's streams, shared by every copy of the model that holds it; or none,
/// when the run trains on independent windows. Generic over the backend only so that Burn's
/// module derive sees a module (a field without `B` would be left out of the record); the
/// memories of every backend share one cell.
pub struct StreamMemory<B: Backend> {
    /// Positions full-attention layers keep (Transformer-XL's memory length); `None`: off.
    full_memory: Option<usize>,
    slots: Arc<Mutex<HashMap<Stream, Slot>>>,
    backend: PhantomData<B>,
}

impl<B: Backend> Clone for StreamMemory<B> {
    fn clone(&self) -> Self {
        self.with_backend()
    }
}

impl<B: Backend> std::fmt::Debug for StreamMemory<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StreamMemory {{ full_memory: {:?} }}", self.full_memory)
    }
}

impl<B: Backend> StreamMemory<B> {
    /// Empty memories; full-attention layers will keep `full_memory` positions.
    pub fn new(full_memory: usize) -> Self {
        Self { full_memory: Some(full_memory), slots: Arc::default(), backend: PhantomData }
    }

    /// No memory: batches are independent windows.
    pub fn off() -> Self {
        Self { full_memory: None, slots: Arc::default(), backend: PhantomData }
    }

    /// The same cell, seen from backend `C`.
    fn with_backend<C: Backend>(&self) -> StreamMemory<C> {
        StreamMemory {
            full_memory: self.full_memory,
            slots: self.slots.clone(),
            backend: PhantomData,
        }
    }

    /// Whether the run keeps memories.
    pub fn is_on(&self) -> bool {
        self.full_memory.is_some()
    }

    /// The logits of the segment `tokens: [batch, N]` of `stream` at stream position `start`,
    /// reading and then updating the stream's memory: a fresh one at `start = 0`, and one that
    /// knows nothing earlier but places the segment at `start` when the kept one is not at
    /// `start` or has other rows. Without memory, one forward pass.
    pub fn forward(
        &self,
        stream: Stream,
        decoder: &Decoder<B>,
        tokens: Tensor<B, 2, Int>,
        start: usize,
    ) -> Result<Tensor<B, 3>, ModelError>
    where
        B: ModelBackend,
    {
        let Some(full_memory) = self.full_memory else {
            return decoder.forward(tokens);
        };
        let [rows, _] = tokens.dims();
        let device = tokens.device();
        let mut slots = self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let kept = match slots.remove(&stream) {
            Some(Slot::Device(memory)) => memory.downcast::<DecoderMemory<B>>().ok().map(|m| *m),
            Some(Slot::Host(data)) => Some(DecoderMemory::from_data(data, &device)),
            None => None,
        };
        let fits = |m: &DecoderMemory<B>| start > 0 && m.start() == start && m.rows() == rows;
        let mut memory = match kept.filter(fits) {
            Some(memory) => memory,
            None => decoder.memory(rows, full_memory, &device)?.starting_at(start),
        };
        let logits = decoder.forward_in_stream(tokens, &mut memory)?;
        slots.insert(stream, Slot::Device(Box::new(memory)));
        Ok(logits)
    }

    /// The training stream's memory on the host, if any, as the model's record keeps it.
    fn train_data(&self) -> Option<DecoderMemoryData> {
        let slots = self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match slots.get(&Stream::Train)? {
            Slot::Host(data) => Some(data.clone()),
            Slot::Device(memory) => memory.downcast_ref::<DecoderMemory<B>>().map(|m| m.to_data()),
        }
    }
}

/// The record of a [`StreamMemory`] that is on: the training stream's memory, on the host. A
/// model without memory records `None` (and checkpoints written before memory existed read as
/// `None`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StreamMemoryRecord {
    /// Positions full-attention layers keep.
    pub full_memory: usize,
    /// The training stream's memory; `None` before the first step.
    pub train: Option<DecoderMemoryData>,
}

impl<B: Backend> Record<B> for StreamMemoryRecord {
    type Item<S: PrecisionSettings> = Self;

    fn into_item<S: PrecisionSettings>(self) -> Self {
        self
    }

    fn from_item<S: PrecisionSettings>(item: Self, _device: &B::Device) -> Self {
        item
    }
}

/// A module without parameters whose record is the training stream's memory.
impl<B: Backend> Module<B> for StreamMemory<B> {
    type Record = Option<StreamMemoryRecord>;

    fn collect_devices(&self, devices: Devices<B>) -> Devices<B> {
        devices
    }

    fn fork(self, _device: &B::Device) -> Self {
        self
    }

    fn to_device(self, _device: &B::Device) -> Self {
        self
    }

    fn visit<V: ModuleVisitor<B>>(&self, _visitor: &mut V) {}

    fn map<M: ModuleMapper<B>>(self, _mapper: &mut M) -> Self {
        self
    }

    /// Restores the training stream's memory (to the device at its next segment); a model
    /// without memory ignores one.
    fn load_record(self, record: Option<StreamMemoryRecord>) -> Self {
        if !self.is_on() {
            return self;
        }
        let mut slots = self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match record.and_then(|r| r.train) {
            Some(data) => slots.insert(Stream::Train, Slot::Host(data)),
            None => slots.remove(&Stream::Train),
        };
        drop(slots);
        self
    }

    fn into_record(self) -> Option<StreamMemoryRecord> {
        let full_memory = self.full_memory?;
        Some(StreamMemoryRecord { full_memory, train: self.train_data() })
    }
}

impl<B: AutodiffBackend> AutodiffModule<B> for StreamMemory<B> {
    type InnerModule = StreamMemory<B::InnerBackend>;

    fn valid(&self) -> StreamMemory<B::InnerBackend> {
        self.with_backend()
    }

    fn from_inner(module: StreamMemory<B::InnerBackend>) -> Self {
        module.with_backend()
    }
}

impl<B: Backend> ModuleDisplayDefault for StreamMemory<B> {
    fn content(&self, content: Content) -> Option<Content> {
        content.add_formatted(&format!("{self:?}")).optional()
    }
}

impl<B: Backend> ModuleDisplay for StreamMemory<B> {}
