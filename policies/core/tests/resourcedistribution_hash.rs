//! The `hashcode` annotation: SHA-256 of `spec.resource` as the API server
//! serves it (Go's encoding/json of the unstructured map). The expected
//! bytes and hashes were produced by Go 1.2x's `json.Marshal` of the same
//! documents unmarshalled into `map[string]interface{}`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use kruise_core::go_json;
use kruise_core::resourcedistribution::{raw_resource_hash, resource_hash};
use serde_json::{Value, json};

#[test]
fn the_spec_example_secret() {
    let resource = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "test-secret-1"},
        "type": "Opaque", "data": {"test": "dGVzdA=="}});
    let expected = r#"{"apiVersion":"v1","data":{"test":"dGVzdA=="},"kind":"Secret","metadata":{"name":"test-secret-1"},"type":"Opaque"}"#;
    assert_eq!(go_json::unstructured(&resource), expected);
    let hash = "d32b7db4c8b12d4cc03ca0d9b3e89a9b501490dbb34f1c77ac858eab0818d8b7";
    assert_eq!(resource_hash(&resource), hash);
    assert_eq!(raw_resource_hash(expected.as_bytes()), hash);
}

#[test]
fn escapes_and_numbers_as_go_writes_them() {
    let input = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x"},"data":{"html":"<b>a & b</b>","ctl":"\b\f\u0001\n\t\r\"\\","uni":"é\u2028\u2029😀"},"n":[1,1.5,100.0,1e21,1.5e-7,-2e-10,0,12345678901234]}"#;
    let resource: Value = serde_json::from_str(input).unwrap();
    let expected = r#"{"apiVersion":"v1","data":{"ctl":"\b\f\u0001\n\t\r\"\\","html":"\u003cb\u003ea \u0026 b\u003c/b\u003e","uni":"é\u2028\u2029😀"},"kind":"ConfigMap","metadata":{"name":"x"},"n":[1,1.5,100,1e+21,1.5e-7,-2e-10,0,12345678901234]}"#;
    assert_eq!(go_json::unstructured(&resource), expected);
    assert_eq!(
        resource_hash(&resource),
        "ca4bf024de1d5aa1c5ec5dd8b1b0e21a4bb1b4d9a91a089e6b451cb546a7c2d7"
    );
}

#[test]
fn field_order_of_the_input_does_not_matter_but_content_does() {
    let a: Value =
        serde_json::from_str(r#"{"kind":"ConfigMap","apiVersion":"v1","data":{"b":"1","a":"2"}}"#)
            .unwrap();
    let b: Value =
        serde_json::from_str(r#"{"apiVersion":"v1","data":{"a":"2","b":"1"},"kind":"ConfigMap"}"#)
            .unwrap();
    assert_eq!(resource_hash(&a), resource_hash(&b));
    let c = json!({"apiVersion": "v1", "data": {"a": "2", "b": "2"}, "kind": "ConfigMap"});
    assert_ne!(resource_hash(&a), resource_hash(&c));
}

#[test]
fn raw_bytes_are_hashed_as_they_are() {
    assert_ne!(
        raw_resource_hash(b"{\"a\":1}"),
        raw_resource_hash(b"{\"a\": 1}")
    );
    // sha256 of the empty input.
    assert_eq!(
        raw_resource_hash(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}
