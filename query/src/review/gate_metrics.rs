//! The dwell gate's weekly review (seed 003 "What you should log before the next review", SPEC
//! 5.3): the three ratios and the mismatch count of `gate_weekly` for one ISO week, with seed 003's
//! freeze alert on the free-admit miss rate, and the week before beside it.

use datafusion::arrow::array::RecordBatch;
use serde::Serialize;

use crate::error::Result;
use crate::review::metrics::{AlertCheck, AlertState, f64_col, i64_col, pick_week, week_cols};
use crate::session::Session;
use crate::words::{format_count, format_ratio};

/// The action seed 003 asks for when free admits miss their slack too often: disable the feature
/// flag (seed 003 rollback step 1, "Disable the feature flag that is named dwell_gate_enabled").
pub const FREEZE_ACTION: &str = "freeze dwell_gate_enabled";

/// Seed 003's review threshold (`lane.yaml` `gate.free_admit_miss_rate`): the alert fires when the
/// week's ratio is above it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GateThresholds {
    /// Free admits that missed slack ÷ free admits, a ratio: 0.01 (seed 003 "If misses exceed one
    /// percent of free admits, freeze the flag").
    pub free_admit_miss_rate: f64,
}

impl From<&laneledger_store::LaneConfig> for GateThresholds {
    /// lane.yaml's `gate.free_admit_miss_rate`.
    fn from(c: &laneledger_store::LaneConfig) -> Self {
        GateThresholds {
            free_admit_miss_rate: c.gate.free_admit_miss_rate,
        }
    }
}

impl Default for GateThresholds {
    /// 0.01, seed 003's one percent.
    fn default() -> Self {
        GateThresholds {
            free_admit_miss_rate: 0.01,
        }
    }
}

impl Session {
    /// seed 003's freeze threshold from the config's `gate.free_admit_miss_rate`.
    pub fn gate_thresholds(&self) -> GateThresholds {
        GateThresholds::from(self.config())
    }
}

/// One week's row of `gate_weekly` (SPEC 5.3): counts of logged decisions whose `decided_at` falls
/// in the ISO week, and seed 003's three ratios. A ratio is `None` when its denominator is 0.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateWeek {
    /// `2026-W48`.
    pub iso_week: String,
    /// Monday 00:00 UTC of the week, RFC 3339.
    pub week_start: String,
    /// Decisions logged in the week.
    pub decisions: i64,
    /// Logged `admit_free` decisions.
    pub admit_free: i64,
    /// Logged `defer` decisions.
    pub defer: i64,
    /// Logged `reserved` decisions (reserved shifts).
    pub reserved: i64,
    /// `admit_free` decisions that later recorded `slack_miss = true` (seed 003's page).
    pub free_admit_misses: i64,
    /// free_admit_misses ÷ admit_free (seed 003's first ratio: the service guess was too kind).
    pub free_admit_miss_rate: Option<f64>,
    /// `defer` decisions with queue_age_s + reserved_service_s ≤ deadline_slack_s (seconds).
    pub defers_that_fit_reserved: i64,
    /// defers_that_fit_reserved ÷ defer (seed 003's second ratio: work a reserved turn could save).
    pub defers_that_fit_reserved_rate: Option<f64>,
    /// `reserved` decisions with queue_age_s + expected_service_s ≤ deadline_slack_s (seconds):
    /// dwell without the retry tax would have fit.
    pub reserved_that_fit_free: i64,
    /// reserved_that_fit_free ÷ reserved (seed 003's third ratio: the caps are stricter than the
    /// cutoff).
    pub reserved_that_fit_free_rate: Option<f64>,
    /// Decisions whose logged `decision` differs from seed 003 `decide_safe` on the same row.
    pub decision_mismatches: i64,
}

/// The dwell gate's review of one ISO week.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateReview {
    /// The week's figures.
    pub week: GateWeek,
    /// The figures of the calendar week before it, when it has decisions.
    pub previous: Option<GateWeek>,
    /// Seed 003's alert: `free_admit_miss_rate` above the threshold.
    pub alert: AlertCheck,
    /// [`FREEZE_ACTION`] when the alert fires, else `None`.
    pub action: Option<&'static str>,
}

fn week_from_row(b: &RecordBatch, row: usize) -> GateWeek {
    let (iso_week, week_start) = week_cols(b, row);
    GateWeek {
        iso_week,
        week_start,
        decisions: i64_col(b, "decisions", row),
        admit_free: i64_col(b, "admit_free", row),
        defer: i64_col(b, "defer", row),
        reserved: i64_col(b, "reserved", row),
        free_admit_misses: i64_col(b, "free_admit_misses", row),
        free_admit_miss_rate: f64_col(b, "free_admit_miss_rate", row),
        defers_that_fit_reserved: i64_col(b, "defers_that_fit_reserved", row),
        defers_that_fit_reserved_rate: f64_col(b, "defers_that_fit_reserved_rate", row),
        reserved_that_fit_free: i64_col(b, "reserved_that_fit_free", row),
        reserved_that_fit_free_rate: f64_col(b, "reserved_that_fit_free_rate", row),
        decision_mismatches: i64_col(b, "decision_mismatches", row),
    }
}

/// Seed 003's alert for one week: `free_admit_miss_rate` against `thresholds` (above fires; no
/// free admits is "no data").
pub fn gate_alert(w: &GateWeek, thresholds: &GateThresholds) -> AlertCheck {
    crate::review::metrics::check(
        "free_admit_miss_rate",
        w.free_admit_miss_rate,
        thresholds.free_admit_miss_rate,
        format!(
            "{} of {} free admits missed their slack",
            format_count(w.free_admit_misses),
            format_count(w.admit_free)
        ),
    )
}

/// The SQL behind the gate weeks list (also shown on the site).
pub const GATE_WEEKS_SQL: &str = "SELECT * FROM gate_weekly ORDER BY week_start";

impl Session {
    /// Every ISO week with gate decisions (by `decided_at`), oldest first.
    pub async fn gate_weeks(&self) -> Result<Vec<GateWeek>> {
        self.weekly_rows("gate_weeks", GATE_WEEKS_SQL, week_from_row).await
    }

    /// The dwell gate's review of `week` (`2026-W48`), or of the latest week with decisions when
    /// `None`, with seed 003's freeze alert at `thresholds` (default 1%).
    ///
    /// Errors: [`crate::Error::BadWeek`] for a label that is not an ISO week, [`crate::Error::UnknownWeek`] when
    /// the ledger holds no decision in it (or no decision at all).
    pub async fn gate_review(&self, week: Option<&str>, thresholds: &GateThresholds) -> Result<GateReview> {
        let (w, previous) = pick_week(&self.gate_weeks().await?, week, |g: &GateWeek| &g.iso_week)?;
        let alert = gate_alert(&w, thresholds);
        Ok(GateReview {
            action: (alert.state == AlertState::Alert).then_some(FREEZE_ACTION),
            alert,
            previous,
            week: w,
        })
    }
}

impl GateReview {
    /// The review as aligned text: the week's counts and ratios with the week before beside them,
    /// then the alert and, when it fires, the action.
    pub fn to_text(&self) -> String {
        let w = &self.week;
        let p = self.previous.as_ref();
        let mut s = format!(
            "dwell gate, ISO week {} (decisions from {})\n\n",
            w.iso_week, w.week_start
        );
        let head_prev = p.map_or("—".to_string(), |p| p.iso_week.clone());
        s += &format!("{:<34} {:>12} {:>12}\n", "metric", w.iso_week, head_prev);
        let count = |f: fn(&GateWeek) -> i64| (format_count(f(w)), p.map_or("—".into(), |p| format_count(f(p))));
        let ratio =
            |f: fn(&GateWeek) -> Option<f64>| (format_ratio(f(w), 3), p.map_or("—".into(), |p| format_ratio(f(p), 3)));
        let rows: Vec<(&str, (String, String))> = vec![
            ("decisions", count(|w| w.decisions)),
            ("admit_free", count(|w| w.admit_free)),
            ("defer", count(|w| w.defer)),
            ("reserved", count(|w| w.reserved)),
            ("free admits that missed slack", count(|w| w.free_admit_misses)),
            ("  ÷ free admits", ratio(|w| w.free_admit_miss_rate)),
            (
                "defers that fit a reserved worker",
                count(|w| w.defers_that_fit_reserved),
            ),
            ("  ÷ defers", ratio(|w| w.defers_that_fit_reserved_rate)),
            ("reserved that fit free, no tax", count(|w| w.reserved_that_fit_free)),
            ("  ÷ reserved shifts", ratio(|w| w.reserved_that_fit_free_rate)),
            ("decisions ≠ the safe decision", count(|w| w.decision_mismatches)),
        ];
        for (name, (now, before)) in rows {
            s += &format!("{name:<34} {now:>12} {before:>12}\n");
        }
        let a = &self.alert;
        s += &format!(
            "\nalerts\n  {:<34} {:>8}  threshold > {:<6} {}\n",
            a.metric,
            format_ratio(a.value, 3),
            a.threshold,
            a.state.as_str().to_uppercase()
        );
        if let Some(action) = self.action {
            s += &format!("  action: {action}\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn week(admit_free: i64, misses: i64) -> GateWeek {
        GateWeek {
            iso_week: "2026-W48".into(),
            week_start: "2026-11-23T00:00:00Z".into(),
            decisions: admit_free,
            admit_free,
            defer: 0,
            reserved: 0,
            free_admit_misses: misses,
            free_admit_miss_rate: (admit_free > 0).then(|| misses as f64 / admit_free as f64),
            defers_that_fit_reserved: 0,
            defers_that_fit_reserved_rate: None,
            reserved_that_fit_free: 0,
            reserved_that_fit_free_rate: None,
            decision_mismatches: 0,
        }
    }

    #[test]
    fn the_freeze_fires_above_one_percent_only() {
        let t = GateThresholds::default();
        assert_eq!(gate_alert(&week(100, 1), &t).state, AlertState::Pass);
        assert_eq!(gate_alert(&week(100, 2), &t).state, AlertState::Alert);
        assert_eq!(gate_alert(&week(0, 0), &t).state, AlertState::NoData);
        let loose = GateThresholds {
            free_admit_miss_rate: 0.05,
        };
        assert_eq!(gate_alert(&week(100, 2), &loose).state, AlertState::Pass);
    }
}
