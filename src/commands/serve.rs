//! `laneledger serve`: the site, the read APIs and the write APIs over one ledger.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use laneledger_query::Session;
use laneledger_store::{LaneConfig, Ledger};
use laneledger_web::{AppState, Auth, Options, Token, Writer};

use crate::cli::ServerArgs;

pub fn run(
    db: &Path,
    addr: SocketAddr,
    config: Option<&Path>,
    server: &ServerArgs,
    retain_every: Duration,
) -> anyhow::Result<ExitCode> {
    let lane_yaml = config;
    let config = super::load_config(config)?;
    // One server per file: a second one is told which server holds it.
    let ledger = super::open(db).map_err(|e| super::remote::refuse_second_server(db, e))?;
    serve_ledger(ledger, config, lane_yaml, addr, server, Some(retain_every), None)
}

/// The token from `--token-file`, else `LANELEDGER_TOKEN`, else none.
fn token(server: &ServerArgs) -> anyhow::Result<Option<Token>> {
    let (text, from) = match &server.token_file {
        Some(path) => (
            std::fs::read_to_string(path).with_context(|| format!("reading the token file {}", path.display()))?,
            path.display().to_string(),
        ),
        None => match std::env::var("LANELEDGER_TOKEN") {
            Ok(t) => (t, "LANELEDGER_TOKEN".to_string()),
            Err(_) => return Ok(None),
        },
    };
    let token = Token::new(&text).map_err(|e| super::usage::usage(format!("the token in {from}: {e}")))?;
    Ok(Some(token))
}

fn seconds(name: &str, s: f64) -> anyhow::Result<Duration> {
    if !(s.is_finite() && s > 0.0 && s <= 86_400.0) {
        return Err(super::usage::usage(format!(
            "--{name} must be a number of seconds between 0 and 86400, not {s}"
        )));
    }
    Ok(Duration::from_secs_f64(s))
}

/// The access rules for `addr`: reads need the token on any address but loopback or with
/// `--read-token`; without a token only loopback is served, and writes are off.
fn auth(addr: SocketAddr, server: &ServerArgs) -> anyhow::Result<Auth> {
    let token = token(server)?;
    let loopback = addr.ip().is_loopback();
    if token.is_none() && !loopback {
        return Err(super::usage::usage(format!(
            "refusing to serve {addr} without a token: set LANELEDGER_TOKEN or --token-file, or serve 127.0.0.1"
        )));
    }
    if token.is_none() && server.read_token {
        return Err(super::usage::usage(
            "--read-token needs a token: set LANELEDGER_TOKEN or --token-file",
        ));
    }
    Ok(Auth {
        token,
        reads_need_token: server.read_token || !loopback,
    })
}

/// Serves `ledger` on `addr`, sweeping it every `retain_every` (none when `None` or zero); prints
/// `banner` (or the URL) once listening, and leaves the discovery file beside the ledger while it
/// serves (the commands that find the file held go through this server). On SIGTERM or Ctrl-C
/// it stops taking connections, answers the requests in flight, lets the writer commit every
/// batch it took, and returns.
pub fn serve_ledger(
    ledger: Ledger,
    config: LaneConfig,
    lane_yaml: Option<&Path>,
    addr: SocketAddr,
    server: &ServerArgs,
    retain_every: Option<Duration>,
    banner: Option<String>,
) -> anyhow::Result<ExitCode> {
    // A request that meets a damaged page fails; the server goes on serving the others.
    super::EXIT_ON_DAMAGE.store(false, std::sync::atomic::Ordering::Relaxed);
    let auth = auth(addr, server)?;
    // Each connection holds a descriptor: take all the hard limit allows (the connection cap is
    // lowered to fit what that is).
    laneledger_web::server::connections::raise_fd_limit();
    let options = Options {
        body_limit: server.body_limit.max(1),
        max_records: server.max_records.max(1),
        request_timeout: seconds("request-timeout", server.request_timeout)?,
        sql_timeout: seconds("sql-timeout", server.sql_timeout)?,
        sql_result: laneledger_query::ResultLimits {
            max_rows: server.sql_max_rows.max(1),
            max_bytes: server.sql_max_result_bytes.max(1),
        },
        query_concurrency: server.query_concurrency.max(1),
        write_concurrency: server.write_concurrency.max(1),
        query_queue: server.query_queue,
        header_timeout: seconds("header-timeout", server.header_timeout)?,
        keep_alive_timeout: seconds("keep-alive-timeout", server.keep_alive_timeout)?,
        body_timeout: seconds("body-timeout", server.body_timeout)?,
        max_connections: server.max_connections.max(1),
        otlp_idem_fallback: server.otlp_idem_fallback,
    };
    let read_only = ledger.is_read_only();
    let db = ledger.path().to_path_buf();
    let announce = super::remote::Announce {
        addr,
        token_file: server.token_file.as_deref(),
        has_token: auth.token.is_some(),
        reads_need_token: auth.reads_need_token,
        body_limit: options.body_limit,
        max_records: options.max_records,
        config: lane_yaml,
    };
    let writes = if read_only {
        "off (the ledger file cannot be written)"
    } else if auth.token.is_some() {
        "on"
    } else {
        "off (no token)"
    };
    let reads = if auth.reads_need_token {
        "need the token"
    } else {
        "open"
    };
    super::runtime()?.block_on(async {
        let session = Session::with_memory_limit(ledger.clone(), config, server.sql_memory.max(1 << 20)).await?;
        let state = AppState::new(session.clone(), session.thresholds()).with_options(options);
        // A file that cannot be written gets no writer and no sweeps: writes answer 503.
        let (state, writer_thread) = if read_only {
            (state.with_auth(auth), None)
        } else {
            let (writer, writer_thread) = Writer::spawn(ledger, server.write_queue)?;
            (state.with_writer(writer, auth), Some(writer_thread))
        };
        let schedule = super::retain::spawn_scheduled(&state, retain_every.filter(|_| !read_only));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        let url = format!("http://{}/", listener.local_addr()?);
        // Best effort: a ledger in a folder that cannot be written is still served; the commands
        // beside it then say the file is held, as before.
        let announce = super::remote::Announce {
            addr: listener.local_addr()?,
            ..announce
        };
        let discovery = super::remote::Discovery::write(&db, &announce)
            .inspect_err(|e| tracing::warn!("commands on this ledger cannot find the server: {e:#}"))
            .ok();
        println!(
            "{}",
            banner
                .unwrap_or_else(|| format!("laneledger serving on {url}"))
                .replace("{url}", &url)
        );
        println!("writes {writes}; reads {reads}");
        // Alerts out: posts to lane.yaml's webhooks run beside the server, never in a request.
        let webhooks = laneledger_web::webhooks::Notifier::new(
            session.clone(),
            session.thresholds(),
            &session.config().webhooks,
            url.trim_end_matches('/'),
            laneledger_web::webhooks::WebhookOptions::default(),
        )
        .spawn();
        let served = laneledger_web::serve_until(listener, state, laneledger_web::shutdown_signal()).await;
        // Stop the sweep schedule: a step already on a blocking thread finishes (its commit is one
        // redb transaction; a rerun converges), and the task's handle to the writer goes.
        if let Some(task) = schedule {
            task.abort();
            let _ = task.await;
        }
        if let Some(task) = webhooks {
            task.abort();
            let _ = task.await;
        }
        // Every handle to the writer is gone now: it commits what it took, then stops.
        if let Some(writer_thread) = writer_thread {
            tokio::task::spawn_blocking(move || writer_thread.join()).await?;
        }
        // Stopped: the commands open the file themselves again.
        drop(discovery);
        served?;
        Ok(ExitCode::SUCCESS)
    })
}
