//! Kubewarden policy: the steps of OpenKruise's pod webhook that need no
//! cluster reads. On Pod CREATE a pod whose controller is an OpenKruise
//! workload gets the `KruisePodReady` readiness gate (spec 00 §1.5), and
//! every container of an ordered pod is gated on its priority's key in the
//! `<pod>-barrier` ConfigMap; everything else is accepted unchanged. Takes
//! no settings.

use kruise_core::launch_priority::{self, NAME_SUFFIX_ALPHABET};
use kruise_core::pod_readiness;
/// The policy takes no settings; any given are refused.
pub use kruise_policy_support::{
    NoSettings as Settings, validate_no_settings as validate_settings,
};
use kruise_policy_support::{Outcome, PodAdmission, pod_to_create, read_pod_request};

/// The decision for one admission request. `name_suffix` names a pod that
/// only has `generateName`.
pub fn evaluate(request: &PodAdmission<'_>, name_suffix: &str) -> Outcome {
    let mut pod = match pod_to_create(request) {
        Ok(Some(pod)) => pod,
        Ok(None) => return Outcome::Accept,
        Err(message) => return Outcome::bad_request(message),
    };
    let gated = pod_readiness::add_gate_for_workload(&mut pod);
    match launch_priority::apply(&pod, name_suffix) {
        Ok(None) if !gated => Outcome::Accept,
        Ok(None) => Outcome::MutatePod(Box::new(pod)),
        Ok(Some(ordered)) => Outcome::MutatePod(Box::new(ordered)),
        Err(e) => Outcome::bad_request(e.to_string()),
    }
}

/// The `validate` waPC operation.
pub fn validate(payload: &[u8]) -> Result<Vec<u8>, String> {
    let outcome = match read_pod_request::<Settings>(payload) {
        Ok(request) => evaluate(&request.request, &random_name_suffix()),
        Err(message) => Outcome::bad_request(message),
    };
    outcome.into_payload().map_err(|e| e.to_string())
}

/// Five characters of Kubernetes' name alphabet, from the platform's
/// randomness (WASI `random_get` in the policy). Without any, the suffix is
/// empty, and only a pod that needs a generated name is refused for it.
fn random_name_suffix() -> String {
    let Some(mut bits) = kruise_policy_support::random::random_u64() else {
        return String::new();
    };
    let alphabet = NAME_SUFFIX_ALPHABET.as_bytes();
    let radix = alphabet.len() as u64;
    (0..5)
        .map(|_| {
            #[allow(clippy::cast_possible_truncation)] // the remainder is below 27
            let index = (bits % radix) as usize;
            bits /= radix;
            char::from(alphabet[index])
        })
        .collect()
}

kruise_policy_support::export_policy!(validate: validate, validate_settings: validate_settings);

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A Pod CREATE request for `object`, kept as its JSON text.
    struct PodCreate(String);

    impl PodCreate {
        fn new(object: &serde_json::Value) -> Self {
            Self(
                json!({
                    "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "operation": "CREATE", "object": object
                })
                .to_string(),
            )
        }

        fn evaluate(&self, name_suffix: &str) -> Outcome {
            evaluate(&serde_json::from_str(&self.0).unwrap(), name_suffix)
        }
    }

    #[test]
    fn random_suffixes_are_valid_names() {
        let suffix = random_name_suffix();
        assert_eq!(suffix.len(), 5);
        assert!(
            suffix.chars().all(|c| NAME_SUFFIX_ALPHABET.contains(c)),
            "{suffix}"
        );
    }

    #[test]
    fn an_ordered_pod_is_mutated() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "annotations": {"apps.kruise.io/container-launch-priority": "Ordered"}},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let Some(object) = PodCreate::new(&pod).evaluate("bbbbb").mutated_object() else {
            panic!("expected a mutation");
        };
        let key = &object["spec"]["containers"][1]["env"][0]["valueFrom"]["configMapKeyRef"];
        assert_eq!(key, &json!({"name": "p-barrier", "key": "p_-1"}));
    }

    #[test]
    fn a_pod_of_an_openkruise_workload_gets_the_readiness_gate() {
        let owner = |api_version: &str| {
            json!([{"apiVersion": api_version, "kind": "CloneSet", "name": "cs",
                    "uid": "u", "controller": true}])
        };
        let pod = |api_version: &str| {
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "ownerReferences": owner(api_version)},
                "spec": {"containers": [{"name": "a"}]}})
        };
        let Some(object) = PodCreate::new(&pod("apps.kruise.io/v1alpha1"))
            .evaluate("bbbbb")
            .mutated_object()
        else {
            panic!("expected a mutation");
        };
        assert_eq!(
            object["spec"]["readinessGates"],
            json!([{"conditionType": "KruisePodReady"}])
        );
        assert_eq!(
            PodCreate::new(&pod("apps/v1")).evaluate("bbbbb"),
            Outcome::Accept
        );

        // With an ordered pod, both.
        let mut ordered = pod("apps.kruise.io/v1beta1");
        ordered["metadata"]["annotations"] =
            json!({"apps.kruise.io/container-launch-priority": "Ordered"});
        ordered["spec"]["containers"] = json!([{"name": "a"}, {"name": "b"}]);
        let Some(object) = PodCreate::new(&ordered).evaluate("bbbbb").mutated_object() else {
            panic!("expected a mutation");
        };
        assert_eq!(
            object["spec"]["readinessGates"],
            json!([{"conditionType": "KruisePodReady"}])
        );
        assert!(object["spec"]["containers"][1]["env"].is_array());
    }

    #[test]
    fn a_bad_priority_is_rejected_with_its_reason() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a"}, {"name": "b", "env": [{"name": "KRUISE_CONTAINER_PRIORITY", "value": "x"}]}]}});
        let outcome = PodCreate::new(&pod).evaluate("bbbbb");
        assert_eq!(
            outcome,
            Outcome::bad_request("container b: KRUISE_CONTAINER_PRIORITY=\"x\" is not an integer")
        );
    }

    #[test]
    fn without_randomness_only_a_pod_to_be_named_is_refused() {
        let ordered = json!({"apps.kruise.io/container-launch-priority": "Ordered"});
        let containers = json!([{"name": "a"}, {"name": "b"}]);
        let named = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "annotations": ordered},
            "spec": {"containers": containers}});
        assert!(matches!(
            PodCreate::new(&named).evaluate(""),
            Outcome::MutatePod(_)
        ));
        let to_be_named = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "web-", "annotations": ordered},
            "spec": {"containers": containers}});
        assert_eq!(
            PodCreate::new(&to_be_named).evaluate(""),
            Outcome::bad_request(
                "cannot name the pod from metadata.generateName: no random name suffix was drawn"
            )
        );
    }

    #[test]
    fn settings_are_refused() {
        let response: serde_json::Value =
            serde_json::from_slice(&validate_settings(b"{\"x\": 1}").unwrap()).unwrap();
        assert_eq!(response["valid"], false);
        assert!(
            response["message"]
                .as_str()
                .unwrap()
                .contains("unknown field `x`")
        );
        let response: serde_json::Value =
            serde_json::from_slice(&validate_settings(b"{}").unwrap()).unwrap();
        assert_eq!(response["valid"], true);
    }
}
