//! Kubewarden policy: adds the label given in its settings to the object
//! under review. It exists to measure the webhook host against the bar
//! policy-server was measured with ("a policy that adds one label"), so it
//! does only that work: read the payload as plain JSON, set one key, write
//! the object back.

use serde::Deserialize;
use serde_json::{Map, Value, json};

/// `{"key": "...", "value": "..."}`, both required.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub key: String,
    pub value: String,
}

impl Settings {
    fn check(&self) -> Result<(), String> {
        if self.key.is_empty() {
            return Err("`key` must not be empty".to_owned());
        }
        Ok(())
    }
}

/// The parts of Kubewarden's validation payload this policy reads.
#[derive(Debug, Deserialize)]
struct Payload {
    request: Request,
    settings: Settings,
}

#[derive(Debug, Deserialize)]
struct Request {
    #[serde(default)]
    object: Option<Value>,
}

/// The `validate` waPC operation: the object with the label set, or an
/// acceptance without mutation when there is no object or it already
/// carries the label.
pub fn validate(payload: &[u8]) -> Result<Vec<u8>, String> {
    let answer = match serde_json::from_slice::<Payload>(payload) {
        Ok(Payload { request, settings }) => match request.object {
            Some(mut object) => match add_label(&mut object, &settings) {
                Ok(true) => json!({"accepted": true, "mutated_object": object}),
                Ok(false) => json!({"accepted": true}),
                Err(message) => json!({"accepted": false, "message": message, "code": 400}),
            },
            None => json!({"accepted": true}),
        },
        Err(e) => {
            json!({"accepted": false, "message": format!("cannot read the request: {e}"), "code": 400})
        }
    };
    serde_json::to_vec(&answer).map_err(|e| e.to_string())
}

/// Sets `metadata.labels[key] = value`; `Ok(false)` when it already was.
fn add_label(object: &mut Value, settings: &Settings) -> Result<bool, String> {
    let metadata = object
        .as_object_mut()
        .ok_or("the object is not a JSON object")?
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let labels = metadata
        .as_object_mut()
        .ok_or("metadata is not a JSON object")?
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    if labels.is_null() {
        *labels = Value::Object(Map::new());
    }
    let labels = labels
        .as_object_mut()
        .ok_or("metadata.labels is not a JSON object")?;
    if labels.get(&settings.key).and_then(Value::as_str) == Some(settings.value.as_str()) {
        return Ok(false);
    }
    labels.insert(settings.key.clone(), Value::String(settings.value.clone()));
    Ok(true)
}

/// The `validate_settings` waPC operation.
pub fn validate_settings(payload: &[u8]) -> Result<Vec<u8>, String> {
    let verdict = serde_json::from_slice::<Settings>(payload)
        .map_err(|e| format!("invalid settings: {e}"))
        .and_then(|settings| settings.check());
    let response = match verdict {
        Ok(()) => json!({"valid": true, "message": null}),
        Err(message) => json!({"valid": false, "message": message}),
    };
    serde_json::to_vec(&response).map_err(|e| e.to_string())
}

kruise_policy_support::export_policy!(validate: validate, validate_settings: validate_settings);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn validate_json(payload: &Value) -> Value {
        serde_json::from_slice(&validate(&serde_json::to_vec(payload).unwrap()).unwrap()).unwrap()
    }

    fn settings() -> Value {
        json!({"key": "bench.kruise.io/seen", "value": "yes"})
    }

    #[test]
    fn the_label_is_added_beside_the_others() {
        let answer = validate_json(&json!({
            "request": {"object": {"metadata": {"name": "p", "labels": {"app": "a"}}}},
            "settings": settings(),
        }));
        assert_eq!(answer["accepted"], true);
        assert_eq!(
            answer["mutated_object"]["metadata"]["labels"],
            json!({"app": "a", "bench.kruise.io/seen": "yes"})
        );
    }

    #[test]
    fn objects_without_labels_get_the_map() {
        for object in [json!({}), json!({"metadata": {"labels": null}})] {
            let answer =
                validate_json(&json!({"request": {"object": object}, "settings": settings()}));
            assert_eq!(
                answer["mutated_object"]["metadata"]["labels"],
                json!({"bench.kruise.io/seen": "yes"})
            );
        }
    }

    #[test]
    fn a_labelled_object_or_none_is_accepted_unchanged() {
        let labelled = json!({"metadata": {"labels": {"bench.kruise.io/seen": "yes"}}});
        for request in [json!({"object": labelled}), json!({"operation": "DELETE"})] {
            let answer = validate_json(&json!({"request": request, "settings": settings()}));
            assert_eq!(answer, json!({"accepted": true}));
        }
    }

    #[test]
    fn malformed_objects_are_rejected_with_a_reason() {
        let answer = validate_json(&json!({
            "request": {"object": {"metadata": {"labels": ["x"]}}},
            "settings": settings(),
        }));
        assert_eq!(answer["accepted"], false);
        assert_eq!(answer["message"], "metadata.labels is not a JSON object");
        let answer: Value = serde_json::from_slice(&validate(b"{\"request\":").unwrap()).unwrap();
        assert_eq!(answer["accepted"], false);
        assert_eq!(answer["code"], 400);
    }

    #[test]
    fn settings_need_a_key_and_a_value() {
        let check = |settings: &str| -> Value {
            serde_json::from_slice(&validate_settings(settings.as_bytes()).unwrap()).unwrap()
        };
        assert_eq!(check(r#"{"key":"k","value":"v"}"#)["valid"], true);
        assert_eq!(check(r#"{"key":"","value":"v"}"#)["valid"], false);
        assert_eq!(check(r#"{"key":"k"}"#)["valid"], false);
        assert_eq!(check(r#"{"key":"k","value":"v","x":1}"#)["valid"], false);
    }
}
