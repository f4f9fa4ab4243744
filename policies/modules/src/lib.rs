//! The kruise-wasm Kubewarden policies as annotated `wasm32-wasip1` modules,
//! built by this crate's build script from the policy crates, and the
//! Kubewarden resources that deploy them.

pub mod fixtures;
mod kubewarden;

pub use kubewarden::{
    MODULE_REGISTRY, cluster_admission_policy, kubewarden_yaml, metadata, policies_yml_entry,
};

/// One policy module.
#[derive(Clone, Copy, Debug)]
pub struct PolicyModule {
    /// The name used for files and policy ids, e.g. `launch-priority`.
    pub name: &'static str,
    /// The module with its `io.kubewarden.metadata` section.
    pub wasm: &'static [u8],
}

pub const SIDECARSET: PolicyModule = PolicyModule {
    name: "sidecarset",
    wasm: include_bytes!(concat!(env!("OUT_DIR"), "/sidecarset.wasm")),
};

pub const LAUNCH_PRIORITY: PolicyModule = PolicyModule {
    name: "launch-priority",
    wasm: include_bytes!(concat!(env!("OUT_DIR"), "/launch-priority.wasm")),
};

pub const VALIDATE_RESOURCEDISTRIBUTION: PolicyModule = PolicyModule {
    name: "validate-resourcedistribution",
    wasm: include_bytes!(concat!(
        env!("OUT_DIR"),
        "/validate-resourcedistribution.wasm"
    )),
};

pub const VALIDATE_SIDECARSET: PolicyModule = PolicyModule {
    name: "validate-sidecarset",
    wasm: include_bytes!(concat!(env!("OUT_DIR"), "/validate-sidecarset.wasm")),
};

pub const VALIDATE_CLONESET: PolicyModule = PolicyModule {
    name: "validate-cloneset",
    wasm: include_bytes!(concat!(env!("OUT_DIR"), "/validate-cloneset.wasm")),
};

/// OpenKruise's ContainerRecreateRequest webhook: defaults a new request
/// from its pod and node (read through host calls) and keeps its spec.
pub const MUTATE_CRR: PolicyModule = PolicyModule {
    name: "mutate-crr",
    wasm: include_bytes!(concat!(env!("OUT_DIR"), "/mutate-crr.wasm")),
};

/// OpenKruise's ImagePullJob and NodeImage webhooks: defaulting and
/// validation of both kinds.
pub const MUTATE_IMAGEPULL: PolicyModule = PolicyModule {
    name: "mutate-imagepull",
    wasm: include_bytes!(concat!(env!("OUT_DIR"), "/mutate-imagepull.wasm")),
};

/// OpenKruise's SidecarSet and CloneSet defaulting webhooks (a SidecarSet's
/// hash annotations too).
pub const MUTATE_DEFAULTS: PolicyModule = PolicyModule {
    name: "mutate-defaults",
    wasm: include_bytes!(concat!(env!("OUT_DIR"), "/mutate-defaults.wasm")),
};

/// Adds the label its settings name: not a product policy but the webhook
/// host benchmark's subject, the work policy-server was measured with.
/// Not in [`ALL`], so not exported or deployed.
pub const BENCH_ADD_LABEL: PolicyModule = PolicyModule {
    name: "add-label",
    wasm: include_bytes!(concat!(env!("OUT_DIR"), "/add-label.wasm")),
};

/// Every policy module. The pod policies come in the order OpenKruise's pod
/// webhook applies them (injection first, so injected sidecars take part in
/// launch priority); the admission of our kinds, which see no pods,
/// after them.
pub const ALL: &[PolicyModule] = &[
    SIDECARSET,
    LAUNCH_PRIORITY,
    VALIDATE_RESOURCEDISTRIBUTION,
    VALIDATE_SIDECARSET,
    VALIDATE_CLONESET,
    MUTATE_CRR,
    MUTATE_IMAGEPULL,
    MUTATE_DEFAULTS,
];
