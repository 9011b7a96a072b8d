//! `laneledger`: parse the command line, run the command, turn its error into an exit code.

mod cli;
mod commands;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LANELEDGER_LOG").unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match commands::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("laneledger: {e:#}");
            ExitCode::from(commands::exit_code(&e))
        }
    }
}
