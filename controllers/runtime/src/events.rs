//! Kubernetes events, best effort: a failure to publish is logged and never
//! fails the reconcile that wanted to say something.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// The most characters of a note (the API limits notes to 1 kB).
const NOTE_CHARS: usize = 600;

/// A controller's event recorder, reporting under its name.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
    controller: String,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("controller", &self.controller)
            .finish_non_exhaustive()
    }
}

impl Events {
    pub fn new(client: Client, controller: &str) -> Self {
        let reporter = Reporter {
            controller: controller.to_owned(),
            instance: None,
        };
        Self {
            recorder: Recorder::new(client, reporter),
            controller: controller.to_owned(),
        }
    }

    pub async fn normal(&self, on: &ObjectReference, reason: &str, action: &str, note: &str) {
        self.publish(on, EventType::Normal, reason, action, note)
            .await;
    }

    pub async fn warning(&self, on: &ObjectReference, reason: &str, action: &str, note: &str) {
        self.publish(on, EventType::Warning, reason, action, note)
            .await;
    }

    async fn publish(
        &self,
        on: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(truncate(note, NOTE_CHARS)),
            action: action.to_owned(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, on).await {
            tracing::warn!(
                controller = %self.controller,
                object = on.name.as_deref().unwrap_or_default(),
                reason,
                %error,
                "cannot publish an event"
            );
        }
    }
}

/// At most `chars` characters, `...` marking a cut.
pub fn truncate(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_respects_characters() {
        assert_eq!(truncate("héllo", 10), "héllo");
        assert_eq!(truncate("héllo", 2), "hé...");
    }
}
