//! An attempt left open past the retention window plus the grace period is abandoned: its job is
//! swept, and the sweep's row counts it; an open attempt within the grace period still keeps its job.

use laneledger_store::storage::retention::{ABANDON_GRACE_DAYS, DAY_MICROS, RetentionRule};
use laneledger_store::{DEFAULT_BATCH, InputFormat, Ledger, ingest_reader, parse_timestamp};

const NOW: &str = "2026-11-01T00:00:00Z";

fn line(job: &str, started: &str, ended: Option<&str>) -> String {
    let end = ended
        .map(|e| format!(r#","ended_at":"{e}","outcome":"ok""#))
        .unwrap_or_default();
    format!(r#"{{"job_id":"{job}","idem_key":"k-{job}","attempt_no":1,"lane":"free","started_at":"{started}"{end}}}"#)
}

#[test]
fn an_attempt_open_past_the_grace_period_is_swept_as_abandoned() {
    let dir = tempfile::tempdir().unwrap();
    let l = Ledger::open(dir.path().join("l.redb")).unwrap();
    // Cutoff 30 days before NOW: 2026-10-02; abandon cutoff 7 days before that: 2026-09-25.
    let text = [
        line("abandoned", "2026-09-20T10:00:00Z", None),
        line("waiting", "2026-09-28T10:00:00Z", None),
        line("finished", "2026-09-20T10:00:00Z", Some("2026-09-20T10:00:05Z")),
        line("recent", "2026-10-20T10:00:00Z", Some("2026-10-20T10:00:05Z")),
    ]
    .join("\n");
    ingest_reader(
        &l,
        "a.ndjson",
        text.as_bytes(),
        InputFormat::Ndjson,
        DEFAULT_BATCH,
        |_| {},
    )
    .unwrap();

    let now = parse_timestamp(NOW).unwrap();
    let rule = RetentionRule {
        days: 30,
        reconcile_window_s: 900,
    };
    assert_eq!(ABANDON_GRACE_DAYS, 7);
    assert_eq!(rule.abandon_cutoff(now), now - 37 * DAY_MICROS);
    let plan = l.plan_sweep(now, rule).unwrap();
    assert_eq!(plan.jobs, ["abandoned", "finished"]);
    assert_eq!((plan.abandoned, plan.kept_open, plan.kept_reconcile), (1, 1, 0));

    let record = l.commit_sweep(&plan, None, &[]).unwrap().unwrap();
    assert_eq!(
        (record.jobs_removed, record.jobs_abandoned, record.rows_removed),
        (2, 1, 2)
    );
    assert_eq!(l.sweeps().unwrap(), [record]);
    assert!(l.attempt("abandoned", 1).unwrap().is_none());
    assert!(l.attempt("waiting", 1).unwrap().is_some());
    l.verify().unwrap();
}
