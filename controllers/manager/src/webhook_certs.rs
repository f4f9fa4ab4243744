//! Keeps the webhook host's certificates current (the leading manager
//! does, every minute): the Secret the host mounts holds a CA and a
//! serving certificate for the host's Service, and every webhook
//! configuration of ours, and the conversion webhook of every CRD of ours,
//! trusts that CA. What to issue is decided in
//! [`crate::certs`].

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kruise_controller_runtime::api_error::is_not_found;
use kube::api::{Patch, PatchParams, PostParams};
use kube::core::ClusterResourceScope;
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::certs::{self, Bundle, Renewal};
use crate::webhook::{CR_MUTATING_WEBHOOK, CR_WEBHOOK, POD_WEBHOOK};

/// The Secret's name, as OpenKruise's.
pub const SECRET: &str = "kruise-webhook-certs";
const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const CERT: &str = "tls.crt";
const KEY: &str = "tls.key";
const EVERY: Duration = Duration::from_mins(1);
/// Our CRDs, whose conversion webhook is the host's `/convert`.
pub const CRDS: [&str; 6] = [
    "clonesets.apps.kruise.io",
    "sidecarsets.apps.kruise.io",
    "containerrecreaterequests.apps.kruise.io",
    "nodeimages.apps.kruise.io",
    "imagepulljobs.apps.kruise.io",
    "resourcedistributions.apps.kruise.io",
];

/// Where the host runs: its namespace, Service and Secret.
#[derive(Debug, Clone)]
pub struct Target {
    pub namespace: String,
    pub service: String,
    pub secret: String,
}

/// Renews every minute; a failed round is logged and tried again.
pub async fn keep_current(client: Client, target: Target) {
    loop {
        if let Err(error) = renew(&client, &target, SystemTime::now()).await {
            tracing::warn!(%error, "webhook certificates: retrying in a minute");
        }
        tokio::time::sleep(EVERY).await;
    }
}

/// One round: the Secret renewed if it must be, then every webhook
/// configuration of ours that exists made to trust its CA.
pub async fn renew(client: &Client, target: &Target, now: SystemTime) -> Result<(), String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &target.namespace);
    let stored = secrets
        .get_opt(&target.secret)
        .await
        .map_err(|e| format!("cannot read the Secret {}: {e}", target.secret))?;
    let current = stored.as_ref().and_then(bundle_in);
    let names = certs::service_names(&target.namespace, &target.service);
    let bundle = match (certs::check(current.as_ref(), &names, now), current) {
        (Renewal::Keep, Some(current)) => current,
        (renewal, current) => {
            let bundle = certs::issue(renewal, current.as_ref(), &names, now)?;
            write(&secrets, target, stored, &bundle).await?;
            tracing::info!(?renewal, secret = %target.secret, "issued webhook certificates");
            bundle
        }
    };
    for name in [POD_WEBHOOK, CR_MUTATING_WEBHOOK] {
        trust::<MutatingWebhookConfiguration>(client, name, &bundle.ca_cert, webhooks_patch)
            .await?;
    }
    trust::<ValidatingWebhookConfiguration>(client, CR_WEBHOOK, &bundle.ca_cert, webhooks_patch)
        .await?;
    for name in CRDS {
        trust::<CustomResourceDefinition>(client, name, &bundle.ca_cert, conversion_patch).await?;
    }
    Ok(())
}

/// The four parts, if the Secret has them all as text.
fn bundle_in(secret: &Secret) -> Option<Bundle> {
    let data = secret.data.as_ref()?;
    let text = |key: &str| String::from_utf8(data.get(key)?.0.clone()).ok();
    Some(Bundle {
        ca_cert: text(CA_CERT)?,
        ca_key: text(CA_KEY)?,
        cert: text(CERT)?,
        key: text(KEY)?,
    })
}

/// Creates the Secret, or replaces the data of the one read (its
/// resourceVersion: a concurrent writer makes this a conflict, retried).
async fn write(
    secrets: &Api<Secret>,
    target: &Target,
    stored: Option<Secret>,
    bundle: &Bundle,
) -> Result<(), String> {
    let data: BTreeMap<String, ByteString> = [
        (CA_CERT, &bundle.ca_cert),
        (CA_KEY, &bundle.ca_key),
        (CERT, &bundle.cert),
        (KEY, &bundle.key),
    ]
    .into_iter()
    .map(|(key, text)| (key.to_owned(), ByteString(text.clone().into_bytes())))
    .collect();
    let result = if let Some(mut secret) = stored {
        secret.data = Some(data);
        secrets
            .replace(&target.secret, &PostParams::default(), &secret)
            .await
    } else {
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(target.secret.clone()),
                namespace: Some(target.namespace.clone()),
                ..Default::default()
            },
            type_: Some("kubernetes.io/tls".to_owned()),
            data: Some(data),
            ..Secret::default()
        };
        secrets.create(&PostParams::default(), &secret).await
    };
    result
        .map(|_| ())
        .map_err(|e| format!("cannot write the Secret {}: {e}", target.secret))
}

/// Makes object `name` trust `ca_pem` with the patch `patch` makes of it
/// (none: it does already); one that is not installed is left to whoever
/// installs it.
async fn trust<K>(
    client: &Client,
    name: &str,
    ca_pem: &str,
    patch: fn(&Value, &str) -> Option<Value>,
) -> Result<(), String>
where
    K: Resource<Scope = ClusterResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    let configuration = match api.get(name).await {
        Ok(configuration) => configuration,
        Err(error) if is_not_found(&error) => return Ok(()),
        Err(error) => return Err(format!("cannot read {name}: {error}")),
    };
    let configuration = serde_json::to_value(configuration).map_err(|e| e.to_string())?;
    let Some(patch) = patch(&configuration, &base64_of(ca_pem)) else {
        return Ok(());
    };
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| tracing::info!(object = name, "set the webhook CA"))
        .map_err(|e| format!("cannot set the CA of {name}: {e}"))
}

fn base64_of(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The merge patch that gives every webhook of `configuration` the
/// `ca_bundle` (base64 PEM), on the resourceVersion read; none when all
/// have it.
fn webhooks_patch(configuration: &Value, ca_bundle: &str) -> Option<Value> {
    let mut webhooks = configuration["webhooks"].as_array()?.clone();
    let mut changed = false;
    for webhook in &mut webhooks {
        if webhook["clientConfig"]["caBundle"] != ca_bundle {
            webhook["clientConfig"]["caBundle"] = json!(ca_bundle);
            changed = true;
        }
    }
    // A merge patch replaces the list whole: the resourceVersion makes a
    // configuration changed since it was read a conflict, not an undo.
    changed.then(|| {
        json!({
            "metadata": {"resourceVersion": configuration["metadata"]["resourceVersion"]},
            "webhooks": webhooks,
        })
    })
}

/// The merge patch that gives a CRD's conversion webhook, when it calls a
/// Service, the `ca_bundle`; none when it has it (or converts otherwise).
fn conversion_patch(crd: &Value, ca_bundle: &str) -> Option<Value> {
    let client_config = &crd["spec"]["conversion"]["webhook"]["clientConfig"];
    (client_config["service"].is_object() && client_config["caBundle"] != ca_bundle).then(
        || json!({"spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": ca_bundle}}}}}),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use kruise_controller_runtime::testing::FakeApi;

    use super::*;

    const SECRET_PATH: &str = "/api/v1/namespaces/kruise-system/secrets/kruise-webhook-certs";
    const POD_WEBHOOK_PATH: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/kruise-wasm-pod-webhook";

    fn target() -> Target {
        Target {
            namespace: "kruise-system".to_owned(),
            service: "kruise-wasm-host".to_owned(),
            secret: SECRET.to_owned(),
        }
    }

    fn pod_webhook() -> Value {
        crate::webhook::pod_webhook(crate::webhook::Endpoint::Service {
            namespace: "kruise-system",
            name: "kruise-wasm-host",
        })
    }

    fn stored_ca(api: &FakeApi) -> String {
        let secret = api.get(SECRET_PATH).unwrap();
        let encoded = secret["data"][CA_CERT].as_str().unwrap();
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .unwrap(),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn the_first_round_issues_the_secret_and_sets_the_ca_then_rounds_write_nothing() {
        let api = FakeApi::default();
        api.insert("mutatingwebhookconfigurations", pod_webhook());
        let now = SystemTime::now();

        renew(&api.client(), &target(), now).await.unwrap();

        let secret = api.get(SECRET_PATH).unwrap();
        assert_eq!(secret["type"], "kubernetes.io/tls");
        let ca = stored_ca(&api);
        let webhook = api.get(POD_WEBHOOK_PATH).unwrap();
        let expected = base64_of(&ca);
        assert_eq!(webhook["webhooks"][0]["clientConfig"]["caBundle"], expected);
        assert_eq!(
            webhook["webhooks"][0]["clientConfig"]["service"]["path"], "/mutate/pods",
            "the rest of the webhook is kept"
        );

        let writes = api.writes().len();
        renew(&api.client(), &target(), now).await.unwrap();
        assert_eq!(api.writes().len(), writes, "a settled round writes nothing");
    }

    #[tokio::test]
    async fn a_secret_that_no_longer_parses_is_reissued() {
        let api = FakeApi::default();
        api.insert(
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": SECRET, "namespace": "kruise-system"},
                   "type": "Opaque",
                   "data": {CA_CERT: "bm90IGEgY2VydA==", CA_KEY: "eA==", CERT: "eA==", KEY: "eA=="}}),
        );
        renew(&api.client(), &target(), SystemTime::now())
            .await
            .unwrap();
        let ca = stored_ca(&api);
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");
        assert_eq!(
            api.get(SECRET_PATH).unwrap()["type"],
            "Opaque",
            "a Secret's type cannot change: it is kept"
        );
    }

    #[test]
    fn the_ca_patch_keeps_the_resource_version_read() {
        let mut configuration = pod_webhook();
        configuration["metadata"]["resourceVersion"] = json!("7");
        let patch = webhooks_patch(&configuration, "CA").unwrap();
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        let mut trusted = configuration.clone();
        trusted["webhooks"] = patch["webhooks"].clone();
        assert_eq!(webhooks_patch(&trusted, "CA"), None);
    }

    #[test]
    fn every_crd_of_ours_is_trusted_through_its_service_only() {
        let generated: Vec<String> = kruise_api::crd::all()
            .unwrap()
            .into_iter()
            .map(|crd| crd.crd["metadata"]["name"].as_str().unwrap().to_owned())
            .collect();
        let mut listed: Vec<String> = CRDS.iter().map(|&name| name.to_owned()).collect();
        let mut generated_sorted = generated.clone();
        generated_sorted.sort();
        listed.sort();
        assert_eq!(listed, generated_sorted);

        let crd = kruise_api::crd::all().unwrap().remove(0).crd;
        let patch = conversion_patch(&crd, "CA").unwrap();
        let mut trusted = crd.clone();
        json_patch::merge(&mut trusted, &patch);
        assert_eq!(conversion_patch(&trusted, "CA"), None);
        let mut by_url = crd;
        kruise_api::crd::set_conversion_url(&mut by_url, "https://127.0.0.1:1/convert", "DEV");
        assert_eq!(
            conversion_patch(&by_url, "CA"),
            None,
            "the dev cluster's CRDs are left alone"
        );
    }
}
