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

/// Namespaces whose pods the pod webhook never sees, so that they start
/// even while the webhook host is down.
pub const SYSTEM_NAMESPACES: [&str; 2] = ["kube-system", "kruise-system"];

/// Where the API server calls the host.
#[derive(Debug, Clone, Copy)]
pub enum Endpoint<'a> {
    /// At a URL (the dev environment's host on loopback), trusting `ca_pem`.
    Url { base: &'a str, ca_pem: &'a str },
    /// At a Service on port 443 (an install); the manager sets the CA it
    /// issued (`webhook_certs`).
    Service { namespace: &'a str, name: &'a str },
}

impl Endpoint<'_> {
    /// The `clientConfig` of a webhook served at `path`.
    fn client_config(self, path: &str) -> Value {
        match self {
            Endpoint::Url { base, ca_pem } => json!({
                "url": format!("{base}{path}"),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem),
            }),
            Endpoint::Service { namespace, name } => json!({
                "service": {"namespace": namespace, "name": name, "path": path, "port": 443},
            }),
        }
    }
}

/// The pod webhook calling `endpoint`. Pods in namespaces labelled
/// `control-plane` are left alone, as OpenKruise does.
pub fn pod_webhook(endpoint: Endpoint<'_>) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": POD_WEBHOOK},
        "webhooks": [{
            "name": "pods.kruise-wasm.io",
            "admissionReviewVersions": ["v1"],
            "clientConfig": endpoint.client_config(&format!("/mutate/{POD_CHAIN}")),
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
pub fn validating_webhooks(endpoint: Endpoint<'_>, policies: &[(&str, &str)]) -> Value {
    let webhooks: Vec<Value> = policies
        .iter()
        .map(|(policy, resource)| {
            let client_config = endpoint.client_config(&format!("/validate/{policy}"));
            let name = format!("{resource}.kruise-wasm.io");
            kind_webhook(&name, &client_config, &[resource], false)
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
pub fn mutating_webhooks(endpoint: Endpoint<'_>, policies: &[(&str, &[&str])]) -> Value {
    let webhooks: Vec<Value> = policies
        .iter()
        .map(|(policy, resources)| {
            let client_config = endpoint.client_config(&format!("/validate/{policy}"));
            let name = format!("{policy}.kruise-wasm.io");
            kind_webhook(&name, &client_config, resources, true)
        })
        .collect();
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CR_MUTATING_WEBHOOK},
        "webhooks": webhooks,
    })
}

/// One webhook sending CREATE and UPDATE of our `resources` to
/// `client_config`, failing closed.
fn kind_webhook(name: &str, client_config: &Value, resources: &[&str], mutating: bool) -> Value {
    let mut webhook = json!({
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": client_config,
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
