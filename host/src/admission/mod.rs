//! The admission logic around the runtime, as pure functions: the
//! `validate` payload, the AdmissionResponse built from the guest's answer,
//! and policy-server's enforcement rules.

mod constraints;
mod diff;
mod request;
mod response;

pub use constraints::{Enforcement, PolicyMode};
pub use request::{
    AdmissionRequest, GroupVersionKind, GroupVersionResource, RequestError, Settings, SettingsText,
    UserInfo, raw_validation_payload, settings_from_value, validation_payload,
};
pub use response::{
    AdmissionResponse, MUTATION_WITHOUT_OBJECT, PatchType, Status, StatusCause, StatusDetails,
    TIMEOUT_MESSAGE, ValidationResponse, admission_review, json_patch_base64,
};
