//! Policy audits on small fixtures and on the sample drills, asserting exact rows.

mod common;

use datafusion::assert_batches_sorted_eq;
use laneledger_query::Session;

/// An attempt line: job, attempt_no, lane, start (seconds after 2026-11-23T00:00:00Z), duration
/// in seconds, outcome, and extra JSON members.
fn at(job: &str, no: u32, lane: &str, start_s: i64, dur_s: i64, outcome: &str, extra: &str) -> String {
    let t = |s: i64| laneledger_store::format_timestamp(1_795_392_000_000_000 + s * 1_000_000);
    format!(
        r#"{{"job_id":"{job}","idem_key":"k-{job}","attempt_no":{no},"lane":"{lane}","started_at":"{}","ended_at":"{}","outcome":"{outcome}"{extra}}}"#,
        t(start_s),
        t(start_s + dur_s)
    )
}

async fn session(lines: &[String]) -> (tempfile::TempDir, Session) {
    let (dir, ledger) = common::ledger_of_lines(lines);
    (dir, Session::new(ledger).await.unwrap())
}

async fn check(s: &Session, sql: &str, expected: &[&str]) {
    let got = s.query(sql).await.unwrap();
    assert_batches_sorted_eq!(expected, &got.batches);
}

#[test]
fn the_fixture_clock_starts_on_monday_of_2026_w48() {
    assert_eq!(
        laneledger_store::parse_timestamp("2026-11-23T00:00:00Z").unwrap(),
        1_795_392_000_000_000
    );
}

#[tokio::test]
async fn a_replayed_job_for_each_lane_violation_kind() {
    let (_d, s) = session(&[
        // obeys next_lane: free retryable, free ok
        at("ok1", 1, "free", 0, 1, "retryable", ""),
        at("ok1", 2, "free", 5, 10, "ok", ""),
        // free after an ambiguous outcome
        at("amb", 1, "free", 0, 40, "ambiguous", ""),
        at("amb", 2, "free", 45, 10, "ok", ""),
        // past the free budget: a third free attempt
        at("bud", 1, "free", 0, 1, "retryable", ""),
        at("bud", 2, "free", 5, 1, "retryable", ""),
        at("bud", 3, "free", 10, 10, "ok", ""),
        // once pinned: ambiguous → paid (right) → free (wrong)
        at("pin", 1, "free", 0, 40, "ambiguous", ""),
        at("pin", 2, "paid", 45, 5, "retryable", ""),
        at("pin", 3, "free", 55, 10, "ok", ""),
        // paying first, with nothing that pins
        at("pay", 1, "paid", 0, 5, "ok", ""),
    ])
    .await;
    check(
        &s,
        "SELECT job_id, attempt_no, lane, expected_lane, kind, reason FROM lane_policy_violation",
        &[
            "+--------+------------+------+---------------+-----------------+--------------------------------------------------------------------------------------+",
            "| job_id | attempt_no | lane | expected_lane | kind            | reason                                                                               |",
            "+--------+------------+------+---------------+-----------------+--------------------------------------------------------------------------------------+",
            "| amb    | 2          | free | paid          | free_where_paid | a free attempt after an ambiguous outcome: pin to paid                               |",
            "| bud    | 3          | free | paid          | free_where_paid | past the free budget: 2 of 2 free attempts used                                      |",
            "| pay    | 1          | paid | free          | paid_where_free | paid before the free budget was spent (0 of 2 free attempts), with nothing that pins |",
            "| pin    | 3          | free | paid          | free_where_paid | once pinned, a job stays on paid                                                     |",
            "+--------+------------+------+---------------+-----------------+--------------------------------------------------------------------------------------+",
        ],
    )
    .await;
}

#[tokio::test]
async fn duplicates_split_by_the_900_s_reconcile_window() {
    let (_d, s) = session(&[
        // one idem key, three artifacts: the second lands 600 s after the first, the third 1,500 s
        at("r", 1, "free", 0, 100, "ambiguous", r#","artifact_id":"a-first""#),
        at("r", 2, "paid", 200, 500, "ok", r#","artifact_id":"a-inside""#),
        at("r", 3, "paid", 300, 1300, "ok", r#","artifact_id":"a-after""#),
        at("single", 1, "free", 0, 10, "ok", r#","artifact_id":"a-single""#),
    ])
    .await;
    check(
        &s,
        "SELECT idem_key, artifact_id, first_artifact_id, gap_s, window_s, class FROM duplicate_reconciliation",
        &[
            "+----------+-------------+-------------------+--------+----------+------------------+",
            "| idem_key | artifact_id | first_artifact_id | gap_s  | window_s | class            |",
            "+----------+-------------+-------------------+--------+----------+------------------+",
            "| k-r      | a-after     | a-first           | 1500.0 | 900.0    | window too short |",
            "| k-r      | a-inside    | a-first           | 600.0  | 900.0    | reconcilable     |",
            "+----------+-------------+-------------------+--------+----------+------------------+",
        ],
    )
    .await;
}

/// Job `spin`: nine attempts 2 s apart from `start_s`, two free then paid, the last one ok (past
/// seed 002's bound of 8 a turn).
fn spin_turn(start_s: i64) -> Vec<String> {
    (1..=9)
        .map(|no| {
            let lane = if no <= 2 { "free" } else { "paid" };
            let outcome = if no == 9 { "ok" } else { "retryable" };
            at("spin", no, lane, start_s + 2 * (i64::from(no) - 1), 1, outcome, "")
        })
        .collect()
}

fn refusal(job: &str, no: u32, start_s: i64, key: &str, pool: &str, code: &str) -> String {
    at(
        job,
        no,
        "free",
        start_s,
        1,
        "retryable",
        &format!(r#","http_status":429{code},"key_id":"{key}","pool_id":"{pool}","model":"model-{key}""#),
    )
}

#[tokio::test]
async fn a_pool_overload_is_three_keys_answering_1305_within_60_s_and_not_over_3_minutes() {
    let mut lines = vec![
        // pool-burst: keys 1, 2, 3 answer 1305 within 50 s
        refusal("b1", 1, 0, "key-1", "pool-burst", r#","provider_code":1305"#),
        refusal("b2", 1, 20, "key-2", "pool-burst", r#","provider_code":1305"#),
        refusal("b3", 1, 49, "key-3", "pool-burst", r#","provider_code":1305"#),
        // pool-spread: the same three keys, 90 s apart (3 minutes in all)
        refusal("s1", 1, 0, "key-1", "pool-spread", r#","provider_code":1305"#),
        refusal("s2", 1, 90, "key-2", "pool-spread", r#","provider_code":1305"#),
        refusal("s3", 1, 180, "key-3", "pool-spread", r#","provider_code":1305"#),
    ];
    // Both pools hold ten keys, so "every key of a small pool" never applies.
    for i in 4..=10 {
        for pool in ["pool-burst", "pool-spread"] {
            lines.push(at(
                &format!("{pool}-{i}"),
                1,
                "free",
                1000,
                5,
                "ok",
                &format!(r#","http_status":200,"key_id":"key-{i}","pool_id":"{pool}""#),
            ));
        }
    }
    let (_d, s) = session(&lines).await;
    check(
        &s,
        "SELECT pool_id, started_at, ended_at, refusals_1305, distinct_keys, keys, pool_size_seen FROM pool_overload_episode",
        &[
            "+------------+----------------------+----------------------+---------------+---------------+-------------------+----------------+",
            "| pool_id    | started_at           | ended_at             | refusals_1305 | distinct_keys | keys              | pool_size_seen |",
            "+------------+----------------------+----------------------+---------------+---------------+-------------------+----------------+",
            "| pool-burst | 2026-11-23T00:00:01Z | 2026-11-23T00:00:50Z | 3             | 3             | key-1,key-2,key-3 | 10             |",
            "+------------+----------------------+----------------------+---------------+---------------+-------------------+----------------+",
        ],
    )
    .await;
}

#[tokio::test]
async fn key_refusal_audits_name_each_lapse() {
    let (_d, s) = session(
        &[
            // the #9967 case: 1305 on key-9, then the same key again at once
            refusal("bee", 1, 0, "key-9", "pool-2", r#","provider_code":1305"#),
            refusal("bee", 2, 5, "key-9", "pool-2", r#","provider_code":1305"#),
            at(
                "bee",
                3,
                "free",
                60,
                10,
                "ok",
                r#","http_status":200,"key_id":"key-0","pool_id":"pool-2""#,
            ),
            // a quota code sent as retryable; key-q then used again 10 minutes later (long break: 30)
            refusal("quota", 1, 0, "key-q", "pool-1", r#","provider_code":1308"#),
            at(
                "later",
                1,
                "free",
                601,
                5,
                "ok",
                r#","http_status":200,"key_id":"key-q","pool_id":"pool-1""#,
            ),
        ]
        .into_iter()
        // nine attempts in one turn
        .chain(spin_turn(0))
        .collect::<Vec<_>>(),
    )
    .await;
    check(
        &s,
        "SELECT job_id, attempt_no, key_id, previous_attempt_no, previous_kind, previous_provider_code, model FROM same_key_retry",
        &[
            "+--------+------------+--------+---------------------+---------------+------------------------+-------------+",
            "| job_id | attempt_no | key_id | previous_attempt_no | previous_kind | previous_provider_code | model       |",
            "+--------+------------+--------+---------------------+---------------+------------------------+-------------+",
            "| bee    | 2          | key-9  | 1                   | transient     | 1305                   | model-key-9 |",
            "+--------+------------+--------+---------------------+---------------+------------------------+-------------+",
        ],
    )
    .await;
    // bee #1 ends at 1 s: rests 15 s until 16 s; attempt 2 starts at 5 s, 11 s early.
    // quota ends at 1 s: closed 1,800 s until 1,801 s; key-q used at 601 s, 1,200 s early. Each
    // row names the model of the use (later's attempt names none).
    check(
        &s,
        "SELECT key_id, job_id, attempt_no, rest, refused_job_id, refused_kind, strikes, rest_s, rest_until, early_s, model FROM key_rest_violation",
        &[
            "+--------+--------+------------+------------+----------------+--------------+---------+--------+----------------------+---------+-------------+",
            "| key_id | job_id | attempt_no | rest       | refused_job_id | refused_kind | strikes | rest_s | rest_until           | early_s | model       |",
            "+--------+--------+------------+------------+----------------+--------------+---------+--------+----------------------+---------+-------------+",
            "| key-9  | bee    | 2          | rest       | bee            | transient    | 0       | 15     | 2026-11-23T00:00:16Z | 11.0    | model-key-9 |",
            "| key-q  | later  | 1          | long break | quota          | quota        | 0       | 1800   | 2026-11-23T00:30:01Z | 1200.0  |             |",
            "+--------+--------+------------+------------+----------------+--------------+---------+--------+----------------------+---------+-------------+",
        ],
    )
    .await;
    check(
        &s,
        "SELECT job_id, attempt_no, outcome, error_kind, http_status, provider_code, model FROM outcome_mismatch",
        &[
            "+--------+------------+-----------+------------+-------------+---------------+-------------+",
            "| job_id | attempt_no | outcome   | error_kind | http_status | provider_code | model       |",
            "+--------+------------+-----------+------------+-------------+---------------+-------------+",
            "| quota  | 1          | retryable | quota      | 429         | 1308          | model-key-q |",
            "+--------+------------+-----------+------------+-------------+---------------+-------------+",
        ],
    )
    .await;
    check(
        &s,
        "SELECT job_id, attempts, bound, last_outcome FROM attempt_bound_exceeded",
        &[
            "+--------+----------+-------+--------------+",
            "| job_id | attempts | bound | last_outcome |",
            "+--------+----------+-------+--------------+",
            "| spin   | 9        | 8     | ok           |",
            "+--------+----------+-------+--------------+",
        ],
    )
    .await;
}

#[tokio::test]
async fn the_pin_drill_obeys_next_lane_and_the_nopin_drill_does_not() {
    let (_d, ledger) = common::ledger_from(&["drill-nopin-2026-W47.ndjson", "drill-pin-2026-W48.ndjson"]);
    let s = Session::new(ledger).await.unwrap();
    check(
        &s,
        "SELECT iso_week, kind, COUNT(*) AS n FROM lane_policy_violation GROUP BY iso_week, kind",
        &[
            "+----------+-----------------+----+",
            "| iso_week | kind            | n  |",
            "+----------+-----------------+----+",
            "| 2026-W47 | free_where_paid | 51 |",
            "+----------+-----------------+----+",
        ],
    )
    .await;
    check(
        &s,
        "SELECT iso_week, class, COUNT(*) AS n FROM duplicate_reconciliation GROUP BY iso_week, class",
        &[
            "+----------+------------------+----+",
            "| iso_week | class            | n  |",
            "+----------+------------------+----+",
            "| 2026-W47 | reconcilable     | 14 |",
            "| 2026-W47 | window too short | 7  |",
            "+----------+------------------+----+",
        ],
    )
    .await;
}

/// Regression: a use that started before the refusal arrived is not "inside its rest".
#[tokio::test]
async fn a_rest_starts_when_the_refusal_arrives() {
    let (_d, s) = session(&[
        // key-c answers 1305 at 10 s to a call that started at 0 s: it rests until 25 s.
        at(
            "slow",
            1,
            "free",
            0,
            10,
            "retryable",
            r#","http_status":429,"provider_code":1305,"key_id":"key-c""#,
        ),
        // started at 5 s, while the slow call was still out: not a lapse
        at(
            "overlap",
            1,
            "free",
            5,
            2,
            "ok",
            r#","http_status":200,"key_id":"key-c""#,
        ),
        // started at 12 s, inside the rest: a lapse, 13 s early
        at("late", 1, "free", 12, 2, "ok", r#","http_status":200,"key_id":"key-c""#),
        // started at 26 s, after the rest
        at(
            "after",
            1,
            "free",
            26,
            2,
            "ok",
            r#","http_status":200,"key_id":"key-c""#,
        ),
    ])
    .await;
    check(
        &s,
        "SELECT job_id, refused_job_id, rest_s, early_s FROM key_rest_violation",
        &[
            "+--------+----------------+--------+---------+",
            "| job_id | refused_job_id | rest_s | early_s |",
            "+--------+----------------+--------+---------+",
            "| late   | slow           | 15     | 13.0    |",
            "+--------+----------------+--------+---------+",
        ],
    )
    .await;
}

/// A section shows the first 100 rows of its SQL by the SQL's own order (run with a LIMIT, a
/// top-k) and counts all of them: on a drill busy enough for sections past 100 rows, every
/// section's `total_rows` and shown rows equal what its SQL returns when run whole.
#[tokio::test]
async fn sections_cut_at_100_rows_and_count_them_all() {
    let (_d, ledger) = common::ledger_from_drill(20_000, laneledger_store::drill::Policy::NoPin, 3);
    let s = Session::new(ledger).await.unwrap();
    let week = s.weeks().await.unwrap()[0].iso_week.clone();
    let sections = s.audit_sections(&week).await.unwrap();
    let mut cut = 0;
    for section in sections
        .iter()
        // gate_ratios and the cost sections are computed in Rust; their SQL gives the rows they
        // are computed from, not their own rows.
        .filter(|x| !x.sql.contains(';') && x.id != "gate_ratios" && x.group != laneledger_query::Group::Cost)
    {
        let whole = s.query(&section.sql).await.unwrap();
        assert_eq!(section.total_rows, whole.num_rows(), "{}", section.id);
        let shown = section
            .total_rows
            .min(laneledger_query::review::sections::MAX_SECTION_ROWS);
        assert_eq!(section.rows.len(), shown, "{}", section.id);
        // The first column of the shown rows, against the whole answer's first rows.
        let (_, cells) = laneledger_query::text_cells(&whole, shown).unwrap();
        let first: Vec<String> = cells.iter().map(|r| r[0].clone()).collect();
        let ours: Vec<String> = section
            .rows
            .iter()
            .map(|r| r[0].clone().unwrap_or("NULL".into()))
            .collect();
        assert_eq!(ours, first, "{}", section.id);
        cut += usize::from(section.total_rows > shown);
    }
    assert!(cut >= 2, "only {cut} sections were cut at 100 rows");
}

/// The rows of `batches` whose `iso_week` is `week`, as sorted table lines.
fn lines_in_week(batches: &[datafusion::arrow::array::RecordBatch], week: &str) -> Vec<String> {
    use datafusion::arrow::array::{AsArray, StringArray};
    use datafusion::arrow::compute::{filter_record_batch, kernels::cmp::eq};
    let kept: Vec<_> = batches
        .iter()
        .map(|b| {
            let col = b.column_by_name("iso_week").unwrap().as_string::<i32>();
            let mask = eq(col, &StringArray::new_scalar(week)).unwrap();
            filter_record_batch(b, &mask).unwrap()
        })
        .collect();
    sorted_lines(&kept)
}

fn sorted_lines(batches: &[datafusion::arrow::array::RecordBatch]) -> Vec<String> {
    let text = datafusion::arrow::util::pretty::pretty_format_batches(batches)
        .unwrap()
        .to_string();
    // The rows' lines, without the header line (printed even for a batch of no rows).
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("| "))
        .skip(1)
        .map(String::from)
        .collect();
    lines.sort();
    lines
}

/// Every review section asks its audit for one week (`WHERE iso_week = '…'`), and the audit then
/// builds only that week's rows. On a two-week drill busy enough for rests, duplicates and
/// overloads to cross the Sunday–Monday boundary, each audit's one-week answer is exactly the
/// whole table's rows of that week (rests, strikes and first artifacts still come from every
/// week), and a week without jobs has none.
#[tokio::test]
async fn one_week_of_an_audit_is_the_whole_audit_cut_to_that_week() {
    use laneledger_query::derived::audits;
    let (_d, ledger) = common::ledger_from_drill(20_000, laneledger_store::drill::Policy::NoPin, 5);
    let s = Session::new(ledger.clone()).await.unwrap();
    // (table, rows in 2026-W45, rows in 2026-W46): the whole table's counts, split by week.
    let expected = [
        ("lane_policy_violation", 1511, 1412),
        ("duplicate_reconciliation", 502, 467),
        ("same_key_retry", 0, 0),
        ("key_rest_violation", 23, 17),
        ("pool_overload_episode", 92, 80),
        ("attempt_bound_exceeded", 0, 0),
        ("outcome_mismatch", 0, 0),
    ];
    let mut got = Vec::new();
    for (table, ..) in expected {
        let whole = s.query(&format!("SELECT * FROM {table}")).await.unwrap();
        let mut counts = Vec::new();
        for week in ["2026-W45", "2026-W46", "2026-W47"] {
            let one = s
                .query(&format!("SELECT * FROM {table} WHERE iso_week = '{week}'"))
                .await
                .unwrap();
            assert_eq!(
                sorted_lines(&one.batches),
                lines_in_week(&whole.batches, week),
                "{table} {week}"
            );
            counts.push(one.num_rows());
        }
        assert_eq!(counts[2], 0, "{table}: no job starts in 2026-W47");
        // The filter reaches the table (built for that week), not only a filter over every row.
        let plan = s
            .query(&format!("EXPLAIN SELECT * FROM {table} WHERE iso_week = '2026-W46'"))
            .await
            .unwrap();
        let plan = sorted_lines(&plan.batches).concat();
        assert!(
            plan.contains(&format!(r#"partial_filters=[{table}.iso_week = Utf8("2026-W46")]"#)),
            "{table}: {plan}"
        );
        assert_eq!(
            counts[0] + counts[1],
            whole.num_rows(),
            "{table}: every row is in one of the weeks"
        );
        got.push((table, counts[0], counts[1]));
    }
    assert_eq!(got, expected);

    // A row that names one attempt carries that attempt's model: row for row what a join back to
    // the attempts gives (the review's counts by model read it instead of joining).
    for (table, models) in [
        ("lane_policy_violation", "free-model"),
        ("duplicate_reconciliation", "free-model"),
        ("key_rest_violation", "free-model"),
    ] {
        let own = s
            .query(&format!("SELECT job_id, attempt_no, model FROM {table}"))
            .await
            .unwrap();
        let joined = s
            .query(&format!(
                "SELECT t.job_id, t.attempt_no, a.model FROM {table} t \
                 LEFT JOIN job_attempt a ON a.job_id = t.job_id AND a.attempt_no = t.attempt_no"
            ))
            .await
            .unwrap();
        assert_eq!(sorted_lines(&own.batches), sorted_lines(&joined.batches), "{table}");
        let distinct = s
            .query(&format!(
                "SELECT string_agg(model, ', ' ORDER BY model) AS m FROM (SELECT DISTINCT model FROM {table})"
            ))
            .await
            .unwrap();
        assert_eq!(
            sorted_lines(&distinct.batches).concat(),
            format!("| {models} |"),
            "{table}"
        );
    }

    // Built for one week, each audit holds only that week's rows: as many as the whole table has
    // in the week, every one labelled with it.
    let attempts = laneledger_query::tables::job_attempt::scan_columns(&ledger, &audits::COLUMNS).unwrap();
    let snap = audits::Snapshot::new(&attempts).unwrap();
    let settings = audits::AuditSettings::default();
    for ((table, w45, w46), audit) in expected.into_iter().zip(audits::audit_tables()) {
        let (name, build) = (audit.name, audit.build);
        assert_eq!(table, name);
        for (week, rows) in [("2026-W45", w45), ("2026-W46", w46), ("2026-W47", 0)] {
            let batch = build(&snap, &settings, Some(week)).unwrap();
            assert_eq!(batch.num_rows(), rows, "{table} {week}");
            assert_eq!(lines_in_week(&[batch], week).len(), rows, "{table} {week}");
        }
    }
}

/// A key refused in the last second of 2026-W47 and used again by a job of 2026-W48 inside its
/// rest is flagged when only 2026-W48 is asked for; an artifact first landed in 2026-W47 makes
/// the 2026-W48 one a duplicate.
#[tokio::test]
async fn a_rest_and_a_duplicate_across_the_week_boundary_are_in_the_later_week() {
    let dup = |job: &str, start_s: i64, art: &str| {
        at(
            job,
            1,
            "free",
            start_s,
            1,
            "ok",
            &format!(r#","artifact_id":"{art}","http_status":200"#),
        )
        .replace(&format!(r#""idem_key":"k-{job}""#), r#""idem_key":"k-shared""#)
    };
    let (_d, s) = session(
        &[
            refusal("sunday", 1, -2, "key-x", "pool-x", r#","provider_code":1305"#),
            at(
                "monday",
                1,
                "free",
                3,
                1,
                "ok",
                r#","http_status":200,"key_id":"key-x","pool_id":"pool-x""#,
            ),
            dup("first", -100, "a-1"),
            dup("second", 100, "a-2"),
            // a same-key retry, a quota sent as retryable and a nine-attempt turn, all in 2026-W48
            refusal("bee", 1, 500, "key-9", "pool-2", r#","provider_code":1305"#),
            refusal("bee", 2, 505, "key-9", "pool-2", r#","provider_code":1305"#),
            refusal("quota", 1, 600, "key-q", "pool-1", r#","provider_code":1308"#),
        ]
        .into_iter()
        .chain(spin_turn(700))
        .collect::<Vec<_>>(),
    )
    .await;
    for (sql, w48) in [
        ("SELECT job_id FROM same_key_retry", "bee"),
        ("SELECT job_id FROM outcome_mismatch", "quota"),
        ("SELECT job_id FROM attempt_bound_exceeded", "spin"),
    ] {
        let one = |week: &str| format!("{sql} WHERE iso_week = '{week}'");
        check(
            &s,
            &one("2026-W48"),
            &[
                "+--------+",
                "| job_id |",
                "+--------+",
                &format!("| {w48:<6} |"),
                "+--------+",
            ],
        )
        .await;
        check(&s, &one("2026-W47"), &["++", "++"]).await;
    }
    check(
        &s,
        "SELECT iso_week, key_id, job_id, refused_job_id, early_s FROM key_rest_violation WHERE iso_week = '2026-W48' AND key_id = 'key-x'",
        &[
            "+----------+--------+--------+----------------+---------+",
            "| iso_week | key_id | job_id | refused_job_id | early_s |",
            "+----------+--------+--------+----------------+---------+",
            "| 2026-W48 | key-x  | monday | sunday         | 11.0    |",
            "+----------+--------+--------+----------------+---------+",
        ],
    )
    .await;
    check(
        &s,
        "SELECT iso_week, idem_key, artifact_id, first_artifact_id, gap_s, class FROM duplicate_reconciliation WHERE iso_week = '2026-W48'",
        &[
            "+----------+----------+-------------+-------------------+-------+--------------+",
            "| iso_week | idem_key | artifact_id | first_artifact_id | gap_s | class        |",
            "+----------+----------+-------------+-------------------+-------+--------------+",
            "| 2026-W48 | k-shared | a-2         | a-1               | 200.0 | reconcilable |",
            "+----------+----------+-------------+-------------------+-------+--------------+",
        ],
    )
    .await;
    check(
        &s,
        "SELECT COUNT(*) AS n FROM key_rest_violation WHERE iso_week = '2026-W47'",
        &["+---+", "| n |", "+---+", "| 0 |", "+---+"],
    )
    .await;
}
