//! Reading a parsed document into a type while knowing where in the document
//! we are: for the path of the first bad field, and for the path of every
//! field the type does not know (serde skips those with
//! `deserialize_ignored_any`, which is where they are noted).
//!
//! serde_path_to_error and serde_ignored give the same by wrapping a
//! deserializer, each in its own layer, and every type's deserializing code
//! is compiled again for each layer: in the JS package that was 1.5 of its
//! 3.7 MB of code. This one deserializer over `serde_json::Value` does both
//! and is compiled once. Its errors are serde_json's, so messages read as
//! they do from `serde_json::from_value`.

use std::cell::RefCell;

use serde::de::value::StrDeserializer;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, EnumAccess, Unexpected, VariantAccess, Visitor,
};
use serde_json::{Error, Value};

/// A value read, with the paths of the fields it did not know.
pub(crate) struct Read<T> {
    pub value: T,
    pub unknown_fields: Vec<String>,
}

/// Why a value could not be read: the innermost place and what was wrong.
pub(crate) struct Failure {
    pub path: String,
    pub error: Error,
}

/// Read `document` as a `T`.
pub(crate) fn read<T: DeserializeOwned>(document: Value) -> Result<Read<T>, Failure> {
    let findings = Findings::default();
    let root = ValueReader {
        value: document,
        path: &Path::Root,
        findings: &findings,
    };
    match T::deserialize(root) {
        Ok(value) => Ok(Read {
            value,
            unknown_fields: findings.unknown_fields.into_inner(),
        }),
        Err(error) => Err(Failure {
            path: findings
                .first_error_at
                .into_inner()
                .unwrap_or_else(|| Path::Root.error_form()),
            error,
        }),
    }
}

/// Where a value sits in the document, as a chain up to the root.
enum Path<'a> {
    Root,
    Field { parent: &'a Path<'a>, name: &'a str },
    Index { parent: &'a Path<'a>, index: usize },
}

impl Path<'_> {
    /// `spec.containers[0].image`, the form of error paths (as
    /// serde_path_to_error wrote them, which our messages and docs show).
    fn error_form(&self) -> String {
        match self {
            Path::Root => ".".to_owned(),
            Path::Field { parent, name } => match parent {
                Path::Root => (*name).to_owned(),
                _ => format!("{}.{name}", parent.error_form()),
            },
            Path::Index { parent, index } => match parent {
                Path::Root => format!("[{index}]"),
                _ => format!("{}[{index}]", parent.error_form()),
            },
        }
    }

    /// `spec.containers.0.imag`, the form of unknown-field paths (as
    /// serde_ignored wrote them, which our messages and docs show).
    fn dotted_form(&self) -> String {
        let segment = match self {
            Path::Root => return ".".to_owned(),
            Path::Field { name, .. } => (*name).to_owned(),
            Path::Index { index, .. } => index.to_string(),
        };
        match self.parent() {
            Some(Path::Root) | None => segment,
            Some(parent) => format!("{}.{segment}", parent.dotted_form()),
        }
    }

    fn parent(&self) -> Option<&Path<'_>> {
        match self {
            Path::Root => None,
            Path::Field { parent, .. } | Path::Index { parent, .. } => Some(parent),
        }
    }
}

/// What the reading noted on the way, shared by every level.
#[derive(Default)]
struct Findings {
    /// Set by the innermost value whose reading failed: the levels above
    /// see the same error pass through and leave it be.
    first_error_at: RefCell<Option<String>>,
    unknown_fields: RefCell<Vec<String>>,
}

impl Findings {
    fn note_error_at(&self, path: &Path<'_>) {
        let mut first = self.first_error_at.borrow_mut();
        if first.is_none() {
            *first = Some(path.error_form());
        }
    }
}

/// Read one value below the root, noting its path if that fails.
fn read_child<'de, S: DeserializeSeed<'de>>(
    seed: S,
    value: Value,
    path: &Path<'_>,
    findings: &Findings,
) -> Result<S::Value, Error> {
    let result = seed.deserialize(ValueReader {
        value,
        path,
        findings,
    });
    note_if_failed(result, path, findings)
}

fn note_if_failed<T>(
    result: Result<T, Error>,
    path: &Path<'_>,
    findings: &Findings,
) -> Result<T, Error> {
    if result.is_err() {
        findings.note_error_at(path);
    }
    result
}

/// A deserializer for one value of the document.
struct ValueReader<'a> {
    value: Value,
    path: &'a Path<'a>,
    findings: &'a Findings,
}

/// Every number type asks [`ValueReader::deserialize_number`].
macro_rules! numbers_only {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            self.deserialize_number(visitor)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for ValueReader<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(b),
            Value::Number(n) => de::Deserializer::deserialize_any(n, visitor),
            Value::String(s) => visitor.visit_string(s),
            Value::Array(items) => visit_array(items, self.path, self.findings, visitor),
            Value::Object(fields) => visit_object(fields, self.path, self.findings, visitor),
        }
    }

    // What follows asks each visitor only for what its type can be, as
    // serde_json's own deserializer does: going through `deserialize_any`
    // for everything would compile every `visit_*` of every visitor.

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        // Only an object, as the API server reads a struct: serde_json would
        // also fill a struct from an array, field by field in order, and
        // that would compile every struct's `visit_seq` too.
        self.deserialize_map(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Object(fields) => visit_object(fields, self.path, self.findings, visitor),
            other => Err(wrong_type(&other, &visitor)),
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Array(items) => visit_array(items, self.path, self.findings, visitor),
            other => Err(wrong_type(&other, &visitor)),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::String(s) => visitor.visit_string(s),
            other => Err(wrong_type(&other, &visitor)),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_string(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_string(visitor)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Bool(b) => visitor.visit_bool(b),
            other => Err(wrong_type(&other, &visitor)),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Null => visitor.visit_unit(),
            other => Err(wrong_type(&other, &visitor)),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.value {
            // A unit variant.
            Value::String(variant) => visitor.visit_enum(StrDeserializer::new(&variant)),
            // A variant with data: `{variant: data}`.
            Value::Object(fields) => {
                let mut entries = fields.into_iter();
                match (entries.next(), entries.next()) {
                    (Some((variant, value)), None) => visitor.visit_enum(VariantReader {
                        variant,
                        value,
                        path: self.path,
                        findings: self.findings,
                    }),
                    _ => Err(de::Error::invalid_value(
                        Unexpected::Map,
                        &"map with a single key",
                    )),
                }
            }
            other => Err(de::Error::invalid_type(
                unexpected(&other),
                &"string or map",
            )),
        }
    }

    /// serde asks for a value it will throw away: a field the type does not know.
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.findings
            .unknown_fields
            .borrow_mut()
            .push(self.path.dotted_form());
        visitor.visit_unit()
    }

    numbers_only! {
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
        deserialize_f32 deserialize_f64
    }

    // The rest: `deserialize_any` asks only for what the value is.
    serde::forward_to_deserialize_any! {
        char bytes byte_buf
    }
}

impl ValueReader<'_> {
    /// A number, which says itself which `visit_*` it is (as
    /// `deserialize_any` would, without compiling the number visitors'
    /// object and array readers).
    fn deserialize_number<'de, V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Number(n) => de::Deserializer::deserialize_any(n, visitor),
            other => Err(wrong_type(&other, &visitor)),
        }
    }
}

// Never inlined, so that each type's fields are read in a function of
// their own: inlined, every volume source of `Volume` was read in one
// 80 KB function of the policy modules, which wasmtime takes seconds and
// hundreds of MB to compile (docs/benchmarks.md, "Compiling the
// policies"). The JS package (opt-level z) comes out the same either way.
#[inline(never)]
fn visit_array<'de, V: Visitor<'de>>(
    items: Vec<Value>,
    path: &Path<'_>,
    findings: &Findings,
    visitor: V,
) -> Result<V::Value, Error> {
    let length = items.len();
    let mut elements = SeqReader {
        items: items.into_iter(),
        next_index: 0,
        path,
        findings,
    };
    let read = visitor.visit_seq(&mut elements)?;
    check_all_read(length, elements.items.len(), "fewer elements in array")?;
    Ok(read)
}

// Never inlined: see `visit_array`.
#[inline(never)]
fn visit_object<'de, V: Visitor<'de>>(
    fields: serde_json::Map<String, Value>,
    path: &Path<'_>,
    findings: &Findings,
    visitor: V,
) -> Result<V::Value, Error> {
    let length = fields.len();
    let mut entries = MapReader {
        entries: fields.into_iter(),
        current: None,
        path,
        findings,
    };
    let read = visitor.visit_map(&mut entries)?;
    check_all_read(length, entries.entries.len(), "fewer elements in map")?;
    Ok(read)
}

/// A visitor that stopped early was given more than its type holds.
fn check_all_read(length: usize, left: usize, expected: &'static str) -> Result<(), Error> {
    match left {
        0 => Ok(()),
        _ => Err(de::Error::invalid_length(length, &expected)),
    }
}

struct SeqReader<'a> {
    items: std::vec::IntoIter<Value>,
    next_index: usize,
    path: &'a Path<'a>,
    findings: &'a Findings,
}

impl<'de> de::SeqAccess<'de> for SeqReader<'_> {
    type Error = Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Error> {
        let Some(item) = self.items.next() else {
            return Ok(None);
        };
        let path = Path::Index {
            parent: self.path,
            index: self.next_index,
        };
        self.next_index += 1;
        read_child(seed, item, &path, self.findings).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct MapReader<'a> {
    entries: serde_json::map::IntoIter,
    /// The entry whose key was just read, until its value is.
    current: Option<(String, Value)>,
    path: &'a Path<'a>,
    findings: &'a Findings,
}

impl MapReader<'_> {
    /// The next entry becomes the current one; its key, if there is one.
    /// Not generic, so compiled once rather than in every struct's reader.
    #[inline(never)]
    fn advance(&mut self) -> Option<&str> {
        self.current = self.entries.next();
        self.current.as_ref().map(|(key, _)| key.as_str())
    }
}

impl<'de> de::MapAccess<'de> for MapReader<'_> {
    type Error = Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Error> {
        match self.advance() {
            Some(key) => seed.deserialize(StrDeserializer::new(key)).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Error> {
        let Some((key, value)) = self.current.take() else {
            return Err(de::Error::custom("value is missing"));
        };
        let path = Path::Field {
            parent: self.path,
            name: &key,
        };
        read_child(seed, value, &path, self.findings)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// An enum variant written as `{variant: data}`.
struct VariantReader<'a> {
    variant: String,
    value: Value,
    path: &'a Path<'a>,
    findings: &'a Findings,
}

impl<'de> EnumAccess<'de> for VariantReader<'_> {
    type Error = Error;
    type Variant = Self;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Self), Error> {
        let variant = seed.deserialize(StrDeserializer::<Error>::new(&self.variant))?;
        Ok((variant, self))
    }
}

impl<'de> VariantAccess<'de> for VariantReader<'_> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        match self.value {
            Value::Null => Ok(()),
            other => Err(de::Error::invalid_type(unexpected(&other), &"unit variant")),
        }
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, Error> {
        let path = Path::Field {
            parent: self.path,
            name: &self.variant,
        };
        read_child(seed, self.value, &path, self.findings)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        self.read_data(VariantShape::Tuple, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.read_data(VariantShape::Struct, visitor)
    }
}

/// What a variant with several values holds: an array or an object.
#[derive(Clone, Copy, PartialEq)]
enum VariantShape {
    Tuple,
    Struct,
}

impl VariantReader<'_> {
    /// The variant's values, read at the variant's path.
    fn read_data<'de, V: Visitor<'de>>(
        self,
        shape: VariantShape,
        visitor: V,
    ) -> Result<V::Value, Error> {
        let path = Path::Field {
            parent: self.path,
            name: &self.variant,
        };
        let result = match (self.value, shape) {
            (Value::Array(items), VariantShape::Tuple) => {
                visit_array(items, &path, self.findings, visitor)
            }
            (Value::Object(fields), VariantShape::Struct) => {
                visit_object(fields, &path, self.findings, visitor)
            }
            (other, VariantShape::Tuple) => Err(de::Error::invalid_type(
                unexpected(&other),
                &"tuple variant",
            )),
            (other, VariantShape::Struct) => Err(de::Error::invalid_type(
                unexpected(&other),
                &"struct variant",
            )),
        };
        note_if_failed(result, &path, self.findings)
    }
}

/// The error for a value that is not what the visitor reads. Not generic,
/// so compiled once rather than in every type's reader.
#[inline(never)]
fn wrong_type(value: &Value, expected: &dyn de::Expected) -> Error {
    de::Error::invalid_type(unexpected(value), expected)
}

fn unexpected(value: &Value) -> Unexpected<'_> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Unexpected::Unsigned(u),
            (_, Some(i), _) => Unexpected::Signed(i),
            (_, _, Some(f)) => Unexpected::Float(f),
            _ => Unexpected::Other("number"),
        },
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::*;
    use crate::test_types::Outer;

    fn failure(document: Value) -> (String, String) {
        match read::<Outer>(document) {
            Ok(read) => panic!("expected a failure, read {:?}", read.value),
            Err(failure) => (failure.path, failure.error.to_string()),
        }
    }

    fn unknown(document: Value) -> Vec<String> {
        match read::<Outer>(document) {
            Ok(read) => read.unknown_fields,
            Err(failure) => panic!("{}: {}", failure.path, failure.error),
        }
    }

    #[test]
    fn reads_what_serde_json_reads() {
        let document = json!({
            "name": "a", "items": [{"size": 1}], "labels": {"k": "v"},
            "nested": {"name": "b", "shape": {"square": {"side": 2}}},
            "shape": "round",
        });
        let ours = read::<Outer>(document.clone()).ok().unwrap().value;
        assert_eq!(ours, serde_json::from_value::<Outer>(document).unwrap());
        for shape in [json!({"named": "x"}), json!({"pair": [1, 2]})] {
            let document = json!({"name": "a", "shape": shape});
            let ours = read::<Outer>(document.clone()).ok().unwrap().value;
            assert_eq!(ours, serde_json::from_value::<Outer>(document).unwrap());
        }
    }

    #[test]
    fn an_error_names_the_innermost_field_with_indexes_in_brackets() {
        let (path, message) = failure(json!({
            "name": "a",
            "nested": {"name": "b", "items": [{"size": 1}, {"size": "big"}]},
        }));
        assert_eq!(path, "nested.items[1].size");
        assert_eq!(message, "invalid type: string \"big\", expected u32");
    }

    #[test]
    fn a_missing_field_is_named_at_the_object_that_lacks_it() {
        let (path, message) = failure(json!({"name": "a", "items": [{}]}));
        assert_eq!(path, "items[0]");
        assert_eq!(message, "missing field `size`");
        let (path, message) = failure(json!({}));
        assert_eq!(path, ".");
        assert_eq!(message, "missing field `name`");
    }

    #[test]
    fn a_struct_is_read_only_from_an_object() {
        // serde_json::from_value would fill `Inner` from `[1]`.
        let (path, message) = failure(json!({"name": "a", "items": [[1]]}));
        assert_eq!(path, "items[0]");
        assert_eq!(message, "invalid type: sequence, expected struct Inner");
    }

    #[test]
    fn messages_say_null_as_serde_json_does() {
        let (path, message) = failure(json!({"name": null}));
        assert_eq!(path, "name");
        assert_eq!(message, "invalid type: null, expected a string");
    }

    #[test]
    fn enum_errors_name_the_variant_or_the_field() {
        let (path, message) = failure(json!({"name": "a", "shape": "hexagon"}));
        assert_eq!(path, "shape");
        assert!(
            message.starts_with("unknown variant `hexagon`"),
            "{message}"
        );
        let (path, _) = failure(json!({"name": "a", "shape": {"square": {"side": -1}}}));
        assert_eq!(path, "shape.square.side");
        let (path, message) = failure(json!({"name": "a", "shape": {"round": null, "named": "x"}}));
        assert_eq!(path, "shape");
        assert_eq!(
            message,
            "invalid value: map, expected map with a single key"
        );
    }

    #[test]
    fn unknown_fields_are_listed_in_order_with_dotted_indexes() {
        let fields = unknown(json!({
            "name": "a", "colour": "red",
            "items": [{"size": 1}, {"size": 2, "weight": 3}],
            "nested": {"name": "b", "extra": {"deep": true}},
        }));
        assert_eq!(fields, ["colour", "items.1.weight", "nested.extra"]);
    }

    #[test]
    fn map_keys_are_data_not_unknown_fields() {
        assert!(unknown(json!({"name": "a", "labels": {"x": "1", "y": "2"}})).is_empty());
    }

    #[test]
    fn the_root_path_reads_as_a_dot() {
        assert_eq!(Path::Root.error_form(), ".");
        let index = Path::Index {
            parent: &Path::Root,
            index: 2,
        };
        assert_eq!(index.error_form(), "[2]");
        assert_eq!(index.dotted_form(), "2");
    }
}
