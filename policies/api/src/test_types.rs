//! What the readers' unit tests read (tracked.rs, outlined.rs): a struct
//! that nests itself, with a list, a map, a tuple and an enum of every
//! variant shape.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Outer {
    name: String,
    #[serde(default)]
    items: Vec<Option<Inner>>,
    nested: Option<Box<Outer>>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    shape: Option<Shape>,
    pair: Option<(i64, f64)>,
}

#[derive(Debug, Deserialize, PartialEq)]
pub(crate) struct Inner {
    size: u32,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
enum Shape {
    Round,
    Square { side: u32 },
    Named(String),
    Pair(u8, u8),
}
