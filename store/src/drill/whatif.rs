//! What-if: one week decided again under other settings, to "adjust one cap at a time, then rerun
//! the samples" (seed 003's closing advice) before changing lane.yaml.
//!
//! Two halves, both pure (no I/O, no clock):
//!
//! - **The dwell gate, exactly.** Every logged decision is decided again with seed 003
//!   `decide_safe` under today's caps and under the changed ones ([`gate_whatif`]), and the three
//!   weekly ratios are counted for the decisions as logged, as decided today and as decided with
//!   the change. `gate.max_queue_age_s` is the cap of rows that logged none (as in SQL), so a row
//!   that logged its own cap keeps it; `gate.reserved_service_s` likewise.
//! - **The lane policy, by simulation.** The week's jobs are routed again by seed 000 `next_lane`
//!   with the given free budget and pin list ([`replay`]), with outcomes drawn from the week's
//!   observed rates ([`LaneModel`]) in seed 000's drill model: a job's first free call meets the
//!   job's own trouble (ambiguous, permanent) and the lane's load, a later free call the rates of
//!   later free calls, a paid call the paid lane's rates. Draws come from [`SplitMix64`] streams
//!   keyed by (seed, job, lane), so the two policies meet the same luck: the n-th free call of job
//!   i draws the same number under both, and a change of figures is the policy's, not the dice's.
//!
//! Duplicates follow seed 000's story: an ambiguous outcome in `pin_on` pins the job and its key
//! is reconciled, so the late output and the retry's are one artifact ("Pin + dedup"); an
//! ambiguous outcome not in `pin_on` is retried as a fresh call, and its late output is a second
//! artifact for the key ("Your retry sees a fresh job … Both get accepted").

use serde::Serialize;

use crate::drill::SplitMix64;
use crate::format::decision::Decision;
use crate::model::record::Outcome;
use crate::policy::gate::{GateDecision, decide_safe};

/// The four outcomes in the order every rate array here uses.
pub const OUTCOMES: [Outcome; 4] = [Outcome::Ok, Outcome::Retryable, Outcome::Ambiguous, Outcome::Permanent];

fn index(o: Outcome) -> usize {
    match o {
        Outcome::Ok => 0,
        Outcome::Retryable => 1,
        Outcome::Ambiguous => 2,
        Outcome::Permanent => 3,
    }
}

/// Observed attempts of one kind of call, by outcome ([`OUTCOMES`] order), with their tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CallCounts {
    /// Attempts that ended with each outcome.
    pub attempts: [u64; 4],
    /// Σ (tokens_in + tokens_out) of those attempts, tokens.
    pub tokens: [u64; 4],
}

impl CallCounts {
    /// Adds `n` attempts ending `outcome` with `tokens` tokens between them.
    pub fn add(&mut self, outcome: Outcome, n: u64, tokens: u64) {
        self.attempts[index(outcome)] += n;
        self.tokens[index(outcome)] += tokens;
    }

    /// All attempts counted.
    pub fn total(&self) -> u64 {
        self.attempts.iter().sum()
    }

    /// The share of each outcome, or `None` with no attempts.
    pub fn rates(&self) -> Option<[f64; 4]> {
        let n = self.total();
        (n > 0).then(|| self.attempts.map(|a| a as f64 / n as f64))
    }
}

/// The week's attempts as the replay reads them: a job's first free call, its later free calls,
/// its paid calls. Open attempts (no outcome yet) are left out by the caller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Observed {
    /// The first free-lane attempt of each job.
    pub first_free: CallCounts,
    /// Every later free-lane attempt.
    pub later_free: CallCounts,
    /// Every paid-lane attempt.
    pub paid: CallCounts,
}

/// seed 000's drill tokens: 800 a free attempt, 1,200 a paid one, used where the week has no
/// attempt of a kind to measure.
const DRILL_FREE_TOKENS: f64 = 800.0;
const DRILL_PAID_TOKENS: f64 = 1_200.0;

/// Outcome probabilities and mean tokens for each kind of call, from [`Observed`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LaneModel {
    /// A job's first free call: P(ok, retryable, ambiguous, permanent).
    pub first_free: [f64; 4],
    /// A later free call.
    pub later_free: [f64; 4],
    /// A paid call.
    pub paid: [f64; 4],
    /// Mean tokens of a free attempt by outcome.
    pub free_tokens: [f64; 4],
    /// Mean tokens of a paid attempt by outcome.
    pub paid_tokens: [f64; 4],
    /// What the week did not show and the model assumed instead, in words.
    pub assumptions: Vec<String>,
}

/// Mean tokens by outcome over `counts`; an outcome never seen takes the mean of the kind's
/// attempts, and a kind never seen takes `fallback`.
fn mean_tokens(counts: &[&CallCounts], fallback: f64) -> [f64; 4] {
    let (mut n, mut t) = ([0u64; 4], [0u64; 4]);
    for c in counts {
        for i in 0..4 {
            n[i] += c.attempts[i];
            t[i] += c.tokens[i];
        }
    }
    let (all_n, all_t): (u64, u64) = (n.iter().sum(), t.iter().sum());
    let overall = if all_n > 0 {
        all_t as f64 / all_n as f64
    } else {
        fallback
    };
    std::array::from_fn(|i| if n[i] > 0 { t[i] as f64 / n[i] as f64 } else { overall })
}

impl LaneModel {
    /// The model of a week: each kind of call's observed rates and mean tokens. A kind the week
    /// has no attempt of takes seed 000's drill assumption, named in `assumptions`: a first free
    /// call that is always ok, a later free call that meets the first call's lane load only
    /// (retryable at its rate, else ok), a paid call that always succeeds, 800 tokens a free
    /// attempt and 1,200 a paid one.
    pub fn from_observed(o: &Observed) -> LaneModel {
        let mut assumptions = Vec::new();
        let first_free = o.first_free.rates().unwrap_or_else(|| {
            assumptions.push("no free attempt this week: a free call is assumed to succeed".to_string());
            [1.0, 0.0, 0.0, 0.0]
        });
        let later_free = o.later_free.rates().unwrap_or_else(|| {
            assumptions.push(
                "no free retry this week: a free retry is assumed to meet the first call's retryable rate, else ok"
                    .to_string(),
            );
            [1.0 - first_free[1], first_free[1], 0.0, 0.0]
        });
        let paid = o.paid.rates().unwrap_or_else(|| {
            assumptions
                .push("no paid attempt this week: a paid call is assumed to succeed with 1,200 tokens".to_string());
            [1.0, 0.0, 0.0, 0.0]
        });
        LaneModel {
            first_free,
            later_free,
            paid,
            free_tokens: mean_tokens(&[&o.first_free, &o.later_free], DRILL_FREE_TOKENS),
            paid_tokens: mean_tokens(&[&o.paid], DRILL_PAID_TOKENS),
            assumptions,
        }
    }
}

/// The lane policy settings the replay follows (lane.yaml `lanes`, `keys.max_attempts_per_turn`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LanePolicy {
    /// `lanes.free.max_attempts`: free attempts before a job is pinned to paid.
    pub free_max_attempts: u32,
    /// `lanes.free.pin_on`: outcomes that pin a job to paid.
    pub pin_on: Vec<Outcome>,
    /// `lanes.paid.max_attempts`: paid attempts a job may use.
    pub paid_max_attempts: u32,
    /// `keys.max_attempts_per_turn`: attempts in all.
    pub max_attempts_per_turn: u32,
}

impl From<&crate::config::LaneConfig> for LanePolicy {
    fn from(c: &crate::config::LaneConfig) -> Self {
        LanePolicy {
            free_max_attempts: c.lanes.free.max_attempts,
            pin_on: c.lanes.free.pin_on.clone(),
            paid_max_attempts: c.lanes.paid.max_attempts,
            max_attempts_per_turn: c.keys.max_attempts_per_turn,
        }
    }
}

/// seed 000 `next_lane` with `pin_on` as a setting, answering `(lane, pinned)` with lane `"free"`
/// or `"paid"`: already pinned, then an outcome in `pin_on`,
/// then the free budget spent (`>=`) pin to paid; otherwise free, unpinned. With seed 000's list
/// it answers as [`crate::policy::lane::next_lane`].
pub fn next_lane_with(
    free_attempts: u32,
    pinned: bool,
    last: Option<Outcome>,
    max_free_attempts: u32,
    pin_on: &[Outcome],
) -> (&'static str, bool) {
    if pinned || last.is_some_and(|o| pin_on.contains(&o)) || free_attempts >= max_free_attempts {
        return ("paid", true);
    }
    ("free", false)
}

/// The drill table of a replay (seed 000 "Run the 300-Job Drill"), with its counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ReplayTable {
    /// Jobs routed.
    pub jobs: u64,
    /// Jobs (one idempotency key each) with at least one artifact.
    pub unique_accepted_artifacts: u64,
    /// Attempts on the free lane.
    pub free_attempts: u64,
    /// Attempts on the paid lane.
    pub paid_attempts: u64,
    /// Σ tokens, rounded to a whole token.
    pub total_tokens: u64,
    /// Σ over keys of (artifacts − 1).
    pub duplicate_artifacts: u64,
    /// Jobs with both a free and a paid attempt.
    pub cross_lane_jobs: u64,
    /// Jobs that ended with no artifact (their budgets spent).
    pub failed_jobs: u64,
}

impl ReplayTable {
    /// total tokens ÷ unique accepted artifacts.
    pub fn tokens_per_accepted_artifact(&self) -> Option<f64> {
        (self.unique_accepted_artifacts > 0).then(|| self.total_tokens as f64 / self.unique_accepted_artifacts as f64)
    }
    /// 100 × duplicate artifacts ÷ jobs.
    pub fn duplicate_artifacts_per_100_jobs(&self) -> Option<f64> {
        (self.jobs > 0).then(|| 100.0 * self.duplicate_artifacts as f64 / self.jobs as f64)
    }
    /// cross-lane jobs ÷ jobs.
    pub fn cross_lane_retries_per_job(&self) -> Option<f64> {
        (self.jobs > 0).then(|| self.cross_lane_jobs as f64 / self.jobs as f64)
    }
}

/// The seed of stream `lane` (0 free, 1 paid) of job `job` under `seed`: a SplitMix64 output of a
/// mix of the three, so streams of neighbouring jobs do not overlap.
fn stream(seed: u64, job: u64, lane: u64) -> SplitMix64 {
    let mut s = SplitMix64::new(seed);
    let a = s.next_u64();
    let mut j = SplitMix64::new(a ^ job.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    let b = j.next_u64();
    SplitMix64::new(b ^ lane.wrapping_mul(0xA076_1D64_78BD_642F))
}

fn draw(rng: &mut SplitMix64, p: &[f64; 4]) -> Outcome {
    let u = rng.unit();
    let mut acc = 0.0;
    for (i, pi) in p.iter().enumerate() {
        acc += pi;
        if u < acc {
            return OUTCOMES[i];
        }
    }
    // Rounding left the sum just under 1: the last outcome with any weight.
    OUTCOMES[p.iter().rposition(|&x| x > 0.0).unwrap_or(0)]
}

/// Routes `jobs` jobs under `policy` with outcomes drawn from `model`, from the streams of
/// `seed`, and counts seed 000's drill table. The same arguments give the same table.
pub fn replay(model: &LaneModel, policy: &LanePolicy, jobs: u64, seed: u64) -> ReplayTable {
    let mut t = ReplayTable {
        jobs,
        ..ReplayTable::default()
    };
    let mut tokens = 0.0f64;
    for job in 0..jobs {
        let mut free_rng = stream(seed, job, 0);
        let mut paid_rng = stream(seed, job, 1);
        let (mut free_n, mut paid_n) = (0u32, 0u32);
        let mut pinned = false;
        let mut last = None;
        let mut done = false;
        // The key's artifact (a success, or a reconciled late output) and the late outputs of
        // ambiguous calls retried as fresh ones.
        let mut keyed = false;
        let mut fresh_late = 0u64;
        for _ in 0..policy.max_attempts_per_turn {
            let (lane, pin) = next_lane_with(free_n, pinned, last, policy.free_max_attempts, &policy.pin_on);
            pinned = pin;
            let outcome = match lane {
                "free" => {
                    let p = if free_n == 0 {
                        &model.first_free
                    } else {
                        &model.later_free
                    };
                    let o = draw(&mut free_rng, p);
                    free_n += 1;
                    tokens += model.free_tokens[index(o)];
                    o
                }
                _ => {
                    if paid_n >= policy.paid_max_attempts {
                        break;
                    }
                    let o = draw(&mut paid_rng, &model.paid);
                    paid_n += 1;
                    tokens += model.paid_tokens[index(o)];
                    o
                }
            };
            match outcome {
                Outcome::Ok => {
                    keyed = true;
                    done = true;
                }
                Outcome::Ambiguous if policy.pin_on.contains(&Outcome::Ambiguous) => keyed = true,
                Outcome::Ambiguous => fresh_late += 1,
                _ => {}
            }
            if done {
                break;
            }
            last = Some(outcome);
        }
        let artifacts = u64::from(keyed) + fresh_late;
        t.free_attempts += u64::from(free_n);
        t.paid_attempts += u64::from(paid_n);
        if artifacts > 0 {
            t.unique_accepted_artifacts += 1;
            t.duplicate_artifacts += artifacts - 1;
        } else {
            t.failed_jobs += 1;
        }
        if free_n > 0 && paid_n > 0 {
            t.cross_lane_jobs += 1;
        }
    }
    t.total_tokens = tokens.round() as u64;
    t
}

/// The gate caps a what-if changes (lane.yaml `gate`), each the value for rows that logged none.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GateCaps {
    /// `gate.max_queue_age_s`, seconds.
    pub max_queue_age_s: f64,
    /// `gate.reserved_service_s`, seconds.
    pub reserved_service_s: f64,
}

impl From<&crate::config::LaneConfig> for GateCaps {
    fn from(c: &crate::config::LaneConfig) -> Self {
        GateCaps {
            max_queue_age_s: c.gate.max_queue_age_s,
            reserved_service_s: c.gate.reserved_service_s,
        }
    }
}

/// Seed 003's weekly counts and three ratios over one set of decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct GateTally {
    /// Decisions counted.
    pub decisions: u64,
    /// `admit_free` decisions.
    pub admit_free: u64,
    /// `defer` decisions.
    pub defer: u64,
    /// `reserved` decisions.
    pub reserved: u64,
    /// Free admits whose job later missed its slack (known only where the logged decision was a
    /// free admit: a job that did not run free has no free miss to count).
    pub free_admit_misses: u64,
    /// Free admits whose logged decision was not a free admit: whether they would have missed is
    /// not known, and they count as no miss.
    pub free_admits_unknown: u64,
    /// Defers with queue age + reserved service ≤ slack.
    pub defers_that_fit_reserved: u64,
    /// Reserved shifts with queue age + expected service ≤ slack.
    pub reserved_that_fit_free: u64,
}

fn ratio(n: u64, d: u64) -> Option<f64> {
    (d > 0).then(|| n as f64 / d as f64)
}

impl GateTally {
    /// free admit misses ÷ free admits.
    pub fn free_admit_miss_rate(&self) -> Option<f64> {
        ratio(self.free_admit_misses, self.admit_free)
    }
    /// defers that fit a reserved worker ÷ defers.
    pub fn defers_that_fit_reserved_rate(&self) -> Option<f64> {
        ratio(self.defers_that_fit_reserved, self.defer)
    }
    /// reserved shifts that fit free ÷ reserved shifts.
    pub fn reserved_that_fit_free_rate(&self) -> Option<f64> {
        ratio(self.reserved_that_fit_free, self.reserved)
    }

    fn count(&mut self, d: &Decision, decision: GateDecision, reserved_service_s: f64) {
        self.decisions += 1;
        match decision {
            GateDecision::AdmitFree => {
                self.admit_free += 1;
                if d.decision != GateDecision::AdmitFree {
                    self.free_admits_unknown += 1;
                } else if d.slack_miss == Some(true) {
                    self.free_admit_misses += 1;
                }
            }
            GateDecision::Defer => {
                self.defer += 1;
                if d.queue_age_s + reserved_service_s <= d.deadline_slack_s {
                    self.defers_that_fit_reserved += 1;
                }
            }
            GateDecision::Reserved => {
                self.reserved += 1;
                if d.queue_age_s + d.expected_service_s <= d.deadline_slack_s {
                    self.reserved_that_fit_free += 1;
                }
            }
        }
    }
}

/// How many decisions went from one decision to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DecisionChange {
    /// The decision under today's caps.
    pub from: &'static str,
    /// The decision with the change.
    pub to: &'static str,
    /// Decisions.
    pub decisions: u64,
}

/// The gate half of a what-if.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateWhatIf {
    /// The decisions as the router logged them.
    pub logged: GateTally,
    /// `decide_safe` under today's caps.
    pub now: GateTally,
    /// `decide_safe` with the change.
    pub changed: GateTally,
    /// Logged decisions that differ from `decide_safe` under today's caps.
    pub logged_mismatches: u64,
    /// Decisions that logged their own queue-age cap, which the change leaves as it is.
    pub own_cap: u64,
    /// From today's decision to the changed one, by pair, in a fixed order; pairs with none left
    /// out.
    pub changes: Vec<DecisionChange>,
}

/// Decides `decisions` again (seed 003 `decide_safe`) under `now` and `changed` caps.
pub fn gate_whatif(decisions: &[Decision], now: &GateCaps, changed: &GateCaps) -> GateWhatIf {
    use GateDecision::{AdmitFree, Defer, Reserved};
    let order = [AdmitFree, Defer, Reserved];
    let mut out = GateWhatIf {
        logged: GateTally::default(),
        now: GateTally::default(),
        changed: GateTally::default(),
        logged_mismatches: 0,
        own_cap: 0,
        changes: Vec::new(),
    };
    let mut pairs = [[0u64; 3]; 3];
    let pos = |g: GateDecision| order.iter().position(|&o| o == g).unwrap_or(0);
    for d in decisions {
        let a = decide_safe(&d.gate_input(now.max_queue_age_s));
        let b = decide_safe(&d.gate_input(changed.max_queue_age_s));
        let reserved_now = d.reserved_service_s.unwrap_or(now.reserved_service_s);
        let reserved_changed = d.reserved_service_s.unwrap_or(changed.reserved_service_s);
        out.logged.count(d, d.decision, reserved_now);
        out.now.count(d, a, reserved_now);
        out.changed.count(d, b, reserved_changed);
        out.logged_mismatches += u64::from(d.decision != a);
        out.own_cap += u64::from(d.max_queue_age_s.is_some());
        pairs[pos(a)][pos(b)] += 1;
    }
    for (i, from) in order.iter().enumerate() {
        for (j, to) in order.iter().enumerate() {
            if i != j && pairs[i][j] > 0 {
                out.changes.push(DecisionChange {
                    from: from.as_str(),
                    to: to.as_str(),
                    decisions: pairs[i][j],
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::lane::{PIN_ON, next_lane_seed};

    fn seed_model() -> LaneModel {
        // seed 000's declared workload: first free call 25% retryable, 5% ambiguous, 2%
        // permanent; a later one 25% retryable; paid always ok; 800 / 1,200 tokens.
        LaneModel {
            first_free: [0.68, 0.25, 0.05, 0.02],
            later_free: [0.75, 0.25, 0.0, 0.0],
            paid: [1.0, 0.0, 0.0, 0.0],
            free_tokens: [800.0; 4],
            paid_tokens: [1200.0; 4],
            assumptions: vec![],
        }
    }

    fn policy(free_max_attempts: u32, pin_on: &[Outcome]) -> LanePolicy {
        LanePolicy {
            free_max_attempts,
            pin_on: pin_on.to_vec(),
            paid_max_attempts: 1,
            max_attempts_per_turn: 8,
        }
    }

    #[test]
    fn next_lane_with_the_seed_list_is_the_seed_router() {
        let pin_on: Vec<Outcome> = PIN_ON.iter().filter_map(|s| Outcome::parse(s)).collect();
        for last in [
            None,
            Some(Outcome::Ok),
            Some(Outcome::Retryable),
            Some(Outcome::Ambiguous),
            Some(Outcome::Permanent),
        ] {
            for free in 0..4 {
                for pinned in [false, true] {
                    let (lane, pin) = next_lane_with(free, pinned, last, 2, &pin_on);
                    let seed = next_lane_seed(free, pinned, last.map_or("", Outcome::as_str));
                    assert_eq!((lane, pin), seed);
                }
            }
        }
    }

    #[test]
    fn pinning_off_moves_the_table_as_the_notes_no_pin_column() {
        let pin_on = [Outcome::Ambiguous, Outcome::Permanent];
        let now = replay(&seed_model(), &policy(2, &pin_on), 3000, 0);
        let off = replay(&seed_model(), &policy(2, &[]), 3000, 0);
        assert!(off.free_attempts > now.free_attempts);
        assert!(off.paid_attempts < now.paid_attempts);
        assert!(off.total_tokens < now.total_tokens);
        assert!(off.duplicate_artifacts > 0 && now.duplicate_artifacts == 0);
        assert!(off.cross_lane_jobs < now.cross_lane_jobs);
        assert_eq!(now.unique_accepted_artifacts, 3000);
        // The same seed gives the same table; another seed another draw.
        assert_eq!(now, replay(&seed_model(), &policy(2, &pin_on), 3000, 0));
        assert_ne!(now, replay(&seed_model(), &policy(2, &pin_on), 3000, 1));
    }

    #[test]
    fn a_missing_kind_of_call_takes_the_drill_assumption_and_says_so() {
        let mut o = Observed::default();
        o.first_free.add(Outcome::Ok, 3, 2400);
        o.first_free.add(Outcome::Retryable, 1, 100);
        let m = LaneModel::from_observed(&o);
        assert_eq!(m.first_free, [0.75, 0.25, 0.0, 0.0]);
        assert_eq!(m.later_free, [0.75, 0.25, 0.0, 0.0]);
        assert_eq!(m.paid, [1.0, 0.0, 0.0, 0.0]);
        assert_eq!(m.free_tokens, [800.0, 100.0, 625.0, 625.0]);
        assert_eq!(m.paid_tokens, [1200.0; 4]);
        assert_eq!(m.assumptions.len(), 2);
    }
}
