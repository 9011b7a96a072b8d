//! The SQL text of every view, and the seed's queries, kept verbatim where the seed gives them.

/// Seed 000's `job_rollup` view, verbatim.
pub const SEED_JOB_ROLLUP_VIEW: &str = "CREATE VIEW job_rollup AS
SELECT job_id,
       MAX(idem_key)                   AS idem_key,
       SUM(lane = 'free')              AS free_attempts,
       SUM(lane = 'paid')              AS paid_attempts,
       SUM(tokens_in + tokens_out)     AS tokens,
       COUNT(DISTINCT artifact_id)     AS artifacts
FROM job_attempt
GROUP BY job_id;";

/// Seed 000's first rollup query, verbatim: tokens per artifact (dividing by `SUM(artifacts)`,
/// which counts duplicates) and cross-lane retries per job.
pub const SEED_Q1_TOKENS_PER_ARTIFACT: &str = "-- tokens per unique artifact, plus cross-lane pressure
SELECT ROUND(SUM(tokens) * 1.0 / SUM(artifacts), 1)   AS tokens_per_artifact,
       ROUND(SUM(free_attempts > 0 AND paid_attempts > 0) * 1.0
             / COUNT(*), 3)                          AS cross_lane_per_job
FROM job_rollup;";

/// Seed 000's second rollup query, verbatim: the duplicates themselves.
pub const SEED_Q2_DUPLICATES: &str = "-- the duplicates themselves
SELECT idem_key, COUNT(DISTINCT artifact_id) AS n
FROM job_attempt
WHERE artifact_id IS NOT NULL
GROUP BY idem_key
HAVING n > 1;";

/// `job_week`: each job's ISO week, from its first attempt's `started_at` (SPEC 4).
/// Columns: job_id, week_start (Monday 00:00 UTC), iso_week (`2026-W47`).
///
/// The table `job_week` is materialized natively from this definition ([`crate::derived::job_week`]); the
/// text is kept for the differential test and for anyone rebuilding it elsewhere.
pub const JOB_WEEK_VIEW: &str = "CREATE VIEW job_week AS
SELECT job_id,
       date_trunc('week', MIN(started_at)) AS week_start,
       to_char(MIN(started_at), '%G-W%V')  AS iso_week
FROM job_attempt
GROUP BY job_id";

/// `week_rollup`: seed 000's drill table for each ISO week of the attempts (SPEC 4), one row a
/// week: iso_week, week_start, jobs, free_attempts, paid_attempts, total_tokens,
/// unique_accepted_artifacts, duplicate_artifacts, cross_lane_jobs, artifacts and four ratios.
///
/// A ratio whose denominator is 0 is NULL. `tokens_per_accepted_artifact` divides by unique
/// accepted artifacts (distinct idem_key with an artifact), as the drill table does;
/// `tokens_per_artifact` divides by `SUM(artifacts)` of `job_rollup`, as the seed's first query does.
///
/// The table `week_rollup` is materialized natively from this definition
/// ([`crate::derived::week_rollup`]); the text is kept for the differential test.
pub const WEEK_ROLLUP_VIEW: &str = "CREATE VIEW week_rollup AS
WITH a AS (
  SELECT w.iso_week, w.week_start, x.job_id, x.idem_key, x.lane,
         x.tokens_in + x.tokens_out AS tokens, x.artifact_id
  FROM job_attempt x JOIN job_week w ON x.job_id = w.job_id
),
per_job AS (
  SELECT iso_week, week_start, job_id,
         SUM(lane = 'free') AS free_attempts,
         SUM(lane = 'paid') AS paid_attempts,
         SUM(tokens) AS tokens,
         COUNT(DISTINCT artifact_id) AS artifacts
  FROM a GROUP BY iso_week, week_start, job_id
),
per_key AS (
  SELECT iso_week, idem_key, COUNT(DISTINCT artifact_id) AS artifacts
  FROM a WHERE artifact_id IS NOT NULL
  GROUP BY iso_week, idem_key
),
jobs AS (
  SELECT iso_week, MIN(week_start) AS week_start,
         COUNT(*) AS jobs,
         SUM(free_attempts) AS free_attempts,
         SUM(paid_attempts) AS paid_attempts,
         SUM(tokens) AS total_tokens,
         SUM(artifacts) AS artifacts,
         SUM(free_attempts > 0 AND paid_attempts > 0) AS cross_lane_jobs
  FROM per_job GROUP BY iso_week
),
keys AS (
  SELECT iso_week, COUNT(*) AS unique_accepted_artifacts,
         SUM(artifacts - 1) AS duplicate_artifacts
  FROM per_key GROUP BY iso_week
)
SELECT j.iso_week, j.week_start, j.jobs, j.free_attempts, j.paid_attempts, j.total_tokens,
       COALESCE(k.unique_accepted_artifacts, 0) AS unique_accepted_artifacts,
       COALESCE(k.duplicate_artifacts, 0) AS duplicate_artifacts,
       j.cross_lane_jobs,
       j.artifacts,
       CAST(j.total_tokens AS DOUBLE) / NULLIF(k.unique_accepted_artifacts, 0) AS tokens_per_accepted_artifact,
       CAST(j.total_tokens AS DOUBLE) / NULLIF(j.artifacts, 0) AS tokens_per_artifact,
       100.0 * COALESCE(k.duplicate_artifacts, 0) / NULLIF(j.jobs, 0) AS duplicate_artifacts_per_100_jobs,
       CAST(j.cross_lane_jobs AS DOUBLE) / NULLIF(j.jobs, 0) AS cross_lane_retries_per_job
FROM jobs j LEFT JOIN keys k ON j.iso_week = k.iso_week
ORDER BY week_start";

/// `weekly_metrics`: `week_rollup`, except that a week some of whose attempts a retention sweep
/// removed (SPEC 6) shows the figures `week_snapshot` kept from before the removal, not what is
/// left of it. Columns as `week_rollup`'s.
pub const WEEKLY_METRICS_VIEW: &str = "CREATE VIEW weekly_metrics AS
SELECT * FROM week_rollup WHERE iso_week NOT IN (SELECT iso_week FROM week_snapshot)
UNION ALL
SELECT iso_week, week_start, jobs, free_attempts, paid_attempts, total_tokens, unique_accepted_artifacts,
       duplicate_artifacts, cross_lane_jobs, artifacts, tokens_per_accepted_artifact, tokens_per_artifact,
       duplicate_artifacts_per_100_jobs, cross_lane_retries_per_job
FROM week_snapshot";

/// `duplicate_artifact`: every artifact of each idem_key that has more than one (seed 000's second
/// query, row by row). Columns: idem_key, artifact_id, job_id, attempt_no, lane, outcome, ended_at.
pub const DUPLICATE_ARTIFACT_VIEW: &str = "CREATE VIEW duplicate_artifact AS
SELECT a.idem_key, a.artifact_id, a.job_id, a.attempt_no, a.lane, a.outcome, a.ended_at
FROM job_attempt a
JOIN (SELECT idem_key FROM job_attempt
      WHERE artifact_id IS NOT NULL
      GROUP BY idem_key
      HAVING COUNT(DISTINCT artifact_id) > 1) d
  ON a.idem_key = d.idem_key
WHERE a.artifact_id IS NOT NULL";

/// `gate_weekly`: seed 003's weekly review of the dwell gate (SPEC 5.3), one row per ISO week of
/// `decided_at`, over `gate_decision` (durations in seconds, defaults of `lane.yaml` applied).
///
/// Columns: iso_week (`2026-W48`), week_start (Monday 00:00 UTC), decisions, admit_free, defer,
/// reserved (counts of the logged decision); free_admit_misses (admit_free with slack_miss true)
/// and free_admit_miss_rate (÷ admit_free; seed 003 freezes `dwell_gate_enabled` above 1%);
/// defers_that_fit_reserved (defer with queue_age_s + reserved_service_s ≤ deadline_slack_s) and
/// defers_that_fit_reserved_rate (÷ defer); reserved_that_fit_free (reserved with queue_age_s +
/// expected_service_s ≤ deadline_slack_s, i.e. dwell without the retry tax fits) and
/// reserved_that_fit_free_rate (÷ reserved); decision_mismatches (logged decision ≠ seed 003
/// `decide_safe`). A ratio whose denominator is 0 is NULL; a slack_miss not yet known counts as no
/// miss.
pub const GATE_WEEKLY_VIEW: &str = "CREATE VIEW gate_weekly AS
WITH d AS (
  SELECT to_char(decided_at, '%G-W%V') AS iso_week,
         date_trunc('week', decided_at) AS week_start,
         decision, expected_decision, slack_miss,
         queue_age_s + reserved_service_s <= deadline_slack_s AS fits_reserved,
         queue_age_s + expected_service_s <= deadline_slack_s AS fits_free_without_tax
  FROM gate_decision
),
w AS (
  SELECT iso_week, MIN(week_start) AS week_start,
         COUNT(*) AS decisions,
         COUNT(CASE WHEN decision = 'admit_free' THEN 1 END) AS admit_free,
         COUNT(CASE WHEN decision = 'defer' THEN 1 END) AS defer,
         COUNT(CASE WHEN decision = 'reserved' THEN 1 END) AS reserved,
         COUNT(CASE WHEN decision = 'admit_free' AND slack_miss THEN 1 END) AS free_admit_misses,
         COUNT(CASE WHEN decision = 'defer' AND fits_reserved THEN 1 END) AS defers_that_fit_reserved,
         COUNT(CASE WHEN decision = 'reserved' AND fits_free_without_tax THEN 1 END) AS reserved_that_fit_free,
         COUNT(CASE WHEN decision <> expected_decision THEN 1 END) AS decision_mismatches
  FROM d
  GROUP BY iso_week
)
SELECT iso_week, week_start, decisions, admit_free, defer, reserved,
       free_admit_misses,
       CAST(free_admit_misses AS DOUBLE) / NULLIF(admit_free, 0) AS free_admit_miss_rate,
       defers_that_fit_reserved,
       CAST(defers_that_fit_reserved AS DOUBLE) / NULLIF(defer, 0) AS defers_that_fit_reserved_rate,
       reserved_that_fit_free,
       CAST(reserved_that_fit_free AS DOUBLE) / NULLIF(reserved, 0) AS reserved_that_fit_free_rate,
       decision_mismatches
FROM w";

/// The views created from their SQL text, in creation order: (name, SQL). `job_rollup`,
/// `job_week` and `week_rollup` are tables materialized from their definitions above.
pub const VIEWS: [(&str, &str); 3] = [
    ("weekly_metrics", WEEKLY_METRICS_VIEW),
    ("duplicate_artifact", DUPLICATE_ARTIFACT_VIEW),
    ("gate_weekly", GATE_WEEKLY_VIEW),
];
