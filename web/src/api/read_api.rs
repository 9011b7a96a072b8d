//! The read APIs: `GET /v1/review`, `POST /v1/sql`, `GET /v1/jobs/{job_id}/attempts`,
//! `GET /v1/idem/{idem_key}/attempts`, `GET /healthz` and `GET /metrics`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use laneledger_query::{AlertState, Cut, OutputFormat, QueryResult, format_result, review_document};
use serde::Deserialize;

use crate::api_error::ApiError;
use crate::server::state::AppState;

/// `?week=2026-W47` (optional: the latest week with data).
#[derive(Debug, Deserialize)]
pub struct WeekParam {
    /// An ISO week label.
    pub week: Option<String>,
    /// `text`: the review as `laneledger review` prints it (the command uses it while a server
    /// holds the ledger); JSON otherwise.
    pub format: Option<String>,
}

/// `GET /v1/review?week=YYYY-Www`: the weekly review as JSON (`laneledger review --format json`'s
/// document), or with `&format=text` as `laneledger review` prints it. 400 for a bad label, 404
/// for a week without data.
pub async fn review(State(state): State<AppState>, Query(p): Query<WeekParam>) -> Result<Response, ApiError> {
    let (review, sections) = state
        .session
        .review_with_sections(p.week.as_deref(), &state.thresholds)
        .await?;
    if p.format.as_deref() == Some("text") {
        let mut text = review.to_text();
        for s in &sections {
            text += &format!("\n{}", laneledger_query::section_text(s));
        }
        return Ok(plain_text(text));
    }
    Ok(Json(review_document(&review, &sections)).into_response())
}

/// A `text/plain` answer.
fn plain_text(text: String) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        )],
        text,
    )
        .into_response()
}

/// The header of a `/v1/sql` answer cut at the server's result limits: one sentence saying where.
pub const CUT_HEADER: &str = "laneledger-cut";

/// `POST /v1/sql`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SqlRequest {
    sql: String,
}

/// Runs user SQL under the server's SQL timeout: read-only, with the session's token and memory
/// limits, its answer cut at `options.sql_result` (see [`laneledger_query::Session::query_capped`]).
///
/// Errors: the query's own ([`ApiError`] from [`laneledger_query::Error`]), or 408 when it runs
/// past `options.sql_timeout`.
pub(crate) async fn run_sql(state: &AppState, sql: &str) -> Result<(QueryResult, Option<Cut>), ApiError> {
    let limit = state.options.sql_timeout;
    match tokio::time::timeout(limit, state.session.query_capped(sql, state.options.sql_result)).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!("the query ran longer than {} s and was stopped", limit.as_secs_f64()),
        )),
    }
}

/// `?format=table|csv|json` of `POST /v1/sql`.
#[derive(Debug, Deserialize)]
pub struct SqlFormatParam {
    /// The answer exactly as `laneledger sql --format F` prints it (the command uses it while a
    /// server holds the ledger).
    pub format: Option<String>,
}

/// `POST /v1/sql` with `{"sql": "…"}`: the rows as JSON (`{"columns": [{"name", "type"}],
/// "rows": [{…}], "row_count": n}`), or CSV (RFC 4180, header row) with `Accept: text/csv`; with
/// `?format=table|csv|json`, the text `laneledger sql --format …` prints.
/// Read-only: DDL, DML, `COPY` and `SET` are 400; see `run_sql` for the limits.
pub async fn sql(
    State(state): State<AppState>,
    Query(q): Query<SqlFormatParam>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: SqlRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body must be {{\"sql\": \"…\"}}: {e}")))?;
    let as_printed = match q.format.as_deref() {
        None => None,
        Some("table") => Some(OutputFormat::Table),
        Some("csv") => Some(OutputFormat::Csv),
        Some("json") => Some(OutputFormat::Json),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "format {other:?} is not one of table, csv, json"
            )));
        }
    };
    let (result, cut) = run_sql(&state, &req.sql).await?;
    // A cut answer says so in a header whatever its format (and in the JSON document).
    let cut_header = |mut response: Response| {
        if let Some(c) = cut
            && let Ok(v) = HeaderValue::from_str(&c.notice())
        {
            response.headers_mut().insert(CUT_HEADER, v);
        }
        response
    };
    if let Some(f) = as_printed {
        return Ok(cut_header(plain_text(format_result(&result, f)?)));
    }
    let csv = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("text/csv"));
    if csv {
        let text = format_result(&result, OutputFormat::Csv)?;
        return Ok(cut_header(
            (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/csv; charset=utf-8"),
                )],
                text,
            )
                .into_response(),
        ));
    }
    let columns: Vec<serde_json::Value> = result
        .schema
        .fields()
        .iter()
        .map(|f| serde_json::json!({ "name": f.name(), "type": f.data_type().to_string() }))
        .collect();
    // The rows are Arrow's JSON writer's array, spliced in as written: parsing it back into a
    // serde value to embed it would cost more than the query (352,697 rows for seed q2 at 10 M).
    let rows = format_result(&result, OutputFormat::Json)?;
    let mut body = Vec::with_capacity(rows.len() + 256);
    body.extend_from_slice(b"{\"columns\":");
    serde_json::to_writer(&mut body, &columns).map_err(ApiError::internal)?;
    body.extend_from_slice(b",\"rows\":");
    body.extend_from_slice(rows.trim_end().as_bytes());
    body.extend_from_slice(format!(",\"row_count\":{}", result.num_rows()).as_bytes());
    body.extend_from_slice(b",\"cut\":");
    let cut_json =
        cut.map(|c| serde_json::json!({"rows": c.rows, "limit": c.limit, "max": c.max, "message": c.notice()}));
    serde_json::to_writer(&mut body, &cut_json).map_err(ApiError::internal)?;
    body.push(b'}');
    Ok(cut_header(
        (
            [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
            body,
        )
            .into_response(),
    ))
}

/// `GET /v1/jobs/{job_id}/attempts`: one job's attempts, read straight from the ledger's
/// (job_id, attempt_no) key range (no SQL planning, no scan), in attempt order, as
/// `{"job_id": "…", "attempts": [{…}]}`. Each attempt has the ingest format's fields (timestamps
/// RFC 3339 UTC, absent fields left out, attrs merged in) plus `ingested_at` and seed 002's
/// `error_kind`. A job with no attempts gives `"attempts": []` (200), so a poller need not tell
/// "not yet" from "never".
///
/// The read runs on the request's own worker, like the JSON it feeds: one job's key range is a
/// few redb pages (tens of µs), and a hand-off to the blocking pool would cost two thread
/// wake-ups, about 0.06 ms of a 0.3 ms lookup at p50 on the 2-core VM of BENCHMARKS.md.
pub async fn job_attempts(
    State(state): State<AppState>,
    axum::extract::Path(job_id): axum::extract::Path<String>,
) -> Result<Response, ApiError> {
    let attempts = state
        .session
        .ledger()
        .job_attempts(&job_id)
        .map_err(ApiError::internal)?;
    Ok(Json(serde_json::json!({ "job_id": job_id, "attempts": attempts_json(&attempts) })).into_response())
}

/// `GET /v1/idem/{idem_key}/attempts`: every attempt that carries one idempotency key, across
/// jobs, in (job_id, attempt_no) order, read through the ledger's idem_key index
/// (`store/src/storage/idem_index.rs`, no SQL planning, no scan), as `{"idem_key": "…", "attempts":
/// [{…}]}` with the attempts as in [`job_attempts`]. Several jobs under one key are the
/// duplicates seed 000 counts. An unknown key gives `"attempts": []` (200).
pub async fn idem_attempts(
    State(state): State<AppState>,
    axum::extract::Path(idem_key): axum::extract::Path<String>,
) -> Result<Response, ApiError> {
    let ledger = state.session.ledger().clone();
    let key = idem_key.clone();
    let attempts = tokio::task::spawn_blocking(move || ledger.attempts_by_idem_key(&key))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)?;
    Ok(Json(serde_json::json!({ "idem_key": idem_key, "attempts": attempts_json(&attempts) })).into_response())
}

/// Attempts as the read APIs give them: the ingest format's fields plus `ingested_at` (RFC 3339
/// UTC) and seed 002's `error_kind`.
fn attempts_json(attempts: &[laneledger_store::StoredAttempt]) -> Vec<serde_json::Value> {
    attempts
        .iter()
        .map(|s| {
            let mut v = s.attempt.to_json();
            if let serde_json::Value::Object(m) = &mut v {
                m.insert(
                    "ingested_at".into(),
                    laneledger_store::format_timestamp(s.ingested_at).into(),
                );
                let kind = laneledger_query::tables::job_attempt::error_kind_of(
                    s.attempt.http_status,
                    s.attempt.provider_code,
                );
                m.insert("error_kind".into(), kind.map(|k| k.as_str()).into());
            }
            v
        })
        .collect()
}

/// `GET /healthz`: 200 `{"status": "ok", …}` when the ledger answers a read, else 503.
pub async fn healthz(State(state): State<AppState>) -> Response {
    let ledger = state.session.ledger().clone();
    match tokio::task::spawn_blocking(move || ledger.attempt_count()).await {
        Ok(Ok(attempts)) => Json(serde_json::json!({
            "status": "ok",
            "attempts": attempts,
            "writes": state.writer.is_some() && state.auth.token.is_some(),
            "write_queue": state.writer.as_ref().map(|w| w.queue_depth()),
        }))
        .into_response(),
        Ok(Err(e)) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the ledger does not answer: {e}"),
        )
        .into_response(),
        Err(e) => ApiError::internal(e).into_response(),
    }
}

/// `?week=` for `/metrics`: the ISO week whose ratios are exported (this week by default).
#[derive(Debug, Deserialize)]
pub struct MetricsParam {
    /// An ISO week label; the current ISO week (UTC) by default.
    pub week: Option<String>,
}

/// Prometheus text format, built line by line.
#[derive(Default)]
struct Exposition(String);

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        self.0 += &format!("# HELP {name} {help}\n# TYPE {name} {kind}\n");
    }
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.0 += name;
        if !labels.is_empty() {
            let l: Vec<String> = labels
                .iter()
                .map(|(k, v)| {
                    let v = v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
                    format!("{k}=\"{v}\"")
                })
                .collect();
            self.0 += &format!("{{{}}}", l.join(","));
        }
        self.0 += &format!(" {value}\n");
    }
}

/// The week's spend as gauges (in `prices.currency`, `laneledger_spend_currency`'s label): a
/// figure with no priced attempt is left out; the attempts by how they were priced always show.
fn spend_gauges(out: &mut Exposition, spend: &laneledger_query::review::cost::WeekSpend, week: &str) {
    let figures = [
        ("laneledger_spend", "Spend of the ISO week's attempts", spend.spend),
        (
            "laneledger_spend_per_accepted_artifact",
            "Spend per unique accepted artifact in the ISO week",
            spend.spend_per_accepted_artifact,
        ),
        (
            "laneledger_duplicate_artifact_spend",
            "Spend of the attempts that returned duplicate artifacts in the ISO week",
            spend.duplicate_artifact_spend,
        ),
    ];
    for (name, help, value) in figures {
        if let Some(v) = value {
            out.family(name, "gauge", &format!("{help} (router costs, else lane.yaml prices)."));
            out.sample(name, &[("week", week)], v);
        }
    }
    if let Some(c) = &spend.currency {
        out.family(
            "laneledger_spend_currency",
            "gauge",
            "1, labelled with the currency of the spend gauges.",
        );
        out.sample("laneledger_spend_currency", &[("currency", c)], 1);
    }
    out.family(
        "laneledger_attempts_priced",
        "gauge",
        "The ISO week's attempts by how their cost is known: router, lane_yaml, or unpriced (left out of the spend).",
    );
    for (by, n) in [
        ("router", spend.router_priced_attempts),
        ("lane_yaml", spend.table_priced_attempts),
        ("unpriced", spend.unpriced_attempts),
    ] {
        out.sample("laneledger_attempts_priced", &[("by", by), ("week", week)], n);
    }
}

/// `GET /metrics`: Prometheus text format (version 0.0.4). Ingest counters of the ledger (by
/// write result, SPEC 2) and of this server's writer; and, for the current ISO week (or
/// `?week=`), every alert of the weekly review ([`laneledger_query::review::metrics::week_alerts`]: seed
/// 000's two ratios, one per audit, and seed 003's gate alerts when the week has gate decisions)
/// as a gauge `laneledger_<metric>` beside its `laneledger_<metric>_threshold`, with
/// `laneledger_alert{metric=...}` 1 where one fires. `docs/prometheus-alerts.yml` alerts on them.
/// Also the SQL threads' CPU time and the connections refused past the cap.
pub async fn metrics(State(state): State<AppState>, Query(p): Query<MetricsParam>) -> Result<Response, ApiError> {
    let ledger = state.session.ledger().clone();
    let (attempts, decisions, rows) = tokio::task::spawn_blocking(move || {
        Ok::<_, laneledger_store::Error>((ledger.counters()?, ledger.decision_counters()?, ledger.attempt_count()?))
    })
    .await
    .map_err(ApiError::internal)?
    .map_err(ApiError::internal)?;
    let mut out = Exposition::default();
    for (name, what, c) in [
        ("laneledger_attempt_records_total", "Attempt records", attempts),
        ("laneledger_decision_records_total", "Gate decision records", decisions),
    ] {
        out.family(
            name,
            "counter",
            &format!("{what} offered to the ledger since it was created, by write result."),
        );
        for (result, n) in [
            ("accepted", c.accepted),
            ("completed", c.completed),
            ("duplicate", c.duplicates),
            ("conflict", c.conflicts),
            ("rejected", c.rejected),
        ] {
            out.sample(name, &[("result", result)], n);
        }
    }
    out.family("laneledger_attempts", "gauge", "Rows in job_attempt.");
    out.sample("laneledger_attempts", &[], rows);
    if let Some(w) = &state.writer {
        use std::sync::atomic::Ordering::Relaxed;
        let s = w.stats();
        let counters = [
            (
                "laneledger_http_write_batches_total",
                "Write requests committed by this server.",
                s.batches.load(Relaxed),
            ),
            (
                "laneledger_http_write_records_total",
                "Records in the write requests committed by this server.",
                s.records.load(Relaxed),
            ),
            (
                "laneledger_commits_total",
                "Group commits (one fsync'd redb transaction each).",
                s.commits.load(Relaxed),
            ),
            (
                "laneledger_commit_failures_total",
                "Group commits that failed (nothing of them was written).",
                s.failed_commits.load(Relaxed),
            ),
            (
                "laneledger_write_queue_full_total",
                "Write requests refused with 503 because the queue was full.",
                s.queue_full.load(Relaxed),
            ),
        ];
        for (name, help, v) in counters {
            out.family(name, "counter", help);
            out.sample(name, &[], v);
        }
        out.family(
            "laneledger_commit_seconds_total",
            "counter",
            "Time spent committing, in seconds.",
        );
        out.sample(
            "laneledger_commit_seconds_total",
            &[],
            s.commit_micros.load(Relaxed) as f64 / 1e6,
        );
        out.family(
            "laneledger_write_queue_depth",
            "gauge",
            "Write requests waiting for the writer.",
        );
        out.sample("laneledger_write_queue_depth", &[], w.queue_depth());
        out.family(
            "laneledger_write_queue_capacity",
            "gauge",
            "Write requests the queue holds before it answers 503.",
        );
        out.sample("laneledger_write_queue_capacity", &[], w.queue_capacity());
    }
    if let Some(ticks) = state.session.sql_cpu_ticks() {
        out.family(
            "laneledger_sql_cpu_seconds_total",
            "counter",
            "CPU time (user and system) of the threads SQL runs on, in seconds.",
        );
        out.sample("laneledger_sql_cpu_seconds_total", &[], ticks as f64 / 100.0);
    }
    out.family(
        "laneledger_connections_refused_total",
        "counter",
        "Connections closed at once because the open-connection cap was reached.",
    );
    out.sample(
        "laneledger_connections_refused_total",
        &[],
        crate::server::connections::REFUSED_CONNECTIONS.load(std::sync::atomic::Ordering::Relaxed),
    );
    let week = match p.week {
        Some(w) => w,
        None => laneledger_query::derived::audits::iso_week_of(laneledger_store::now_micros()),
    };
    match state.session.review(Some(&week), &state.thresholds).await {
        Ok(review) => {
            out.family(
                "laneledger_week_has_data",
                "gauge",
                "1 when a job started in the ISO week.",
            );
            out.sample("laneledger_week_has_data", &[("week", &week)], 1);
            out.family(
                "laneledger_week_partial",
                "gauge",
                "1 while the ISO week is still in progress (its counts will grow), else 0.",
            );
            out.sample("laneledger_week_partial", &[("week", &week)], u8::from(review.partial));
            out.family(
                "laneledger_week_jobs",
                "gauge",
                "Jobs whose first attempt started in the ISO week.",
            );
            out.sample("laneledger_week_jobs", &[("week", &week)], review.week.jobs);
            out.family(
                "laneledger_min_jobs",
                "gauge",
                "The fewest jobs a week needs for a ratio over its jobs to alert (lane.yaml alerts.min_jobs).",
            );
            out.sample("laneledger_min_jobs", &[], state.thresholds.min_jobs);
            for a in &review.alerts {
                let name = format!("laneledger_{}", a.metric);
                if let Some(v) = a.value {
                    out.family(&name, "gauge", &format!("{} in the ISO week.", a.label));
                    out.sample(&name, &[("week", &week)], v);
                }
                let t = format!("{name}_threshold");
                out.family(&t, "gauge", &format!("The alert fires when {} is above this.", a.label));
                out.sample(&t, &[], a.threshold);
            }
            out.family(
                "laneledger_alert",
                "gauge",
                "1 when the metric is above its threshold in the ISO week, else 0.",
            );
            for a in &review.alerts {
                out.sample(
                    "laneledger_alert",
                    &[("metric", a.metric), ("week", &week)],
                    u8::from(a.state == AlertState::Alert),
                );
            }
            if let Some(spend) = &review.week.spend {
                spend_gauges(&mut out, spend, &week);
            }
        }
        Err(laneledger_query::Error::UnknownWeek(_)) => {
            out.family(
                "laneledger_week_has_data",
                "gauge",
                "1 when a job started in the ISO week.",
            );
            out.sample("laneledger_week_has_data", &[("week", &week)], 0);
        }
        Err(e) => return Err(e.into()),
    }
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        out.0,
    )
        .into_response())
}
