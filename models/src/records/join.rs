//! When q, k, v became one parameter, and gate, up another ([`crate::stored`]).
//!
//! A layer's projections were `{query: Q, key: K, value: V}` (three linear layers, each
//! `{weight: {id, param}, bias}`) and an MLP `{gate: G, up: U, down: D, …}`. They are now
//! `{qkv: QKV}` and `{gate_up: GU, down: D, …}`: each tensor of the joined layer is its parts'
//! tensors side by side along the output axis (the last), under the first part's parameter id.
//!
//! An optimizer's state follows its parameters: AdamW's moments (Burn's adaptor record, a map
//! keyed by parameter id) and the mixed-precision master weights and moments (a list of
//! entries, each with its `id`) of the parts are joined the same way, from the groups of ids
//! that rewriting the model record of the same checkpoint found ([`join_layers`]).

use crate::records::value::Value;

/// The ids of parameters joined into one, in order, and the rows of their weights (the axes
/// before the output axis), which a flattened copy (a master weight) needs to be joined.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Group {
    ids: Vec<String>,
    rows: usize,
}

/// The parts of each joined layer: the old field names and the new one.
const JOINS: [(&[&str], &str); 2] =
    [(&["query", "key", "value"], "qkv"), (&["gate", "up"], "gate_up")];

/// Rewrites every old projection set and MLP under `value`; the groups of parameter ids it
/// joined (none: nothing to rewrite).
pub(crate) fn join_layers(value: &mut Value) -> Vec<Group> {
    let mut groups = Vec::new();
    visit(value, &mut |entries| join_layer(entries, &mut groups));
    groups
}

/// Rewrites the optimizer state under `value` for the parameters of `groups`; whether it did.
pub(crate) fn join_state(value: &mut Value, groups: &[Group]) -> bool {
    let mut joined = false;
    walk(value, &mut |node| joined |= join_state_here(node, groups));
    joined
}

/// Calls `f` on the entries of every map under `value`, outermost first.
fn visit(value: &mut Value, f: &mut impl FnMut(&mut Vec<(Value, Value)>)) {
    walk(value, &mut |node| {
        if let Value::Map(entries) = node {
            f(entries)
        }
    });
}

/// Calls `f` on every value under `value`, outermost first.
fn walk(value: &mut Value, f: &mut impl FnMut(&mut Value)) {
    f(value);
    match value {
        Value::Array(items) => items.iter_mut().for_each(|item| walk(item, f)),
        Value::Map(entries) => entries.iter_mut().for_each(|(_, v)| walk(v, f)),
        _ => {}
    }
}

/// The value under `key` in `entries`.
fn field<'a>(entries: &'a [(Value, Value)], key: &str) -> Option<&'a Value> {
    entries.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v)
}

/// Joins the parts of one of [`JOINS`] in `entries` (a projection set: exactly q, k, v; an
/// MLP: gate and up beside other fields), recording the ids it joined.
fn join_layer(entries: &mut Vec<(Value, Value)>, groups: &mut Vec<Group>) {
    for (names, joined) in JOINS {
        // Linear attention's layer has a query, key and value too, beside other fields.
        let projections = names.len() != 3 || entries.len() == 3;
        let parts: Option<Vec<Value>> = names.iter().map(|n| field(entries, n).cloned()).collect();
        let (Some(parts), true) = (parts, projections) else { continue };
        let Some(linear) = join(&parts, 1) else { continue };
        for tensor in ["weight", "bias"] {
            let ids: Option<Vec<String>> = parts.iter().map(|p| parameter_id(p, tensor)).collect();
            let rows = parts.first().and_then(|p| weight_rows(p, tensor)).unwrap_or(1);
            groups.extend(ids.map(|ids| Group { ids, rows }));
        }
        entries.retain(|(k, _)| !k.as_str().is_some_and(|k| names.contains(&k)));
        entries.insert(0, (Value::Str(joined.into()), linear));
    }
}

/// The id of a linear layer record's `tensor` (`weight` or `bias`), if it has one.
fn parameter_id(linear: &Value, tensor: &str) -> Option<String> {
    let Value::Map(entries) = linear else { return None };
    let Some(Value::Map(param)) = field(entries, tensor) else { return None };
    field(param, "id")?.as_str().map(str::to_string)
}

/// The rows of a linear layer record's `tensor`: its shape's axes before the last.
fn weight_rows(linear: &Value, tensor: &str) -> Option<usize> {
    let Value::Map(entries) = linear else { return None };
    let Some(Value::Map(param)) = field(entries, tensor) else { return None };
    let Some(Value::Map(data)) = field(param, "param") else { return None };
    let shape = shape(data)?;
    Some(shape[..shape.len().saturating_sub(1)].iter().product())
}

/// Joins the states of each group's parameters where `node` holds them: a map keyed by id
/// (AdamW's record) or a list of entries with an `id` (the master weights).
fn join_state_here(node: &mut Value, groups: &[Group]) -> bool {
    let mut joined = false;
    for group in groups {
        joined |= match node {
            Value::Map(entries) => join_found(entries, group, entry_key, entry_value),
            Value::Array(items) => join_found(items, group, entry_id, itself),
            _ => false,
        };
    }
    joined
}

/// A map entry's key.
fn entry_key((key, _): &(Value, Value)) -> Option<&str> {
    key.as_str()
}

/// A map entry's value.
fn entry_value((_, value): &mut (Value, Value)) -> &mut Value {
    value
}

/// A list entry itself.
fn itself(item: &mut Value) -> &mut Value {
    item
}

/// The `id` field of a list entry.
fn entry_id(item: &Value) -> Option<&str> {
    match item {
        Value::Map(entries) => field(entries, "id")?.as_str(),
        _ => None,
    }
}

/// Replaces the items of `items` that hold the states of `group`'s parameters (found by
/// `id_of`, their state reached by `state`) with one item, the first's with its state joined.
/// When some are missing or they do not join, all are dropped, so that no parameter gets a
/// state of another shape (AdamW starts that parameter's moments again). Whether any was
/// found.
fn join_found<T: Clone>(
    items: &mut Vec<T>,
    group: &Group,
    id_of: fn(&T) -> Option<&str>,
    state: fn(&mut T) -> &mut Value,
) -> bool {
    let find = |id: &String| items.iter().position(|item| id_of(item) == Some(id.as_str()));
    let found: Vec<Option<usize>> = group.ids.iter().map(find).collect();
    if found.iter().all(Option::is_none) {
        return false;
    }
    let mut parts: Option<Vec<T>> = found.iter().map(|at| at.map(|i| items[i].clone())).collect();
    let joined = parts.as_mut().and_then(|parts| {
        let states: Vec<Value> = parts.iter_mut().map(|p| state(p).clone()).collect();
        let joined = join(&states, group.rows)?;
        let mut first = parts[0].clone();
        *state(&mut first) = joined;
        Some(first)
    });
    let mut index = 0;
    items.retain(|_| {
        index += 1;
        !found.contains(&Some(index - 1))
    });
    items.extend(joined);
    true
}

/// Values of one structure joined part by part: tensors side by side along their last axis (a
/// 1-D tensor as `rows` rows), maps field by field, lists item by item, anything else (ids,
/// step counts) the first part's. `None` when the parts differ in structure.
fn join(parts: &[Value], rows: usize) -> Option<Value> {
    match &parts[0] {
        Value::Map(entries) if shape(entries).is_some() => join_tensors(parts, rows),
        Value::Map(entries) => {
            let mut out = Vec::with_capacity(entries.len());
            for (key, _) in entries {
                let name = key.as_str()?;
                let fields: Option<Vec<Value>> = parts
                    .iter()
                    .map(|p| match p {
                        Value::Map(e) => field(e, name).cloned(),
                        _ => None,
                    })
                    .collect();
                out.push((key.clone(), join(&fields?, rows)?));
            }
            Some(Value::Map(out))
        }
        Value::Array(items) => {
            let lists: Option<Vec<&Vec<Value>>> = parts
                .iter()
                .map(|p| match p {
                    Value::Array(list) if list.len() == items.len() => Some(list),
                    _ => None,
                })
                .collect();
            let lists = lists?;
            let joined: Option<Vec<Value>> = (0..items.len())
                .map(|i| join(&lists.iter().map(|l| l[i].clone()).collect::<Vec<_>>(), rows))
                .collect();
            Some(Value::Array(joined?))
        }
        first => Some(first.clone()),
    }
}

/// The shape of a tensor's data (`{bytes, shape, dtype}`), if `entries` are one.
fn shape(entries: &[(Value, Value)]) -> Option<Vec<usize>> {
    let Some(Value::Bin(_)) = field(entries, "bytes") else { return None };
    let Value::Array(dims) = field(entries, "shape")? else { return None };
    dims.iter()
        .map(|d| match d {
            Value::UInt(d) => Some(*d as usize),
            _ => None,
        })
        .collect()
}

/// Tensors' data side by side along the last axis: each row of the result is the parts'
/// rows in order. A 1-D part is read as `rows` rows (a flattened weight); otherwise its rows
/// are its shape's axes before the last.
fn join_tensors(parts: &[Value], rows: usize) -> Option<Value> {
    let mut tensors = Vec::with_capacity(parts.len());
    for part in parts {
        let Value::Map(entries) = part else { return None };
        let Some(Value::Bin(bytes)) = field(entries, "bytes") else { return None };
        tensors.push((entries, bytes, shape(entries)?));
    }
    let (first, _, first_shape) = &tensors[0];
    let rows = match first_shape.len() {
        0 => return None,
        1 => rows,
        n => first_shape[..n - 1].iter().product(),
    };
    let mut joined = Vec::with_capacity(tensors.iter().map(|(_, b, _)| b.len()).sum());
    for row in 0..rows {
        for (_, bytes, _) in &tensors {
            if rows == 0 || bytes.len() % rows != 0 {
                return None;
            }
            let width = bytes.len() / rows;
            joined.extend_from_slice(&bytes[row * width..(row + 1) * width]);
        }
    }
    let last: usize = tensors.iter().map(|(_, _, s)| *s.last().expect("not 0-D")).sum();
    let mut shape = first_shape.clone();
    *shape.last_mut().expect("not 0-D") = last;
    let shape = Value::Array(shape.into_iter().map(|d| Value::UInt(d as u64)).collect());
    let entries = first.iter().map(|(k, v)| {
        let value = match k.as_str() {
            Some("bytes") => Value::Bin(joined.clone()),
            Some("shape") => shape.clone(),
            _ => v.clone(),
        };
        (k.clone(), value)
    });
    Some(Value::Map(entries.collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, Value)]) -> Value {
        Value::Map(entries.iter().map(|(k, v)| (Value::Str(k.to_string()), v.clone())).collect())
    }

    /// A tensor's data as a record holds it.
    fn data(values: &[f32], shape: &[u64]) -> Value {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let shape = Value::Array(shape.iter().map(|&d| Value::UInt(d)).collect());
        map(&[("bytes", Value::Bin(bytes)), ("shape", shape), ("dtype", Value::Str("F32".into()))])
    }

    /// A linear layer's record: `weight` a `[2, 1]` column of parameter `id`, no bias.
    fn linear(id: &str, column: [f32; 2]) -> Value {
        let weight = map(&[("id", Value::Str(id.into())), ("param", data(&column, &[2, 1]))]);
        map(&[("weight", weight), ("bias", Value::Nil)])
    }

    /// AdamW's state of a `[2, 1]` parameter, as Burn's adaptor record holds it.
    fn moments(first: [f32; 2]) -> Value {
        let momentum = map(&[
            ("time", Value::UInt(3)),
            ("moment_1", data(&first, &[2, 1])),
            ("moment_2", data(&first.map(|m| m * m), &[2, 1])),
        ]);
        map(&[("V1", map(&[("Rank2", map(&[("momentum", momentum)]))]))])
    }

    /// A mixed-precision master entry: flattened weights and moments.
    fn master(id: &str, weights: [f32; 2]) -> Value {
        let moments = map(&[("time", Value::UInt(3)), ("first", data(&weights, &[2]))]);
        map(&[
            ("id", Value::Str(id.into())),
            ("weights", data(&weights, &[2])),
            ("moments", moments),
        ])
    }

    #[test]
    fn projections_and_mlps_join_with_their_optimizer_state() {
        let projections = map(&[
            ("query", linear("q", [1.0, 2.0])),
            ("key", linear("k", [3.0, 4.0])),
            ("value", linear("v", [5.0, 6.0])),
        ]);
        let mlp = map(&[
            ("gate", linear("g", [1.0, 2.0])),
            ("up", linear("u", [3.0, 4.0])),
            ("down", linear("d", [5.0, 6.0])),
        ]);
        let mut model = map(&[("local", projections), ("mlp", mlp)]);
        let groups = join_layers(&mut model);
        let group =
            |ids: &[&str]| Group { ids: ids.iter().map(|s| s.to_string()).collect(), rows: 2 };
        assert_eq!(groups, vec![group(&["q", "k", "v"]), group(&["g", "u"])]);
        let weight = |values: &[f32], cols| {
            map(&[("id", Value::Str("q".into())), ("param", data(values, &[2, cols]))])
        };
        let qkv =
            map(&[("weight", weight(&[1.0, 3.0, 5.0, 2.0, 4.0, 6.0], 3)), ("bias", Value::Nil)]);
        let Value::Map(entries) = &model else { panic!("a map") };
        assert_eq!(entries[0].1, map(&[("qkv", qkv)]));
        let Value::Map(mlp) = &entries[1].1 else { panic!("a map") };
        let names: Vec<_> = mlp.iter().map(|(k, _)| k.as_str().unwrap()).collect();
        assert_eq!(names, ["gate_up", "down"]);
        assert!(join_layers(&mut model).is_empty(), "today's format has nothing to join");

        let adamw = |ids: &[(&str, [f32; 2])]| {
            map(&ids.iter().map(|(id, m)| (*id, moments(*m))).collect::<Vec<_>>())
        };
        let mut state = map(&[(
            "item",
            adamw(&[("q", [1.0, 2.0]), ("k", [3.0, 4.0]), ("v", [5.0, 6.0]), ("d", [7.0, 8.0])]),
        )]);
        assert!(join_state(&mut state, &groups));
        let joined = map(&[(
            "V1",
            map(&[(
                "Rank2",
                map(&[(
                    "momentum",
                    map(&[
                        ("time", Value::UInt(3)),
                        ("moment_1", data(&[1.0, 3.0, 5.0, 2.0, 4.0, 6.0], &[2, 3])),
                        ("moment_2", data(&[1.0, 9.0, 25.0, 4.0, 16.0, 36.0], &[2, 3])),
                    ]),
                )]),
            )]),
        )]);
        assert_eq!(state, map(&[("item", map(&[("d", moments([7.0, 8.0])), ("q", joined)]))]));

        let mut masters = map(&[(
            "masters",
            Value::Array(vec![master("g", [1.0, 2.0]), master("u", [3.0, 4.0])]),
        )]);
        assert!(join_state(&mut masters, &groups));
        let flat = [1.0, 3.0, 2.0, 4.0];
        let moments = map(&[("time", Value::UInt(3)), ("first", data(&flat, &[4]))]);
        let entry = map(&[
            ("id", Value::Str("g".into())),
            ("weights", data(&flat, &[4])),
            ("moments", moments),
        ]);
        assert_eq!(masters, map(&[("masters", Value::Array(vec![entry]))]));
    }

    #[test]
    fn linear_attention_is_left_alone_and_a_partial_group_dropped() {
        let mut layer = map(&[
            ("query", linear("q", [1.0, 2.0])),
            ("key", linear("k", [3.0, 4.0])),
            ("value", linear("v", [5.0, 6.0])),
            ("output", linear("o", [7.0, 8.0])),
        ]);
        let before = layer.clone();
        assert!(join_layers(&mut layer).is_empty());
        assert_eq!(layer, before);

        let group = Group { ids: vec!["g".into(), "u".into()], rows: 2 };
        let mut state = map(&[("g", moments([1.0, 2.0])), ("d", moments([3.0, 4.0]))]);
        assert!(join_state(&mut state, &[group]));
        assert_eq!(state, map(&[("d", moments([3.0, 4.0]))]), "no state of another shape");
    }
}
