//! CloneSet: v1alpha1's one update strategy `type` (ReCreate,
//! InPlaceIfPossible, InPlaceOnly, OnDelete) becomes v1beta1's `type`
//! (RollingUpdate or OnDelete) plus `rollingUpdate.podUpdatePolicy`, and
//! the rolling fields move under `rollingUpdate`; `disablePVCReuse` flips
//! to `enablePVCReuse`; the exclude-preparing-delete label and the image
//! pre-download annotations become spec fields.

use serde_json::{Map, Value};

use super::{
    ConversionError, Object, metadata_map, metadata_value, move_field, object_entry, set_flag,
    string_at, take_bool, take_object,
};
use crate::cloneset::LABEL_EXCLUDE_PREPARING_DELETE;
use crate::cloneset::predownload::{
    MIN_UPDATED_READY_ANNOTATION, PARALLELISM_ANNOTATION, TIMEOUT_ANNOTATION,
};

/// The fields both versions' rolling updates share.
const ROLLING_FIELDS: [&str; 6] = [
    "partition",
    "maxUnavailable",
    "maxSurge",
    "paused",
    "priorityStrategy",
    "scatterStrategy",
];

const ON_DELETE: &str = "OnDelete";
const RE_CREATE: &str = "ReCreate";

pub(super) fn to_v1beta1(object: &mut Object) -> Result<(), ConversionError> {
    let exclude = metadata_value(object, "labels", LABEL_EXCLUDE_PREPARING_DELETE) == Some("true");
    let annotations = predownload_annotations(object);
    let spec = object_entry(object, "spec", "spec")?;

    let scale = object_entry(spec, "scaleStrategy", "spec.scaleStrategy")?;
    let disable = take_bool(
        scale,
        "disablePVCReuse",
        "spec.scaleStrategy.disablePVCReuse",
    )?;
    set_flag(scale, "enablePVCReuse", !disable.unwrap_or(false));
    if exclude {
        set_flag(scale, "excludePreparingDelete", true);
    }

    let mut alpha = take_object(spec, "updateStrategy", "spec.updateStrategy")?.unwrap_or_default();
    let alpha_type = string_at(&alpha, "type", "spec.updateStrategy.type")?.unwrap_or_default();
    // OpenKruise turns an unknown type into ReCreate; we pass it through
    // (v1beta1's policy is a free string), so a typo still reaches our
    // validation and controller and is reported instead of vanishing.
    let policy = match alpha_type {
        ON_DELETE => None,
        "" => Some(RE_CREATE.to_owned()),
        policy => Some(policy.to_owned()),
    };
    let mut beta = Map::new();
    let Some(policy) = policy else {
        beta.insert("type".to_owned(), Value::from(ON_DELETE));
        spec.insert("updateStrategy".to_owned(), Value::Object(beta));
        return Ok(());
    };
    beta.insert("type".to_owned(), Value::from("RollingUpdate"));
    let mut rolling = Map::new();
    for field in ROLLING_FIELDS {
        move_field(&mut alpha, &mut rolling, field);
    }
    rolling.insert("podUpdatePolicy".to_owned(), Value::from(policy));
    let in_place = take_object(
        &mut alpha,
        "inPlaceUpdateStrategy",
        "spec.updateStrategy.inPlaceUpdateStrategy",
    )?;
    if let Some(in_place) = in_place_to_v1beta1(in_place.as_ref(), &annotations) {
        rolling.insert("inPlaceUpdateStrategy".to_owned(), Value::Object(in_place));
    }
    beta.insert("rollingUpdate".to_owned(), Value::Object(rolling));
    spec.insert("updateStrategy".to_owned(), Value::Object(beta));
    Ok(())
}

pub(super) fn to_v1alpha1(object: &mut Object) -> Result<(), ConversionError> {
    let spec = object_entry(object, "spec", "spec")?;

    let scale = object_entry(spec, "scaleStrategy", "spec.scaleStrategy")?;
    let enable = take_bool(scale, "enablePVCReuse", "spec.scaleStrategy.enablePVCReuse")?;
    set_flag(scale, "disablePVCReuse", !enable.unwrap_or(false));
    let exclude = take_bool(
        scale,
        "excludePreparingDelete",
        "spec.scaleStrategy.excludePreparingDelete",
    )?;

    let mut beta = take_object(spec, "updateStrategy", "spec.updateStrategy")?.unwrap_or_default();
    let on_delete = string_at(&beta, "type", "spec.updateStrategy.type")? == Some(ON_DELETE);
    let mut rolling = take_object(
        &mut beta,
        "rollingUpdate",
        "spec.updateStrategy.rollingUpdate",
    )?;
    let alpha_type = if on_delete {
        ON_DELETE.to_owned()
    } else {
        let policy = match &rolling {
            Some(rolling) => string_at(
                rolling,
                "podUpdatePolicy",
                "spec.updateStrategy.rollingUpdate.podUpdatePolicy",
            )?,
            None => None,
        };
        // An unknown policy passes through too (see `to_v1beta1`).
        match policy {
            None | Some("") => RE_CREATE.to_owned(),
            Some(policy) => policy.to_owned(),
        }
    };
    let mut alpha = Map::new();
    alpha.insert("type".to_owned(), Value::from(alpha_type));
    let mut annotations = Vec::new();
    if let Some(rolling) = &mut rolling {
        for field in ROLLING_FIELDS {
            move_field(rolling, &mut alpha, field);
        }
        let in_place = take_object(
            rolling,
            "inPlaceUpdateStrategy",
            "spec.updateStrategy.rollingUpdate.inPlaceUpdateStrategy",
        )?;
        if let Some((in_place, written)) = in_place_to_v1alpha1(in_place) {
            alpha.insert("inPlaceUpdateStrategy".to_owned(), Value::Object(in_place));
            annotations = written;
        }
    }
    spec.insert("updateStrategy".to_owned(), Value::Object(alpha));

    if !annotations.is_empty() {
        let map = metadata_map(object, "annotations")?;
        for (key, value) in annotations {
            map.insert(key.to_owned(), Value::from(value));
        }
    }
    // OpenKruise drops `excludePreparingDelete` here; v1alpha1 spells it as
    // this label, so we keep it: a v1alpha1 writer (our defaulting webhook
    // sees every CloneSet as v1alpha1) would otherwise lose the user's
    // v1beta1 setting.
    if exclude == Some(true) {
        metadata_map(object, "labels")?.insert(
            LABEL_EXCLUDE_PREPARING_DELETE.to_owned(),
            Value::from("true"),
        );
    }
    Ok(())
}

/// The three image pre-download annotations, non-empty ones only.
struct Predownload {
    parallelism: Option<String>,
    timeout_seconds: Option<String>,
    min_updated_ready_pods: Option<String>,
}

fn predownload_annotations(object: &Object) -> Predownload {
    let read = |key| {
        metadata_value(object, "annotations", key)
            .filter(|value| !value.is_empty())
            .map(str::to_owned)
    };
    Predownload {
        parallelism: read(PARALLELISM_ANNOTATION),
        timeout_seconds: read(TIMEOUT_ANNOTATION),
        min_updated_ready_pods: read(MIN_UPDATED_READY_ANNOTATION),
    }
}

/// v1alpha1's in-place strategy keeps only its grace period; the
/// pre-download settings come from the annotations, where v1alpha1 reads
/// them. Numbers that do not parse are left out, as OpenKruise does.
fn in_place_to_v1beta1(source: Option<&Object>, annotations: &Predownload) -> Option<Object> {
    let annotated = annotations.parallelism.is_some()
        || annotations.timeout_seconds.is_some()
        || annotations.min_updated_ready_pods.is_some();
    if source.is_none() && !annotated {
        return None;
    }
    let mut target = Map::new();
    if let Some(grace) = source
        .and_then(|s| s.get("gracePeriodSeconds"))
        .filter(|grace| grace.as_i64() != Some(0))
    {
        target.insert("gracePeriodSeconds".to_owned(), grace.clone());
    }
    if let Some(parallelism) = &annotations.parallelism {
        target.insert(
            "imagePreDownloadParallelism".to_owned(),
            int_or_string(parallelism),
        );
    }
    let numbers = [
        (
            "imagePreDownloadTimeoutSeconds",
            &annotations.timeout_seconds,
        ),
        (
            "imagePreDownloadMinUpdatedReadyPods",
            &annotations.min_updated_ready_pods,
        ),
    ];
    for (field, text) in numbers {
        if let Some(number) = text.as_deref().and_then(|t| t.parse::<i32>().ok()) {
            target.insert(field.to_owned(), Value::from(number));
        }
    }
    Some(target)
}

/// The reverse: the pre-download settings go back to annotations.
/// OpenKruise drops a strategy with nothing set; we keep it, because its
/// own defaulting stores `inPlaceUpdateStrategy: {}` and a stored object
/// should come back from v1beta1 as it went in.
fn in_place_to_v1alpha1(source: Option<Object>) -> Option<(Object, Vec<(&'static str, String)>)> {
    let source = source?;
    let mut target = Map::new();
    if let Some(grace) = source
        .get("gracePeriodSeconds")
        .filter(|grace| grace.as_i64() != Some(0))
    {
        target.insert("gracePeriodSeconds".to_owned(), grace.clone());
    }
    let fields = [
        ("imagePreDownloadParallelism", PARALLELISM_ANNOTATION),
        ("imagePreDownloadTimeoutSeconds", TIMEOUT_ANNOTATION),
        (
            "imagePreDownloadMinUpdatedReadyPods",
            MIN_UPDATED_READY_ANNOTATION,
        ),
    ];
    let annotations = fields
        .iter()
        .filter_map(|(field, annotation)| {
            let text = match source.get(*field)? {
                Value::String(text) => text.clone(),
                Value::Null => return None,
                other => other.to_string(),
            };
            Some((*annotation, text))
        })
        .collect();
    Some((target, annotations))
}

/// Kubernetes' `intstr.Parse`: a number when the text is one, else the text.
fn int_or_string(text: &str) -> Value {
    text.parse::<i32>()
        .map_or_else(|_| Value::from(text), Value::from)
}
