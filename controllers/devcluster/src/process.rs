//! The child processes of a dev cluster: started with their output in a log
//! file, watched for early exits, and killed on stop or drop.

use std::fs::File;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

#[derive(Debug)]
pub struct Component {
    pub name: &'static str,
    pub log: PathBuf,
    child: Child,
}

impl Component {
    pub fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        log_dir: &Path,
    ) -> std::io::Result<Self> {
        let log = log_dir.join(format!("{name}.log"));
        let out = File::create(&log)?;
        let err = out.try_clone()?;
        let child = Command::new(program)
            .args(args)
            // A group of its own: Ctrl-C in the terminal reaches only the
            // launcher, which stops the components in order.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()?;
        tracing::debug!(name, pid = child.id(), "started");
        Ok(Self { name, log, child })
    }

    /// `Some(message)` when the process has already exited.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!(
                "{} exited early ({status}); the end of {}:\n{}",
                self.name,
                self.log.display(),
                log_tail(&self.log)
            )),
            Ok(None) => None,
            Err(error) => Some(format!("{}: cannot be watched: {error}", self.name)),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the process and reaps it, so nothing is left behind.
    pub fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        self.stop();
    }
}

pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
