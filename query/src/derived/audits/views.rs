//! The audits that are plain SQL over `week_attempt` (each attempt with its job's ISO week).
//!
//! Each groups by the dictionary `iso_week` and gives it out as text, as `job_week` does; a
//! filter on the text is moved below the grouping onto the dictionary.

/// `refusal_by_kind`: refused attempts per ISO week and seed 002 kind (transient, quota, auth,
/// request). Columns: iso_week, error_kind, attempts, keys (distinct key_id).
pub const REFUSAL_BY_KIND_VIEW: &str = "CREATE VIEW refusal_by_kind AS
SELECT arrow_cast(iso_week, 'Utf8') AS iso_week, error_kind, attempts, keys FROM (
  SELECT iso_week, error_kind, COUNT(*) AS attempts, COUNT(DISTINCT key_id) AS keys
  FROM week_attempt
  WHERE error_kind IS NOT NULL AND error_kind <> 'ok'
  GROUP BY iso_week, error_kind)";

/// `refusal_by_code`: refused attempts per ISO week, HTTP status and provider code.
/// Columns: iso_week, http_status, provider_code, error_kind, attempts.
pub const REFUSAL_BY_CODE_VIEW: &str = "CREATE VIEW refusal_by_code AS
SELECT arrow_cast(iso_week, 'Utf8') AS iso_week, http_status, provider_code, error_kind, attempts FROM (
  SELECT iso_week, http_status, provider_code, error_kind, COUNT(*) AS attempts
  FROM week_attempt
  WHERE error_kind IS NOT NULL AND error_kind <> 'ok'
  GROUP BY iso_week, http_status, provider_code, error_kind)";

/// `free_lane_bet`: the measured side of seed 000's "When the Free Lane Is the Wrong Bet" per ISO
/// week. Columns: iso_week, free_p95_latency_s (p95 of ended_at − started_at over free attempts
/// that ended ok, seconds), ambiguous_rate (ambiguous free attempts ÷ free attempts),
/// free_tokens_per_attempt, paid_tokens_per_attempt (mean tokens), token_delta
/// (|paid − free| ÷ free), free_latency_left_out (free ok attempts whose ended_at is before their
/// started_at: an impossible latency, left out of the p95 and counted here; `data_quality` lists
/// them as `ended_before_started`).
pub const FREE_LANE_BET_VIEW: &str = "CREATE VIEW free_lane_bet AS
WITH a AS (
  SELECT iso_week, lane, outcome, tokens_in + tokens_out AS tokens,
         (CAST(ended_at AS BIGINT) - CAST(started_at AS BIGINT)) / 1000000.0 AS seconds
  FROM week_attempt
),
lat AS (
  SELECT iso_week, percentile_cont(0.95) WITHIN GROUP (ORDER BY seconds) AS free_p95_latency_s
  FROM a WHERE lane = 'free' AND outcome = 'ok' AND seconds >= 0
  GROUP BY iso_week
),
m AS (
  SELECT iso_week,
         SUM(lane = 'free' AND outcome = 'ambiguous') * 1.0 / NULLIF(SUM(lane = 'free'), 0) AS ambiguous_rate,
         AVG(CASE WHEN lane = 'free' THEN tokens END) AS free_tokens_per_attempt,
         AVG(CASE WHEN lane = 'paid' THEN tokens END) AS paid_tokens_per_attempt,
         COUNT(CASE WHEN lane = 'free' AND outcome = 'ok' AND seconds < 0 THEN 1 END) AS free_latency_left_out
  FROM a GROUP BY iso_week
)
SELECT arrow_cast(m.iso_week, 'Utf8') AS iso_week, lat.free_p95_latency_s, m.ambiguous_rate, m.free_tokens_per_attempt, m.paid_tokens_per_attempt,
       abs(m.paid_tokens_per_attempt - m.free_tokens_per_attempt) / NULLIF(m.free_tokens_per_attempt, 0) AS token_delta,
       m.free_latency_left_out
FROM m LEFT JOIN lat ON m.iso_week = lat.iso_week";

/// The audit views, in creation order (after the core views).
pub const AUDIT_VIEWS: [(&str, &str); 3] = [
    ("refusal_by_kind", REFUSAL_BY_KIND_VIEW),
    ("refusal_by_code", REFUSAL_BY_CODE_VIEW),
    ("free_lane_bet", FREE_LANE_BET_VIEW),
];
