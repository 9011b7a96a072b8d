//! `laneledger serve`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use laneledger_query::Session;
use laneledger_store::{LaneConfig, Ledger};
use laneledger_web::AppState;

pub fn run(db: &Path, addr: SocketAddr, config: Option<&Path>) -> anyhow::Result<ExitCode> {
    let config = super::load_config(config)?;
    let ledger = Ledger::open(db).with_context(|| format!("opening {}", db.display()))?;
    serve_ledger(ledger, config, addr, None)
}

/// Serves `ledger` on `addr`; prints `banner` (or the URL) once listening.
pub fn serve_ledger(
    ledger: Ledger,
    config: LaneConfig,
    addr: SocketAddr,
    banner: Option<String>,
) -> anyhow::Result<ExitCode> {
    super::runtime()?.block_on(async {
        let session = Session::with_config(ledger, config).await?;
        let state = AppState {
            thresholds: session.thresholds(),
            session,
        };
        super::retain::spawn_scheduled(&state);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        let url = format!("http://{}/", listener.local_addr()?);
        println!(
            "{}",
            banner
                .unwrap_or_else(|| format!("laneledger serving on {url}"))
                .replace("{url}", &url)
        );
        laneledger_web::serve_until(listener, state, laneledger_web::shutdown_signal()).await?;
        Ok(ExitCode::SUCCESS)
    })
}
