//! Decoding Nomad JSON the way Go's `encoding/json` does: object keys match struct fields
//! case-insensitively (an exact match wins), and unknown keys are ignored.
//!
//! serde matches keys exactly, so decoding goes through [`CiValue`], a `Deserializer` over a parsed
//! `serde_json::Value` that rewrites each key to the field name it matches before serde sees it.
//! Errors carry the JSON path of the value that failed (`TaskGroups[0].Count: invalid type …`).

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};
use serde_json::Value;
use std::fmt;

/// A JSON document that does not decode into the expected type; `path` leads to the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// Path segments, outermost first: `TaskGroups`, `[0]`, `Count`.
    pub path: Vec<String>,
    pub message: String,
}

impl DecodeError {
    fn within(mut self, segment: String) -> Self {
        self.path.insert(0, segment);
        self
    }

    /// The path as text: `TaskGroups[0].Count`.
    pub fn path_text(&self) -> String {
        let mut out = String::new();
        for seg in &self.path {
            if !out.is_empty() && !seg.starts_with('[') {
                out.push('.');
            }
            out.push_str(seg);
        }
        out
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path_text(), self.message)
        }
    }
}

impl std::error::Error for DecodeError {}

impl de::Error for DecodeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DecodeError {
            path: Vec::new(),
            message: msg.to_string(),
        }
    }
}

/// Decodes JSON text into `T` with Go's key matching.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, DecodeError> {
    let value: Value = serde_json::from_str(text).map_err(|e| DecodeError {
        path: Vec::new(),
        message: format!("invalid JSON: {e}"),
    })?;
    from_value(&value)
}

/// Decodes a parsed JSON value into `T` with Go's key matching.
pub fn from_value<T: DeserializeOwned>(value: &Value) -> Result<T, DecodeError> {
    T::deserialize(CiValue(value))
}

/// Deserializer methods that read `null` as the type's zero (`visit`) and anything else as it is.
macro_rules! zero_on_null {
    ($($($method:ident)+ => $visit:ident($zero:expr);)+) => {
        $($(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
                match self.0 {
                    Value::Null => visitor.$visit($zero),
                    _ => self.deserialize_any(visitor),
                }
            }
        )+)+
    };
}

/// A `Deserializer` over a borrowed JSON value that matches struct keys case-insensitively.
#[derive(Clone, Copy)]
pub struct CiValue<'a>(pub &'a Value);

impl<'de> de::Deserializer<'de> for CiValue<'_> {
    type Error = DecodeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => visit_number(n, visitor),
            Value::String(s) => visitor.visit_str(s),
            Value::Array(items) => visitor.visit_seq(CiSeq {
                items: items.iter(),
                index: 0,
            }),
            Value::Object(map) => visitor.visit_map(CiMap::new(map, None)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        match self.0 {
            Value::Object(map) => visitor.visit_map(CiMap::new(map, Some(fields))),
            // Go decodes `null` into a struct as "leave it zero".
            Value::Null => visitor.visit_map(CiMap::new(&serde_json::Map::new(), Some(fields))),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.0 {
            // Go decodes `null` into a slice as an empty (nil) slice.
            Value::Null => visitor.visit_seq(CiSeq {
                items: [].iter(),
                index: 0,
            }),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.0 {
            Value::Null => visitor.visit_map(CiMap::new(&serde_json::Map::new(), None)),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        match self.0 {
            Value::String(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        visitor.visit_newtype_struct(self)
    }

    // Go decodes `null` into a number, a bool or a string as "leave it zero".
    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.0 {
            Value::Null => visitor.visit_bool(false),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.0 {
            Value::Null => visitor.visit_str(""),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.deserialize_str(visitor)
    }

    zero_on_null! {
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128 => visit_i64(0);
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128 => visit_u64(0);
        deserialize_f32 deserialize_f64 => visit_f64(0.0);
    }

    serde::forward_to_deserialize_any! {
        char bytes byte_buf unit unit_struct tuple tuple_struct identifier ignored_any
    }
}

fn visit_number<'de, V: Visitor<'de>>(
    n: &serde_json::Number,
    visitor: V,
) -> Result<V::Value, DecodeError> {
    if let Some(u) = n.as_u64() {
        visitor.visit_u64(u)
    } else if let Some(i) = n.as_i64() {
        visitor.visit_i64(i)
    } else {
        visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
    }
}

fn unexpected(value: &Value) -> de::Unexpected<'_> {
    match value {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(b) => de::Unexpected::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => de::Unexpected::Signed(i),
            None => de::Unexpected::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => de::Unexpected::Str(s),
        Value::Array(_) => de::Unexpected::Seq,
        Value::Object(_) => de::Unexpected::Map,
    }
}

struct CiSeq<'a> {
    items: std::slice::Iter<'a, Value>,
    index: usize,
}

impl<'de> SeqAccess<'de> for CiSeq<'_> {
    type Error = DecodeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DecodeError> {
        let Some(item) = self.items.next() else {
            return Ok(None);
        };
        let index = self.index;
        self.index += 1;
        seed.deserialize(CiValue(item))
            .map(Some)
            .map_err(|e| e.within(format!("[{index}]")))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct CiMap<'a> {
    entries: serde_json::map::Iter<'a>,
    fields: Option<&'static [&'static str]>,
    pending: Option<(&'a str, &'a Value)>,
}

impl<'a> CiMap<'a> {
    fn new(
        map: &'a serde_json::Map<String, Value>,
        fields: Option<&'static [&'static str]>,
    ) -> Self {
        CiMap {
            entries: map.iter(),
            fields,
            pending: None,
        }
    }

    /// The struct field `key` names: an exact match first, then Go's case-insensitive match.
    fn field_for<'k>(&self, key: &'k str) -> &'k str
    where
        'static: 'k,
    {
        let Some(fields) = self.fields else {
            return key;
        };
        if let Some(exact) = fields.iter().find(|f| **f == key) {
            return exact;
        }
        fields
            .iter()
            .find(|f| f.eq_ignore_ascii_case(key))
            .copied()
            .unwrap_or(key)
    }
}

impl<'de> MapAccess<'de> for CiMap<'_> {
    type Error = DecodeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DecodeError> {
        // A struct field set to `null` is left at its default, as if it were absent: Go leaves the
        // zero value, and python-nomad sends every unset field of a job as `null`.
        let Some((key, value)) = self
            .entries
            .find(|(_, v)| self.fields.is_none() || !v.is_null())
        else {
            return Ok(None);
        };
        self.pending = Some((key.as_str(), value));
        let name = self.field_for(key.as_str());
        seed.deserialize(de::value::StrDeserializer::<DecodeError>::new(name))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, DecodeError> {
        let Some((key, value)) = self.pending.take() else {
            return Err(de::Error::custom("value requested before key"));
        };
        let name = self.field_for(key);
        seed.deserialize(CiValue(value))
            .map_err(|e| e.within(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq, Default)]
    #[serde(default)]
    struct Inner {
        #[serde(rename = "MemoryMB")]
        memory_mb: i64,
        #[serde(rename = "ID")]
        id: String,
    }

    #[derive(Debug, Deserialize, PartialEq, Default)]
    #[serde(default, rename_all = "PascalCase")]
    struct Outer {
        name: String,
        items: Vec<Inner>,
        meta: std::collections::BTreeMap<String, String>,
        maybe: Option<i32>,
    }

    #[test]
    fn keys_match_case_insensitively_and_unknown_keys_are_ignored() {
        let got: Outer = from_str(
            r#"{"NAME":"a","items":[{"memorymb":5,"Id":"x","Bogus":1}],"meta":{"Rack":"r1"},"Extra":[1,2]}"#,
        )
        .unwrap();
        assert_eq!(got.name, "a");
        assert_eq!(
            got.items,
            vec![Inner {
                memory_mb: 5,
                id: "x".into()
            }]
        );
        // map keys are data, not field names: their case is kept
        assert_eq!(got.meta.get("Rack").map(String::as_str), Some("r1"));
        assert_eq!(got.maybe, None);
    }

    #[test]
    fn errors_name_the_path() {
        let err =
            from_str::<Outer>(r#"{"Items":[{"MemoryMB":1},{"MemoryMB":"lots"}]}"#).unwrap_err();
        assert_eq!(err.path_text(), "Items[1].MemoryMB");
        assert!(
            err.to_string()
                .starts_with("Items[1].MemoryMB: invalid type: string \"lots\""),
            "{err}"
        );
    }

    #[test]
    fn null_means_zero_value() {
        let got: Outer = from_str(r#"{"Items":null,"Meta":null,"Maybe":null}"#).unwrap();
        assert_eq!(got, Outer::default());
    }

    #[derive(Debug, Deserialize, PartialEq, Default)]
    #[serde(default)]
    struct Scalars {
        #[serde(rename = "Flag")]
        flag: bool,
        #[serde(rename = "Count")]
        count: i32,
        #[serde(rename = "Size")]
        size: u64,
        #[serde(rename = "Ratio")]
        ratio: f64,
        #[serde(rename = "Name")]
        name: String,
        #[serde(rename = "Tags")]
        tags: Vec<String>,
        #[serde(rename = "Meta")]
        meta: std::collections::BTreeMap<String, String>,
        #[serde(rename = "Inner")]
        inner: Inner,
    }

    #[test]
    fn null_in_every_kind_of_value_reads_as_its_zero() {
        // Go's encoding/json: null leaves the zero value, for fields, slice items and map values.
        let got: Scalars = from_str(
            r#"{"Flag":null,"Count":null,"Size":null,"Ratio":null,"Name":null,
                "Tags":["a",null],"Meta":{"k":null},"Inner":{"MemoryMB":null,"ID":null}}"#,
        )
        .unwrap();
        assert_eq!(
            got,
            Scalars {
                tags: vec!["a".into(), String::new()],
                meta: [("k".to_string(), String::new())].into(),
                ..Scalars::default()
            }
        );
        let counts: Vec<i64> = from_str("[1,null,3]").unwrap();
        assert_eq!(counts, vec![1, 0, 3]);
    }

    #[test]
    fn a_null_field_is_the_same_as_an_absent_one_even_with_a_non_zero_default() {
        #[derive(Debug, Deserialize, PartialEq)]
        #[serde(default)]
        struct WithDefault {
            #[serde(rename = "Priority")]
            priority: i32,
        }
        impl Default for WithDefault {
            fn default() -> Self {
                WithDefault { priority: 50 }
            }
        }
        let got: WithDefault = from_str(r#"{"Priority":null}"#).unwrap();
        assert_eq!(got.priority, 50);
    }
}
