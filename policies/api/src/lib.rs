//! The `apps.kruise.io/v1alpha1` API: OpenKruise's kinds with their wire
//! names, defaults and CRD schemas. Pure data, so it builds for native and
//! both wasm targets.

pub mod cloneset;
pub mod common;
pub mod containerrecreaterequest;
pub mod crd;
pub mod imagepulljob;
pub mod nodeimage;
pub mod object;
pub mod outlined;
pub mod pod_defaults;
pub mod resourcedistribution;
pub mod schema;
mod sidecar_container_fields;
pub mod sidecarset;
pub mod stored;
#[cfg(test)]
mod test_types;
mod tracked;

pub use cloneset::CloneSet;
pub use containerrecreaterequest::ContainerRecreateRequest;
pub use imagepulljob::ImagePullJob;
pub use nodeimage::NodeImage;
pub use object::{
    KruiseObject, ParseError, Strictness, from_value, from_yaml, object_from_value, parse_object,
    stored_object_from_json,
};
pub use resourcedistribution::ResourceDistribution;
pub use sidecarset::SidecarSet;
pub use stored::Stored;
