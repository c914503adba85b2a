//! Test helpers shared by the modules' tests: JSON round trips and Go-style key matching.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::fmt::Debug;

/// Encodes `value`, decodes it through [`crate::json::from_str`], and checks that the result is equal and
/// encodes to the same text. Returns the text.
pub(crate) fn assert_round_trip<T>(value: &T) -> String
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let text = serde_json::to_string(value).expect("encodes");
    let back: T = crate::json::from_str(&text).unwrap_or_else(|e| panic!("decodes: {e}\n{text}"));
    assert_eq!(&back, value, "decoded value differs\n{text}");
    let again = serde_json::to_string(&back).expect("encodes again");
    assert_eq!(again, text, "second encoding differs");
    text
}

/// Encodes `value`, lower-cases every object key, and checks that it still decodes to `value`.
/// Map keys are lower-cased too, so examples keep their map keys in lower case.
pub(crate) fn assert_decodes_lowercased<T>(value: &T)
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let lowered = lowercase_keys(serde_json::to_value(value).expect("encodes"));
    let text = lowered.to_string();
    let back: T = crate::json::from_str(&text).unwrap_or_else(|e| panic!("decodes: {e}\n{text}"));
    assert_eq!(&back, value, "lower-cased keys decode differently\n{text}");
}

fn lowercase_keys(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k.to_lowercase(), lowercase_keys(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(lowercase_keys).collect()),
        other => other,
    }
}
