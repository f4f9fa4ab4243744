//! The Go types OpenKruise v1.9 hashes, field by field as `k8s.io/api`
//! v0.32 (the version OpenKruise v1.9 builds with) and OpenKruise's
//! `apis/apps/v1alpha1` declare them: order, `omitempty`, embedded structs.

use super::GoType::{Any, Bool, Int, IntOrString, Map, Ptr, Quantity, Slice, String, Struct, Time};
use super::{Field, GoType, field, omit_empty};

const STRINGS: GoType = Slice(&String);

const LOCAL_OBJECT_REFERENCE: &[Field] = &[omit_empty("name", String)];

const CONTAINER_PORT: GoType = Struct(&[
    omit_empty("name", String),
    omit_empty("hostPort", Int),
    field("containerPort", Int),
    omit_empty("protocol", String),
    omit_empty("hostIP", String),
]);

const ENV_SOURCE_REF: GoType = Struct(&[
    Field::Inline(LOCAL_OBJECT_REFERENCE),
    omit_empty("optional", Ptr(&Bool)),
]);

const ENV_FROM_SOURCE: GoType = Struct(&[
    omit_empty("prefix", String),
    omit_empty("configMapRef", Ptr(&ENV_SOURCE_REF)),
    omit_empty("secretRef", Ptr(&ENV_SOURCE_REF)),
]);

const OBJECT_FIELD_SELECTOR: GoType =
    Struct(&[omit_empty("apiVersion", String), field("fieldPath", String)]);

const RESOURCE_FIELD_SELECTOR: GoType = Struct(&[
    omit_empty("containerName", String),
    field("resource", String),
    omit_empty("divisor", Quantity),
]);

const KEY_SELECTOR: GoType = Struct(&[
    Field::Inline(LOCAL_OBJECT_REFERENCE),
    field("key", String),
    omit_empty("optional", Ptr(&Bool)),
]);

const ENV_VAR_SOURCE: GoType = Struct(&[
    omit_empty("fieldRef", Ptr(&OBJECT_FIELD_SELECTOR)),
    omit_empty("resourceFieldRef", Ptr(&RESOURCE_FIELD_SELECTOR)),
    omit_empty("configMapKeyRef", Ptr(&KEY_SELECTOR)),
    omit_empty("secretKeyRef", Ptr(&KEY_SELECTOR)),
]);

const ENV_VAR: GoType = Struct(&[
    field("name", String),
    omit_empty("value", String),
    omit_empty("valueFrom", Ptr(&ENV_VAR_SOURCE)),
]);

const RESOURCE_LIST: GoType = Map(&Quantity);

const RESOURCE_REQUIREMENTS: GoType = Struct(&[
    omit_empty("limits", RESOURCE_LIST),
    omit_empty("requests", RESOURCE_LIST),
    omit_empty(
        "claims",
        Slice(&Struct(&[
            field("name", String),
            omit_empty("request", String),
        ])),
    ),
]);

const CONTAINER_RESIZE_POLICY: GoType = Struct(&[
    field("resourceName", String),
    field("restartPolicy", String),
]);

const VOLUME_MOUNT: GoType = Struct(&[
    field("name", String),
    omit_empty("readOnly", Bool),
    omit_empty("recursiveReadOnly", Ptr(&String)),
    field("mountPath", String),
    omit_empty("subPath", String),
    omit_empty("mountPropagation", Ptr(&String)),
    omit_empty("subPathExpr", String),
]);

const VOLUME_DEVICE: GoType = Struct(&[field("name", String), field("devicePath", String)]);

const EXEC_ACTION: GoType = Struct(&[omit_empty("command", STRINGS)]);

const HTTP_GET_ACTION: GoType = Struct(&[
    omit_empty("path", String),
    field("port", IntOrString),
    omit_empty("host", String),
    omit_empty("scheme", String),
    omit_empty(
        "httpHeaders",
        Slice(&Struct(&[field("name", String), field("value", String)])),
    ),
]);

const TCP_SOCKET_ACTION: GoType = Struct(&[field("port", IntOrString), omit_empty("host", String)]);

const GRPC_ACTION: GoType = Struct(&[field("port", Int), field("service", Ptr(&String))]);

const PROBE: GoType = Struct(&[
    // ProbeHandler, embedded.
    Field::Inline(&[
        omit_empty("exec", Ptr(&EXEC_ACTION)),
        omit_empty("httpGet", Ptr(&HTTP_GET_ACTION)),
        omit_empty("tcpSocket", Ptr(&TCP_SOCKET_ACTION)),
        omit_empty("grpc", Ptr(&GRPC_ACTION)),
    ]),
    omit_empty("initialDelaySeconds", Int),
    omit_empty("timeoutSeconds", Int),
    omit_empty("periodSeconds", Int),
    omit_empty("successThreshold", Int),
    omit_empty("failureThreshold", Int),
    omit_empty("terminationGracePeriodSeconds", Ptr(&Int)),
]);

const LIFECYCLE_HANDLER: GoType = Struct(&[
    omit_empty("exec", Ptr(&EXEC_ACTION)),
    omit_empty("httpGet", Ptr(&HTTP_GET_ACTION)),
    omit_empty("tcpSocket", Ptr(&TCP_SOCKET_ACTION)),
    omit_empty("sleep", Ptr(&Struct(&[field("seconds", Int)]))),
]);

const LIFECYCLE: GoType = Struct(&[
    omit_empty("postStart", Ptr(&LIFECYCLE_HANDLER)),
    omit_empty("preStop", Ptr(&LIFECYCLE_HANDLER)),
]);

const PROFILE: GoType = Struct(&[
    field("type", String),
    omit_empty("localhostProfile", Ptr(&String)),
]);

const SECURITY_CONTEXT: GoType = Struct(&[
    omit_empty(
        "capabilities",
        Ptr(&Struct(&[
            omit_empty("add", STRINGS),
            omit_empty("drop", STRINGS),
        ])),
    ),
    omit_empty("privileged", Ptr(&Bool)),
    omit_empty(
        "seLinuxOptions",
        Ptr(&Struct(&[
            omit_empty("user", String),
            omit_empty("role", String),
            omit_empty("type", String),
            omit_empty("level", String),
        ])),
    ),
    omit_empty(
        "windowsOptions",
        Ptr(&Struct(&[
            omit_empty("gmsaCredentialSpecName", Ptr(&String)),
            omit_empty("gmsaCredentialSpec", Ptr(&String)),
            omit_empty("runAsUserName", Ptr(&String)),
            omit_empty("hostProcess", Ptr(&Bool)),
        ])),
    ),
    omit_empty("runAsUser", Ptr(&Int)),
    omit_empty("runAsGroup", Ptr(&Int)),
    omit_empty("runAsNonRoot", Ptr(&Bool)),
    omit_empty("readOnlyRootFilesystem", Ptr(&Bool)),
    omit_empty("allowPrivilegeEscalation", Ptr(&Bool)),
    omit_empty("procMount", Ptr(&String)),
    omit_empty("seccompProfile", Ptr(&PROFILE)),
    omit_empty("appArmorProfile", Ptr(&PROFILE)),
]);

const ANY: GoType = Any;

/// `corev1.Container`'s fields.
const CONTAINER: &[Field] = &[
    field("name", String),
    omit_empty("image", String),
    omit_empty("command", STRINGS),
    omit_empty("args", STRINGS),
    omit_empty("workingDir", String),
    omit_empty("ports", Slice(&CONTAINER_PORT)),
    omit_empty("envFrom", Slice(&ENV_FROM_SOURCE)),
    omit_empty("env", Slice(&ENV_VAR)),
    omit_empty("resources", RESOURCE_REQUIREMENTS),
    omit_empty("resizePolicy", Slice(&CONTAINER_RESIZE_POLICY)),
    omit_empty("restartPolicy", Ptr(&String)),
    omit_empty("volumeMounts", Slice(&VOLUME_MOUNT)),
    omit_empty("volumeDevices", Slice(&VOLUME_DEVICE)),
    omit_empty("livenessProbe", Ptr(&PROBE)),
    omit_empty("readinessProbe", Ptr(&PROBE)),
    omit_empty("startupProbe", Ptr(&PROBE)),
    omit_empty("lifecycle", Ptr(&LIFECYCLE)),
    omit_empty("terminationMessagePath", String),
    omit_empty("terminationMessagePolicy", String),
    omit_empty("imagePullPolicy", String),
    omit_empty("securityContext", Ptr(&SECURITY_CONTEXT)),
    omit_empty("stdin", Bool),
    omit_empty("stdinOnce", Bool),
    omit_empty("tty", Bool),
];

const SHARE_VOLUME_POLICY: GoType = Struct(&[omit_empty("type", String)]);

const TRANSFER_ENV_VAR: GoType = Struct(&[
    omit_empty("sourceContainerName", String),
    omit_empty(
        "sourceContainerNameFrom",
        Ptr(&Struct(&[omit_empty(
            "fieldRef",
            Ptr(&OBJECT_FIELD_SELECTOR),
        )])),
    ),
    omit_empty("envName", String),
    omit_empty("envNames", STRINGS),
]);

const RESOURCE_EXPRESSIONS: GoType =
    Struct(&[omit_empty("cpu", String), omit_empty("memory", String)]);

const RESOURCES_POLICY: GoType = Struct(&[
    field("targetContainersMode", String),
    omit_empty("targetContainersNameRegex", String),
    field(
        "resourcesExpr",
        Struct(&[
            omit_empty("limits", Ptr(&RESOURCE_EXPRESSIONS)),
            omit_empty("requests", Ptr(&RESOURCE_EXPRESSIONS)),
        ]),
    ),
]);

/// OpenKruise's `SidecarContainer`: a `corev1.Container`, embedded, then
/// its own fields.
pub const SIDECAR_CONTAINER: GoType = Struct(&[
    Field::Inline(CONTAINER),
    omit_empty("podInjectPolicy", String),
    omit_empty(
        "upgradeStrategy",
        Struct(&[
            omit_empty("upgradeType", String),
            omit_empty("hotUpgradeEmptyImage", String),
        ]),
    ),
    omit_empty("shareVolumePolicy", SHARE_VOLUME_POLICY),
    omit_empty("shareVolumeDevicePolicy", Ptr(&SHARE_VOLUME_POLICY)),
    omit_empty("transferEnv", Slice(&TRANSFER_ENV_VAR)),
    omit_empty("resourcesPolicy", Ptr(&RESOURCES_POLICY)),
]);

/// What OpenKruise's SidecarSet hash marshals: `map[string]interface{}`
/// with `containers` and, when a native sidecar is among them,
/// `initContainers` (keys sorted, so `containers` first).
pub const SIDECARSET_HASH_INPUT: GoType = Struct(&[
    field("containers", Slice(&SIDECAR_CONTAINER)),
    omit_empty("initContainers", Slice(&SIDECAR_CONTAINER)),
]);

const CONTAINER_TYPE: GoType = Struct(CONTAINER);

/// `metav1.ObjectMeta`.
const OBJECT_META: GoType = Struct(&[
    omit_empty("name", String),
    omit_empty("generateName", String),
    omit_empty("namespace", String),
    omit_empty("selfLink", String),
    omit_empty("uid", String),
    omit_empty("resourceVersion", String),
    omit_empty("generation", Int),
    omit_empty("creationTimestamp", Time),
    omit_empty("deletionTimestamp", Ptr(&Time)),
    omit_empty("deletionGracePeriodSeconds", Ptr(&Int)),
    omit_empty("labels", Map(&String)),
    omit_empty("annotations", Map(&String)),
    omit_empty("ownerReferences", Slice(&ANY)),
    omit_empty("finalizers", STRINGS),
    omit_empty("managedFields", Slice(&ANY)),
]);

/// `corev1.PodSpec`, its containers described in full, its other fields
/// by their outer kind (enough for Go's `omitempty`).
const POD_SPEC: GoType = Struct(&[
    omit_empty("volumes", Slice(&ANY)),
    omit_empty("initContainers", Slice(&CONTAINER_TYPE)),
    field("containers", Slice(&CONTAINER_TYPE)),
    omit_empty("ephemeralContainers", Slice(&ANY)),
    omit_empty("restartPolicy", String),
    omit_empty("terminationGracePeriodSeconds", Ptr(&ANY)),
    omit_empty("activeDeadlineSeconds", Ptr(&ANY)),
    omit_empty("dnsPolicy", String),
    omit_empty("nodeSelector", Map(&ANY)),
    omit_empty("serviceAccountName", String),
    omit_empty("serviceAccount", String),
    omit_empty("automountServiceAccountToken", Ptr(&ANY)),
    omit_empty("nodeName", String),
    omit_empty("hostNetwork", Bool),
    omit_empty("hostPID", Bool),
    omit_empty("hostIPC", Bool),
    omit_empty("shareProcessNamespace", Ptr(&ANY)),
    omit_empty("securityContext", Ptr(&ANY)),
    omit_empty("imagePullSecrets", Slice(&ANY)),
    omit_empty("hostname", String),
    omit_empty("subdomain", String),
    omit_empty("affinity", Ptr(&ANY)),
    omit_empty("schedulerName", String),
    omit_empty("tolerations", Slice(&ANY)),
    omit_empty("hostAliases", Slice(&ANY)),
    omit_empty("priorityClassName", String),
    omit_empty("priority", Ptr(&ANY)),
    omit_empty("dnsConfig", Ptr(&ANY)),
    omit_empty("readinessGates", Slice(&ANY)),
    omit_empty("runtimeClassName", Ptr(&ANY)),
    omit_empty("enableServiceLinks", Ptr(&ANY)),
    omit_empty("preemptionPolicy", Ptr(&ANY)),
    omit_empty("overhead", RESOURCE_LIST),
    omit_empty("topologySpreadConstraints", Slice(&ANY)),
    omit_empty("setHostnameAsFQDN", Ptr(&ANY)),
    omit_empty("os", Ptr(&ANY)),
    omit_empty("hostUsers", Ptr(&ANY)),
    omit_empty("schedulingGates", Slice(&ANY)),
    omit_empty("resourceClaims", Slice(&ANY)),
    omit_empty("resources", Ptr(&ANY)),
]);

/// `corev1.PodTemplateSpec`, as a CloneSet's revision holds it.
pub const POD_TEMPLATE_SPEC: GoType = Struct(&[
    omit_empty("metadata", OBJECT_META),
    omit_empty("spec", POD_SPEC),
]);
