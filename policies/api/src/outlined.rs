//! serde_json's readers (of text, and of a parsed document), with every
//! value below the top read in a function of its own.
//!
//! A type's `visit_map` calls each field's reading from one place only, so
//! the compiler inlines it, and the field's own fields, down the tree: read
//! with serde_json alone, `Volume` (30 volume sources) and `PodSpec` became
//! functions of 77 and 58 KB in the policy modules read from text, 94 and
//! 76 KB read from a parsed document. wasmtime's compile memory grows much
//! faster than a function's size (docs/benchmarks.md, "Compiling the
//! policies"), and such functions set the host's peak at start. Here each
//! value is read through [`Outlined`], whose `deserialize` is never
//! inlined. What is read, and every error message, are serde_json's.

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};

/// Reads `text` as a `T`, as `serde_json::from_str` does.
pub fn from_str<T: DeserializeOwned>(text: &str) -> serde_json::Result<T> {
    let mut reader = serde_json::Deserializer::from_str(text);
    let value = T::deserialize(Reader(&mut reader))?;
    reader.end()?;
    Ok(value)
}

/// Reads a parsed document as a `T`, as `serde_json::from_value` does.
pub fn from_value<T: DeserializeOwned>(document: serde_json::Value) -> serde_json::Result<T> {
    T::deserialize(Reader(document))
}

/// A deserializer whose visitors are handed on wrapped, so that what they
/// read below comes back through here.
struct Reader<D>(D);

/// A visitor, wrapped: the maps, sequences and values it is given are.
struct Wrapped<V>(V);

/// How one value is read: in a function of its own.
struct Outlined<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Outlined<S> {
    type Value = S::Value;

    #[inline(never)]
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Reader(deserializer))
    }
}

/// `Deserializer` methods, each handing its arguments on as they are and
/// its visitor wrapped.
macro_rules! forward {
    ($($method:ident($($argument:ident: $type:ty),*))*) => {$(
        fn $method<V: Visitor<'de>>(
            self,
            $($argument: $type,)*
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.0.$method($($argument,)* Wrapped(visitor))
        }
    )*};
}

type Names = &'static [&'static str];

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Reader<D> {
    type Error = D::Error;

    forward! {
        deserialize_any() deserialize_bool()
        deserialize_i8() deserialize_i16() deserialize_i32() deserialize_i64() deserialize_i128()
        deserialize_u8() deserialize_u16() deserialize_u32() deserialize_u64() deserialize_u128()
        deserialize_f32() deserialize_f64() deserialize_char() deserialize_str()
        deserialize_string() deserialize_bytes() deserialize_byte_buf() deserialize_option()
        deserialize_unit() deserialize_seq() deserialize_map() deserialize_identifier()
        deserialize_ignored_any()
        deserialize_unit_struct(name: &'static str)
        deserialize_newtype_struct(name: &'static str)
        deserialize_tuple(len: usize)
        deserialize_tuple_struct(name: &'static str, len: usize)
        deserialize_struct(name: &'static str, fields: Names)
        deserialize_enum(name: &'static str, variants: Names)
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

/// `Visitor` methods that take a plain value, handed on as they are.
macro_rules! pass {
    ($($method:ident: $type:ty)*) => {$(
        fn $method<E: de::Error>(self, value: $type) -> Result<V::Value, E> {
            self.0.$method(value)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrapped<V> {
    type Value = V::Value;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.expecting(formatter)
    }

    pass! {
        visit_bool: bool
        visit_i8: i8 visit_i16: i16 visit_i32: i32 visit_i64: i64 visit_i128: i128
        visit_u8: u8 visit_u16: u16 visit_u32: u32 visit_u64: u64 visit_u128: u128
        visit_f32: f32 visit_f64: f64 visit_char: char
        visit_str: &str visit_borrowed_str: &'de str visit_string: String
        visit_bytes: &[u8] visit_borrowed_bytes: &'de [u8] visit_byte_buf: Vec<u8>
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.0.visit_some(Reader(deserializer))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<V::Value, D::Error> {
        self.0.visit_newtype_struct(Reader(deserializer))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, elements: A) -> Result<V::Value, A::Error> {
        self.0.visit_seq(Reader(elements))
    }

    fn visit_map<A: MapAccess<'de>>(self, entries: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(Reader(entries))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, variant: A) -> Result<V::Value, A::Error> {
        self.0.visit_enum(Reader(variant))
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Reader<A> {
    type Error = A::Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        self.0.next_element_seed(Outlined(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Reader<A> {
    type Error = A::Error;

    // Keys are names, read as serde_json reads them.
    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        self.0.next_key_seed(seed)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.0.next_value_seed(Outlined(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Reader<A> {
    type Error = A::Error;
    type Variant = Reader<A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), A::Error> {
        let (variant, data) = self.0.variant_seed(seed)?;
        Ok((variant, Reader(data)))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Reader<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, A::Error> {
        self.0.newtype_variant_seed(Outlined(seed))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.0.tuple_variant(len, Wrapped(visitor))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.0.struct_variant(fields, Wrapped(visitor))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use super::*;
    use crate::test_types::Outer;

    fn both<T: DeserializeOwned + PartialEq + std::fmt::Debug>(text: &str) {
        let ours = from_str::<T>(text).map_err(|e| e.to_string());
        let theirs = serde_json::from_str::<T>(text).map_err(|e| e.to_string());
        assert_eq!(ours, theirs, "{text}");
        if let Ok(document) = serde_json::from_str::<serde_json::Value>(text) {
            let ours = from_value::<T>(document.clone()).map_err(|e| e.to_string());
            let theirs = serde_json::from_value::<T>(document).map_err(|e| e.to_string());
            assert_eq!(ours, theirs, "{text}");
        }
    }

    #[test]
    fn reads_and_refuses_what_serde_json_does() {
        for text in [
            r#"{"name": "a", "items": [{"size": 1}, null], "labels": {"k": "v"}, "pair": [-1, 1.5],
                "nested": {"name": "b", "shape": {"square": {"side": 2}}}, "shape": "round"}"#,
            r#"{"name": "a", "shape": {"named": "x"}}"#,
            r#"{"name": "a", "shape": {"pair": [1, 2]}}"#,
            r#"{"name": "a", "unknown": {"deep": [1, {"x": null}]}}"#,
            r#"{"name": "a", "items": [{"size": "big"}]}"#,
            r#"{"name": "a", "labels": {"k": 1}}"#,
            r#"{"name": "a", "pair": [1, 2, 3]}"#,
            r#"{"name": "a", "shape": "hexagon"}"#,
            r#"{"name": "a", "shape": {"pair": [1]}}"#,
            r#"{"items": []}"#,
            r#"{"name": "a"} trailing"#,
            r#"{"name": "a""#,
            "[]",
        ] {
            both::<Outer>(text);
        }
    }

    #[test]
    fn reads_a_pod_as_serde_json_does() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"app": "x"},
                         "creationTimestamp": "2026-12-05T10:00:00Z"},
            "spec": {
                "containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}],
                                "resources": {"limits": {"cpu": "1", "memory": 128}}}],
                "volumes": [{"name": "v", "emptyDir": {}},
                            {"name": "w", "configMap": {"name": "cm", "items": [{"key": "k", "path": "p"}]}}],
            },
        })
        .to_string();
        both::<Pod>(&pod);
        both::<Pod>(&pod.replace("80", "\"eighty\""));
    }
}
