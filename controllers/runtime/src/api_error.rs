//! The API answers a controller branches on rather than fails on.

/// 404: the object is gone (or never was).
pub fn is_not_found(error: &kube::Error) -> bool {
    has_code(error, 404)
}

/// 409 on a write: someone else changed the object first (or, on a
/// create, it exists already: see [`is_already_exists`]).
pub fn is_conflict(error: &kube::Error) -> bool {
    has_code(error, 409)
}

/// 409 with reason `AlreadyExists`: a create found the name taken.
pub fn is_already_exists(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409 && status.reason == "AlreadyExists")
}

fn has_code(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

/// An API call a reconcile round could not make, and what it was for
/// (`read the pod: ...`); the round is retried with backoff.
#[derive(Debug, thiserror::Error)]
#[error("{action}: {source}")]
pub struct ApiFailure {
    pub action: &'static str,
    pub source: kube::Error,
}

/// `.map_err(failed("read the pod"))`.
pub fn failed(action: &'static str) -> impl FnOnce(kube::Error) -> ApiFailure {
    move |source| ApiFailure { action, source }
}

/// A write's result where losing a race is no failure: a conflict (someone
/// wrote first) or a missing object (deleted meanwhile) is `Ok`, and the
/// next round plans again from what is there; anything else fails with
/// `action`.
pub fn unless_raced<T>(
    result: Result<T, kube::Error>,
    action: &'static str,
) -> Result<(), ApiFailure> {
    raced(result).map(drop).map_err(failed(action))
}

/// A write's result with a lost race (a conflict, or the object gone) as
/// `None`; any other error stays one.
pub fn raced<T>(result: Result<T, kube::Error>) -> Result<Option<T>, kube::Error> {
    match result {
        Ok(object) => Ok(Some(object)),
        Err(error) if is_conflict(&error) || is_not_found(&error) => Ok(None),
        Err(error) => Err(error),
    }
}
