//! The webhook configurations that send the API server's admission calls
//! to our host: OpenKruise's pod webhook as one mutation chain
//! (SidecarSet injection, then launch priority).

use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

pub const POD_WEBHOOK: &str = "kruise-wasm-pod-webhook";
/// The chain the host serves at `/mutate/<chain>`.
pub const POD_CHAIN: &str = "pods";

/// The pod webhook pointing at `base_url` (e.g. `https://127.0.0.1:8443`),
/// trusted through `ca_pem`. Pods in namespaces labelled `control-plane`
/// are left alone, as OpenKruise does.
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
            "namespaceSelector": {
                "matchExpressions": [{"key": "control-plane", "operator": "DoesNotExist"}],
            },
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "timeoutSeconds": 10,
            "reinvocationPolicy": "Never",
        }],
    })
}

pub async fn register(client: &Client, configuration: &Value) -> Result<(), String> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let name = configuration["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    api.patch(
        name,
        &PatchParams::apply("kruise-manager").force(),
        &Patch::Apply(configuration),
    )
    .await
    .map(|_| ())
    .map_err(|e| format!("cannot register the webhook {name}: {e}"))
}
