//! The shared validation cases (policies/fixtures/<kind>/validation.yaml):
//! a valid `base`, and cases that each set one value and name the one field
//! then refused.

use serde_json::Value;

pub struct Case {
    pub name: String,
    pub object: Value,
    pub refused: String,
}

/// The file's `base` and its cases, each applied to a copy of the base.
pub fn cases(yaml: &str) -> (Value, Vec<Case>) {
    let file: Value = serde_yaml::from_str(yaml).unwrap();
    let base = file["base"].clone();
    let cases = file["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|case| Case {
            name: case["name"].as_str().unwrap().to_owned(),
            object: with_value(&base, case["set"].as_str().unwrap(), &case["value"]),
            refused: case["refused"].as_str().unwrap().to_owned(),
        })
        .collect();
    (base, cases)
}

/// `base` with the value at `pointer` set (the parent must exist).
fn with_value(base: &Value, pointer: &str, value: &Value) -> Value {
    let mut object = base.clone();
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    match object.pointer_mut(parent).unwrap() {
        Value::Array(items) => items[key.parse::<usize>().unwrap()] = value.clone(),
        parent => parent[key] = value.clone(),
    }
    object
}
