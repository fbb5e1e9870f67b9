//! Any MessagePack value, read and written through serde (rmp-serde), for rewriting a record
//! whose Rust type no longer exists ([`super::migrate`]). Byte strings stay byte strings and
//! `f32` stays `f32`, so a value written back encodes the same data as it was read.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, Serializer};

/// A MessagePack value. Maps keep their entries' order and any key type.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    /// `nil`: a `None`, a unit.
    Nil,
    /// A boolean.
    Bool(bool),
    /// A negative (or signed) integer.
    Int(i64),
    /// A non-negative integer.
    UInt(u64),
    /// A 32-bit float.
    F32(f32),
    /// A 64-bit float.
    F64(f64),
    /// A string: a map key (a field or variant name), a string field.
    Str(String),
    /// A byte string: a tensor's data.
    Bin(Vec<u8>),
    /// An array: a sequence, a tuple.
    Array(Vec<Value>),
    /// A map: a struct with named fields, an enum variant (one entry, named after it).
    Map(Vec<(Value, Value)>),
}

impl Value {
    /// The string, if the value is one.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Nil => serializer.serialize_unit(),
            Value::Bool(b) => serializer.serialize_bool(*b),
            Value::Int(i) => serializer.serialize_i64(*i),
            Value::UInt(u) => serializer.serialize_u64(*u),
            Value::F32(f) => serializer.serialize_f32(*f),
            Value::F64(f) => serializer.serialize_f64(*f),
            Value::Str(s) => serializer.serialize_str(s),
            Value::Bin(bytes) => serializer.serialize_bytes(bytes),
            Value::Array(items) => serializer.collect_seq(items),
            Value::Map(entries) => serializer.collect_map(entries.iter().map(|(k, v)| (k, v))),
        }
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

/// Builds a [`Value`] from whatever the decoder finds.
struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a MessagePack value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::UInt(v))
    }

    fn visit_f32<E>(self, v: f32) -> Result<Value, E> {
        Ok(Value::F32(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::F64(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }

    fn visit_bytes<E>(self, v: &[u8]) -> Result<Value, E> {
        Ok(Value::Bin(v.to_vec()))
    }

    fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Value, E> {
        Ok(Value::Bin(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Nil)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Nil)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        Value::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        Ok(Value::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_round_trips_through_messagepack() {
        let value = Value::Map(vec![
            (Value::Str("a".into()), Value::Array(vec![Value::Nil, Value::Bool(true)])),
            (Value::Str("b".into()), Value::Bin(vec![1, 2, 3])),
            (Value::Str("c".into()), Value::Map(vec![(Value::UInt(7), Value::Int(-3))])),
            (Value::Str("d".into()), Value::F32(0.5)),
            (Value::Str("e".into()), Value::F64(-1.25)),
        ]);
        let bytes = rmp_serde::to_vec_named(&value).unwrap();
        assert_eq!(rmp_serde::from_slice::<Value>(&bytes).unwrap(), value);
    }
}
