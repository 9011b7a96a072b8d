//! `laneledger`: parse the command line, run the command, turn its error into an exit code.

mod cli;
mod commands;
mod progress;

use std::process::ExitCode;

use clap::Parser;

/// mimalloc instead of glibc's malloc: ingest hands every parsed record from the parsing thread to
/// the writing thread, and glibc's frees of them were a fifth of ingest's time (BENCHMARKS.md).
/// Built with `no_thp`: its transparent huge pages put q1's peak RSS at 10 M attempts at 2.0 GiB.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Stack for the command's thread and the runtime's workers: deep SQL expressions are planned
/// recursively, and a refusal must come before the stack runs out.
const STACK_BYTES: usize = 256 << 20;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LANELEDGER_LOG").unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    commands::report_damage_on_panic();
    let run = std::thread::Builder::new()
        .stack_size(STACK_BYTES)
        .spawn(move || commands::run(cli));
    match run.map(|t| t.join()) {
        Ok(Ok(Ok(code))) => code,
        Ok(Ok(Err(e))) => {
            eprintln!("laneledger: {e:#}");
            ExitCode::from(commands::exit_code(&e))
        }
        Ok(Err(_)) => ExitCode::from(101),
        Err(e) => {
            eprintln!("laneledger: cannot start: {e}");
            ExitCode::FAILURE
        }
    }
}
