//! `streamkeeper-operator`: the operator binary.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Kubernetes operator for exactly-once stateful stream jobs (StatefulStreamJob, streamkeeper.dev/v1alpha1).
#[derive(Parser, Debug)]
#[command(name = "streamkeeper-operator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the StatefulStreamJob CustomResourceDefinition as YAML (pipe it to `kubectl apply -f -`).
    Crd,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => match streamkeeper::crd::crd_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::FAILURE
            }
        },
    }
}
