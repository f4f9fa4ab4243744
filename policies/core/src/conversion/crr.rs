//! ContainerRecreateRequest: v1alpha1 keeps the controller's container
//! snapshot and the time the pod was made not-ready in annotations;
//! v1beta1 keeps them in `status.containerStatusSnapshot` and a
//! `PreRecreateGrace` condition. Both directions keep the annotations, so
//! a v1alpha1 reader (our controller and node agent) always finds them.

use std::str::FromStr;

use k8s_openapi::jiff::Timestamp;
use kruise_api::containerrecreaterequest::{
    ContainerStatusSnapshot, SYNC_CONTAINER_STATUSES_ANNOTATION, UNREADY_ACQUIRED_KEY,
};
use serde_json::{Value, json};

use super::{ConversionError, Object, metadata_map, metadata_value, object_entry};

const PRE_RECREATE_GRACE: &str = "PreRecreateGrace";
const GRACE_MESSAGE: &str = "Pod has been forced to not-ready for unreadyGracePeriodSeconds drain";

/// An annotation that does not parse is left where it is (it stays in the
/// v1alpha1 view) and not promoted, as OpenKruise does.
pub(super) fn to_v1beta1(object: &mut Object) -> Result<(), ConversionError> {
    let snapshot = metadata_value(object, "annotations", SYNC_CONTAINER_STATUSES_ANNOTATION)
        .filter(|raw| !raw.is_empty())
        .and_then(|raw| serde_json::from_str::<Vec<ContainerStatusSnapshot>>(raw).ok());
    let acquired = metadata_value(object, "annotations", UNREADY_ACQUIRED_KEY)
        .and_then(|raw| Timestamp::from_str(raw).ok());
    if snapshot.is_none() && acquired.is_none() {
        return Ok(());
    }
    let status = object_entry(object, "status", "status")?;
    if let Some(snapshot) = snapshot {
        let snapshot = serde_json::to_value(snapshot)
            .map_err(|e| ConversionError::new("status.containerStatusSnapshot", e.to_string()))?;
        status.insert("containerStatusSnapshot".to_owned(), snapshot);
    }
    if let Some(acquired) = acquired {
        status.insert(
            "conditions".to_owned(),
            json!([{
                "type": PRE_RECREATE_GRACE,
                "status": "True",
                "lastTransitionTime": whole_seconds(acquired),
                "reason": PRE_RECREATE_GRACE,
                "message": GRACE_MESSAGE,
            }]),
        );
    }
    Ok(())
}

pub(super) fn to_v1alpha1(object: &mut Object) -> Result<(), ConversionError> {
    let Some(Value::Object(status)) = object.get_mut("status") else {
        return Ok(());
    };
    let snapshot = match status.remove("containerStatusSnapshot") {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            serde_json::from_value::<Vec<ContainerStatusSnapshot>>(value).map_err(|e| {
                ConversionError::new("status.containerStatusSnapshot", e.to_string())
            })?,
        ),
    };
    let conditions = status.remove("conditions");
    let acquired = conditions
        .as_ref()
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == PRE_RECREATE_GRACE && c["status"] == "True")
        .and_then(|c| c["lastTransitionTime"].as_str())
        .and_then(|time| Timestamp::from_str(time).ok());
    let annotations = metadata_map(object, "annotations")?;
    if let Some(snapshot) = snapshot {
        let raw = serde_json::to_string(&snapshot)
            .map_err(|e| ConversionError::new("status.containerStatusSnapshot", e.to_string()))?;
        annotations.insert(
            SYNC_CONTAINER_STATUSES_ANNOTATION.to_owned(),
            Value::from(raw),
        );
    }
    if let Some(acquired) = acquired {
        annotations.insert(
            UNREADY_ACQUIRED_KEY.to_owned(),
            Value::from(whole_seconds(acquired)),
        );
    }
    super::drop_empty_metadata_map(object, "annotations");
    Ok(())
}

/// A Kubernetes time as the API writes it: RFC 3339 in UTC, whole seconds.
fn whole_seconds(time: Timestamp) -> String {
    Timestamp::from_second(time.as_second())
        .unwrap_or(time)
        .to_string()
}
