//! Parsing request bodies while noticing what `serde_json::Value` would
//! silently drop: keys given twice in one object (`fieldValidation` reports
//! them as upstream's strict decoding does, by field path).

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// A JSON document and the paths of the keys it repeats.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub value: Value,
    pub duplicates: Vec<String>,
}

/// Parses `bytes`, keeping the last of any repeated key as serde_json does
/// and recording its path (`metadata.labels.app`, `spec.ports[0].name`).
pub fn parse(bytes: &[u8]) -> Result<Parsed, serde_json::Error> {
    let mut duplicates = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = Node {
        path: String::new(),
        duplicates: &mut duplicates,
    }
    .deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(Parsed { value, duplicates })
}

struct Node<'a> {
    path: String,
    duplicates: &'a mut Vec<String>,
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let path = format!("{}[{}]", self.path, items.len());
            match seq.next_element_seed(Node {
                path,
                duplicates: &mut *self.duplicates,
            })? {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            let value = map.next_value_seed(Node {
                path: path.clone(),
                duplicates: &mut *self.duplicates,
            })?;
            if object.insert(key, value).is_some() {
                self.duplicates.push(path);
            }
        }
        Ok(Value::Object(object))
    }
}

/// Sets `value` at `path` (field names) in `target`, making objects on the
/// way (and replacing what is not an object).
pub fn set_at(target: &mut Value, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        *target = value;
        return;
    };
    let mut current = target;
    for part in parents {
        if !current.is_object() {
            *current = Value::Object(Map::new());
        }
        let Some(map) = current.as_object_mut() else {
            return;
        };
        current = map
            .entry((*part).to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !current.is_object() {
        *current = Value::Object(Map::new());
    }
    if let Some(map) = current.as_object_mut() {
        map.insert((*last).to_string(), value);
    }
}

/// The string at a JSON pointer, or "" when there is none.
pub fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn repeated_keys_are_reported_by_path_and_the_last_wins() {
        let parsed = parse(br#"{"metadata":{"name":"a","name":"b","labels":{"x":"1","x":"2"}},"spec":{"ports":[{"port":1,"port":2}]}}"#).expect("valid");
        assert_eq!(
            parsed.value,
            json!({"metadata": {"name": "b", "labels": {"x": "2"}}, "spec": {"ports": [{"port": 2}]}})
        );
        assert_eq!(
            parsed.duplicates,
            vec!["metadata.name", "metadata.labels.x", "spec.ports[0].port"]
        );
        let clean = parse(br#"{"a":[1,2.5,"s",null,true,{"b":{}}]}"#).expect("valid");
        assert_eq!(
            clean.value,
            json!({"a": [1, 2.5, "s", null, true, {"b": {}}]})
        );
        assert!(clean.duplicates.is_empty());
        assert!(parse(b"{\"a\":1} trailing").is_err());
        assert!(parse(b"{\"a\":").is_err());
    }
}
