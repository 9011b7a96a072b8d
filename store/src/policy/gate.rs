//! Seed 003 (`dwell_gate.py`): the free-path dwell gate.
//!
//! Free-path dwell is queue age + expected service + retry tax, all in seconds. The gate admits a
//! job on the free path only while that dwell still fits the remaining deadline slack; queue age
//! gets a veto (defer) before slack is compared, and a non-positive service guess or slack fails
//! closed (defer). Utilization plays no part.

/// The longest queue age, in seconds, the gate tolerates before it defers a job (seed 003
/// `Job.max_queue_age_s = 30.0`).
pub const DEFAULT_MAX_QUEUE_AGE_S: f64 = 30.0;

/// The fields the gate reads for one attempt, all in seconds (seed 003 `Job`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GateInput {
    /// Seconds since the job was enqueued (seed 003 `queue_age_s`).
    pub queue_age_s: f64,
    /// The declared service time on the free path, in seconds (seed 003 `expected_service_s`).
    pub expected_service_s: f64,
    /// One unused retry priced in wall seconds (seed 003 `retry_tax_s`).
    pub retry_tax_s: f64,
    /// Cutoff time minus elapsed wall time, in seconds; negative once the cutoff has passed (seed
    /// 003 `deadline_slack_s`).
    pub deadline_slack_s: f64,
    /// The queue-age cap, in seconds, above which the job is deferred (seed 003
    /// `max_queue_age_s`, default [`DEFAULT_MAX_QUEUE_AGE_S`]).
    pub max_queue_age_s: f64,
}

impl GateInput {
    /// A gate input with the default queue-age cap [`DEFAULT_MAX_QUEUE_AGE_S`], all arguments in
    /// seconds, in the seed's positional order (seed 003 `Job(queue_age_s, expected_service_s,
    /// retry_tax_s, deadline_slack_s)`).
    pub fn new(queue_age_s: f64, expected_service_s: f64, retry_tax_s: f64, deadline_slack_s: f64) -> Self {
        GateInput {
            queue_age_s,
            expected_service_s,
            retry_tax_s,
            deadline_slack_s,
            max_queue_age_s: DEFAULT_MAX_QUEUE_AGE_S,
        }
    }
}

/// The gate's decision for one attempt (seed 003 decision field: `admit_free | defer | reserved`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GateDecision {
    /// Dwell fits the slack: run on the free path (seed 003 `'admit_free'`).
    AdmitFree,
    /// Queue age over the cap, or a non-positive service guess or slack: hold the job (seed 003
    /// `'defer'`).
    Defer,
    /// Dwell exceeds the slack: hand the job to a reserved worker (seed 003 `'reserved'`).
    Reserved,
}

impl GateDecision {
    /// The seed's spelling: `"admit_free"`, `"defer"` or `"reserved"` (seed 003 `decide` return
    /// values).
    pub fn as_str(self) -> &'static str {
        match self {
            GateDecision::AdmitFree => "admit_free",
            GateDecision::Defer => "defer",
            GateDecision::Reserved => "reserved",
        }
    }

    /// The decision for the seed's spelling, `None` for anything else (exact, case-sensitive)
    /// (seed 003 decision field).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "admit_free" => Some(GateDecision::AdmitFree),
            "defer" => Some(GateDecision::Defer),
            "reserved" => Some(GateDecision::Reserved),
            _ => None,
        }
    }
}

/// Free-path dwell in seconds: queue age + expected service + retry tax (seed 003 `dwell`).
pub fn dwell(job: &GateInput) -> f64 {
    job.queue_age_s + job.expected_service_s + job.retry_tax_s
}

/// The gate without guards (seed 003 `decide`): defer when queue age (seconds) is strictly over
/// the cap, else reserved when dwell (seconds) is strictly over the slack, else admit on the free
/// path.
pub fn decide(job: &GateInput) -> GateDecision {
    if job.queue_age_s > job.max_queue_age_s {
        return GateDecision::Defer;
    }
    if dwell(job) > job.deadline_slack_s {
        return GateDecision::Reserved;
    }
    GateDecision::AdmitFree
}

/// The gate with its fail-closed guards (seed 003 `decide_safe`): defer when the expected service
/// or the deadline slack (seconds) is zero or negative, otherwise [`decide`].
pub fn decide_safe(job: &GateInput) -> GateDecision {
    if job.expected_service_s <= 0.0 || job.deadline_slack_s <= 0.0 {
        return GateDecision::Defer;
    }
    decide(job)
}

/// The drill's printed line for job number `i` (seed 003 `'job=%s dwell=%.0f slack=%.0f
/// decision=%s'`, with [`decide_safe`]); dwell and slack are whole seconds.
///
/// Rust's `{:.0}` rounds the exact binary value half to even, as Python's `%.0f` does.
pub fn drill_line(i: usize, job: &GateInput) -> String {
    format!(
        "job={} dwell={:.0} slack={:.0} decision={}",
        i,
        dwell(job),
        job.deadline_slack_s,
        decide_safe(job).as_str()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// seed 003 `samples`, in order.
    fn samples() -> [GateInput; 6] {
        [
            GateInput::new(12.0, 8.0, 8.0, 90.0), // expected admit_free
            GateInput::new(41.0, 8.0, 8.0, 90.0), // expected defer, age cap
            GateInput::new(20.0, 8.0, 8.0, 30.0), // expected reserved, dwell over slack
            GateInput::new(20.0, 8.0, 0.0, 30.0), // expected admit_free, retry tax removed
            GateInput::new(10.0, 0.0, 8.0, 90.0), // expected defer, non-positive service
            GateInput::new(10.0, 8.0, 8.0, -1.0), // expected defer, negative slack
        ]
    }

    #[test]
    fn the_six_samples_print_the_six_expected_lines() {
        let expected = [
            "job=1 dwell=28 slack=90 decision=admit_free",
            "job=2 dwell=57 slack=90 decision=defer",
            "job=3 dwell=36 slack=30 decision=reserved",
            "job=4 dwell=28 slack=30 decision=admit_free",
            "job=5 dwell=18 slack=90 decision=defer",
            "job=6 dwell=26 slack=-1 decision=defer",
        ];
        let lines: Vec<String> = samples()
            .iter()
            .enumerate()
            .map(|(i, job)| drill_line(i + 1, job))
            .collect();
        assert_eq!(lines, expected);
    }

    #[test]
    fn the_injected_stuck_attempt_defers() {
        // age 50, slack 40, retry tax a full service interval of 8
        let job = GateInput::new(50.0, 8.0, 8.0, 40.0);
        assert_eq!(dwell(&job), 66.0);
        assert_eq!(decide_safe(&job), GateDecision::Defer);
        // the age cap fires first, before dwell is compared with slack
        assert_eq!(decide(&job), GateDecision::Defer);
        assert_eq!(drill_line(7, &job), "job=7 dwell=66 slack=40 decision=defer");
    }

    #[test]
    fn a_zero_service_guess_defers() {
        let job = GateInput::new(10.0, 0.0, 8.0, 90.0);
        assert_eq!(decide_safe(&job), GateDecision::Defer);
        // without the guard the under-counted dwell would be admitted too early
        assert_eq!(decide(&job), GateDecision::AdmitFree);
        let negative = GateInput::new(10.0, -3.0, 8.0, 90.0);
        assert_eq!(decide_safe(&negative), GateDecision::Defer);
    }

    #[test]
    fn the_boundaries_are_strict() {
        // age exactly at the cap is not over it; dwell exactly at slack still fits
        let job = GateInput::new(30.0, 8.0, 2.0, 40.0);
        assert_eq!(decide_safe(&job), GateDecision::AdmitFree);
        let over = GateInput {
            max_queue_age_s: 29.0,
            ..job
        };
        assert_eq!(decide_safe(&over), GateDecision::Defer);
        let tight = GateInput::new(30.0, 8.0, 2.5, 40.0);
        assert_eq!(decide_safe(&tight), GateDecision::Reserved);
    }

    #[test]
    fn decisions_round_trip_through_str() {
        for d in [GateDecision::AdmitFree, GateDecision::Defer, GateDecision::Reserved] {
            assert_eq!(GateDecision::parse(d.as_str()), Some(d));
        }
        assert_eq!(GateDecision::parse("Defer"), None);
        assert_eq!(GateDecision::parse(""), None);
    }
}
