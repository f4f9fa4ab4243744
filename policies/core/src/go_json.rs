//! JSON exactly as Go's `encoding/json` writes it, for the hashes
//! OpenKruise computes over `json.Marshal` output: a drop-in must produce
//! the same bytes, so the same hashes.
//!
//! * [`unstructured`]: an untyped value (Go's `map[string]interface{}`),
//!   keys sorted.
//! * [`typed`]: a value of a Go struct type described by a [`GoType`]: its
//!   fields in the struct's order, zero values written where Go writes them
//!   (`"resources":{}`, `"name":""`, `null` for a nil slice without
//!   `omitempty`), quantities in canonical form.
//!
//! Both compact, with Go's string escaping (`<`, `>`, `&`, U+2028 and
//! U+2029 as `\u` escapes).

pub mod types;

use std::fmt::{self, Write as _};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use serde_json::{Map, Value};

use crate::quantity::Quantity;

/// A Go type, as far as its JSON encoding goes.
#[derive(Clone, Copy, Debug)]
pub enum GoType {
    String,
    Bool,
    /// Any integer type.
    Int,
    /// `resource.Quantity`: a struct (never empty), written canonically.
    Quantity,
    /// `intstr.IntOrString`: a struct (never empty), written as its value.
    IntOrString,
    /// `metav1.Time`: a struct (never empty), `null` when zero.
    Time,
    /// A type not described further: written as given, keys sorted.
    Any,
    Ptr(&'static GoType),
    Slice(&'static GoType),
    /// A map with string keys, written sorted.
    Map(&'static GoType),
    Struct(&'static [Field]),
}

/// One field of a Go struct: its JSON name, type and `omitempty`; or an
/// embedded struct (`json:",inline"`) whose fields are written in its place.
#[derive(Clone, Copy, Debug)]
pub enum Field {
    Named {
        name: &'static str,
        go_type: GoType,
        omit_empty: bool,
    },
    Inline(&'static [Field]),
}

/// A field without `omitempty`.
pub const fn field(name: &'static str, go_type: GoType) -> Field {
    Field::Named {
        name,
        go_type,
        omit_empty: false,
    }
}

/// A field with `omitempty`.
pub const fn omit_empty(name: &'static str, go_type: GoType) -> Field {
    Field::Named {
        name,
        go_type,
        omit_empty: true,
    }
}

/// `value` as Go's `json.Marshal` of the equivalent unstructured map.
pub fn unstructured(value: &Value) -> String {
    let mut out = String::new();
    write_unstructured(&mut out, value);
    out
}

/// `value` (serde's rendering of a Kubernetes object, absent fields left
/// out) as Go's `json.Marshal` of the Go type `go_type`. Fields the Go type
/// does not have are dropped, as Go's decoder drops them. An error names a
/// value the Go type cannot hold.
pub fn typed(value: &Value, go_type: &GoType) -> Result<String, String> {
    let mut out = String::new();
    write_typed(&mut out, Some(value), go_type, Path::Root)?;
    Ok(out)
}

/// What Go's decoder would read back from [`typed`]'s output: `value`
/// with Go's zero values filled in and fields Go lacks dropped, as a
/// value again (for comparing, or for building untyped JSON from it).
pub fn as_go_value(value: &Value, go_type: &GoType) -> Result<Value, String> {
    let text = typed(value, go_type)?;
    serde_json::from_str(&text).map_err(|e| format!("re-reading Go's JSON: {e}"))
}

/// Where the writer is in the document (`.spec.containers[0]`), for error
/// messages only: a chain of borrowed segments on the stack, so the
/// writer allocates nothing for it unless a value does not fit.
#[derive(Clone, Copy)]
enum Path<'a> {
    Root,
    Field(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
    Key(&'a Path<'a>, &'a str),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Field(parent, name) => write!(f, "{parent}.{name}"),
            Path::Index(parent, index) => write!(f, "{parent}[{index}]"),
            Path::Key(parent, key) => write!(f, "{parent}[{key}]"),
        }
    }
}

/// Writes `value` (`None` or null: Go's zero value) as `go_type`.
fn write_typed(
    out: &mut String,
    value: Option<&Value>,
    go_type: &GoType,
    path: Path<'_>,
) -> Result<(), String> {
    let value = value.filter(|v| !v.is_null());
    let mismatch = || format!("{path}: {value:?} is not a Go {go_type:?}");
    match (go_type, value) {
        (GoType::String, None) => out.push_str("\"\""),
        (GoType::String | GoType::IntOrString | GoType::Time, Some(Value::String(s))) => {
            write_string(out, s);
        }
        (GoType::Bool, None) => out.push_str("false"),
        (GoType::Bool, Some(Value::Bool(b))) => out.push_str(if *b { "true" } else { "false" }),
        (GoType::Int | GoType::IntOrString, None) => out.push('0'),
        (GoType::Int, Some(Value::Number(n))) if n.is_i64() || n.is_u64() => {
            let _ = write!(out, "{n}");
        }
        (GoType::IntOrString, Some(Value::Number(n))) if n.is_i64() => {
            let _ = write!(out, "{n}");
        }
        (GoType::Quantity, None) => out.push_str("\"0\""),
        (GoType::Quantity, Some(value)) => {
            let text: ApiQuantity =
                serde_json::from_value(value.clone()).map_err(|_| mismatch())?;
            let quantity = Quantity::parse(&text.0).map_err(|e| format!("{path}: {e}"))?;
            write_string(out, &quantity.to_string());
        }
        (GoType::Time | GoType::Any | GoType::Ptr(_) | GoType::Slice(_) | GoType::Map(_), None) => {
            out.push_str("null");
        }
        (GoType::Any, Some(value)) => write_unstructured(out, value),
        (GoType::Ptr(inner), Some(_)) => write_typed(out, value, inner, path)?,
        (GoType::Slice(item), Some(Value::Array(items))) => {
            out.push('[');
            for (index, element) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_typed(out, Some(element), item, Path::Index(&path, index))?;
            }
            out.push(']');
        }
        (GoType::Map(item), Some(Value::Object(entries))) => {
            let mut keys: Vec<&String> = entries.keys().collect();
            crate::ordered::sort(&mut keys);
            out.push('{');
            for (index, key) in keys.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_typed(out, entries.get(key), item, Path::Key(&path, key))?;
            }
            out.push('}');
        }
        (GoType::Struct(fields), None) => write_struct(out, &Map::new(), fields, path)?,
        (GoType::Struct(fields), Some(Value::Object(object))) => {
            write_struct(out, object, fields, path)?;
        }
        _ => return Err(mismatch()),
    }
    Ok(())
}

fn write_struct(
    out: &mut String,
    object: &Map<String, Value>,
    fields: &[Field],
    path: Path<'_>,
) -> Result<(), String> {
    out.push('{');
    let mut first = true;
    write_fields(out, object, fields, path, &mut first)?;
    out.push('}');
    Ok(())
}

fn write_fields(
    out: &mut String,
    object: &Map<String, Value>,
    fields: &[Field],
    path: Path<'_>,
    first: &mut bool,
) -> Result<(), String> {
    for field in fields {
        match field {
            Field::Inline(inner) => write_fields(out, object, inner, path, first)?,
            Field::Named {
                name,
                go_type,
                omit_empty,
            } => {
                let value = object.get(*name);
                if *omit_empty && is_empty(value, go_type) {
                    continue;
                }
                if !*first {
                    out.push(',');
                }
                *first = false;
                write_string(out, name);
                out.push(':');
                write_typed(out, value, go_type, Path::Field(&path, name))?;
            }
        }
    }
    Ok(())
}

/// Go's `omitempty` test: false, 0, "", a nil pointer, an empty slice or
/// map. A struct (a quantity and an int-or-string among them) is never
/// empty.
fn is_empty(value: Option<&Value>, go_type: &GoType) -> bool {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return !matches!(
            go_type,
            GoType::Struct(_) | GoType::Quantity | GoType::IntOrString | GoType::Time
        );
    };
    match (go_type, value) {
        (GoType::String, Value::String(s)) => s.is_empty(),
        (GoType::Bool, Value::Bool(b)) => !b,
        (GoType::Int, Value::Number(n)) => n.as_i64() == Some(0),
        (GoType::Slice(_), Value::Array(items)) => items.is_empty(),
        (GoType::Map(_), Value::Object(entries)) => entries.is_empty(),
        _ => false,
    }
}

fn write_unstructured(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() {
                out.push_str(&n.to_string());
            } else if let Some(f) = n.as_f64() {
                out.push_str(&go_float(f));
            }
        }
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_unstructured(out, item);
            }
            out.push(']');
        }
        Value::Object(fields) => {
            // Go sorts map keys by their bytes, as `str` ordering does.
            let mut keys: Vec<&String> = fields.keys().collect();
            crate::ordered::sort(&mut keys);
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_unstructured(out, &fields[key]);
            }
            out.push('}');
        }
    }
}

/// A JSON string as Go escapes it. Runs of characters that need no escape
/// are copied whole.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    let mut plain_from = 0;
    for (at, c) in s.char_indices() {
        // `None`: written as a `\u` escape.
        let escape = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => None,
            c if u32::from(c) < 0x20 => None,
            _ => continue,
        };
        out.push_str(&s[plain_from..at]);
        match escape {
            Some(escape) => out.push_str(escape),
            None => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
        }
        plain_from = at + c.len_utf8();
    }
    out.push_str(&s[plain_from..]);
    out.push('"');
}

/// Go's float64 encoding: the shortest representation, in exponent form
/// below 1e-6 and from 1e21 on (`1e+21`, `1e-7`).
fn go_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let text = format!("{f:e}");
        match text.split_once('e') {
            Some((mantissa, exponent)) if !exponent.starts_with('-') => {
                format!("{mantissa}e+{exponent}")
            }
            _ => text,
        }
    } else {
        format!("{f}")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn floats_read_as_go_writes_them() {
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(100.0), "100");
        assert_eq!(go_float(0.0), "0");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(1.5e-7), "1.5e-7");
        assert_eq!(go_float(-2e-10), "-2e-10");
        assert_eq!(go_float(1e20), "100000000000000000000");
    }

    const INNER: GoType = GoType::Struct(&[omit_empty("a", GoType::String)]);
    const INLINED: &[Field] = &[field("x", GoType::Int)];
    const OUTER: GoType = GoType::Struct(&[
        field("name", GoType::String),
        omit_empty("image", GoType::String),
        field("list", GoType::Slice(&GoType::String)),
        omit_empty("inner", INNER),
        omit_empty("ptr", GoType::Ptr(&INNER)),
        Field::Inline(INLINED),
        omit_empty("limits", GoType::Map(&GoType::Quantity)),
        omit_empty("divisor", GoType::Quantity),
        field("port", GoType::IntOrString),
        omit_empty("flag", GoType::Bool),
    ]);

    #[test]
    fn structs_in_field_order_with_gos_zero_values() {
        assert_eq!(
            typed(&json!({}), &OUTER).unwrap(),
            r#"{"name":"","list":null,"inner":{},"x":0,"divisor":"0","port":0}"#
        );
        let full = json!({
            "flag": true, "port": "http", "divisor": "1000m", "limits": {"memory": "1Gi", "cpu": "0.5"},
            "x": 3, "ptr": {}, "inner": {"a": "<b>"}, "list": [], "image": "", "name": "n", "unknown": 1,
        });
        assert_eq!(
            typed(&full, &OUTER).unwrap(),
            r#"{"name":"n","list":[],"inner":{"a":"\u003cb\u003e"},"ptr":{},"x":3,"limits":{"cpu":"500m","memory":"1Gi"},"divisor":"1","port":"http","flag":true}"#
        );
    }

    #[test]
    fn values_a_go_type_cannot_hold_are_errors() {
        let error = typed(&json!({"x": "three"}), &OUTER).unwrap_err();
        assert!(error.starts_with(".x: "), "{error}");
        let error = typed(&json!({"limits": {"cpu": "2x"}}), &OUTER).unwrap_err();
        assert!(
            error.starts_with(".limits[cpu]: quantities must match"),
            "{error}"
        );
    }

    #[test]
    fn strings_are_escaped_as_go_escapes_them() {
        let mut out = String::new();
        write_string(&mut out, "é\"q\\\n\r\t\u{8}\u{c}\u{1}<a>&\u{2028}\u{2029}ü");
        assert_eq!(
            out,
            r#""é\"q\\\n\r\t\b\f\u0001\u003ca\u003e\u0026\u2028\u2029ü""#
        );
        out.clear();
        write_string(&mut out, "plain");
        assert_eq!(out, r#""plain""#);
    }

    #[test]
    fn an_error_names_the_path_to_the_value() {
        const LIST: GoType = GoType::Struct(&[field(
            "items",
            GoType::Slice(&GoType::Struct(&[field("m", GoType::Map(&GoType::Int))])),
        )]);
        let error = typed(&json!({"items": [{}, {"m": {"k": "x"}}]}), &LIST).unwrap_err();
        assert!(error.starts_with(".items[1].m[k]: "), "{error}");
    }

    #[test]
    fn unstructured_maps_are_sorted() {
        let value = json!({"b": [1, 2.5, null], "a": {"z": "&", "y": false}});
        assert_eq!(
            unstructured(&value),
            r#"{"a":{"y":false,"z":"\u0026"},"b":[1,2.5,null]}"#
        );
    }
}
