//! What policy-server does to a policy's answer on `/validate` (not on
//! `/audit`), in its order: monitor mode, then the mutation constraint,
//! then the custom rejection message (spec §1.4).

use serde::Deserialize;

use super::response::{AdmissionResponse, Status, StatusCause};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PolicyMode {
    #[default]
    Protect,
    Monitor,
}

/// How one policy is configured to be enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enforcement {
    pub policy_id: String,
    pub mode: PolicyMode,
    pub allowed_to_mutate: bool,
    pub custom_message: Option<String>,
}

impl Enforcement {
    /// How `kwctl run` enforces a plain `.wasm`: protect mode, mutations
    /// allowed, the policy's own messages.
    pub fn kwctl_run(policy_id: &str) -> Self {
        Self {
            policy_id: policy_id.to_owned(),
            mode: PolicyMode::Protect,
            allowed_to_mutate: true,
            custom_message: None,
        }
    }

    pub fn apply(&self, response: AdmissionResponse) -> AdmissionResponse {
        let response = self.monitor(response);
        let response = self.forbid_mutation(response);
        self.custom_rejection(response)
    }

    /// Monitor mode only observes: always allowed, nothing patched.
    fn monitor(&self, response: AdmissionResponse) -> AdmissionResponse {
        if self.mode != PolicyMode::Monitor {
            return response;
        }
        AdmissionResponse {
            allowed: true,
            patch_type: None,
            patch: None,
            status: None,
            ..response
        }
    }

    /// A policy behind a validating webhook must not send a patch: the API
    /// server would fail the request.
    fn forbid_mutation(&self, response: AdmissionResponse) -> AdmissionResponse {
        if self.mode != PolicyMode::Protect || self.allowed_to_mutate || response.patch.is_none() {
            return response;
        }
        AdmissionResponse {
            allowed: false,
            patch_type: None,
            patch: None,
            status: Some(Status {
                message: Some(format!(
                    "Request rejected by policy {}. The policy attempted to mutate the request, but it is currently configured to not allow mutations.",
                    self.policy_id
                )),
                ..Status::default()
            }),
            ..response
        }
    }

    /// The operator's message replaces the policy's, which is kept as the
    /// last cause.
    fn custom_rejection(&self, response: AdmissionResponse) -> AdmissionResponse {
        let Some(custom) = &self.custom_message else {
            return response;
        };
        if response.allowed {
            return response;
        }
        let status = response.status.clone().unwrap_or_default();
        let mut details = status.details.unwrap_or_default();
        details.causes.push(StatusCause {
            message: Some(status.message.unwrap_or_default()),
            ..StatusCause::default()
        });
        AdmissionResponse {
            status: Some(Status {
                message: Some(custom.clone()),
                details: Some(details),
                code: status.code,
            }),
            ..response
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::admission::response::PatchType;

    fn enforcement(mode: PolicyMode, allowed_to_mutate: bool, custom: Option<&str>) -> Enforcement {
        Enforcement {
            policy_id: "policy-id".to_owned(),
            mode,
            allowed_to_mutate,
            custom_message: custom.map(str::to_owned),
        }
    }

    fn mutation() -> AdmissionResponse {
        AdmissionResponse {
            uid: "u".to_owned(),
            allowed: true,
            patch_type: Some(PatchType::JsonPatch),
            patch: Some("cGF0Y2g=".to_owned()),
            warnings: Some(vec!["w".to_owned()]),
            ..AdmissionResponse::default()
        }
    }

    fn rejection() -> AdmissionResponse {
        AdmissionResponse::reject("u", "policy says no".to_owned(), Some(403))
    }

    const NOT_ALLOWED: &str = "Request rejected by policy policy-id. The policy attempted to mutate the request, but it is currently configured to not allow mutations.";

    #[test]
    fn monitor_mode_accepts_everything_unpatched() {
        for custom in [None, Some("custom")] {
            for allowed_to_mutate in [true, false] {
                let e = enforcement(PolicyMode::Monitor, allowed_to_mutate, custom);
                let accepted = e.apply(mutation());
                assert!(accepted.allowed);
                assert_eq!((accepted.patch, accepted.patch_type), (None, None));
                assert_eq!(
                    accepted.warnings,
                    Some(vec!["w".to_owned()]),
                    "warnings survive"
                );
                let rejected = e.apply(rejection());
                assert!(rejected.allowed);
                assert_eq!(rejected.status, None);
            }
        }
    }

    #[test]
    fn protect_mode_refuses_unallowed_mutations() {
        let refused = enforcement(PolicyMode::Protect, false, None).apply(mutation());
        assert!(!refused.allowed);
        assert_eq!(refused.patch, None);
        assert_eq!(refused.patch_type, None);
        assert_eq!(
            refused.status,
            Some(Status {
                message: Some(NOT_ALLOWED.to_owned()),
                ..Status::default()
            })
        );
        assert_eq!(
            enforcement(PolicyMode::Protect, true, None).apply(mutation()),
            mutation()
        );
    }

    #[test]
    fn a_custom_message_replaces_a_rejection_and_keeps_it_as_cause() {
        let e = enforcement(PolicyMode::Protect, true, Some("custom"));
        let response = e.apply(rejection());
        assert_eq!(
            response.to_json(),
            r#"{"uid":"u","allowed":false,"status":{"message":"custom","details":{"causes":[{"reason":null,"message":"policy says no","field":null}]},"code":403},"auditAnnotations":null,"warnings":null}"#
        );
        assert_eq!(
            e.apply(mutation()),
            mutation(),
            "acceptances are left alone"
        );
    }

    #[test]
    fn the_custom_message_comes_after_the_mutation_constraint() {
        let response = enforcement(PolicyMode::Protect, false, Some("custom")).apply(mutation());
        let status = response.status.unwrap();
        assert_eq!(status.message.as_deref(), Some("custom"));
        assert_eq!(
            status.details.unwrap().causes[0].message.as_deref(),
            Some(NOT_ALLOWED)
        );
    }

    #[test]
    fn protect_mode_without_custom_message_changes_nothing_else() {
        let e = enforcement(PolicyMode::Protect, false, None);
        assert_eq!(e.apply(rejection()), rejection());
    }
}
