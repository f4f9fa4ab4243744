//! CustomResourceDefinitions generated from the types, with OpenKruise's
//! names, short names, printer columns and subresources.
//!
//! Each CRD serves v1alpha1 (our types) and v1beta1 (see [`v1beta1`]) and,
//! as OpenKruise v1.9 does, stores v1beta1. The API server converts
//! between them by calling the webhook host's `/convert`: the CRDs name the
//! host's Service; an installation (or the dev cluster) sets the address
//! and the CA it trusts with [`set_conversion_url`].

mod v1beta1;

use std::any::TypeId;

use k8s_openapi::NamespaceResourceScope;
use schemars::generate::SchemaSettings;
use schemars::{Schema, SchemaGenerator};
use serde_json::{Value, json};

use crate::object::{GROUP, KruiseObject, VERSION};
use crate::{
    CloneSet, ContainerRecreateRequest, ImagePullJob, NodeImage, ResourceDistribution, SidecarSet,
};

/// The schemas of a kind's spec and status (implemented by `kruise_kind!`).
pub trait Schemas {
    fn spec_schema(generator: &mut SchemaGenerator) -> Schema;
    fn status_schema(generator: &mut SchemaGenerator) -> Schema;
}

/// What a CRD says beyond the schema.
struct Presentation {
    description: &'static str,
    short_names: &'static [&'static str],
    columns: Vec<Column>,
    /// CloneSet's scale subresource, so `kubectl scale` and HPAs work.
    scale: bool,
    /// Columns OpenKruise shows for v1alpha1 only.
    alpha_only_columns: &'static [&'static str],
}

struct Column {
    name: &'static str,
    json_path: &'static str,
    type_: &'static str,
    description: &'static str,
    /// 1 = shown only with `-o wide`.
    priority: u8,
}

const fn column(
    name: &'static str,
    json_path: &'static str,
    type_: &'static str,
    description: &'static str,
) -> Column {
    Column {
        name,
        json_path,
        type_,
        description,
        priority: 0,
    }
}

const AGE: Column = column(
    "AGE",
    ".metadata.creationTimestamp",
    "date",
    "Time since creation.",
);

/// One generated CRD and the file it is kept in.
#[derive(Debug)]
pub struct GeneratedCrd {
    pub file_name: String,
    pub crd: Value,
}

impl GeneratedCrd {
    pub fn to_yaml(&self) -> Result<String, serde_yaml::Error> {
        serde_yaml::to_string(&self.crd)
    }
}

/// Every CRD this project serves.
pub fn all() -> Result<Vec<GeneratedCrd>, String> {
    Ok(vec![
        generate::<CloneSet>(&clone_set())?,
        generate::<SidecarSet>(&sidecar_set())?,
        generate::<ContainerRecreateRequest>(&container_recreate_request())?,
        generate::<NodeImage>(&node_image())?,
        generate::<ImagePullJob>(&image_pull_job())?,
        generate::<ResourceDistribution>(&resource_distribution())?,
    ])
}

/// The version the API server stores, as OpenKruise v1.9's CRDs say.
pub const STORAGE_VERSION: &str = "v1beta1";

/// Where the API server sends ConversionReviews in a cluster install: the
/// webhook host's Service.
pub const CONVERSION_SERVICE: (&str, &str) = ("kruise-system", "kruise-wasm-host");
pub const CONVERSION_PATH: &str = "/convert";

/// Points a CRD's conversion webhook at `url` (e.g.
/// `https://127.0.0.1:8443/convert`), trusted through `ca_bundle` (base64
/// PEM), instead of the Service.
pub fn set_conversion_url(crd: &mut Value, url: &str, ca_bundle: &str) {
    crd["spec"]["conversion"]["webhook"]["clientConfig"] = json!({
        "url": url,
        "caBundle": ca_bundle,
    });
}

fn clone_set() -> Presentation {
    Presentation {
        description: "CloneSet manages identical pods with partitioned, surge-aware and in-place rollouts.",
        short_names: &["clone"],
        columns: vec![
            column("DESIRED", ".spec.replicas", "integer", "Desired pods."),
            column(
                "UPDATED",
                ".status.updatedReplicas",
                "integer",
                "Pods on the update revision.",
            ),
            column(
                "UPDATED_READY",
                ".status.updatedReadyReplicas",
                "integer",
                "Updated pods that are ready.",
            ),
            column(
                "UPDATED_AVAILABLE",
                ".status.updatedAvailableReplicas",
                "integer",
                "Updated pods that are available.",
            ),
            column("READY", ".status.readyReplicas", "integer", "Ready pods."),
            column("TOTAL", ".status.replicas", "integer", "All pods."),
            AGE,
            Column {
                priority: 1,
                ..column(
                    "CONTAINERS",
                    ".spec.template.spec.containers[*].name",
                    "string",
                    "Container names.",
                )
            },
            Column {
                priority: 1,
                ..column(
                    "IMAGES",
                    ".spec.template.spec.containers[*].image",
                    "string",
                    "Container images.",
                )
            },
            Column {
                priority: 1,
                ..column(
                    "SELECTOR",
                    ".status.labelSelector",
                    "string",
                    "Pod selector.",
                )
            },
        ],
        scale: true,
        alpha_only_columns: &[],
    }
}

fn sidecar_set() -> Presentation {
    Presentation {
        description: "SidecarSet injects sidecar containers into matching pods and upgrades them in place.",
        short_names: &[],
        columns: vec![
            column(
                "MATCHED",
                ".status.matchedPods",
                "integer",
                "Pods carrying these sidecars.",
            ),
            column(
                "UPDATED",
                ".status.updatedPods",
                "integer",
                "Matched pods on the latest sidecar version.",
            ),
            column(
                "READY",
                ".status.readyPods",
                "integer",
                "Matched pods that are ready.",
            ),
            AGE,
        ],
        scale: false,
        alpha_only_columns: &[],
    }
}

fn container_recreate_request() -> Presentation {
    Presentation {
        description: "ContainerRecreateRequest restarts chosen containers of a running pod.",
        short_names: &["crr"],
        columns: vec![
            column("PHASE", ".status.phase", "string", "Phase of the request."),
            column("POD", ".spec.podName", "string", "Target pod."),
            column(
                "NODE",
                ".metadata.labels.crr\\.apps\\.kruise\\.io/node-name",
                "string",
                "Node of the pod.",
            ),
            AGE,
        ],
        scale: false,
        alpha_only_columns: &[],
    }
}

fn node_image() -> Presentation {
    Presentation {
        description: "NodeImage lists the images a node should pull and reports their state.",
        short_names: &[],
        columns: vec![
            column("DESIRED", ".status.desired", "integer", "Images to pull."),
            column(
                "PULLING",
                ".status.pulling",
                "integer",
                "Images being pulled.",
            ),
            column("SUCCEED", ".status.succeeded", "integer", "Images pulled."),
            column("FAILED", ".status.failed", "integer", "Images that failed."),
            AGE,
        ],
        scale: false,
        alpha_only_columns: &[],
    }
}

fn image_pull_job() -> Presentation {
    Presentation {
        description: "ImagePullJob pre-pulls an image on selected nodes.",
        short_names: &[],
        columns: vec![
            column("TOTAL", ".status.desired", "integer", "Nodes to pull on."),
            column("ACTIVE", ".status.active", "integer", "Nodes pulling."),
            column("SUCCEED", ".status.succeeded", "integer", "Nodes done."),
            column("FAILED", ".status.failed", "integer", "Nodes that failed."),
            AGE,
            column("MESSAGE", ".status.message", "string", "Summary."),
        ],
        scale: false,
        alpha_only_columns: &["MESSAGE"],
    }
}

fn resource_distribution() -> Presentation {
    Presentation {
        description: "ResourceDistribution copies a Secret or ConfigMap into chosen namespaces and keeps the copies in sync.",
        short_names: &["distributor"],
        columns: vec![
            column("TOTAL", ".status.desired", "integer", "Target namespaces."),
            column(
                "SUCCEED",
                ".status.succeeded",
                "integer",
                "Namespaces in sync.",
            ),
            column(
                "FAILED",
                ".status.failed",
                "integer",
                "Namespaces that failed.",
            ),
        ],
        scale: false,
        alpha_only_columns: &[],
    }
}

fn generate<K>(presentation: &Presentation) -> Result<GeneratedCrd, String>
where
    K: KruiseObject + Schemas,
    K::Scope: 'static,
{
    let mut generator = SchemaSettings::openapi3()
        .with(|settings| {
            settings.inline_subschemas = true;
            settings.meta_schema = None;
        })
        .into_generator();
    let spec = K::spec_schema(&mut generator);
    let status = K::status_schema(&mut generator);
    let mut schema = json!({
        "type": "object",
        "description": presentation.description,
        "properties": {
            "apiVersion": { "type": "string", "description": "Versioned schema of this object." },
            "kind": { "type": "string", "description": "Kind of this object." },
            "metadata": { "type": "object" },
            "spec": spec,
            "status": status,
        }
    });
    strip_generator_noise(&mut schema);
    let beta_schema = v1beta1::schema(K::KIND, schema.clone())?;

    let plural = K::URL_PATH_SEGMENT;
    let kind = K::KIND;
    let mut subresources = json!({ "status": {} });
    if presentation.scale {
        subresources["scale"] = json!({
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.labelSelector",
        });
    }
    let columns = |version| printer_columns(presentation, version);
    let mut names = json!({
        "kind": kind,
        "listKind": format!("{kind}List"),
        "plural": plural,
        "singular": kind.to_lowercase(),
    });
    if !presentation.short_names.is_empty() {
        names["shortNames"] = json!(presentation.short_names);
    }
    let namespaced = TypeId::of::<K::Scope>() == TypeId::of::<NamespaceResourceScope>();
    let scope = if namespaced { "Namespaced" } else { "Cluster" };
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{plural}.{GROUP}") },
        "spec": {
            "group": GROUP,
            "names": names,
            "scope": scope,
            "versions": [
                {
                    "name": VERSION,
                    "served": true,
                    "storage": false,
                    "schema": { "openAPIV3Schema": schema },
                    "subresources": subresources,
                    "additionalPrinterColumns": columns(VERSION),
                },
                {
                    "name": STORAGE_VERSION,
                    "served": true,
                    "storage": true,
                    "schema": { "openAPIV3Schema": beta_schema },
                    "subresources": subresources,
                    "additionalPrinterColumns": columns(STORAGE_VERSION),
                },
            ],
            "conversion": conversion(),
        }
    });
    Ok(GeneratedCrd {
        file_name: format!("{GROUP}_{plural}.yaml"),
        crd,
    })
}

/// The columns `kubectl get` shows for `version`.
fn printer_columns(presentation: &Presentation, version: &str) -> Vec<Value> {
    presentation
        .columns
        .iter()
        .filter(|c| version == VERSION || !presentation.alpha_only_columns.contains(&c.name))
        .map(|c| {
            let mut column = json!({
                "name": c.name,
                "jsonPath": c.json_path,
                "type": c.type_,
                "description": c.description,
            });
            if c.priority > 0 {
                column["priority"] = json!(c.priority);
            }
            column
        })
        .collect()
}

/// The conversion webhook: the host's Service in a cluster install.
fn conversion() -> Value {
    json!({
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {
                "service": {
                    "namespace": CONVERSION_SERVICE.0,
                    "name": CONVERSION_SERVICE.1,
                    "path": CONVERSION_PATH,
                    "port": 443,
                },
            },
        },
    })
}

/// Drop what schemars adds that a CRD schema does not use. An absent
/// optional field is simply omitted, so `Option` needs no `nullable`.
fn strip_generator_noise(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            map.remove("nullable");
            drop_null_type(map);
            collapse_single_any_of(map);
            consts_to_enum(map);
            map.remove("title");
            map.remove("$schema");
            map.remove("examples");
            // `false` defaults of skipped booleans and empty lists say nothing.
            if map
                .get("default")
                .is_some_and(|d| d == &json!(false) || d == &json!([]) || d.is_null())
            {
                map.remove("default");
            }
            map.values_mut().for_each(strip_generator_noise);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_generator_noise),
        _ => {}
    }
}

/// schemars types an `Option<T>` as `[T, "null"]`.
fn drop_null_type(map: &mut serde_json::Map<String, Value>) {
    if let Some(Value::Array(types)) = map.get_mut("type") {
        types.retain(|t| t != "null");
        if let [single] = types.as_slice() {
            let single = single.clone();
            map.insert("type".to_owned(), single);
        }
    }
    if let Some(Value::Array(options)) = map.get_mut("anyOf") {
        options.retain(|option| option != &json!({ "type": "null" }));
    }
}

/// `Option<Struct>` can come out as `anyOf: [<struct>]` once `null` is gone.
fn collapse_single_any_of(map: &mut serde_json::Map<String, Value>) {
    let single = match map.get("anyOf") {
        Some(Value::Array(options)) if options.len() == 1 => options[0].clone(),
        _ => return,
    };
    map.remove("anyOf");
    if let Value::Object(inner) = single {
        for (key, value) in inner {
            map.entry(key).or_insert(value);
        }
    }
}

/// A unit enum whose variants carry doc comments comes out as a `oneOf` of
/// `const`s; a CRD wants `type: string` with an `enum`.
fn consts_to_enum(map: &mut serde_json::Map<String, Value>) {
    let Some(Value::Array(options)) = map.get("oneOf") else {
        return;
    };
    let values: Option<Vec<Value>> = options
        .iter()
        .map(|option| option.get("const").filter(|c| c.is_string()).cloned())
        .collect();
    if let Some(values) = values {
        map.remove("oneOf");
        map.insert("type".to_owned(), json!("string"));
        map.insert("enum".to_owned(), Value::Array(values));
    }
}
