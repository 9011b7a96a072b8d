//! What-if for one ISO week: its gate decisions decided again under other caps, and its jobs
//! routed again under another lane policy with the week's own outcome rates
//! ([`laneledger_store::drill::whatif`]), beside the week as logged. What `laneledger whatif`,
//! `/weeks/{week}/whatif` and `GET /v1/whatif` show.

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use laneledger_store::LaneConfig;
use laneledger_store::drill::whatif::{
    GateCaps, GateTally, GateWhatIf, LaneModel, LanePolicy, Observed, ReplayTable, gate_whatif, replay,
};
use laneledger_store::format::decision::Decision;
use laneledger_store::model::record::Outcome;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::review::metrics::{WeekMetrics, parse_iso_week};
use crate::session::Session;
use crate::words::{format_count, format_ratio};

/// The largest week the lane replay routes: beyond it the replay would hold a request for
/// seconds (the trace weeks have tens of thousands of jobs; 2 M jobs take about a second).
pub const MAX_REPLAY_JOBS: i64 = 2_000_000;

/// One setting the what-if reads, today and with the change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SettingChange {
    /// The lane.yaml key, e.g. `lanes.free.pin_on`.
    pub key: &'static str,
    /// Today's value, as lane.yaml writes it.
    pub now: String,
    /// The changed value.
    pub with_change: String,
}

/// The lane half: the week's jobs routed again.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LaneWhatIf {
    /// The week's attempts by kind of call and outcome (open attempts left out).
    pub observed: Observed,
    /// The rates and tokens drawn from.
    pub model: LaneModel,
    /// The week as logged (`weekly_metrics`).
    pub logged: WeekMetrics,
    /// The jobs routed again under today's policy.
    pub now: ReplayTable,
    /// The jobs routed again with the change.
    pub with_change: ReplayTable,
}

/// A week's what-if.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WhatIf {
    /// `2026-W48`.
    pub iso_week: String,
    /// The replay's random seed.
    pub seed: u64,
    /// The settings the what-if reads whose value changes (empty: nothing changes).
    pub changes: Vec<SettingChange>,
    /// The lane policy replayed; `None` when no job started in the week.
    pub lane: Option<LaneWhatIf>,
    /// The gate decided again; `None` when the week has no gate decision.
    pub gate: Option<GateWhatIf>,
}

fn pin_text(pin_on: &[Outcome]) -> String {
    format!("[{}]", pin_on.iter().map(|o| o.as_str()).collect::<Vec<_>>().join(", "))
}

/// The settings the what-if reads, where `changed` differs from `now`.
pub fn setting_changes(now: &LaneConfig, changed: &LaneConfig) -> Vec<SettingChange> {
    type Setting = (&'static str, fn(&LaneConfig) -> String);
    let settings: [Setting; 6] = [
        ("lanes.free.max_attempts", |c| c.lanes.free.max_attempts.to_string()),
        ("lanes.free.pin_on", |c| pin_text(&c.lanes.free.pin_on)),
        ("lanes.paid.max_attempts", |c| c.lanes.paid.max_attempts.to_string()),
        ("keys.max_attempts_per_turn", |c| {
            c.keys.max_attempts_per_turn.to_string()
        }),
        ("gate.max_queue_age_s", |c| c.gate.max_queue_age_s.to_string()),
        ("gate.reserved_service_s", |c| c.gate.reserved_service_s.to_string()),
    ];
    settings
        .iter()
        .filter_map(|(key, f)| {
            let (a, b) = (f(now), f(changed));
            (a != b).then_some(SettingChange {
                key,
                now: a,
                with_change: b,
            })
        })
        .collect()
}

/// A column as Utf8 or Int64 whatever its Arrow type.
fn column(b: &RecordBatch, name: &str, to: &DataType) -> Result<std::sync::Arc<dyn Array>> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| Error::Internal(format!("what-if: no column {name}")))?;
    cast(c, to).map_err(|e| Error::Internal(format!("what-if: column {name}: {e}")))
}

impl Session {
    /// The week's attempts of its jobs (a job belongs to the week of its first attempt), counted
    /// by kind of call (a job's first free attempt, a later free one, a paid one) and outcome.
    /// Attempts on other tiers and attempts still open are not counted.
    async fn observed_calls(&self, week: &str) -> Result<Observed> {
        // `week` has passed parse_iso_week: digits, a dash and a W only.
        let sql = format!(
            "SELECT lane, rn = 1 AS first_on_lane, outcome, COUNT(*) AS n,
                    CAST(SUM(tokens_in + tokens_out) AS BIGINT) AS tokens
             FROM (SELECT a.lane, a.outcome, a.tokens_in, a.tokens_out,
                          ROW_NUMBER() OVER (PARTITION BY a.job_id, a.lane ORDER BY a.attempt_no) AS rn
                   FROM week_attempt a WHERE a.iso_week = '{week}')
             WHERE outcome IS NOT NULL
             GROUP BY lane, rn = 1, outcome"
        );
        let result = self.query(&sql).await?;
        let mut o = Observed::default();
        for b in &result.batches {
            let lane = column(b, "lane", &DataType::Utf8)?;
            let first = column(b, "first_on_lane", &DataType::Boolean)?;
            let outcome = column(b, "outcome", &DataType::Utf8)?;
            let n = column(b, "n", &DataType::Int64)?;
            let tokens = column(b, "tokens", &DataType::Int64)?;
            let (lane, first, outcome) = (lane.as_string::<i32>(), first.as_boolean(), outcome.as_string::<i32>());
            let (n, tokens) = (n.as_primitive::<Int64Type>(), tokens.as_primitive::<Int64Type>());
            for row in 0..b.num_rows() {
                let Some(out) = Outcome::parse(outcome.value(row)) else {
                    continue;
                };
                let (count, t) = (n.value(row).max(0) as u64, tokens.value(row).max(0) as u64);
                match (lane.value(row), first.value(row)) {
                    ("free", true) => o.first_free.add(out, count, t),
                    ("free", false) => o.later_free.add(out, count, t),
                    ("paid", _) => o.paid.add(out, count, t),
                    _ => {}
                }
            }
        }
        Ok(o)
    }

    /// The gate decisions whose `decided_at` falls in `week`, in ledger order.
    fn week_decisions(&self, week: &str) -> Result<Vec<Decision>> {
        let mut out = Vec::new();
        self.ledger().for_each_decision(|s| {
            if crate::derived::job_week::iso_week_of(s.decision.decided_at) == week {
                out.push(s.decision);
            }
        })?;
        Ok(out)
    }

    /// The what-if of `week` (`2026-W48`) under `changed`, against this session's settings, with
    /// the replay's random `seed`: the same arguments on the same ledger give the same answer.
    ///
    /// Errors: [`Error::BadWeek`] for a label that is not an ISO week, [`Error::UnknownWeek`]
    /// when no job started in the week and no gate decision was logged in it,
    /// [`Error::Plan`] when the week has more than [`MAX_REPLAY_JOBS`] jobs.
    pub async fn whatif(&self, week: &str, changed: &LaneConfig, seed: u64) -> Result<WhatIf> {
        // One pin for all its reads ([`Session::pinned`]).
        let this = &self.pinned();
        parse_iso_week(week)?;
        let now_config = this.config().clone();
        let logged = this.weeks().await?.into_iter().find(|w| w.iso_week == week);
        let lane = match logged {
            Some(logged) if logged.jobs > 0 => {
                if logged.jobs > MAX_REPLAY_JOBS {
                    return Err(Error::Plan(format!(
                        "{week} has {} jobs; the what-if replays at most {}",
                        format_count(logged.jobs),
                        format_count(MAX_REPLAY_JOBS)
                    )));
                }
                let observed = this.observed_calls(week).await?;
                let model = LaneModel::from_observed(&observed);
                let jobs = logged.jobs as u64;
                let now = replay(&model, &LanePolicy::from(&now_config), jobs, seed);
                let with_change = replay(&model, &LanePolicy::from(changed), jobs, seed);
                Some(LaneWhatIf {
                    observed,
                    model,
                    logged,
                    now,
                    with_change,
                })
            }
            _ => None,
        };
        let decisions = this.week_decisions(week)?;
        let gate = (!decisions.is_empty())
            .then(|| gate_whatif(&decisions, &GateCaps::from(&now_config), &GateCaps::from(changed)));
        if lane.is_none() && gate.is_none() {
            return Err(Error::UnknownWeek(week.to_string()));
        }
        Ok(WhatIf {
            iso_week: week.to_string(),
            seed,
            changes: setting_changes(&now_config, changed),
            lane,
            gate,
        })
    }
}

/// One row of a what-if table: the metric and its figure in each column, formatted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WhatIfRow {
    /// The metric's name.
    pub name: &'static str,
    /// As logged (the review's figure).
    pub logged: String,
    /// Decided again or replayed under today's settings.
    pub now: String,
    /// With the change.
    pub with_change: String,
}

fn row(name: &'static str, logged: String, now: String, with_change: String) -> WhatIfRow {
    WhatIfRow {
        name,
        logged,
        now,
        with_change,
    }
}

fn c(n: u64) -> String {
    format_count(i64::try_from(n).unwrap_or(i64::MAX))
}

impl LaneWhatIf {
    /// Seed 000's drill table: as logged, replayed today, replayed with the change.
    pub fn rows(&self) -> Vec<WhatIfRow> {
        let (l, a, b) = (&self.logged, &self.now, &self.with_change);
        let lc = |n: i64| format_count(n);
        vec![
            row("jobs", lc(l.jobs), c(a.jobs), c(b.jobs)),
            row(
                "unique accepted artifacts",
                lc(l.unique_accepted_artifacts),
                c(a.unique_accepted_artifacts),
                c(b.unique_accepted_artifacts),
            ),
            row(
                "free attempts",
                lc(l.free_attempts),
                c(a.free_attempts),
                c(b.free_attempts),
            ),
            row(
                "paid attempts",
                lc(l.paid_attempts),
                c(a.paid_attempts),
                c(b.paid_attempts),
            ),
            row("total tokens", lc(l.total_tokens), c(a.total_tokens), c(b.total_tokens)),
            row(
                "tokens per accepted artifact",
                format_ratio(l.tokens_per_accepted_artifact, 1),
                format_ratio(a.tokens_per_accepted_artifact(), 1),
                format_ratio(b.tokens_per_accepted_artifact(), 1),
            ),
            row(
                "duplicate artifacts",
                lc(l.duplicate_artifacts),
                c(a.duplicate_artifacts),
                c(b.duplicate_artifacts),
            ),
            row(
                "duplicate artifacts per 100 jobs",
                format_ratio(l.duplicate_artifacts_per_100_jobs, 2),
                format_ratio(a.duplicate_artifacts_per_100_jobs(), 2),
                format_ratio(b.duplicate_artifacts_per_100_jobs(), 2),
            ),
            row(
                "cross-lane retries per job",
                format_ratio(l.cross_lane_retries_per_job, 3),
                format_ratio(a.cross_lane_retries_per_job(), 3),
                format_ratio(b.cross_lane_retries_per_job(), 3),
            ),
            row(
                "jobs left without an artifact",
                "—".to_string(),
                c(a.failed_jobs),
                c(b.failed_jobs),
            ),
        ]
    }

    /// The outcome rates drawn from, a row per kind of call: name, attempts seen, then the share
    /// of ok, retryable, ambiguous, permanent as percentages.
    pub fn rate_rows(&self) -> Vec<(&'static str, String, [String; 4])> {
        let pct = |p: &[f64; 4]| p.map(|x| format!("{:.1}%", 100.0 * x));
        vec![
            (
                "free lane, a job's first call",
                c(self.observed.first_free.total()),
                pct(&self.model.first_free),
            ),
            (
                "free lane, a later call",
                c(self.observed.later_free.total()),
                pct(&self.model.later_free),
            ),
            ("paid lane", c(self.observed.paid.total()), pct(&self.model.paid)),
        ]
    }
}

fn gate_rows_of(t: [&GateTally; 3]) -> Vec<WhatIfRow> {
    let count = |f: fn(&GateTally) -> u64| t.map(|t| c(f(t)));
    let rate = |f: fn(&GateTally) -> Option<f64>| t.map(|t| format_ratio(f(t), 3));
    let r = |name, [a, b, d]: [String; 3]| row(name, a, b, d);
    vec![
        r("decisions", count(|t| t.decisions)),
        r("admit_free", count(|t| t.admit_free)),
        r("defer", count(|t| t.defer)),
        r("reserved", count(|t| t.reserved)),
        r("free admits that missed their slack", count(|t| t.free_admit_misses)),
        r("  ÷ free admits", rate(GateTally::free_admit_miss_rate)),
        r("free admits whose miss is not known", count(|t| t.free_admits_unknown)),
        r(
            "defers that fit a reserved worker",
            count(|t| t.defers_that_fit_reserved),
        ),
        r("  ÷ defers", rate(GateTally::defers_that_fit_reserved_rate)),
        r(
            "reserved shifts that fit free, no tax",
            count(|t| t.reserved_that_fit_free),
        ),
        r("  ÷ reserved shifts", rate(GateTally::reserved_that_fit_free_rate)),
    ]
}

/// The gate's counts and three ratios: as logged, decided again today, with the change.
pub fn gate_rows(g: &GateWhatIf) -> Vec<WhatIfRow> {
    gate_rows_of([&g.logged, &g.now, &g.changed])
}

impl WhatIf {
    /// The what-if as aligned text.
    pub fn to_text(&self) -> String {
        let mut s = format!("what-if for ISO week {} (replay seed {})\n\n", self.iso_week, self.seed);
        if self.changes.is_empty() {
            s += "nothing the what-if reads differs from today's settings\n";
        } else {
            s += "the change:\n";
            for ch in &self.changes {
                s += &format!("  {}: {} → {}\n", ch.key, ch.now, ch.with_change);
            }
        }
        let table = |rows: &[WhatIfRow], heads: [&str; 3]| {
            let mut t = format!("{:<38} {:>12} {:>14} {:>16}\n", "metric", heads[0], heads[1], heads[2]);
            for r in rows {
                t += &format!("{:<38} {:>12} {:>14} {:>16}\n", r.name, r.logged, r.now, r.with_change);
            }
            t
        };
        match &self.lane {
            Some(l) => {
                s += &format!(
                    "\nlane policy: the week's {} jobs routed again with the week's outcome rates\n",
                    format_count(l.logged.jobs)
                );
                s += &format!(
                    "{:<32} {:>9} {:>8} {:>10} {:>10} {:>10}\n",
                    "outcome rates", "attempts", "ok", "retryable", "ambiguous", "permanent"
                );
                for (name, n, p) in l.rate_rows() {
                    s += &format!("{name:<32} {n:>9} {:>8} {:>10} {:>10} {:>10}\n", p[0], p[1], p[2], p[3]);
                }
                for a in &l.model.assumptions {
                    s += &format!("  assumed: {a}\n");
                }
                s += "\n";
                s += &table(&l.rows(), ["as logged", "replayed now", "with the change"]);
            }
            None => s += "\nlane policy: no job started in this week\n",
        }
        match &self.gate {
            Some(g) => {
                s += &format!(
                    "\ndwell gate: the week's {} decisions decided again\n",
                    c(g.logged.decisions)
                );
                s += &table(&gate_rows(g), ["as logged", "decided now", "with the change"]);
                if g.changes.is_empty() {
                    s += "decisions that change: none\n";
                } else {
                    s += "decisions that change:\n";
                    for ch in &g.changes {
                        s += &format!("  {} → {}: {}\n", ch.from, ch.to, c(ch.decisions));
                    }
                }
                if g.logged_mismatches > 0 {
                    s += &format!(
                        "{} logged decisions differ from the safe decision under today's caps\n",
                        c(g.logged_mismatches)
                    );
                }
                if g.own_cap > 0 {
                    s += &format!(
                        "{} decisions logged their own queue-age cap and keep it\n",
                        c(g.own_cap)
                    );
                }
            }
            None => s += "\ndwell gate: no decision was logged in this week\n",
        }
        s
    }
}
