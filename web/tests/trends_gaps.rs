//! Honest comparisons on the site: trend charts space weeks by time and break their line over
//! weeks without data; a week in progress (at an injected "now") is marked partial; an empty
//! week before is shown as empty; a ratio from too few jobs is not a red card.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use laneledger_query::{Session, Thresholds};
use laneledger_store::{DEFAULT_BATCH, InputFormat, Ledger, ingest_reader, parse_timestamp};
use laneledger_web::{AppState, app};
use tempfile::TempDir;
use tower::ServiceExt;

/// `n` jobs of one ok free attempt at `at`; the first has a second artifact under its key (a
/// duplicate) when `duplicate`.
fn jobs(prefix: &str, n: usize, at: &str, duplicate: bool) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..n {
        let artifacts = if duplicate && i == 0 { 2 } else { 1 };
        for a in 0..artifacts {
            out.push(format!(
                r#"{{"job_id":"{prefix}-{i}","idem_key":"k-{prefix}-{i}","attempt_no":{no},"lane":"free","started_at":"{at}","ended_at":"{at}","outcome":"ok","tokens_in":10,"tokens_out":20,"artifact_id":"a-{prefix}-{i}-{a}"}}"#,
                no = a + 1
            ));
        }
    }
    out
}

/// A site over a fresh ledger holding `lines`, with "now" at `now` when given.
async fn site(lines: &[String], now: Option<&str>) -> (TempDir, AppState) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("t.redb")).unwrap();
    let text = lines.join("\n") + "\n";
    let format = InputFormat::from_path("t.ndjson");
    ingest_reader(
        &ledger,
        "t.ndjson",
        std::io::Cursor::new(text),
        format,
        DEFAULT_BATCH,
        |_| {},
    )
    .unwrap();
    let mut session = Session::new(ledger).await.unwrap();
    if let Some(now) = now {
        session = session.with_now(parse_timestamp(now).unwrap());
    }
    (dir, AppState::new(session, Thresholds::default()))
}

async fn get(state: &AppState, uri: &str) -> String {
    let response = app(state.clone())
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{uri}");
    String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

/// The `<svg>` of the trend chart of `metric` on the weeks page.
fn chart<'a>(html: &'a str, metric: &str) -> &'a str {
    let from = &html[html.find(&format!("id=\"trend-{metric}\"")).unwrap()..];
    &from[..from.find("</svg>").unwrap()]
}

/// Each `<tag …>` of `svg` that carries `data-{attr}`: its attributes, by name.
fn elements(svg: &str, tag: &str, attr: &str) -> Vec<std::collections::HashMap<String, String>> {
    svg.split(&format!("<{tag} "))
        .skip(1)
        .map(|e| &e[..e.find('>').unwrap()])
        .filter(|e| e.contains(&format!(" data-{attr}=")))
        .map(|e| {
            e.split('"')
                .collect::<Vec<_>>()
                .chunks(2)
                .filter(|c| c.len() == 2)
                .map(|c| (c[0].trim().trim_end_matches('=').to_string(), c[1].to_string()))
                .collect()
        })
        .collect()
}

/// Each week's point: (week, cx).
fn points(svg: &str) -> Vec<(String, f64)> {
    elements(svg, "circle", "week")
        .into_iter()
        .map(|c| (c["data-week"].clone(), c["cx"].parse().unwrap()))
        .collect()
}

/// Weeks 2026-W40, W41, W44 and W45 (none in W42 and W43).
fn gappy() -> Vec<String> {
    let mut lines = jobs("w40", 2, "2026-09-29T10:00:00Z", false);
    lines.extend(jobs("w41", 2, "2026-10-06T10:00:00Z", false));
    lines.extend(jobs("w44", 2, "2026-10-27T10:00:00Z", false));
    lines.extend(jobs("w45", 2, "2026-11-03T10:00:00Z", false));
    lines
}

#[tokio::test]
async fn a_trend_chart_spaces_weeks_by_time_and_breaks_its_line_over_a_gap() {
    let (_d, state) = site(&gappy(), None).await;
    let html = get(&state, "/weeks").await;
    let svg = chart(&html, "cross_lane_retries_per_job");
    let segments = elements(svg, "polyline", "segment-from");
    let runs: Vec<(&str, &str, &str)> = segments
        .iter()
        .map(|s| {
            (
                s["data-segment-from"].as_str(),
                s["data-segment-to"].as_str(),
                s["data-points"].as_str(),
            )
        })
        .collect();
    assert_eq!(runs, [("2026-W40", "2026-W41", "2"), ("2026-W44", "2026-W45", "2")]);
    let gaps = elements(svg, "rect", "gap-from");
    assert_eq!(gaps.len(), 1);
    assert_eq!(
        (
            gaps[0]["data-gap-from"].as_str(),
            gaps[0]["data-gap-to"].as_str(),
            gaps[0]["data-gap-weeks"].as_str()
        ),
        ("2026-W42", "2026-W43", "2")
    );
    assert!(svg.contains("<title>no data in the 2 weeks 2026-W42 to 2026-W43</title>"));
    let p = points(svg);
    let weeks: Vec<&str> = p.iter().map(|(w, _)| w.as_str()).collect();
    assert_eq!(weeks, ["2026-W40", "2026-W41", "2026-W44", "2026-W45"]);
    // One week apart, then three, then one: x moves in proportion (pixels are whole numbers).
    let step = p[1].1 - p[0].1;
    assert!(step > 40.0, "{p:?}");
    assert!((p[2].1 - p[1].1 - 3.0 * step).abs() <= 1.0, "{p:?}");
    assert!((p[3].1 - p[2].1 - step).abs() <= 1.0, "{p:?}");
    // The gap's shade spans W42 and W43: from one slot past W41's point to one slot before W44's.
    let (x, width): (f64, f64) = (gaps[0]["x"].parse().unwrap(), gaps[0]["width"].parse().unwrap());
    assert!((x - (p[1].1 + step / 2.0)).abs() <= 1.0, "{x} {p:?}");
    assert!((width - 2.0 * step).abs() <= 1.0, "{width} {step}");
    assert!(html.contains("weeks without data are shaded"));
}

#[tokio::test]
async fn consecutive_weeks_make_one_line_and_no_gap() {
    let mut lines = jobs("w40", 2, "2026-09-29T10:00:00Z", false);
    lines.extend(jobs("w41", 2, "2026-10-06T10:00:00Z", false));
    lines.extend(jobs("w42", 2, "2026-10-13T10:00:00Z", false));
    let (_d, state) = site(&lines, None).await;
    let html = get(&state, "/weeks").await;
    let svg = chart(&html, "duplicate_artifacts_per_100_jobs");
    let segments = elements(svg, "polyline", "segment-from");
    assert_eq!(segments.len(), 1);
    assert_eq!(
        (
            segments[0]["data-segment-from"].as_str(),
            segments[0]["data-segment-to"].as_str()
        ),
        ("2026-W40", "2026-W42")
    );
    assert!(elements(svg, "rect", "gap-from").is_empty());
    let p = points(svg);
    assert_eq!(p.len(), 3);
    assert!(((p[2].1 - p[1].1) - (p[1].1 - p[0].1)).abs() <= 1.0, "{p:?}");
}

#[tokio::test]
async fn a_week_in_progress_is_marked_partial_on_the_index_the_week_page_and_metrics() {
    // "Now" is Wednesday of 2026-W45.
    let (_d, state) = site(&gappy(), Some("2026-11-04T12:00:00Z")).await;
    let index = get(&state, "/weeks").await;
    let row = |week: &str| {
        let from = &index[index.find(&format!(">{week}</a>")).unwrap()..];
        from[..from.find("</th>").unwrap()].to_string()
    };
    assert!(row("2026-W45").contains(r#"<span class="badge partial">partial</span>"#));
    assert!(!row("2026-W44").contains("partial"));
    let page = get(&state, "/weeks/2026-W45").await;
    assert!(page.contains(r#"<p class="verdict-line partial" id="partial-week"><strong>Partial week</strong>: 2026-W45 is still in progress (it ends Monday 2026-11-09, 00:00 UTC)."#));
    let done = get(&state, "/weeks/2026-W44").await;
    assert!(!done.contains("id=\"partial-week\""));
    let metrics = get(&state, "/metrics?week=2026-W45").await;
    assert!(
        metrics.contains("laneledger_week_partial{week=\"2026-W45\"} 1\n"),
        "{metrics}"
    );
    assert!(metrics.contains("laneledger_week_jobs{week=\"2026-W45\"} 2\n"));
    assert!(metrics.contains("laneledger_min_jobs 20\n"));
    let metrics = get(&state, "/metrics?week=2026-W44").await;
    assert!(metrics.contains("laneledger_week_partial{week=\"2026-W44\"} 0\n"));

    // A week later nothing is partial.
    let (_d, state) = site(&gappy(), Some("2026-11-09T00:00:00Z")).await;
    assert!(!get(&state, "/weeks").await.contains("badge partial"));
}

#[tokio::test]
async fn an_empty_week_before_is_named_and_nothing_is_compared_with_it() {
    let (_d, state) = site(&gappy(), None).await;
    let page = get(&state, "/weeks/2026-W44").await;
    assert!(page.contains(r#"<strong id="previous-empty">no attempts in 2026-W43</strong>"#));
    assert!(page.contains(r#"<th class="num nowrap">2026-W43 (no attempts)</th>"#));
    let jobs_row = &page[page.find(">jobs</th>").unwrap()..];
    let cells: Vec<&str> = jobs_row[..jobs_row.find("</tr>").unwrap()]
        .split("<td class=\"num\">")
        .skip(1)
        .map(|c| &c[..c.find("</td>").unwrap()])
        .collect();
    assert_eq!(cells, ["2", "—", "—"]);
    // W45's week before, W44, has data: compared.
    let page = get(&state, "/weeks/2026-W45").await;
    assert!(!page.contains("previous-empty"));
    assert!(page.contains(r#"<th class="num nowrap">2026-W44</th>"#));
}

#[tokio::test]
async fn a_ratio_from_too_few_jobs_is_not_a_red_card() {
    // Three jobs, one duplicate: 33.33 per 100 jobs, above 1, from fewer than 20 jobs.
    let (_d, state) = site(&jobs("w47", 3, "2026-11-17T10:00:00Z", true), None).await;
    let page = get(&state, "/weeks/2026-W47").await;
    let card = &page[page.find(r#"id="alert-duplicate_artifacts_per_100_jobs""#).unwrap() - 40..];
    let card = &card[..card.find("</section>").unwrap()];
    assert!(card.contains(r#"<section class="card fewjobs""#), "{card}");
    assert!(card.contains(r#"<span class="badge fewjobs">too few jobs</span>"#));
    assert!(card.contains("33.33 is above 1, from too few jobs to raise an alert"));
    assert!(page.contains("<strong>No alert this week</strong>: 1 of the "));
    assert!(page.contains(
        " figures below is above its threshold, but from fewer jobs than a week needs to raise an alert (<code>alerts.min_jobs</code>)"
    ));
    assert!(!page.contains(r#"<section class="card alert""#));
    let weeks = get(&state, "/weeks").await;
    assert!(weeks.contains(r#"data-week="2026-W47" data-metric="duplicate_artifacts_per_100_jobs" data-value="33.33" data-state="too_few_jobs"><title>2026-W47: duplicate artifacts per 100 jobs 33.33 (too few jobs; alert above 1)</title>"#));
    let metrics = get(&state, "/metrics?week=2026-W47").await;
    assert!(metrics.contains("laneledger_alert{metric=\"duplicate_artifacts_per_100_jobs\",week=\"2026-W47\"} 0\n"));

    // The same week with 20 jobs is red.
    let (_d, state) = site(&jobs("w47", 20, "2026-11-17T10:00:00Z", true), None).await;
    let page = get(&state, "/weeks/2026-W47").await;
    assert!(page.contains(r#"<section class="card alert" id="alert-duplicate_artifacts_per_100_jobs">"#));
    assert!(page.contains("5.00 is above 1: ALERT"));
    assert!(!page.contains("fewer jobs than a week needs"));
    let weeks = get(&state, "/weeks").await;
    assert!(weeks.contains(
        r#"data-week="2026-W47" data-metric="duplicate_artifacts_per_100_jobs" data-value="5.00" data-state="alert""#
    ));
}
