//! `streamkeeper-worker`: the worker binary.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use streamkeeper_contract::{Versioned, WorkerConfig};

/// The streamkeeper worker: exactly-once stateful processing on RocksDB with a Kafka changelog.
#[derive(Parser, Debug)]
#[command(name = "streamkeeper-worker", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Read and check a worker config file (the one the operator renders), then print it back
    /// normalized. Exits non-zero with a message naming the bad field.
    CheckConfig {
        /// Path of the worker config (YAML or JSON).
        #[arg(long, env = "STREAMKEEPER_CONFIG")]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::CheckConfig { config } => {
            let text = match std::fs::read_to_string(&config) {
                Ok(text) => text,
                Err(error) => {
                    eprintln!("error: cannot read {}: {error}", config.display());
                    return ExitCode::FAILURE;
                }
            };
            match WorkerConfig::from_yaml(&text) {
                Ok(parsed) => {
                    print!("{}", parsed.to_yaml());
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("error: {}: {error}", config.display());
                    ExitCode::FAILURE
                }
            }
        }
    }
}
