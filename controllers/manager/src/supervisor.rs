//! The manager's tasks, each under a name, watched: a controller is meant to
//! run for as long as the process does, so one that ends or panics is
//! reported (and the manager exits, for Kubernetes to restart it) rather
//! than missing silently while the process looks healthy.

use std::collections::HashMap;
use std::future::Future;

use tokio::task::{Id, JoinSet};

#[derive(Debug, Default)]
pub struct Supervisor {
    tasks: JoinSet<()>,
    names: HashMap<Id, &'static str>,
}

impl Supervisor {
    pub fn spawn(&mut self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        let handle = self.tasks.spawn(task);
        self.names.insert(handle.id(), name);
    }

    /// Waits for the first task to end and says which and how; never
    /// returns while every task runs (nor when there are none).
    pub async fn ended(&mut self) -> String {
        let Some(joined) = self.tasks.join_next_with_id().await else {
            return std::future::pending().await;
        };
        let (id, how) = match joined {
            Ok((id, ())) => (id, "ended".to_owned()),
            Err(error) if error.is_panic() => (error.id(), "panicked".to_owned()),
            Err(error) => (error.id(), format!("stopped: {error}")),
        };
        let name = self.names.remove(&id).unwrap_or("a task");
        format!("{name} {how}")
    }

    /// Stops every task.
    pub fn stop(&mut self) {
        // Dropping a JoinSet aborts its tasks, and they are not reported.
        self.tasks = JoinSet::new();
        self.names.clear();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_task_that_panics_or_ends_is_named() {
        let mut tasks = Supervisor::default();
        tasks.spawn("forever", std::future::pending());
        tasks.spawn("crashing", async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            panic!("a bug");
        });
        assert_eq!(tasks.ended().await, "crashing panicked");
        tasks.spawn("finishing", async {});
        assert_eq!(tasks.ended().await, "finishing ended");
        let still = tokio::time::timeout(Duration::from_millis(50), tasks.ended()).await;
        assert!(still.is_err(), "the running task is not reported");
    }

    #[tokio::test]
    async fn no_tasks_and_stopped_tasks_are_not_reported() {
        let mut none = Supervisor::default();
        let waited = tokio::time::timeout(Duration::from_millis(20), none.ended()).await;
        assert!(waited.is_err());
        let mut tasks = Supervisor::default();
        tasks.spawn("forever", std::future::pending());
        tasks.stop();
        let waited = tokio::time::timeout(Duration::from_millis(20), tasks.ended()).await;
        assert!(waited.is_err(), "stopping is not a crash");
    }
}
