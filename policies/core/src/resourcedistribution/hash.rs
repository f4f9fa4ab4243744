//! The `hashcode` annotation (spec 07 §1.3): lowercase hex SHA-256 of the
//! raw bytes of `spec.resource` as the API server serves them.
//!
//! The API server stores a custom resource as Go's `encoding/json` writes
//! its unstructured map: compact, keys sorted, `<`, `>`, `&`, U+2028 and
//! U+2029 escaped. [`go_json`] writes a parsed resource the same way, so
//! [`resource_hash`] of the parsed `spec.resource` equals OpenKruise's hash
//! of the raw bytes.

use std::fmt::Write as _;

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The hash of a parsed `spec.resource`.
pub fn resource_hash(resource: &Value) -> String {
    raw_resource_hash(&go_json(resource))
}

/// The hash of `spec.resource` bytes exactly as read.
pub fn raw_resource_hash(raw: &[u8]) -> String {
    Sha256::digest(raw)
        .iter()
        .fold(String::new(), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        })
}

/// `value` as Go's `json.Marshal` of the equivalent unstructured map.
pub fn go_json(value: &Value) -> Vec<u8> {
    let mut out = String::new();
    write_value(&mut out, value);
    out.into_bytes()
}

fn write_value(out: &mut String, value: &Value) {
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
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(fields) => {
            // Go sorts map keys by their bytes, as `str` ordering does.
            let mut keys: Vec<&String> = fields.keys().collect();
            keys.sort_unstable();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, &fields[key]);
            }
            out.push('}');
        }
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
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
}
