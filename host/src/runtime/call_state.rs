//! The waPC per-call state a host keeps between the guest's imports, and
//! how a finished `__guest_call` is read from it (the rules of the `wapc`
//! host crate, spec §1.1).

use super::error::CallError;

/// The request being served and whatever the guest and the host answered.
#[derive(Debug, Default)]
pub(crate) struct CallState {
    request: Option<GuestRequest>,
    guest_response: Option<Vec<u8>>,
    guest_error: Option<String>,
    host_response: Option<Vec<u8>>,
    host_error: Option<String>,
}

#[derive(Debug)]
pub(crate) struct GuestRequest {
    pub operation: String,
    pub payload: Vec<u8>,
}

impl CallState {
    /// Step 1 of a guest call: forget everything from before, remember the
    /// request `__guest_request` will copy into the guest.
    pub fn begin_guest_call(&mut self, operation: &str, payload: &[u8]) {
        *self = Self {
            request: Some(GuestRequest {
                operation: operation.to_owned(),
                payload: payload.to_vec(),
            }),
            ..Self::default()
        };
    }

    pub fn request(&self) -> Option<&GuestRequest> {
        self.request.as_ref()
    }

    pub fn set_guest_response(&mut self, bytes: Vec<u8>) {
        self.guest_response = Some(bytes);
    }

    pub fn set_guest_error(&mut self, message: String) {
        self.guest_error = Some(message);
    }

    /// Before each host call: the guest must never read an answer meant for
    /// an earlier one.
    pub fn begin_host_call(&mut self) {
        self.host_response = None;
        self.host_error = None;
    }

    /// Stores the host's answer; the return value is what `__host_call`
    /// gives the guest (1 success, 0 failure).
    pub fn finish_host_call(&mut self, answer: Result<Vec<u8>, String>) -> i32 {
        match answer {
            Ok(bytes) => {
                self.host_response = Some(bytes);
                1
            }
            Err(message) => {
                self.host_error = Some(message);
                0
            }
        }
    }

    pub fn host_response(&self) -> Option<&[u8]> {
        self.host_response.as_deref()
    }

    pub fn host_error(&self) -> Option<&str> {
        self.host_error.as_deref()
    }

    /// Step 4: what `__guest_call` returning `code` means. The call's
    /// state is taken, leaving none behind.
    pub fn take_outcome(&mut self, code: i32) -> Result<Vec<u8>, CallError> {
        std::mem::take(self).outcome(code)
    }

    fn outcome(self, code: i32) -> Result<Vec<u8>, CallError> {
        if code == 0 {
            return Err(CallError::Guest(self.guest_error.unwrap_or_else(|| {
                "No error message set for call failure".to_owned()
            })));
        }
        match (self.guest_response, self.guest_error) {
            (Some(response), _) => Ok(response),
            (None, Some(error)) => Err(CallError::Guest(error)),
            (None, None) => Err(CallError::Guest(
                "No error message OR response set for call success".to_owned(),
            )),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn answered(response: Option<&[u8]>, error: Option<&str>) -> CallState {
        let mut state = CallState::default();
        state.begin_guest_call("validate", b"{}");
        if let Some(response) = response {
            state.set_guest_response(response.to_vec());
        }
        if let Some(error) = error {
            state.set_guest_error(error.to_owned());
        }
        state
    }

    #[test]
    fn success_returns_the_response_even_beside_an_error() {
        assert_eq!(answered(Some(b"ok"), None).outcome(1).unwrap(), b"ok");
        assert_eq!(answered(Some(b"ok"), Some("e")).outcome(1).unwrap(), b"ok");
    }

    #[test]
    fn any_non_zero_code_is_success() {
        assert_eq!(answered(Some(b"ok"), None).outcome(7).unwrap(), b"ok");
    }

    #[test]
    fn success_without_response_falls_back_to_the_error() {
        assert_eq!(
            answered(None, Some("boom")).outcome(1),
            Err(CallError::Guest("boom".to_owned()))
        );
        assert_eq!(
            answered(None, None).outcome(1),
            Err(CallError::Guest(
                "No error message OR response set for call success".to_owned()
            ))
        );
    }

    #[test]
    fn failure_ignores_a_response() {
        assert_eq!(
            answered(Some(b"ok"), Some("boom")).outcome(0),
            Err(CallError::Guest("boom".to_owned()))
        );
        assert_eq!(
            answered(Some(b"ok"), None).outcome(0),
            Err(CallError::Guest(
                "No error message set for call failure".to_owned()
            ))
        );
    }

    #[test]
    fn a_new_guest_call_forgets_the_previous_one() {
        let mut state = answered(Some(b"old"), Some("old error"));
        state.begin_host_call();
        state.finish_host_call(Ok(b"host".to_vec()));
        state.begin_guest_call("protocol_version", b"");
        assert!(state.host_response().is_none());
        assert_eq!(state.request().unwrap().operation, "protocol_version");
        assert_eq!(
            state.outcome(1),
            Err(CallError::Guest(
                "No error message OR response set for call success".to_owned()
            ))
        );
    }

    #[test]
    fn a_host_call_clears_the_previous_answer() {
        let mut state = CallState::default();
        assert_eq!(state.finish_host_call(Err("denied".to_owned())), 0);
        assert_eq!(state.host_error(), Some("denied"));
        state.begin_host_call();
        assert_eq!(state.host_error(), None);
        assert_eq!(state.finish_host_call(Ok(b"[]".to_vec())), 1);
        assert_eq!(state.host_response(), Some(&b"[]"[..]));
        assert_eq!(state.host_error(), None);
    }
}
