//! What the command line needs from a server that holds the ledger file: `POST /v1/verify` (the
//! chain check on the server's open database) and `GET /v1/export` (the export, streamed as a
//! tar archive of the folder `laneledger export` writes).
//!
//! redb lets one process open a file, so while `serve` runs, `laneledger verify` and
//! `laneledger export` on the same file go through these routes (the command finds the server
//! from the discovery file `serve` leaves beside the ledger).

use std::io::Read;
use std::path::{Path, PathBuf};

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use laneledger_query::archive::export::{self, ExportFormat, parse_bound};
use laneledger_query::tables::gate_decision::GateDefaults;
use serde::Deserialize;

use crate::api_error::ApiError;
use crate::server::state::AppState;

/// The response header of `GET /v1/export` with the attempts written.
pub const EXPORT_ROWS_HEADER: &str = "x-laneledger-export-rows";
/// The response header of a Parquet `GET /v1/export` with the ledger tables' rows:
/// `gate_decision=41,week_snapshot=0,retention_sweep=0`.
pub const EXPORT_TABLES_HEADER: &str = "x-laneledger-export-tables";

/// `POST /v1/verify`: the chain check of `laneledger verify` on the server's open database (every
/// chain entry and every record against it), logged in `verify_run` as the command logs it.
/// redb's checksum of every page needs the file to itself, so it is left to `laneledger verify`
/// on a stopped server or a copy. 200 with the report, clean or not:
/// `{"clean", "entries", "records", "checkpoints", "tip", "problems", "first_bad"}`.
pub async fn verify(State(state): State<AppState>) -> Result<Response, ApiError> {
    let ledger = state.session.ledger().clone();
    let report = tokio::task::spawn_blocking(move || {
        let report = ledger.verify()?;
        // The run is logged as `laneledger verify` logs it; a file that cannot be written is not.
        let logged = if ledger.is_read_only() {
            false
        } else {
            ledger.record_verify(laneledger_store::now_micros(), &report)?;
            true
        };
        Ok::<_, laneledger_store::Error>((report, logged))
    })
    .await
    .map_err(ApiError::internal)?;
    let (report, logged) = report.map_err(ApiError::internal)?;
    Ok(Json(serde_json::json!({
        "clean": report.is_clean(),
        "entries": report.entries,
        "records": report.records,
        "checkpoints": report.checkpoints,
        "tip": report.tip,
        "problems": report.problems,
        "first_bad": report.first_bad.as_ref().map(ToString::to_string),
        "logged": logged,
    }))
    .into_response())
}

/// `GET /v1/export`'s query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportParams {
    /// `parquet` (the default), `arrow` or `csv`.
    pub format: Option<String>,
    /// Attempts that started at or after this time (RFC 3339 or YYYY-MM-DD).
    pub since: Option<String>,
    /// Attempts that started before this time.
    pub until: Option<String>,
}

/// `GET /v1/export?format=parquet|arrow|csv&since=…&until=…`: what `laneledger export` writes,
/// as one uncompressed tar archive (`day=YYYY-MM-DD/attempts.parquet`, and for Parquet
/// `ledger/…`), with the gate defaults of the server's lane.yaml. The export is written to a
/// hidden folder beside the ledger first (so it must fit the request timeout), then streamed and
/// removed. The rows go in [`EXPORT_ROWS_HEADER`] and [`EXPORT_TABLES_HEADER`]. 400 on a bad
/// format or time.
pub async fn export(State(state): State<AppState>, Query(p): Query<ExportParams>) -> Result<Response, ApiError> {
    let format = match p.format.as_deref().unwrap_or("parquet") {
        "parquet" => ExportFormat::Parquet,
        "arrow" => ExportFormat::Arrow,
        "csv" => ExportFormat::Csv,
        other => {
            return Err(ApiError::bad_request(format!(
                "format {other:?} is not one of parquet, arrow, csv"
            )));
        }
    };
    let bound = |name: &str, v: Option<&str>| {
        v.map(parse_bound)
            .transpose()
            .map_err(|e| ApiError::bad_request(format!("{name}: {e}")))
    };
    let since = bound("since", p.since.as_deref())?;
    let until = bound("until", p.until.as_deref())?;
    let gate = GateDefaults {
        max_queue_age_s: state.session.config().gate.max_queue_age_s,
        reserved_service_s: state.session.config().gate.reserved_service_s,
    };
    let ledger = state.session.ledger().clone();
    let (summary, dir) = tokio::task::spawn_blocking(move || {
        // Beside the ledger: the same file system, which has room for the ledger's own growth
        // (a system temp folder may be a small tmpfs).
        let near = ledger.path().parent().filter(|p| !p.as_os_str().is_empty());
        let dir = tempfile::Builder::new()
            .prefix(".laneledger-export-")
            .tempdir_in(near.unwrap_or(Path::new(".")))
            .or_else(|_| tempfile::Builder::new().prefix("laneledger-export-").tempdir())?;
        let summary = export::export_with(&ledger, format, dir.path(), since, until, &gate);
        Ok::<_, std::io::Error>((summary, dir))
    })
    .await
    .map_err(ApiError::internal)?
    .map_err(ApiError::internal)?;
    let summary = summary.map_err(|e| match e {
        laneledger_query::Error::BadTimeRange(m) => ApiError::bad_request(m),
        e => ApiError::from(e),
    })?;
    let tables: Vec<String> = summary
        .tables
        .iter()
        .map(|t| format!("{}={}", t.table, t.rows))
        .collect();
    let entries = tar_entries(dir.path()).map_err(ApiError::internal)?;
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    tokio::task::spawn_blocking(move || {
        if let Err(e) = write_tar(&entries, &tx) {
            let _ = tx.blocking_send(Err(e));
        }
        // The folder goes once the archive is sent (or the client went away).
        drop(dir);
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
    let mut r = Body::from_stream(stream).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-tar"));
    h.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static("attachment; filename=\"laneledger-export.tar\""),
    );
    h.insert(EXPORT_ROWS_HEADER, HeaderValue::from(summary.rows));
    if !tables.is_empty() {
        let value = HeaderValue::from_str(&tables.join(",")).map_err(ApiError::internal)?;
        h.insert(EXPORT_TABLES_HEADER, value);
    }
    Ok(r)
}

/// One member of the archive: a folder or a file, by its path inside the export.
struct Entry {
    rel: String,
    full: PathBuf,
    dir: bool,
}

/// Every folder and file under `root`, parents first, in name order (the tar's order).
fn tar_entries(root: &Path) -> std::io::Result<Vec<Entry>> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<Entry>) -> std::io::Result<()> {
        let mut items: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
        items.sort_by_key(|e| e.file_name());
        for e in items {
            let full = e.path();
            let rel = full
                .strip_prefix(root)
                .map_err(std::io::Error::other)?
                .to_string_lossy()
                .replace('\\', "/");
            if e.file_type()?.is_dir() {
                out.push(Entry {
                    rel,
                    full: full.clone(),
                    dir: true,
                });
                walk(root, &full, out)?;
            } else {
                out.push(Entry { rel, full, dir: false });
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(root, root, &mut out)?;
    Ok(out)
}

/// A ustar header of `len` bytes for `name` (a folder when `dir`).
fn ustar_header(name: &str, len: u64, dir: bool) -> std::io::Result<[u8; 512]> {
    let mut h = [0u8; 512];
    let name = if dir { format!("{name}/") } else { name.to_string() };
    // Names past 100 bytes are split at a `/` into the 155-byte prefix and the name.
    let (prefix, short) = if name.len() <= 100 {
        ("", name.as_str())
    } else {
        let cut = name[..name.len().min(156)]
            .rfind('/')
            .filter(|&i| name.len() - i - 1 <= 100 && i > 0)
            .ok_or_else(|| std::io::Error::other(format!("{name}: too long a path for a tar archive")))?;
        (&name[..cut], &name[cut + 1..])
    };
    if len >= 8 << 30 {
        return Err(std::io::Error::other(format!(
            "{name}: larger than a tar member may be"
        )));
    }
    let put = |h: &mut [u8; 512], at: usize, bytes: &[u8]| h[at..at + bytes.len()].copy_from_slice(bytes);
    put(&mut h, 0, short.as_bytes());
    put(&mut h, 100, if dir { b"0000755\0" } else { b"0000644\0" });
    put(&mut h, 108, b"0000000\0");
    put(&mut h, 116, b"0000000\0");
    put(&mut h, 124, format!("{len:011o}\0").as_bytes());
    put(&mut h, 136, b"00000000000\0");
    put(&mut h, 148, b"        ");
    h[156] = if dir { b'5' } else { b'0' };
    put(&mut h, 257, b"ustar\0");
    put(&mut h, 263, b"00");
    put(&mut h, 345, prefix.as_bytes());
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    put(&mut h, 148, format!("{sum:06o}\0 ").as_bytes());
    Ok(h)
}

/// Sends `entries` as a tar archive down `tx`, in chunks of up to 256 KiB.
fn write_tar(entries: &[Entry], tx: &tokio::sync::mpsc::Sender<std::io::Result<Bytes>>) -> std::io::Result<()> {
    let gone = || std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away");
    let send = |chunk: Vec<u8>| tx.blocking_send(Ok(Bytes::from(chunk))).map_err(|_| gone());
    for e in entries {
        if e.dir {
            send(ustar_header(&e.rel, 0, true)?.to_vec())?;
            continue;
        }
        let mut f = std::fs::File::open(&e.full)?;
        let len = f.metadata()?.len();
        send(ustar_header(&e.rel, len, false)?.to_vec())?;
        let mut left = len;
        while left > 0 {
            let mut buf = vec![0u8; left.min(256 << 10) as usize];
            f.read_exact(&mut buf)?;
            left -= buf.len() as u64;
            send(buf)?;
        }
        let pad = (512 - (len % 512) as usize) % 512;
        if pad > 0 {
            send(vec![0u8; pad])?;
        }
    }
    send(vec![0u8; 1024])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_name_is_split_at_a_slash_and_the_checksum_counts_spaces() {
        let name = format!("ledger/{}/gate_decision.parquet", "d".repeat(120));
        let h = ustar_header(&name, 1234, false).unwrap();
        let field = |at: usize, len: usize| {
            let f = &h[at..at + len];
            String::from_utf8_lossy(&f[..f.iter().position(|&b| b == 0).unwrap_or(len)]).into_owned()
        };
        assert_eq!(field(0, 100), "gate_decision.parquet");
        assert_eq!(field(345, 155), format!("ledger/{}", "d".repeat(120)));
        assert_eq!(field(124, 12), "00000002322");
        let mut blank = h;
        blank[148..156].copy_from_slice(b"        ");
        let sum: u32 = blank.iter().map(|&b| u32::from(b)).sum();
        assert_eq!(field(148, 8).trim(), format!("{sum:06o}"));
        assert_eq!(h[156], b'0');
    }
}
