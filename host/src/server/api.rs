//! What the policy endpoints answer, as plain functions of the request
//! body (spec §3.3): evaluation failures are admission denials inside a
//! 200; only unreadable bodies and unknown policies are HTTP errors.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::admission::{AdmissionRequest, AdmissionResponse, admission_review};
use crate::chain::run_chain;
use crate::policy::{CLUSTER_FILL_WAIT, Policy};
use crate::server::body;

/// Which endpoint: `/validate` enforces the policy's configuration,
/// `/audit` reports its bare verdict, `/validate_raw` takes any JSON,
/// `/mutate` runs a chain (ours, not policy-server's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Validate,
    Audit,
    ValidateRaw,
    Mutate,
}

/// An answer that is not an AdmissionReview: `{"message", "status"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl ApiError {
    pub(crate) fn new(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub fn body(&self) -> Value {
        json!({"message": self.message, "status": self.status})
    }

    pub fn internal() -> Self {
        Self::new(500, "Something went wrong")
    }
}

/// The loaded policies and the server-wide admission settings.
#[derive(Debug, Default)]
pub struct Policies {
    pub policies: BTreeMap<String, Arc<Policy>>,
    /// Requests in this namespace are accepted without evaluation
    /// (`--always-accept-admission-reviews-on-namespace`).
    pub always_accept_namespace: Option<String>,
    /// `/mutate/<chain>`: policies run in order (the `--chains` file).
    pub chains: BTreeMap<String, Vec<Arc<Policy>>>,
}

/// A body read and checked, ready for the evaluation.
#[derive(Debug)]
pub enum Evaluation {
    Admission {
        policy: Arc<Policy>,
        request: Box<AdmissionRequest>,
    },
    Raw {
        policy: Arc<Policy>,
        request: Value,
    },
    Chain {
        /// `chain/<name>`: never a policy id, which cannot contain `/`.
        label: String,
        policies: Vec<Arc<Policy>>,
        request: Box<AdmissionRequest>,
    },
    /// Answered without running the policy.
    Answered(Value),
}

/// What an endpoint's id names.
enum Target {
    Policy(Arc<Policy>),
    Raw(Arc<Policy>),
    Chain(Vec<Arc<Policy>>),
}

impl Policies {
    /// Everything that can be decided without running the policy.
    pub fn prepare(
        &self,
        endpoint: Endpoint,
        id: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Result<Evaluation, ApiError> {
        let target = self.target(endpoint, id)?;
        if !content_type.is_some_and(is_json) {
            return Err(ApiError::new(
                415,
                "Expected request with `Content-Type: application/json`",
            ));
        }
        if let Target::Raw(policy) = target {
            let request = body::raw_request(body)?;
            return Ok(Evaluation::Raw { policy, request });
        }
        Ok(self.admit(target, id, body::admission_request(body)?))
    }

    /// The evaluation of a request read and checked.
    fn admit(&self, target: Target, id: &str, request: AdmissionRequest) -> Evaluation {
        if request.namespace.is_some() && request.namespace == self.always_accept_namespace {
            let accepted = AdmissionResponse {
                uid: request.uid,
                allowed: true,
                ..AdmissionResponse::default()
            };
            return Evaluation::Answered(admission_review(&accepted));
        }
        let request = Box::new(request);
        match target {
            Target::Chain(policies) => Evaluation::Chain {
                label: format!("chain/{id}"),
                policies,
                request,
            },
            Target::Raw(policy) | Target::Policy(policy) => {
                Evaluation::Admission { policy, request }
            }
        }
    }

    fn target(&self, endpoint: Endpoint, id: &str) -> Result<Target, ApiError> {
        if endpoint == Endpoint::Mutate {
            return self
                .chains
                .get(id)
                .cloned()
                .map(Target::Chain)
                .ok_or_else(|| ApiError::new(404, format!("chain `{id}` not found")));
        }
        let policy = self
            .policies
            .get(id)
            .cloned()
            .ok_or_else(|| ApiError::new(404, format!("policy `{id}` not found")))?;
        Ok(if endpoint == Endpoint::ValidateRaw {
            Target::Raw(policy)
        } else {
            Target::Policy(policy)
        })
    }
}

impl Evaluation {
    /// Waits, up to [`CLUSTER_FILL_WAIT`], for the watch caches its
    /// policies read; [`Evaluation::run`] then refuses the request if they
    /// have still not filled.
    pub async fn wait_for_cluster(&self) {
        let deadline = tokio::time::Instant::now() + CLUSTER_FILL_WAIT;
        match self {
            Self::Answered(_) => {}
            Self::Admission { policy, .. } | Self::Raw { policy, .. } => {
                policy.wait_for_cluster(deadline).await;
            }
            Self::Chain { policies, .. } => {
                for policy in policies {
                    policy.wait_for_cluster(deadline).await;
                }
            }
        }
    }

    /// Runs the policy: the guest runs in this future.
    pub async fn run(self, endpoint: Endpoint) -> Value {
        match self {
            Self::Answered(review) => review,
            Self::Raw { policy, request } => {
                json!({"response": policy.validate_raw(&request).await})
            }
            Self::Chain {
                policies, request, ..
            } => {
                let members: Vec<&Policy> = policies.iter().map(AsRef::as_ref).collect();
                admission_review(&run_chain(&members, &request).await.response)
            }
            Self::Admission { policy, request } => {
                let response = match endpoint {
                    Endpoint::Audit => policy.audit(&request).await,
                    Endpoint::Validate | Endpoint::ValidateRaw | Endpoint::Mutate => {
                        policy.validate(&request).await
                    }
                };
                admission_review(&response)
            }
        }
    }
}

fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/json")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn no_policies() -> Policies {
        Policies::default()
    }

    #[test]
    fn unknown_policies_are_404() {
        let error = no_policies()
            .prepare(Endpoint::Validate, "nope", Some("application/json"), b"{}")
            .unwrap_err();
        assert_eq!(error.status, 404);
        assert_eq!(
            error.body(),
            json!({"message": "policy `nope` not found", "status": 404})
        );
    }

    #[test]
    fn json_content_types_are_recognised() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(!is_json("text/plain"));
        assert!(!is_json("application/jsonx"));
    }
}
