//! `laneledger serve`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use laneledger_query::{Session, Thresholds};
use laneledger_store::Ledger;
use laneledger_web::AppState;

pub fn run(db: &Path, addr: SocketAddr) -> anyhow::Result<ExitCode> {
    let ledger = Ledger::open(db).with_context(|| format!("opening {}", db.display()))?;
    serve_ledger(ledger, addr, None)
}

/// Serves `ledger` on `addr`; prints `banner` (or the URL) once listening.
pub fn serve_ledger(ledger: Ledger, addr: SocketAddr, banner: Option<String>) -> anyhow::Result<ExitCode> {
    super::runtime()?.block_on(async {
        let session = Session::new(ledger).await?;
        let state = AppState {
            session,
            thresholds: Thresholds::default(),
        };
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
