//! The JSON Patch from a request's object to the object a guest mutated,
//! read straight from the guest's text.
//!
//! policy-server parses the mutated object into a JSON tree and diffs the
//! two trees (`json_patch::diff`). Most of a mutated pod is the request's
//! own object given back unchanged, so here the text is walked against the
//! original tree instead: unchanged parts are compared as they are read and
//! nothing is built for them; only what was added or replaced becomes a
//! tree. The patch is `json_patch::diff`'s, op for op and in its order (a
//! property test compares the two). Text the walk does not take (an object
//! with a key given twice, serde_json's raw-value marker, or anything
//! serde_json refuses) is left to the tree way, whose patch and error
//! messages are policy-server's.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use serde::Deserialize as _;
use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value};

/// `json_patch::diff(original, mutated)` for `mutated` given as the text
/// of a guest answer's `mutated_object`; `None` for text the walk does not
/// take (the module's header says which).
pub fn diff_text(original: &Value, mutated: &str) -> Option<Patch> {
    // Read inside an array, the object is allowed the nesting depth it has
    // inside the answer (serde_json's limit counts the answer's own level).
    let wrapped = format!("[{mutated}]");
    let mut walk = Walk::default();
    let mut text = serde_json::Deserializer::from_str(&wrapped);
    text.deserialize_seq(Only(Against {
        original,
        walk: &mut walk,
    }))
    .ok()?;
    text.end().ok()?;
    Some(Patch(walk.ops))
}

/// serde_json's tree reader takes an object with this first key for a
/// raw value written as a string (its `raw_value` feature, on here).
const RAW_VALUE_MARKER: &str = "$serde_json::private::RawValue";

/// An array of one element, read by the seed it holds.
struct Only<S>(S);

impl<'de, S: DeserializeSeed<'de, Value = ()>> Visitor<'de> for Only<S> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("one JSON value")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        seq.next_element_seed(self.0)?
            .ok_or_else(|| de::Error::invalid_length(0, &"one value"))?;
        match seq.next_element::<de::IgnoredAny>()? {
            None => Ok(()),
            Some(_) => Err(de::Error::invalid_length(2, &"one value")),
        }
    }
}

/// Where the walk is in the mutated text, and the ops found so far.
#[derive(Default)]
struct Walk<'de> {
    path: Vec<Segment<'de>>,
    ops: Vec<PatchOperation>,
}

enum Segment<'de> {
    Key(Cow<'de, str>),
    Index(usize),
}

impl Walk<'_> {
    /// The JSON Pointer of where the walk is (escaped as `json_patch`
    /// escapes it).
    fn pointer(&self) -> PointerBuf {
        let mut pointer = PointerBuf::new();
        for segment in &self.path {
            match segment {
                Segment::Key(key) => pointer.push_back(key.as_ref()),
                Segment::Index(index) => pointer.push_back(*index),
            }
        }
        pointer
    }

    fn replace(&mut self, value: Value) {
        let path = self.pointer();
        self.ops
            .push(PatchOperation::Replace(ReplaceOperation { path, value }));
    }

    fn add(&mut self, value: Value) {
        let path = self.pointer();
        self.ops
            .push(PatchOperation::Add(AddOperation { path, value }));
    }

    fn remove(&mut self, key: Option<&str>) {
        let mut path = self.pointer();
        if let Some(key) = key {
            path.push_back(key);
        }
        self.ops
            .push(PatchOperation::Remove(RemoveOperation { path }));
    }

    /// Puts the ops written since `first` in the order of their keys, as
    /// `json_patch::diff` visits an object's keys (sorted); `keys` are
    /// sorted, each with the range of ops written while it was read.
    fn order_by_key(&mut self, first: usize, keys: &[(Cow<'_, str>, Range<usize>)]) {
        if keys
            .windows(2)
            .all(|pair| pair[0].1.start <= pair[1].1.start)
        {
            return;
        }
        let mut written: Vec<Option<PatchOperation>> = self.ops.drain(first..).map(Some).collect();
        for (_, range) in keys {
            for index in range.clone() {
                if let Some(op) = written.get_mut(index - first).and_then(Option::take) {
                    self.ops.push(op);
                }
            }
        }
    }
}

/// Reads one value of the mutated text against its original.
struct Against<'o, 'w, 'de> {
    original: &'o Value,
    walk: &'w mut Walk<'de>,
}

impl Against<'_, '_, '_> {
    fn scalar(self, value: &Value) {
        if self.original != value {
            self.walk.replace(value.clone());
        }
    }

    /// A value of another type than the original's: read whole, it replaces.
    fn replaced_by<'de, D: Deserializer<'de>>(self, rest: D) -> Result<(), D::Error> {
        self.walk.replace(Value::deserialize(rest)?);
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Against<'_, '_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Against<'_, '_, 'de> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<(), E> {
        self.scalar(&Value::Bool(value));
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<(), E> {
        self.scalar(&Value::Number(value.into()));
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<(), E> {
        self.scalar(&Value::Number(value.into()));
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<(), E> {
        // As serde_json's own tree reader takes a float.
        self.scalar(&Number::from_f64(value).map_or(Value::Null, Value::Number));
        Ok(())
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<(), E> {
        if self.original.as_str() != Some(value) {
            self.walk.replace(Value::String(value.to_owned()));
        }
        Ok(())
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<(), E> {
        if self.original.as_str() != Some(value.as_str()) {
            self.walk.replace(Value::String(value));
        }
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar(&Value::Null);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Value::Array(left) = self.original else {
            return self.replaced_by(SeqAccessDeserializer::new(seq));
        };
        let mut index = 0;
        loop {
            self.walk.path.push(Segment::Index(index));
            let read = match left.get(index) {
                Some(original) => seq
                    .next_element_seed(Against {
                        original,
                        walk: self.walk,
                    })?
                    .is_some(),
                None => seq
                    .next_element::<Value>()?
                    .map(|value| self.walk.add(value))
                    .is_some(),
            };
            self.walk.path.pop();
            if !read {
                break;
            }
            index += 1;
        }
        // Each element past the new end is removed at that end, one after
        // the other, as json_patch::diff writes it.
        self.walk.path.push(Segment::Index(index));
        for _ in index..left.len() {
            self.walk.remove(None);
        }
        self.walk.path.pop();
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Value::Object(left) = self.original else {
            return self.replaced_by(MapAccessDeserializer::new(map));
        };
        let first = self.walk.ops.len();
        let mut keys: Vec<(Cow<'de, str>, Range<usize>)> = Vec::new();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let start = self.walk.ops.len();
            let original = left.get(key.as_ref());
            self.walk.path.push(Segment::Key(key.clone()));
            if let Some(original) = original {
                map.next_value_seed(Against {
                    original,
                    walk: self.walk,
                })?;
            } else {
                let value = map.next_value::<Value>()?;
                self.walk.add(value);
            }
            self.walk.path.pop();
            keys.push((key, start..self.walk.ops.len()));
        }
        keys.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        if keys.windows(2).any(|pair| pair[0].0 == pair[1].0) {
            // The tree keeps the last of the two values: the tree way.
            return Err(de::Error::custom("a key given twice"));
        }
        self.walk.order_by_key(first, &keys);
        for key in left.keys() {
            if keys
                .binary_search_by(|(seen, _)| seen.as_ref().cmp(key))
                .is_err()
            {
                self.walk.remove(Some(key));
            }
        }
        Ok(())
    }
}

/// An object's key, borrowed from the text unless it has escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a string key")
    }

    fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<Self::Value, E> {
        unmarked(Cow::Borrowed(key))
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        unmarked(Cow::Owned(key.to_owned()))
    }

    fn visit_string<E: de::Error>(self, key: String) -> Result<Self::Value, E> {
        unmarked(Cow::Owned(key))
    }
}

/// The key, unless it is the raw-value marker, which the tree way reads
/// as serde_json does.
fn unmarked<E: de::Error>(key: Cow<'_, str>) -> Result<Cow<'_, str>, E> {
    if key == RAW_VALUE_MARKER {
        return Err(E::custom("serde_json's raw-value marker"));
    }
    Ok(key)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn reference(original: &Value, mutated: &Value) -> Patch {
        json_patch::diff(original, mutated)
    }

    fn walk_of(original: &Value, text: &str) -> Patch {
        diff_text(original, text).unwrap()
    }

    #[test]
    fn the_walk_gives_json_patchs_ops_in_its_order() {
        let original = json!({
            "metadata": {"name": "p", "labels": {"a": "1", "z/x~y": "2"}},
            "spec": {"containers": [{"name": "app", "image": "a:1"}, {"name": "b"}, {"name": "c"}]},
            "n": 1, "f": 1.5, "neg": -3, "gone": true, "same": null,
        });
        // Written in another key order than the tree's (as a guest's
        // struct fields are), keys escaped in pointers, arrays longer and
        // shorter, and values of another type.
        let text = r#"{"spec": {"containers": [{"image": "a:2", "name": "app"}, {"name": "b", "x": [1]}],
            "volumes": [{"name": "v"}]}, "same": null, "n": 1.0, "f": 1.5, "neg": -3,
            "metadata": {"name": "p", "labels": {"z/x~y": "3", "a": "1", "new\"": {"k": [true]}}},
            "extra": [[], {}]}"#;
        let mutated: Value = serde_json::from_str(text).unwrap();
        let patch = walk_of(&original, text);
        assert_eq!(patch, reference(&original, &mutated));
        let paths: Vec<String> = patch
            .0
            .iter()
            .map(|op| {
                serde_json::to_value(op).unwrap()["path"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(
            paths,
            [
                "/extra",
                "/metadata/labels/new\"",
                "/metadata/labels/z~1x~0y",
                "/n",
                "/spec/containers/0/image",
                "/spec/containers/1/x",
                "/spec/containers/2",
                "/spec/volumes",
                "/gone",
            ]
            .map(str::to_owned)
            .to_vec()
        );
    }

    #[test]
    fn an_unchanged_object_gives_no_ops() {
        let original = json!({"a": [1, {"b": "c\u{e9}\n"}], "d": {}});
        let text = serde_json::to_string(&original).unwrap();
        assert!(walk_of(&original, &text).0.is_empty());
    }

    #[test]
    fn removed_elements_are_removed_at_the_new_end() {
        let original = json!([1, 2, 3, 4]);
        let patch = walk_of(&original, "[1]");
        assert_eq!(patch, reference(&original, &json!([1])));
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([{"op": "remove", "path": "/1"}, {"op": "remove", "path": "/1"}, {"op": "remove", "path": "/1"}])
        );
    }

    /// What the tree way reads otherwise is left to it: a key given twice
    /// (the tree keeps the last value), the raw-value marker, and text
    /// serde_json refuses.
    #[test]
    fn what_the_tree_reads_otherwise_is_not_walked() {
        let original = json!({"a": 1, "b": {"c": 1}});
        for text in [
            r#"{"a": 5, "b": 2, "a": 1}"#,
            r#"{"$serde_json::private::RawValue": "[1]"}"#,
            r#"{"b": {"$serde_json::private::RawValue": "1"}}"#,
            r#"{"a": 1"#,
            r#"{"a": 1} x"#,
            "[1,]",
            "nul",
            "1, 2",
        ] {
            assert_eq!(diff_text(&original, text), None, "{text}");
        }
        // Inside the answer the object has one level less than on its own.
        let deepest = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(diff_text(&json!([]), &deepest(126)).is_some());
        assert_eq!(diff_text(&json!([]), &deepest(127)), None);
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-3i64..3).prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            prop_oneof![Just(0.5), Just(-1.0), Just(-0.0), Just(1e-7), Just(1e300)]
                .prop_map(Value::from),
            "[ab/~\"\\\\é]{0,2}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map("[ab/~\"\\\\é]{0,2}", inner, 0..5)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    /// A value changed in places: what a guest's mutation looks like,
    /// mostly the original with some parts added, dropped or replaced.
    fn mutated(original: Value) -> BoxedStrategy<Value> {
        let mut variants = vec![Just(original.clone()).boxed()];
        variants.push(json_value().boxed());
        match original {
            Value::Object(map) => {
                let entries: Vec<(String, Value)> = map.into_iter().collect();
                let changed = entries
                    .into_iter()
                    .map(|(key, value)| {
                        prop_oneof![
                            3 => mutated(value).prop_map(Some),
                            1 => Just(None),
                        ]
                        .prop_map(move |value| value.map(|value| (key.clone(), value)))
                    })
                    .collect::<Vec<_>>();
                let extra = prop::collection::btree_map("[abc]{1,2}", json_value(), 0..2);
                variants.push(
                    (changed, extra)
                        .prop_map(|(kept, extra)| {
                            let mut object: serde_json::Map<String, Value> =
                                kept.into_iter().flatten().collect();
                            for (key, value) in extra {
                                object.entry(key).or_insert(value);
                            }
                            Value::Object(object)
                        })
                        .boxed(),
                );
            }
            Value::Array(items) => {
                let changed: Vec<_> = items.into_iter().map(mutated).collect();
                variants.push(
                    (
                        changed,
                        0usize..3,
                        prop::collection::vec(json_value(), 0..2),
                    )
                        .prop_map(|(mut items, drop, extra)| {
                            items.truncate(items.len().saturating_sub(drop));
                            items.extend(extra);
                            Value::Array(items)
                        })
                        .boxed(),
                );
            }
            _ => {}
        }
        proptest::strategy::Union::new(variants).boxed()
    }

    fn pair() -> impl Strategy<Value = (Value, Value)> {
        json_value().prop_flat_map(|original| (Just(original.clone()), mutated(original)))
    }

    /// The mutated value written with each object's keys in an order of
    /// `seed`'s, as a guest writes a struct's fields in its own order: the
    /// patch must not depend on it.
    fn shuffled_keys(value: &Value, seed: u64) -> String {
        match value {
            Value::Object(map) => {
                let mut fields: Vec<(u64, String)> = map
                    .iter()
                    .map(|(key, value)| {
                        let field = format!(
                            "{}: {}",
                            Value::String(key.clone()),
                            shuffled_keys(value, seed)
                        );
                        (mixed(seed, key), field)
                    })
                    .collect();
                fields.sort();
                let fields: Vec<String> = fields.into_iter().map(|(_, field)| field).collect();
                format!("{{{}}}", fields.join(", "))
            }
            Value::Array(items) => {
                let items: Vec<String> = items.iter().map(|v| shuffled_keys(v, seed)).collect();
                format!("[{}]", items.join(","))
            }
            other => other.to_string(),
        }
    }

    /// FNV-1a of the seed and the key: an order that differs by seed.
    fn mixed(seed: u64, key: &str) -> u64 {
        seed.to_le_bytes()
            .iter()
            .chain(key.as_bytes())
            .fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
                (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn the_walk_is_json_patchs_diff((original, mutated) in pair(), seed in any::<u64>()) {
            let expected = reference(&original, &mutated);
            let text = serde_json::to_string(&mutated).unwrap();
            prop_assert_eq!(&walk_of(&original, &text), &expected);
            prop_assert_eq!(&walk_of(&original, &shuffled_keys(&mutated, seed)), &expected);
            let pretty = serde_json::to_string_pretty(&mutated).unwrap();
            prop_assert_eq!(&walk_of(&original, &pretty), &expected);
        }
    }
}
