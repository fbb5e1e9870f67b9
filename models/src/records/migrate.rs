//! Records saved before a format change, rewritten into today's format as they are read: the
//! mixer enum (below) and the joined q|k|v and gate|up parameters (`records/join.rs`).
//!
//! # When the per-layer weights became one `Mixer` enum
//!
//! A `SelfAttention` layer held its weights in four optional fields: `local` (q, k, v),
//! `global` (Longformer's global q, k, v), `output` and `linear` (Taylor linear attention).
//! It now holds one [`Mixer`](crate::layers::Mixer), an enum module, whose record
//! MessagePack writes as a map of one entry named after the variant. An old layer's map
//!
//! ```text
//! {local: L, global: G, output: O, linear: nil, query_norm: …, …}   (a windowed layer)
//! {local: nil, global: nil, output: nil, linear: A, …}              (linear attention)
//! ```
//!
//! becomes `{mixer: {Windowed: {local: L, global: G, output: O}}, query_norm: …, …}` or
//! `{mixer: {Linear: A}, …}`: the tensors are moved, not changed, and parameter ids are kept
//! (an optimizer's record, keyed by them, still matches). Any map that has the four old fields
//! is such a layer, wherever it is in the record (a decoder's blocks, a language model's
//! decoder), so one rewrite serves model files and training checkpoints alike.

use serde::de::DeserializeOwned;

use crate::records::join::{join_layers, join_state};
use crate::records::value::Value;

/// The fields of an old `SelfAttention` record that the mixer replaced.
const OLD_FIELDS: [&str; 4] = ["local", "global", "output", "linear"];

/// `bytes`, a MessagePack record written before a format change, decoded as `I` after the
/// rewrite of the module documentation; `None` when they are not MessagePack, hold nothing to
/// rewrite, or do not decode as `I` even so.
pub fn migrated<I: DeserializeOwned>(bytes: &[u8]) -> Option<I> {
    let mut value: Value = rmp_serde::from_slice(bytes).ok()?;
    let mixer = upgrade(&mut value);
    if !mixer & join_layers(&mut value).is_empty() {
        return None;
    }
    decode(&value)
}

/// The optimizer record that `optimizer` reads, saved with the model record `model` (the same
/// checkpoint's) before q|k|v and gate|up were joined, decoded as `I` with the states of the
/// joined parameters joined. `None` when `model` holds no parameters to join (a record of
/// today's format: it has the field `gate_up`, which this looks for first, before reading the
/// optimizer's record) or the rewrite fails.
pub fn migrated_optimizer<I: DeserializeOwned>(
    optimizer: impl FnOnce() -> Option<Vec<u8>>,
    model: &[u8],
) -> Option<I> {
    const JOINED: &[u8] = b"\xa7gate_up";
    if model.windows(JOINED.len()).any(|w| w == JOINED) {
        return None;
    }
    let mut model: Value = rmp_serde::from_slice(model).ok()?;
    let groups = join_layers(&mut model);
    let mut value: Value = rmp_serde::from_slice(&optimizer()?).ok()?;
    match join_state(&mut value, &groups) {
        true => decode(&value),
        false => None,
    }
}

/// `value` encoded and decoded as `I`.
fn decode<I: DeserializeOwned>(value: &Value) -> Option<I> {
    let encoded = rmp_serde::to_vec_named(value).ok()?;
    rmp_serde::decode::from_read(encoded.as_slice()).ok()
}

/// Rewrites every old attention layer under `value`; whether there was one.
fn upgrade(value: &mut Value) -> bool {
    match value {
        Value::Array(items) => items.iter_mut().fold(false, |found, item| upgrade(item) | found),
        Value::Map(entries) => match upgrade_layer(entries) {
            true => true,
            false => entries.iter_mut().fold(false, |found, (_, v)| upgrade(v) | found),
        },
        _ => false,
    }
}

/// Rewrites `entries` if they are an old attention layer's fields (all four of
/// [`OLD_FIELDS`], no `mixer`) of a consistent layer: linear attention alone, or q, k, v and
/// output projections; whether it did.
fn upgrade_layer(entries: &mut Vec<(Value, Value)>) -> bool {
    let has = |entries: &[(Value, Value)], name: &str| {
        entries.iter().any(|(key, _)| key.as_str() == Some(name))
    };
    if has(entries, "mixer") || !OLD_FIELDS.iter().all(|name| has(entries, name)) {
        return false;
    }
    let field = |entries: &[(Value, Value)], name: &str| {
        entries.iter().find(|(key, _)| key.as_str() == Some(name)).map(|(_, v)| v.clone())
    };
    let [local, global, output, linear] = OLD_FIELDS.map(|name| field(entries, name));
    let named = |name: &str, value| (Value::Str(name.to_string()), value);
    let mixer = match (local, global, output, linear) {
        (Some(Value::Nil), Some(Value::Nil), Some(Value::Nil), Some(linear))
            if linear != Value::Nil =>
        {
            Value::Map(vec![named("Linear", linear)])
        }
        (Some(local), Some(global), Some(output), Some(Value::Nil))
            if local != Value::Nil && output != Value::Nil =>
        {
            let windowed =
                vec![named("local", local), named("global", global), named("output", output)];
            Value::Map(vec![named("Windowed", Value::Map(windowed))])
        }
        _ => return false,
    };
    entries.retain(|(key, _)| !key.as_str().is_some_and(|k| OLD_FIELDS.contains(&k)));
    entries.insert(0, named("mixer", mixer));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, Value)]) -> Value {
        Value::Map(entries.iter().map(|(k, v)| (Value::Str(k.to_string()), v.clone())).collect())
    }

    #[test]
    fn old_layers_become_mixers_wherever_they_are() {
        let old = |local: Value, output: Value, linear: Value| {
            map(&[
                ("local", local),
                ("global", Value::Nil),
                ("output", output),
                ("linear", linear),
                ("sinks", Value::Nil),
            ])
        };
        let (p, o, a) = (Value::UInt(1), Value::UInt(2), Value::UInt(3));
        let mut record = map(&[(
            "blocks",
            Value::Array(vec![
                old(p.clone(), o.clone(), Value::Nil),
                old(Value::Nil, Value::Nil, a.clone()),
            ]),
        )]);
        assert!(upgrade(&mut record));
        let windowed = map(&[("local", p), ("global", Value::Nil), ("output", o)]);
        let expected = map(&[(
            "blocks",
            Value::Array(vec![
                map(&[("mixer", map(&[("Windowed", windowed)])), ("sinks", Value::Nil)]),
                map(&[("mixer", map(&[("Linear", a)])), ("sinks", Value::Nil)]),
            ]),
        )]);
        assert_eq!(record, expected);
        assert!(!upgrade(&mut record), "a new record has nothing to rewrite");
    }

    #[test]
    fn an_inconsistent_old_layer_is_left_alone() {
        let both = [("local", Value::UInt(1)), ("global", Value::Nil)];
        let rest = [("output", Value::UInt(2)), ("linear", Value::UInt(3))];
        let mut layer = map(&[both.as_slice(), rest.as_slice()].concat());
        let before = layer.clone();
        assert!(!upgrade(&mut layer));
        assert_eq!(layer, before);
        assert!(migrated::<Value>(b"\xc1 not MessagePack").is_none());
    }
}
