//! The `apps.kruise.io/v1alpha1` API: OpenKruise's kinds with their wire
//! names, defaults and CRD schemas. Pure data, so it builds for native and
//! both wasm targets.

pub mod cloneset;
pub mod common;
pub mod containerrecreaterequest;
pub mod imagepulljob;
pub mod nodeimage;
pub mod object;
pub mod resourcedistribution;
pub mod schema;
pub mod sidecarset;

pub use cloneset::CloneSet;
pub use object::{KruiseObject, ParseError, Strictness, from_value, from_yaml, parse_object};
