//! The webhook configurations that send the API server's admission calls
//! to our host: OpenKruise's pod webhook as one mutation chain
//! (SidecarSet injection, then launch priority).

use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

pub const POD_WEBHOOK: &str = "kruise-wasm-pod-webhook";
/// The chain the host serves at `/mutate/<chain>`.
pub const POD_CHAIN: &str = "pods";

/// The pod webhook pointing at `base_url` (e.g. `https://127.0.0.1:8443`),
/// trusted through `ca_pem`. Pods in namespaces labelled `control-plane`
/// are left alone, as OpenKruise does.
/// Namespaces whose pods the pod webhook never sees, so that they start
/// even while the webhook host is down.
pub const SYSTEM_NAMESPACES: [&str; 2] = ["kube-system", "kruise-system"];

pub fn pod_webhook(base_url: &str, ca_pem: &str) -> Value {
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": POD_WEBHOOK},
        "webhooks": [{
            "name": "pods.kruise-wasm.io",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {
                "url": format!("{base_url}/mutate/{POD_CHAIN}"),
                "caBundle": ca_bundle,
            },
            "rules": [{
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
            }],
            // Fail: while the host is down, pods wait rather than start
            // without their sidecars or launch order. Namespaces whose pods
            // must start even then are never sent: OpenKruise's
            // `control-plane` exclusion, kube-system, and our own.
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": "control-plane", "operator": "DoesNotExist"},
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                     "values": SYSTEM_NAMESPACES},
                ],
            },
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "timeoutSeconds": 10,
            "reinvocationPolicy": "Never",
        }],
    })
}

pub const CR_WEBHOOK: &str = "kruise-wasm-validating-webhook";

/// The validation of our custom resources, one policy per kind: each
/// webhook sends its kind's CREATE and UPDATE to `/validate/<policy>`.
pub fn validating_webhooks(base_url: &str, ca_pem: &str, policies: &[(&str, &str)]) -> Value {
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let webhooks: Vec<Value> = policies
        .iter()
        .map(|(policy, resource)| {
            let url = format!("{base_url}/validate/{policy}");
            let name = format!("{resource}.kruise-wasm.io");
            kind_webhook(&name, &url, &ca_bundle, &[resource], false)
        })
        .collect();
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CR_WEBHOOK},
        "webhooks": webhooks,
    })
}

pub const CR_MUTATING_WEBHOOK: &str = "kruise-wasm-mutating-webhook";

/// The webhooks that default (and check) our custom resources, one per
/// policy: CREATE and UPDATE of its resources go to `/validate/<policy>`,
/// where the host answers with the policy's mutation (the policy is
/// allowed to mutate). Fail: a ContainerRecreateRequest stored without its
/// pod-uid and node-name labels would never reach a node agent, a job
/// without its finalizer would leave mirrored secrets behind, a SidecarSet
/// stored without its defaults could turn an image-only edit into more.
pub fn mutating_webhooks(base_url: &str, ca_pem: &str, policies: &[(&str, &[&str])]) -> Value {
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let webhooks: Vec<Value> = policies
        .iter()
        .map(|(policy, resources)| {
            let url = format!("{base_url}/validate/{policy}");
            let name = format!("{policy}.kruise-wasm.io");
            kind_webhook(&name, &url, &ca_bundle, resources, true)
        })
        .collect();
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CR_MUTATING_WEBHOOK},
        "webhooks": webhooks,
    })
}

/// One webhook sending CREATE and UPDATE of our `resources` to `url`,
/// failing closed.
fn kind_webhook(
    name: &str,
    url: &str,
    ca_bundle: &str,
    resources: &[&str],
    mutating: bool,
) -> Value {
    let mut webhook = json!({
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"url": url, "caBundle": ca_bundle},
        "rules": [{
            "apiGroups": ["apps.kruise.io"],
            "apiVersions": ["v1alpha1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": resources,
        }],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "timeoutSeconds": 10,
    });
    if mutating {
        // Our defaults do not depend on other webhooks' mutations.
        webhook["reinvocationPolicy"] = json!("Never");
    }
    webhook
}

/// Applies a Mutating- or ValidatingWebhookConfiguration.
pub async fn register(client: &Client, configuration: &Value) -> Result<(), String> {
    let name = configuration["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    let result = if configuration["kind"] == "ValidatingWebhookConfiguration" {
        apply::<ValidatingWebhookConfiguration>(client, name, configuration).await
    } else {
        apply::<MutatingWebhookConfiguration>(client, name, configuration).await
    };
    result.map_err(|e| format!("cannot register the webhook {name}: {e}"))
}

async fn apply<K>(client: &Client, name: &str, configuration: &Value) -> Result<(), kube::Error>
where
    K: kube::Resource<Scope = kube::core::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::all(client.clone());
    api.patch(
        name,
        &PatchParams::apply("kruise-manager").force(),
        &Patch::Apply(configuration),
    )
    .await
    .map(|_| ())
}
