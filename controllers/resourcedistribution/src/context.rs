//! What every reconcile shares: the client, the event recorder and the
//! retry backoff per distribution.

use kruise_controller_runtime::backoff::Backoff;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};

use crate::CONTROLLER_NAME;

pub(crate) struct Context {
    pub client: Client,
    pub recorder: Recorder,
    /// Consecutive failed reconciles, per distribution name.
    pub backoff: Backoff,
}

impl Context {
    pub fn new(client: Client) -> Self {
        let reporter = Reporter {
            controller: CONTROLLER_NAME.to_owned(),
            instance: None,
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            backoff: Backoff::default(),
        }
    }
}
