//! Builds the dev cluster's Go binaries if missing and prints where they
//! are (CI runs it as a step of its own, so a Go build failure is reported
//! as such rather than inside a test).

use std::process::ExitCode;

fn main() -> ExitCode {
    match kruise_devcluster::Binaries::ensure() {
        Ok(binaries) => {
            println!("{}", binaries.path("").display());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("devcluster-binaries: {error}");
            ExitCode::FAILURE
        }
    }
}
