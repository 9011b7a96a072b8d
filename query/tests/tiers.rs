//! The lane policy replay over lane.yaml's own tiers (issue 31), the same replay with the
//! original two lanes (exactly the findings it gave before tiers), and the audit turned off.
//!
//! The tiers records are checked against are the process's, so the tests here take turns.

use std::sync::{Mutex, MutexGuard};

use datafusion::assert_batches_eq;
use laneledger_query::Session;
use laneledger_query::derived::audits::lane_policy::{self, Violation};
use laneledger_query::derived::audits::{AuditAttempt, AuditSettings};
use laneledger_query::review::metrics::AlertState;
use laneledger_store::{Lane, LaneConfig, Outcome};

mod common;

static TURN: Mutex<()> = Mutex::new(());

/// This test's turn, with `config`'s tiers in force (the default ones restored after).
struct Turn(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Turn {
    fn with(config: &LaneConfig) -> Turn {
        let guard = TURN.lock().unwrap_or_else(|e| e.into_inner());
        config.lanes.activate();
        Turn(guard)
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        LaneConfig::default().lanes.activate();
    }
}

const THREE_TIERS: &str = "\
lanes:
  tiers:
    - { name: Gemini-Free, max_attempts: 2, pin_on: [ambiguous, permanent] }
    - { name: gpt-4o, max_attempts: 1, pin_on: [permanent] }
    - { name: claude }
";

/// An attempt line in 2026-W48: job, attempt_no, lane, outcome.
fn at(job: &str, no: u32, lane: &str, outcome: &str) -> String {
    let t = |s: i64| laneledger_store::format_timestamp(1_795_392_000_000_000 + s * 1_000_000);
    format!(
        r#"{{"job_id":"{job}","idem_key":"k-{job}","attempt_no":{no},"lane":"{lane}","started_at":"{}","ended_at":"{}","outcome":"{outcome}"}}"#,
        t(i64::from(no) * 10),
        t(i64::from(no) * 10 + 5)
    )
}

async fn session(config: LaneConfig, lines: &[String]) -> (tempfile::TempDir, Session) {
    let (dir, ledger) = common::ledger_of_lines(lines);
    (dir, Session::with_config(ledger, config).await.unwrap())
}

#[tokio::test]
async fn three_tiers_replay_in_their_order_with_exact_findings() {
    let config = LaneConfig::from_yaml_str(THREE_TIERS, "lane.yaml").unwrap();
    let _turn = Turn::with(&config);
    let (_d, s) = session(
        config,
        &[
            // Down every tier as the policy says: budget spent, then a pinning outcome.
            at("clean", 1, "Gemini-Free", "retryable"),
            at("clean", 2, "Gemini-Free", "retryable"),
            at("clean", 3, "gpt-4o", "permanent"),
            at("clean", 4, "claude", "ok"),
            // Gemini-Free again after an outcome that pins it.
            at("amb", 1, "Gemini-Free", "ambiguous"),
            at("amb", 2, "Gemini-Free", "ok"),
            // The last tier while the first still had budget.
            at("skip", 1, "Gemini-Free", "retryable"),
            at("skip", 2, "claude", "ok"),
            // gpt-4o past its budget of one.
            at("gptbud", 1, "Gemini-Free", "retryable"),
            at("gptbud", 2, "Gemini-Free", "retryable"),
            at("gptbud", 3, "gpt-4o", "retryable"),
            at("gptbud", 4, "gpt-4o", "ok"),
            // Back to the first tier once moved on.
            at("back", 1, "Gemini-Free", "permanent"),
            at("back", 2, "gpt-4o", "retryable"),
            at("back", 3, "Gemini-Free", "ok"),
        ],
    )
    .await;
    let got = s
        .query(
            "SELECT job_id, attempt_no, lane, expected_lane, kind, reason, free_attempts_before \
             FROM lane_policy_violation ORDER BY job_id, attempt_no",
        )
        .await
        .unwrap();
    assert_batches_eq!(
        [
            "+--------+------------+-------------+---------------+--------------------------+------------------------------------------------------------------------------------------------------+----------------------+",
            "| job_id | attempt_no | lane        | expected_lane | kind                     | reason                                                                                               | free_attempts_before |",
            "+--------+------------+-------------+---------------+--------------------------+------------------------------------------------------------------------------------------------------+----------------------+",
            "| amb    | 2          | Gemini-Free | gpt-4o        | Gemini-Free_where_gpt-4o | a Gemini-Free attempt after an ambiguous outcome: pin to gpt-4o                                      | 1                    |",
            "| back   | 3          | Gemini-Free | claude        | Gemini-Free_where_claude | once pinned, a job stays on claude                                                                   | 1                    |",
            "| gptbud | 4          | gpt-4o      | claude        | gpt-4o_where_claude      | past the gpt-4o budget: 1 of 1 gpt-4o attempts used                                                  | 2                    |",
            "| skip   | 2          | claude      | Gemini-Free   | claude_where_Gemini-Free | claude before the Gemini-Free budget was spent (1 of 2 Gemini-Free attempts), with nothing that pins | 1                    |",
            "+--------+------------+-------------+---------------+--------------------------+------------------------------------------------------------------------------------------------------+----------------------+",
        ],
        &got.batches
    );
    let lanes = s
        .query("SELECT lane, COUNT(*) AS n FROM job_attempt GROUP BY lane ORDER BY lane")
        .await
        .unwrap();
    assert_batches_eq!(
        [
            "+-------------+---+",
            "| lane        | n |",
            "+-------------+---+",
            "| Gemini-Free | 9 |",
            "| claude      | 2 |",
            "| gpt-4o      | 4 |",
            "+-------------+---+",
        ],
        &lanes.batches
    );
}

/// The replay as it was before tiers, verbatim but for its inputs: seed 000 `next_lane` with
/// lane.yaml's free budget and pin_on.
fn replay_before_tiers(attempts: &[AuditAttempt<'_>], max_free: u32, pin_on: &[&str]) -> Vec<Violation> {
    let next_lane = |free: u32, pinned: bool, last: &str| {
        if pinned || pin_on.contains(&last) || free >= max_free {
            ("paid", true)
        } else {
            ("free", false)
        }
    };
    let mut out = Vec::new();
    let (mut free, mut pinned, mut last) = (0u32, false, None::<&'static str>);
    for a in attempts {
        let (expected, pin) = next_lane(free, pinned, last.unwrap_or(""));
        let lane = a.lane.as_str();
        if lane != expected {
            let (kind, reason) = if a.lane == Lane::Free {
                let why = if pinned {
                    "once pinned, a job stays on paid".to_string()
                } else if let Some(o) = last.filter(|o| pin_on.contains(o)) {
                    format!("a free attempt after an {o} outcome: pin to paid")
                } else {
                    format!("past the free budget: {free} of {max_free} free attempts used")
                };
                ("free_where_paid", why)
            } else {
                (
                    "paid_where_free",
                    format!(
                        "paid before the free budget was spent ({free} of {max_free} free attempts), with nothing that pins"
                    ),
                )
            };
            out.push(Violation {
                row: a.row,
                job_id: a.job_id.to_string(),
                attempt_no: a.attempt_no,
                lane,
                expected_lane: expected,
                kind: kind.to_string(),
                reason,
                previous_outcome: last,
                free_attempts_before: free,
            });
        }
        pinned = pin;
        if a.lane == Lane::Free {
            free += 1;
        }
        last = a.outcome.map(|o| o.as_str());
    }
    out
}

#[test]
fn the_two_original_lanes_give_exactly_the_findings_of_before() {
    let outcomes = [
        None,
        Some(Outcome::Ok),
        Some(Outcome::Retryable),
        Some(Outcome::Ambiguous),
        Some(Outcome::Permanent),
    ];
    let steps: Vec<(Lane, Option<Outcome>)> = [Lane::Free, Lane::Paid]
        .into_iter()
        .flat_map(|l| outcomes.iter().map(move |o| (l, *o)))
        .collect();
    let settings = [(2, vec!["ambiguous", "permanent"]), (1, vec![]), (3, vec!["retryable"])];
    let (mut jobs, mut flagged) = (0, 0);
    for (max_free, pin_on) in &settings {
        let s = AuditSettings {
            max_free_attempts: *max_free,
            pin_on: pin_on.iter().map(|p| p.to_string()).collect(),
            ..AuditSettings::default()
        };
        // Every job of 1 to 4 attempts over the two lanes and five outcomes.
        let mut seqs: Vec<Vec<usize>> = (0..steps.len()).map(|i| vec![i]).collect();
        let mut all = seqs.clone();
        for _ in 1..4 {
            seqs = seqs
                .iter()
                .flat_map(|s| (0..steps.len()).map(move |i| [s.as_slice(), &[i]].concat()))
                .collect();
            all.extend(seqs.iter().cloned());
        }
        for seq in &all {
            let attempts: Vec<AuditAttempt<'_>> = seq
                .iter()
                .enumerate()
                .map(|(n, &i)| AuditAttempt {
                    row: n,
                    job_id: "j",
                    idem_key: "k",
                    attempt_no: n as u32 + 1,
                    lane: steps[i].0,
                    started_at: n as i64,
                    ended_at: None,
                    outcome: steps[i].1,
                    artifact_id: None,
                    http_status: None,
                    provider_code: None,
                    key_id: None,
                    pool_id: None,
                    model: None,
                })
                .collect();
            let now = lane_policy::replay(&attempts, &s);
            assert_eq!(now, replay_before_tiers(&attempts, *max_free, pin_on), "{seq:?}");
            jobs += 1;
            flagged += usize::from(!now.is_empty());
        }
    }
    // 10 + 100 + 1,000 + 10,000 jobs under each of the three settings, many of them flagged.
    assert_eq!(jobs, 3 * 11_110);
    assert!(flagged > jobs / 2, "{flagged} of {jobs}");
    // The same two lanes written as tiers replay the same.
    let as_tiers = LaneConfig::from_yaml_str(
        "lanes:\n  tiers:\n    - {name: free, max_attempts: 2, pin_on: [ambiguous, permanent]}\n    - {name: paid}\n",
        "lane.yaml",
    )
    .unwrap();
    let a = |no: u32, lane: Lane, o: Outcome| AuditAttempt {
        row: no as usize,
        job_id: "j",
        idem_key: "k",
        attempt_no: no,
        lane,
        started_at: 0,
        ended_at: None,
        outcome: Some(o),
        artifact_id: None,
        http_status: None,
        provider_code: None,
        key_id: None,
        pool_id: None,
        model: None,
    };
    let job = [
        a(1, Lane::Free, Outcome::Ambiguous),
        a(2, Lane::Free, Outcome::Ok),
        a(3, Lane::Paid, Outcome::Ok),
    ];
    let tiers = lane_policy::replay(&job, &AuditSettings::from(&as_tiers));
    assert_eq!(tiers, lane_policy::replay(&job, &AuditSettings::default()));
    assert_eq!(
        tiers
            .iter()
            .map(|v| (v.attempt_no, v.kind.as_str(), v.reason.as_str()))
            .collect::<Vec<_>>(),
        [(
            2,
            "free_where_paid",
            "a free attempt after an ambiguous outcome: pin to paid"
        )]
    );
}

/// Twenty jobs that keep the policy and one that does not, in 2026-W48.
fn pinned_week() -> Vec<String> {
    let mut lines = Vec::new();
    for j in 0..20 {
        lines.push(at(&format!("clean{j:02}"), 1, "free", "retryable"));
        lines.push(at(&format!("clean{j:02}"), 2, "free", "ok"));
    }
    lines.push(at("amb", 1, "free", "ambiguous"));
    lines.push(at("amb", 2, "free", "ok"));
    lines
}

#[tokio::test]
async fn the_audit_turned_off_says_so_and_its_alert_does_not_fire() {
    let _turn = Turn::with(&LaneConfig::default());
    // On (the default): the pinned job is found and the alert fires.
    let (_d, on) = session(LaneConfig::default(), &pinned_week()).await;
    let section = on
        .audit_sections("2026-W48")
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.id == "lane_policy_violation")
        .unwrap();
    assert_eq!((section.title, section.total_rows), ("Lane policy violations", 1));
    assert_eq!(section.rows[0][0].as_deref(), Some("amb"));
    let (review, _) = on
        .review_with_sections(Some("2026-W48"), &on.thresholds())
        .await
        .unwrap();
    let alert = review
        .alerts
        .iter()
        .find(|a| a.metric == "lane_policy_violations_per_100_jobs")
        .unwrap();
    assert_eq!((alert.value, alert.state), (Some(100.0 / 21.0), AlertState::Alert));

    // Off: no rows, a section that says it is off, and an alert with no figure.
    let off = LaneConfig::from_yaml_str("lanes:\n  audit: false\n", "lane.yaml").unwrap();
    let (_d2, s) = session(off, &pinned_week()).await;
    let n = s
        .query("SELECT COUNT(*) AS n FROM lane_policy_violation")
        .await
        .unwrap();
    assert_batches_eq!(["+---+", "| n |", "+---+", "| 0 |", "+---+"], &n.batches);
    let section = s
        .audit_sections("2026-W48")
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.id == "lane_policy_violation")
        .unwrap();
    assert_eq!(section.title, "Lane policy violations: off");
    assert_eq!(section.total_rows, 0);
    assert_eq!(
        section.rows,
        [[Some("off (lanes.audit: false in lane.yaml)".to_string())]]
    );
    let (review, _) = s.review_with_sections(Some("2026-W48"), &s.thresholds()).await.unwrap();
    let alert = review
        .alerts
        .iter()
        .find(|a| a.metric == "lane_policy_violations_per_100_jobs")
        .unwrap();
    assert_eq!((alert.value, alert.state), (None, AlertState::NoData));
    assert_eq!(
        alert.detail,
        "off: lanes.audit is false in lane.yaml, so the lane policy is not replayed"
    );
    assert!(
        review
            .firing()
            .all(|a| a.metric != "lane_policy_violations_per_100_jobs")
    );
}
