//! What a controller's reconcile needs beside the object: the client, its
//! events (reported under the controller's name) and its retry backoff.
//! A controller with more to carry keeps a context of its own.

use kube::Client;

use crate::backoff::Backoff;
use crate::events::Events;

pub struct Context {
    pub client: Client,
    pub events: Events,
    pub backoff: Backoff,
}

impl Context {
    /// `controller` names the events' reporter.
    pub fn new(client: Client, controller: &str) -> Self {
        Self {
            events: Events::new(client.clone(), controller),
            backoff: Backoff::default(),
            client,
        }
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // kube's Client shows nothing worth printing.
        f.debug_struct("Context")
            .field("events", &self.events)
            .field("backoff", &self.backoff)
            .finish_non_exhaustive()
    }
}
