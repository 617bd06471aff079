//! The structure of a forward's output: how tuples, lists, dicts, `None` and constants are put
//! together around its tensors. A CUDA graph only knows the tensors; `prepare` keeps the
//! structure ([`Layout`]) from the model's own run, and [`Nimble::forward_value`] rebuilds the
//! output ([`Value`]) around the replayed tensors.
//!
//! [`Nimble::forward_value`]: crate::Nimble::forward_value

use serde_json::Value as Json;
use tch::Tensor;

use crate::error::{NimbleError, Result};

/// How a forward's output is put together around its tensors, each named by its position in
/// the flat list of the output's tensors.
#[derive(Clone, Debug, PartialEq)]
pub enum Layout {
    Tensor(usize),
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Tuple(Vec<Layout>),
    List(Vec<Layout>),
    /// Entries in the model's order.
    Dict(Vec<(Layout, Layout)>),
}

/// A forward's output: tensors in the structure the model returned.
#[derive(Debug)]
pub enum Value {
    Tensor(Tensor),
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Tuple(Vec<Value>),
    List(Vec<Value>),
    Dict(Vec<(Value, Value)>),
}

impl Layout {
    /// The layout of a Rust forward's `n` outputs: the tensor itself when there is one, else a
    /// tuple (as a TorchScript trace of it returns them).
    pub fn of_list(n: usize) -> Layout {
        if n == 1 {
            Layout::Tensor(0)
        } else {
            Layout::Tuple((0..n).map(Layout::Tensor).collect())
        }
    }

    /// Reads the shim's JSON form (see `shim/jit.cpp`, `write_structure`).
    pub(crate) fn parse(text: &str) -> Result<Layout> {
        let json: Json = serde_json::from_str(text).map_err(|e| NimbleError::Internal(format!("malformed output structure `{text}`: {e}")))?;
        let layout = Layout::from_json(&json)?;
        let mut seen = Vec::new();
        layout.collect_indices(&mut seen);
        if seen.iter().enumerate().any(|(position, &index)| position != index) {
            return Err(NimbleError::Internal(format!("output structure `{text}` does not number its tensors in order")));
        }
        Ok(layout)
    }

    fn from_json(json: &Json) -> Result<Layout> {
        let bad = || NimbleError::Internal(format!("malformed output structure element `{json}`"));
        let items = |value: &Json| -> Result<Vec<Layout>> { value.as_array().ok_or_else(bad)?.iter().map(Layout::from_json).collect() };
        Ok(match json {
            Json::Null => Layout::None,
            Json::Bool(b) => Layout::Bool(*b),
            Json::Object(map) if map.len() == 1 => {
                let (tag, value) = map.iter().next().expect("one entry");
                match tag.as_str() {
                    "tensor" => Layout::Tensor(value.as_u64().ok_or_else(bad)? as usize),
                    "int" => Layout::Int(value.as_i64().ok_or_else(bad)?),
                    "float" => Layout::Float(match value {
                        Json::String(s) if s == "nan" => f64::NAN,
                        Json::String(s) if s == "inf" => f64::INFINITY,
                        Json::String(s) if s == "-inf" => f64::NEG_INFINITY,
                        other => other.as_f64().ok_or_else(bad)?,
                    }),
                    "str" => Layout::Str(value.as_str().ok_or_else(bad)?.to_string()),
                    "tuple" => Layout::Tuple(items(value)?),
                    "list" => Layout::List(items(value)?),
                    "dict" => Layout::Dict(
                        value
                            .as_array()
                            .ok_or_else(bad)?
                            .iter()
                            .map(|entry| match entry.as_array().map(Vec::as_slice) {
                                Some([key, value]) => Ok((Layout::from_json(key)?, Layout::from_json(value)?)),
                                _ => Err(bad()),
                            })
                            .collect::<Result<_>>()?,
                    ),
                    _ => return Err(bad()),
                }
            }
            _ => return Err(bad()),
        })
    }

    fn collect_indices(&self, out: &mut Vec<usize>) {
        match self {
            Layout::Tensor(i) => out.push(*i),
            Layout::Tuple(items) | Layout::List(items) => items.iter().for_each(|item| item.collect_indices(out)),
            Layout::Dict(entries) => entries.iter().for_each(|(key, value)| {
                key.collect_indices(out);
                value.collect_indices(out);
            }),
            Layout::None | Layout::Bool(_) | Layout::Int(_) | Layout::Float(_) | Layout::Str(_) => {}
        }
    }

    /// How many tensors the output holds.
    pub fn tensor_count(&self) -> usize {
        let mut indices = Vec::new();
        self.collect_indices(&mut indices);
        indices.len()
    }

    /// The output with `tensors` (the flat list, shallow clones taken) in their places.
    pub fn fill(&self, tensors: &[Tensor]) -> Result<Value> {
        if tensors.len() != self.tensor_count() {
            return Err(NimbleError::Internal(format!("the output structure holds {} tensors, got {}", self.tensor_count(), tensors.len())));
        }
        Ok(self.fill_unchecked(tensors))
    }

    fn fill_unchecked(&self, tensors: &[Tensor]) -> Value {
        let all = |items: &[Layout]| items.iter().map(|item| item.fill_unchecked(tensors)).collect();
        match self {
            Layout::Tensor(i) => Value::Tensor(tensors[*i].shallow_clone()),
            Layout::None => Value::None,
            Layout::Bool(b) => Value::Bool(*b),
            Layout::Int(i) => Value::Int(*i),
            Layout::Float(x) => Value::Float(*x),
            Layout::Str(s) => Value::Str(s.clone()),
            Layout::Tuple(items) => Value::Tuple(all(items)),
            Layout::List(items) => Value::List(all(items)),
            Layout::Dict(entries) => Value::Dict(entries.iter().map(|(k, v)| (k.fill_unchecked(tensors), v.fill_unchecked(tensors))).collect()),
        }
    }
}

impl Value {
    /// The output's tensors, flat, in order.
    pub fn tensors(&self) -> Vec<&Tensor> {
        let mut out = Vec::new();
        self.collect(&mut out);
        out
    }

    fn collect<'a>(&'a self, out: &mut Vec<&'a Tensor>) {
        match self {
            Value::Tensor(t) => out.push(t),
            Value::Tuple(items) | Value::List(items) => items.iter().for_each(|item| item.collect(out)),
            Value::Dict(entries) => entries.iter().for_each(|(key, value)| {
                key.collect(out);
                value.collect(out);
            }),
            Value::None | Value::Bool(_) | Value::Int(_) | Value::Float(_) | Value::Str(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_and_rebuilds_the_output() {
        let text = r#"{"tuple":[{"tensor":0},null,{"int":3},{"float":"nan"},{"float":0.5},{"str":"a\"b"},true,
            {"list":[{"tensor":1},{"tensor":2}]},{"dict":[[{"str":"k"},{"tensor":3}]]}]}"#;
        let layout = Layout::parse(text).unwrap();
        assert_eq!(layout.tensor_count(), 4);
        let tensors: Vec<Tensor> = (0..4).map(|i| Tensor::from(i as f32)).collect();
        let value = layout.fill(&tensors).unwrap();
        let Value::Tuple(items) = &value else { panic!("a tuple") };
        assert!(matches!(items[1], Value::None));
        assert!(matches!(items[2], Value::Int(3)));
        assert!(matches!(items[3], Value::Float(x) if x.is_nan()));
        assert!(matches!(&items[5], Value::Str(s) if s == "a\"b"));
        let order: Vec<f64> = value.tensors().iter().map(|t| t.double_value(&[])).collect();
        assert_eq!(order, [0.0, 1.0, 2.0, 3.0]);
        assert!(layout.fill(&tensors[..3]).is_err());
    }

    #[test]
    fn malformed_structures_are_errors() {
        for text in ["", "{", r#"{"tensor":-1}"#, r#"{"set":[]}"#, r#"{"dict":[[null]]}"#, "[1]", r#"{"tuple":[{"tensor":1},{"tensor":0}]}"#] {
            assert!(Layout::parse(text).is_err(), "{text} should be refused");
        }
    }

    #[test]
    fn a_rust_forward_is_one_tensor_or_a_tuple() {
        assert_eq!(Layout::of_list(1), Layout::Tensor(0));
        assert_eq!(Layout::of_list(2), Layout::Tuple(vec![Layout::Tensor(0), Layout::Tensor(1)]));
    }
}
