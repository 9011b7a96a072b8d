//! The charts, downloads and alert states of the site over the sample data (seed 000's two drill
//! weeks, seed 002's incident, seed 003's decisions), each checked against SQL run beside it.

use std::collections::{BTreeMap, HashMap};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use laneledger_query::{OutputFormat, Session, format_result};
use laneledger_store::{DEFAULT_BATCH, InputFormat, Ledger, ingest_decisions_reader, ingest_reader};
use laneledger_web::{AppState, app};
use tempfile::TempDir;
use tower::ServiceExt;

async fn sample_state() -> (TempDir, AppState) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = Ledger::open(dir.path().join("l.redb")).expect("ledger");
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-data");
    for f in [
        "drill-nopin-2026-W47.ndjson",
        "drill-pin-2026-W48.ndjson",
        "keys-incident-2026-10-17.ndjson",
    ] {
        let r = std::io::BufReader::new(std::fs::File::open(data.join(f)).expect("sample file"));
        ingest_reader(&ledger, f, r, InputFormat::Ndjson, DEFAULT_BATCH, |_| {}).expect("ingest");
    }
    let r = std::io::BufReader::new(std::fs::File::open(data.join("decisions-2026-W48.ndjson")).expect("decisions"));
    ingest_decisions_reader(&ledger, "decisions", r, InputFormat::Ndjson, DEFAULT_BATCH, |_| {}).expect("ingest");
    let session = Session::new(ledger).await.expect("session");
    let state = AppState::new(session.clone(), session.thresholds());
    (dir, state)
}

struct Got {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

async fn get(state: &AppState, uri: &str) -> Got {
    let resp = app(state.clone())
        .oneshot(Request::get(uri).body(Body::empty()).expect("request"))
        .await
        .expect("infallible");
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    Got {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).expect("utf-8"),
    }
}

/// Rows of `sql` as JSON objects.
async fn sql_rows(session: &Session, sql: &str) -> Vec<serde_json::Map<String, serde_json::Value>> {
    let result = session.query(sql).await.expect("sql");
    let json = format_result(&result, OutputFormat::Json).expect("json");
    serde_json::from_str(&json).expect("rows")
}

/// The attributes of every `<tag …>` element of `html`.
fn elements(html: &str, tag: &str) -> Vec<HashMap<String, String>> {
    let open = format!("<{tag} ");
    html.match_indices(&open)
        .map(|(i, _)| {
            let rest = &html[i + open.len()..];
            let head = &rest[..rest.find('>').expect("tag end")];
            let mut attrs = HashMap::new();
            let mut s = head;
            while let Some(eq) = s.find("=\"") {
                let name = s[..eq].trim().trim_start_matches('/').to_string();
                let after = &s[eq + 2..];
                let end = after.find('"').expect("quote");
                attrs.insert(name, after[..end].to_string());
                s = &after[end + 1..];
            }
            attrs
        })
        .collect()
}

/// The `<svg>` of class `class` in `html`.
fn svg<'a>(html: &'a str, class: &str) -> &'a str {
    let start = html
        .find(&format!("<svg class=\"{class}\""))
        .unwrap_or_else(|| panic!("no svg {class}"));
    let end = start + html[start..].find("</svg>").expect("</svg>");
    &html[start..end + 6]
}

/// The text of each `<text>` element of `svg`.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text ")
        .skip(1)
        .map(|t| {
            let body = &t[t.find('>').expect(">") + 1..t.find("</text>").expect("</text>")];
            body.trim().to_string()
        })
        .collect()
}

/// Parses RFC 4180 CSV (quoted fields, CRLF) into rows of fields.
fn parse_csv(csv: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = csv.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\r') => {}
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => field.push(c),
        }
    }
    assert!(field.is_empty() && row.is_empty(), "CSV ends with CRLF");
    rows
}

/// The text of an HTML fragment: tags dropped, askama's entities decoded, whitespace collapsed.
fn text(fragment: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in fragment.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    let out = out.split_whitespace().collect::<Vec<_>>().join(" ");
    [
        ("&#60;", "<"),
        ("&#62;", ">"),
        ("&#34;", "\""),
        ("&#39;", "'"),
        ("&#38;", "&"),
    ]
    .iter()
    .fold(out, |s, (entity, c)| s.replace(entity, c))
}

/// The `<td>` texts of each row of the first `<tbody>` after `after`.
fn body_rows(html: &str, after: &str) -> Vec<Vec<String>> {
    let start = html.find(after).unwrap_or_else(|| panic!("no {after}"));
    let body = &html[start..];
    let body = &body[body.find("<tbody>").expect("tbody")..];
    let body = &body[..body.find("</tbody>").expect("/tbody")];
    body.split("<tr")
        .skip(1)
        .map(|tr| {
            tr.split("<td")
                .skip(1)
                .map(|td| text(&td[td.find('>').expect(">") + 1..td.find("</td>").expect("/td")]))
                .collect()
        })
        .collect()
}

/// The jobs whose first attempt falls in `week`, written without the view `job_week`.
fn jobs_of(week: &str) -> String {
    format!("SELECT job_id FROM job_attempt GROUP BY job_id HAVING to_char(MIN(started_at), '%G-W%V') = '{week}'")
}

#[tokio::test]
async fn the_daily_chart_draws_each_days_attempts_by_lane_and_outcome_as_sql_counts_them() {
    let (_dir, state) = sample_state().await;
    let page = get(&state, "/weeks/2026-W47").await;
    assert_eq!(page.status, StatusCode::OK);
    let chart = svg(&page.body, "chart daily");
    let bars: Vec<HashMap<String, String>> = elements(chart, "rect")
        .into_iter()
        .filter(|r| r.contains_key("data-attempts"))
        .collect();
    // A day of the nopin drill: every lane and outcome the SQL counts, and nothing else.
    let day = "2026-11-17";
    let want: BTreeMap<(String, String), i64> = sql_rows(
        &state.session,
        &format!(
            "SELECT lane, COALESCE(outcome, '') AS outcome, COUNT(*) AS n FROM job_attempt \
             WHERE job_id IN ({}) AND date_trunc('day', started_at) = TIMESTAMP '{day}T00:00:00Z' \
             GROUP BY lane, outcome",
            jobs_of("2026-W47")
        ),
    )
    .await
    .into_iter()
    .map(|r| {
        (
            (
                r["lane"].as_str().unwrap().to_string(),
                r["outcome"].as_str().unwrap().to_string(),
            ),
            r["n"].as_i64().unwrap(),
        )
    })
    .collect();
    assert!(want.len() >= 3, "the day has several lanes and outcomes: {want:?}");
    let got: BTreeMap<(String, String), i64> = bars
        .iter()
        .filter(|b| b["data-day"] == day)
        .map(|b| {
            (
                (b["data-lane"].clone(), b["data-outcome"].clone()),
                b["data-attempts"].parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, want);
    // Every bar of the week adds up to the drill table's free and paid attempts.
    let week = &sql_rows(
        &state.session,
        "SELECT free_attempts, paid_attempts FROM weekly_metrics WHERE iso_week = '2026-W47'",
    )
    .await[0];
    for (lane, col) in [("free", "free_attempts"), ("paid", "paid_attempts")] {
        let sum: i64 = bars
            .iter()
            .filter(|b| b["data-lane"] == lane)
            .map(|b| b["data-attempts"].parse::<i64>().unwrap())
            .sum();
        assert_eq!(sum, week[col].as_i64().unwrap(), "{lane}");
    }
    // Each segment is drawn as tall as its count, on one scale (to the pixel plotters rounds to).
    let sum = |key: &str| bars.iter().map(|b| b[key].parse::<f64>().unwrap()).sum::<f64>();
    let scale = sum("height") / sum("data-attempts");
    for b in &bars {
        let h: f64 = b["height"].parse().unwrap();
        let n: f64 = b["data-attempts"].parse().unwrap();
        assert!((h - n * scale).abs() <= 1.5, "{b:?} at {scale} px an attempt");
    }
    // The day is named under its bars, and the table beside the chart has the same counts.
    assert!(texts(chart).contains(&"Tue 17 Nov".to_string()));
    let table = body_rows(&page.body, "daily-table");
    let row = table.iter().find(|r| r[0] == day).expect("the day's row");
    assert_eq!(row[1], want[&("free".to_string(), "ok".to_string())].to_string());
    assert_eq!(
        row.last().unwrap(),
        &want.values().sum::<i64>().to_string(),
        "the attempts column"
    );
}

#[tokio::test]
async fn the_downloads_give_exactly_the_tables_rows() {
    let (_dir, state) = sample_state().await;
    let page = get(&state, "/weeks/2026-W47").await.body;

    // The daily table: CSV and JSON hold the page's rows, with the right headers.
    let csv = get(&state, "/weeks/2026-W47/tables/daily.csv").await;
    assert_eq!(csv.status, StatusCode::OK);
    assert_eq!(
        csv.headers[header::CONTENT_TYPE],
        "text/csv; charset=utf-8; header=present"
    );
    assert_eq!(
        csv.headers[header::CONTENT_DISPOSITION],
        "attachment; filename=\"laneledger-2026-W47-daily.csv\""
    );
    let rows = parse_csv(&csv.body);
    let table = body_rows(&page, "daily-table");
    assert_eq!(rows[0][0], "day");
    assert_eq!(rows[0].last().unwrap(), "attempts");
    assert_eq!(rows[1..], table[..], "CSV rows are the page's rows");
    let json = get(&state, "/weeks/2026-W47/tables/daily.json").await;
    assert_eq!(json.status, StatusCode::OK);
    assert_eq!(json.headers[header::CONTENT_TYPE], "application/json");
    assert_eq!(
        json.headers[header::CONTENT_DISPOSITION],
        "attachment; filename=\"laneledger-2026-W47-daily.json\""
    );
    let objects: Vec<serde_json::Map<String, serde_json::Value>> = serde_json::from_str(&json.body).unwrap();
    assert_eq!(objects.len(), table.len());
    for (o, r) in objects.iter().zip(&table) {
        let cells: Vec<String> = rows[0]
            .iter()
            .map(|c| match &o[c] {
                serde_json::Value::String(s) => s.clone(),
                v => v.to_string(),
            })
            .collect();
        assert_eq!(&cells, r);
    }
    let days = sql_rows(
        &state.session,
        &format!(
            "SELECT COUNT(DISTINCT date_trunc('day', started_at)) AS n FROM job_attempt WHERE job_id IN ({})",
            jobs_of("2026-W47")
        ),
    )
    .await;
    assert_eq!(objects.len() as i64, days[0]["n"].as_i64().unwrap());

    // An audit section: every row its SQL returns, which the page shows in full here.
    let csv = parse_csv(
        &get(&state, "/weeks/2026-W47/tables/duplicate_reconciliation.csv")
            .await
            .body,
    );
    let n = sql_rows(
        &state.session,
        "SELECT COUNT(*) AS n FROM duplicate_reconciliation WHERE iso_week = '2026-W47'",
    )
    .await[0]["n"]
        .as_i64()
        .unwrap();
    assert!(n > 0);
    assert_eq!(csv.len() as i64 - 1, n);
    assert_eq!(
        csv[0],
        [
            "idem_key",
            "artifact_id",
            "first_artifact_id",
            "job_id",
            "attempt_no",
            "gap_s",
            "class"
        ]
    );
    // The section's rows, after the counts by class that open it.
    let section = &page[page.find("id=\"duplicate_reconciliation\"").expect("section")..];
    let shown = body_rows(section, "<strong>The rows</strong>");
    let ids = |rows: &[Vec<String>]| {
        let mut v: Vec<String> = rows.iter().map(|r| r[1].clone()).collect();
        v.sort();
        v
    };
    assert_eq!(ids(&csv[1..]), ids(&shown), "the same artifacts as the page");

    // A section the query layer computes: the table as the page shows it.
    let bet: Vec<serde_json::Map<String, serde_json::Value>> =
        serde_json::from_str(&get(&state, "/weeks/2026-W47/tables/free_lane_bet.json").await.body).unwrap();
    let shown = body_rows(&page, "id=\"free_lane_bet\"");
    assert_eq!(bet.len(), shown.len());
    for (o, r) in bet.iter().zip(&shown) {
        assert_eq!(o["condition"].as_str().unwrap(), r[0]);
        assert_eq!(o["holds"].as_str().unwrap(), r[2]);
    }

    // The drill table's rows: the week and the previous week with data.
    let drill: Vec<serde_json::Map<String, serde_json::Value>> =
        serde_json::from_str(&get(&state, "/weeks/2026-W47/tables/drill.json").await.body).unwrap();
    let weeks: Vec<&str> = drill.iter().map(|o| o["iso_week"].as_str().unwrap()).collect();
    assert_eq!(weeks, ["2026-W47", "2026-W42"]);
    let want = sql_rows(
        &state.session,
        "SELECT * FROM weekly_metrics WHERE iso_week = '2026-W47'",
    )
    .await;
    assert_eq!(drill[0], want[0]);

    // The weeks index's table.
    let weeks = parse_csv(&get(&state, "/weeks/tables/weeks.csv").await.body);
    assert_eq!(weeks.len() - 1, state.session.weeks().await.unwrap().len());

    // What is not a table.
    assert_eq!(
        get(&state, "/weeks/2026-W47/tables/nope.csv").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&state, "/weeks/2026-W47/tables/daily.xlsx").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&state, "/weeks/2026-W01/tables/daily.csv").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&state, "/weeks/2026-47/tables/daily.csv").await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        get(&state, "/weeks/tables/nope.json").await.status,
        StatusCode::NOT_FOUND
    );
}

/// The alert cards of a week page: (metric, badge word, verdict).
fn alert_cards(html: &str) -> Vec<(String, String, String)> {
    let alerts = &html[html.find("<h2>Alerts</h2>").expect("alerts")..html.find("<h2 id=\"daily\">").expect("daily")];
    alerts
        .split("<section class=\"card ")
        .skip(1)
        .map(|card| {
            let badge = text(&card[card.find("<span class=\"badge").unwrap()..card.find("</span>").unwrap()]);
            let verdict = &card[card.find("<p class=\"verdict").unwrap()..];
            let verdict = text(&verdict[..verdict.find("</p>").unwrap()]);
            let metric = &card[card.find("<code>").unwrap() + 6..card.find("</code>").unwrap()];
            (metric.to_string(), badge, verdict)
        })
        .collect()
}

#[tokio::test]
async fn the_drill_weeks_read_alert_for_the_nopin_week_and_pass_for_the_pin_week() {
    let (_dir, state) = sample_state().await;
    for (week, want_dup) in [("2026-W47", "ALERT"), ("2026-W48", "pass")] {
        let html = get(&state, &format!("/weeks/{week}")).await.body;
        let cards = alert_cards(&html);
        let m = &sql_rows(
            &state.session,
            &format!(
                "SELECT cross_lane_retries_per_job AS c, duplicate_artifacts_per_100_jobs AS d \
                 FROM weekly_metrics WHERE iso_week = '{week}'"
            ),
        )
        .await[0];
        let cross = m["c"].as_f64().unwrap();
        let dup = m["d"].as_f64().unwrap();
        let by_metric = |metric: &str| cards.iter().find(|c| c.0 == metric).cloned().unwrap();
        assert_eq!(
            by_metric("cross_lane_retries_per_job"),
            (
                "cross_lane_retries_per_job".to_string(),
                "pass".to_string(),
                format!("{cross:.3} is at or below 0.20: pass")
            ),
            "{week}"
        );
        let dup_verdict = if want_dup == "ALERT" {
            format!("{dup:.2} is above 1: ALERT")
        } else {
            format!("{dup:.2} is at or below 1: pass")
        };
        assert_eq!(
            by_metric("duplicate_artifacts_per_100_jobs"),
            (
                "duplicate_artifacts_per_100_jobs".to_string(),
                want_dup.to_string(),
                dup_verdict
            ),
            "{week}"
        );
        assert!(html.contains(&format!(
            "<section class=\"card {}\" id=\"alert-duplicate_artifacts_per_100_jobs\">",
            want_dup.to_lowercase()
        )));
        // The red cards come first.
        let first_pass = cards.iter().position(|c| c.1 != "ALERT").unwrap_or(cards.len());
        assert!(cards[first_pass..].iter().all(|c| c.1 != "ALERT"), "{week}: {cards:?}");
    }
    // The front page is the latest week, 2026-W48: the gate's two alerts fire and come first;
    // seed 000's two pass.
    let html = get(&state, "/").await.body;
    let cards = alert_cards(&html);
    let firing: Vec<&str> = cards.iter().filter(|c| c.1 == "ALERT").map(|c| c.0.as_str()).collect();
    assert_eq!(
        firing,
        ["free_admit_miss_rate", "gate_decision_mismatches_per_100_decisions"]
    );
    assert_eq!(cards[0].0, "free_admit_miss_rate");
    assert_eq!(cards[2].0, "cross_lane_retries_per_job");
    assert_eq!(cards[2].1, "pass");
    assert_eq!(cards[3].0, "duplicate_artifacts_per_100_jobs");
    assert_eq!(cards[3].1, "pass");
}

#[tokio::test]
async fn the_weeks_charts_plot_each_weeks_ratio_against_its_threshold() {
    let (_dir, state) = sample_state().await;
    let page = get(&state, "/weeks").await;
    assert_eq!(page.status, StatusCode::OK);
    let rows = sql_rows(
        &state.session,
        "SELECT iso_week, cross_lane_retries_per_job AS c, duplicate_artifacts_per_100_jobs AS d \
         FROM weekly_metrics ORDER BY week_start",
    )
    .await;
    let points: Vec<HashMap<String, String>> = elements(&page.body, "circle");
    for (metric, col, decimals, threshold) in [
        ("cross_lane_retries_per_job", "c", 3, 0.20),
        ("duplicate_artifacts_per_100_jobs", "d", 2, 1.0),
    ] {
        let got: Vec<(String, String, String)> = points
            .iter()
            .filter(|p| p["data-metric"] == metric)
            .map(|p| (p["data-week"].clone(), p["data-value"].clone(), p["data-state"].clone()))
            .collect();
        let want: Vec<(String, String, String)> = rows
            .iter()
            .map(|r| {
                let v = r[col].as_f64().unwrap();
                let state = if v > threshold { "alert" } else { "pass" };
                (
                    r["iso_week"].as_str().unwrap().to_string(),
                    format!("{v:.decimals$}"),
                    state.to_string(),
                )
            })
            .collect();
        assert_eq!(got, want, "{metric}");
        let chart = &page.body[page.body.find(&format!("id=\"trend-{metric}\"")).unwrap()..];
        assert!(
            texts(&chart[..chart.find("</svg>").unwrap()])
                .contains(&format!("alert above {}", if threshold == 1.0 { "1" } else { "0.20" }))
        );
    }
    // Seed 003's miss rate for the week with gate decisions.
    let gate = sql_rows(
        &state.session,
        "SELECT iso_week, free_admit_miss_rate AS r FROM gate_weekly",
    )
    .await;
    let miss: Vec<&HashMap<String, String>> = points
        .iter()
        .filter(|p| p["data-metric"] == "free_admit_miss_rate")
        .collect();
    assert_eq!(miss.len(), gate.len());
    assert_eq!(miss[0]["data-week"], gate[0]["iso_week"].as_str().unwrap());
    assert_eq!(miss[0]["data-value"], format!("{:.3}", gate[0]["r"].as_f64().unwrap()));
}

#[tokio::test]
async fn the_job_timeline_names_each_attempt_with_its_lane_outcome_key_and_refusal() {
    let (_dir, state) = sample_state().await;
    let job = "bee-spin";
    let page = get(&state, &format!("/jobs/{job}")).await;
    assert_eq!(page.status, StatusCode::OK);
    let chart = svg(&page.body, "chart timeline");
    let bars: Vec<HashMap<String, String>> = elements(chart, "rect")
        .into_iter()
        .filter(|r| r.contains_key("data-attempt-no"))
        .collect();
    let want = sql_rows(
        &state.session,
        &format!(
            "SELECT attempt_no, lane, COALESCE(outcome, '') AS outcome, COALESCE(key_id, '') AS key_id, \
             error_kind, pool_id FROM job_attempt WHERE job_id = '{job}' ORDER BY attempt_no"
        ),
    )
    .await;
    assert_eq!(bars.len(), want.len());
    assert!(want.len() >= 8, "bee-spin's turn of attempts");
    let labels = texts(chart);
    for (bar, row) in bars.iter().zip(&want) {
        let no = row["attempt_no"].as_i64().unwrap().to_string();
        assert_eq!(bar["data-attempt-no"], no);
        assert_eq!(bar["data-lane"], row["lane"].as_str().unwrap());
        assert_eq!(bar["data-outcome"], row["outcome"].as_str().unwrap());
        assert_eq!(bar["data-key"], row["key_id"].as_str().unwrap());
        let kind = row["error_kind"].as_str().unwrap_or("—");
        assert_eq!(bar["data-error-kind"], kind);
        // Readable on the chart: the attempt's number, its key with its pool, its refusal kind.
        assert!(labels.contains(&format!("#{no}")), "#{no} in {labels:?}");
        if let (Some(k), Some(p)) = (row["key_id"].as_str(), row["pool_id"].as_str()) {
            assert!(labels.contains(&format!("{k} ({p})")), "{k} ({p}) in {labels:?}");
        }
        assert!(
            labels.iter().any(|l| l.starts_with(&format!("{kind} "))),
            "{kind} in {labels:?}"
        );
    }
}

#[tokio::test]
async fn a_jobs_attempts_and_the_duplicates_download_as_their_pages_list_them() {
    let (_dir, state) = sample_state().await;
    let job = "bee-9967";
    let page = get(&state, &format!("/jobs/{job}")).await.body;
    let shown = body_rows(&page, "<h2>Attempts</h2>");
    let detail = body_rows(&page, "<h2>Provider answer and key</h2>");
    let csv = get(&state, &format!("/jobs/{job}/tables/attempts.csv")).await;
    assert_eq!(csv.status, StatusCode::OK);
    assert_eq!(
        csv.headers[header::CONTENT_DISPOSITION],
        "attachment; filename=\"laneledger-job-bee-9967-attempts.csv\""
    );
    let rows = parse_csv(&csv.body);
    let col = |name: &str| rows[0].iter().position(|c| c == name).expect(name);
    assert_eq!(rows.len() - 1, shown.len());
    for ((r, s), d) in rows[1..].iter().zip(&shown).zip(&detail) {
        assert_eq!(r[col("attempt_no")], s[0]);
        assert_eq!(r[col("lane")], s[1]);
        assert_eq!(r[col("outcome")], s[5]);
        assert_eq!(r[col("http_status")], d[1]);
        assert_eq!(r[col("provider_code")], d[2]);
        assert_eq!(r[col("error_kind")], d[3]);
        assert_eq!(r[col("key_id")], d[4]);
    }
    let json = get(&state, &format!("/jobs/{job}/tables/attempts.json")).await;
    let objects: Vec<serde_json::Map<String, serde_json::Value>> = serde_json::from_str(&json.body).unwrap();
    assert_eq!(objects.len(), shown.len());
    assert_eq!(
        get(&state, "/jobs/no-such-job/tables/attempts.csv").await.status,
        StatusCode::NOT_FOUND
    );

    // The duplicates page: a row an artifact of a duplicated key.
    let page = get(&state, "/duplicates").await.body;
    let listed = page.matches("<td><a href=\"/jobs/").count();
    let csv = parse_csv(&get(&state, "/duplicates/tables/duplicates.csv").await.body);
    assert!(listed > 0);
    assert_eq!(csv.len() - 1, listed);
    let n = sql_rows(&state.session, "SELECT COUNT(*) AS n FROM duplicate_artifact").await[0]["n"]
        .as_i64()
        .unwrap();
    assert_eq!(listed as i64, n);
}
