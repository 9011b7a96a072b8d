//! Honest comparisons: the previous week is the calendar week before (an empty one is shown as
//! empty, not skipped, also across a year boundary), a week in progress is partial at an injected
//! "now", and a ratio from fewer jobs than `alerts.min_jobs` is shown but does not alert.

use laneledger_query::review::metrics::{previous_iso_week, week_end_micros, week_is_partial};
use laneledger_query::{AlertState, Session, Thresholds, review_document};
use laneledger_store::parse_timestamp;

mod common;

/// One job: a single ok free attempt at `at`, with `artifacts` distinct artifacts under one key
/// (more than one is a duplicate artifact).
fn job(id: &str, at: &str, artifacts: usize) -> String {
    (0..artifacts.max(1))
        .map(|n| {
            format!(
                r#"{{"job_id":"{id}","idem_key":"k-{id}","attempt_no":{no},"lane":"free","started_at":"{at}","ended_at":"{at}","outcome":"ok","tokens_in":10,"tokens_out":20,"artifact_id":"a-{id}-{n}"}}"#,
                no = n + 1
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A session over a fresh ledger holding `lines` (NDJSON attempts).
async fn session(lines: &[String]) -> (tempfile::TempDir, Session) {
    let (dir, ledger) = common::ledger_of_lines(lines);
    (dir, Session::new(ledger).await.unwrap())
}

/// `n` jobs named `{prefix}-{i}` at `at`.
fn jobs(prefix: &str, n: usize, at: &str) -> Vec<String> {
    (0..n).map(|i| job(&format!("{prefix}-{i}"), at, 1)).collect()
}

#[test]
fn the_week_before_is_the_calendar_week_before() {
    assert_eq!(previous_iso_week("2026-W47").unwrap(), "2026-W46");
    // 2026 has 53 ISO weeks, 2025 has 52, 2020 has 53.
    assert_eq!(previous_iso_week("2027-W01").unwrap(), "2026-W53");
    assert_eq!(previous_iso_week("2026-W01").unwrap(), "2025-W52");
    assert_eq!(previous_iso_week("2021-W01").unwrap(), "2020-W53");
    assert!(previous_iso_week("2026-W54").is_err());
    assert_eq!(
        week_end_micros("2026-W47").unwrap(),
        parse_timestamp("2026-11-23T00:00:00Z").unwrap()
    );
    assert_eq!(
        week_end_micros("2026-W53").unwrap(),
        parse_timestamp("2027-01-04T00:00:00Z").unwrap()
    );
}

#[tokio::test]
async fn across_a_year_boundary_the_previous_week_is_the_last_week_of_the_year_before() {
    // Two jobs in 2026-W53 (Monday 2026-12-28), three in 2027-W01 (Monday 2027-01-04).
    let mut lines = jobs("old", 2, "2026-12-29T10:00:00Z");
    lines.extend(jobs("new", 3, "2027-01-05T10:00:00Z"));
    let (_d, s) = session(&lines).await;
    let r = s.review(Some("2027-W01"), &Thresholds::default()).await.unwrap();
    assert_eq!(r.week.jobs, 3);
    assert_eq!(r.previous_week, "2026-W53");
    let p = r.previous.as_ref().expect("2026-W53 has data");
    assert_eq!((p.iso_week.as_str(), p.jobs), ("2026-W53", 2));
    assert!(!r.to_text().contains("No attempts in"), "{}", r.to_text());
}

#[tokio::test]
async fn an_empty_week_before_is_shown_as_empty_not_skipped() {
    // Jobs in 2026-W45 and 2026-W47; none in 2026-W46.
    let mut lines = jobs("w45", 4, "2026-11-03T10:00:00Z");
    lines.extend(jobs("w47", 5, "2026-11-17T10:00:00Z"));
    let (_d, s) = session(&lines).await;
    let r = s.review(Some("2026-W47"), &Thresholds::default()).await.unwrap();
    assert_eq!(r.week.jobs, 5);
    assert_eq!(r.previous_week, "2026-W46");
    assert_eq!(r.previous, None, "2026-W45 is not the week before 2026-W47");
    let text = r.to_text();
    assert!(
        text.contains("No attempts in 2026-W46, the week before: no change is computed."),
        "{text}"
    );
    assert!(text.contains(&format!("{:<34} {:>12} {:>12}\n", "metric", "2026-W47", "2026-W46")));
    assert!(
        text.contains(&format!("{:<34} {:>12} {:>12}\n", "jobs", "5", "—")),
        "{text}"
    );
    let doc = review_document(&r, &[]);
    assert_eq!(doc["previous_week"], "2026-W46");
    assert!(doc["previous"].is_null());

    // With a job in 2026-W46 the same week is compared with it.
    lines.extend(jobs("w46", 2, "2026-11-10T10:00:00Z"));
    let (_d2, s) = session(&lines).await;
    let r = s.review(Some("2026-W47"), &Thresholds::default()).await.unwrap();
    assert_eq!(
        r.previous.as_ref().map(|p| (p.iso_week.as_str(), p.jobs)),
        Some(("2026-W46", 2))
    );
    assert_eq!(review_document(&r, &[])["previous"]["jobs"], 2);
    assert!(!r.to_text().contains("No attempts in"));
}

#[tokio::test]
async fn a_week_is_partial_until_the_monday_after_it_at_an_injected_now() {
    let (_d, s) = session(&jobs("w47", 3, "2026-11-17T10:00:00Z")).await;
    let at = |t: &str| s.clone().with_now(parse_timestamp(t).unwrap());
    let t = Thresholds::default();
    let mid = at("2026-11-18T12:00:00Z").review(Some("2026-W47"), &t).await.unwrap();
    assert!(mid.partial);
    assert!(mid.to_text().contains("PARTIAL: the week is still in progress"));
    assert_eq!(review_document(&mid, &[])["partial"], true);
    let last_second = at("2026-11-22T23:59:59Z").review(None, &t).await.unwrap();
    assert!(last_second.partial);
    let over = at("2026-11-23T00:00:00Z").review(None, &t).await.unwrap();
    assert!(!over.partial);
    assert!(!over.to_text().contains("PARTIAL"));
    assert_eq!(review_document(&over, &[])["partial"], false);
    let now = parse_timestamp("2026-11-23T00:00:00Z").unwrap();
    assert!(week_is_partial("2026-W48", now));
    assert!(!week_is_partial("2026-W47", now));
}

#[tokio::test]
async fn a_ratio_from_fewer_jobs_than_min_jobs_is_shown_but_does_not_alert() {
    // Three jobs, one of them with a duplicate artifact: 33.33 duplicates per 100 jobs.
    let mut lines = vec![job("dup", "2026-11-17T10:00:00Z", 2)];
    lines.extend(jobs("ok", 2, "2026-11-17T11:00:00Z"));
    let (_d, s) = session(&lines).await;
    let state = |t: Thresholds| {
        let s = s.clone();
        async move {
            let r = s.review(Some("2026-W47"), &t).await.unwrap();
            let a = r
                .alerts
                .iter()
                .find(|a| a.metric == "duplicate_artifacts_per_100_jobs")
                .unwrap()
                .clone();
            let firing: Vec<&str> = r.firing().map(|a| a.metric).collect();
            (a, firing.contains(&"duplicate_artifacts_per_100_jobs"), r)
        }
    };
    let default = Thresholds::default();
    assert_eq!(default.min_jobs, 20);
    let (a, fires, r) = state(default).await;
    assert_eq!(a.value, Some(100.0 / 3.0));
    assert_eq!(a.state, AlertState::TooFewJobs);
    assert!(!fires);
    assert_eq!(
        a.detail,
        "1 duplicate artifacts in 3 jobs; only 3 jobs, fewer than the 20 a week needs to raise an alert (alerts.min_jobs)"
    );
    let text = r.to_text();
    assert!(text.contains("TOO FEW JOBS"), "{text}");
    assert!(
        text.contains(
            "No alert this week: 1 figure is above its threshold from too few jobs to alert (alerts.min_jobs)."
        ),
        "{text}"
    );
    let doc = review_document(&r, &[]);
    assert!(
        doc["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["metric"] == "duplicate_artifacts_per_100_jobs" && a["state"] == "too_few_jobs")
    );
    assert!(
        !doc["alerting"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m == "duplicate_artifacts_per_100_jobs")
    );

    // With min_jobs at 3 the same week alerts.
    let (a, fires, r) = state(Thresholds { min_jobs: 3, ..default }).await;
    assert_eq!((a.value, a.state, fires), (Some(100.0 / 3.0), AlertState::Alert, true));
    assert!(!r.to_text().contains("too few jobs"));
    assert_eq!(a.detail, "1 duplicate artifacts in 3 jobs");
    // And a passing ratio in a small week stays a pass.
    let (a, fires, _) = state(Thresholds {
        duplicate_artifacts_per_100_jobs: 50.0,
        ..default
    })
    .await;
    assert_eq!((a.state, fires), (AlertState::Pass, false));
}
