//! Seed 000 (`lane_router.py`): pick the lane for a job's next attempt.
//!
//! The failure class decides the lane, not the retry count alone: a job whose last outcome was
//! `ambiguous` or `permanent` is pinned to the paid lane, and so is a job that has used up its free
//! attempts. Once pinned, a job stays pinned. No times are involved; attempt counts are plain counts.

/// The outcomes that pin a job to the paid lane (seed 000 `PIN_ON = {"ambiguous", "permanent"}`,
/// lane.yaml `lanes.free.pin_on`).
pub const PIN_ON: [&str; 2] = ["ambiguous", "permanent"];

/// Free-lane attempts a job may use before it is pinned to paid, a count of attempts (seed 000
/// `MAX_FREE_ATTEMPTS = 2`, lane.yaml `lanes.free.max_attempts: 2`).
pub const MAX_FREE_ATTEMPTS: u32 = 2;

/// The lane for the next attempt, as `(lane, pinned)` with lane `"paid"` or `"free"` (seed 000
/// `next_lane`).
///
/// `free_attempts` counts the job's free-lane attempts so far, `pinned` says whether it is already
/// pinned, `last_outcome` is the previous attempt's outcome (`ok | retryable | ambiguous |
/// permanent`), and `max_free_attempts` is the free-lane budget in attempts (the seed uses
/// [`MAX_FREE_ATTEMPTS`]). The branches run in the seed's order: already pinned, then an outcome in
/// [`PIN_ON`], then the budget spent (`>=`); otherwise the free lane, unpinned.
pub fn next_lane(free_attempts: u32, pinned: bool, last_outcome: &str, max_free_attempts: u32) -> (&'static str, bool) {
    if pinned {
        return ("paid", true);
    }
    if PIN_ON.contains(&last_outcome) {
        return ("paid", true);
    }
    if free_attempts >= max_free_attempts {
        return ("paid", true);
    }
    ("free", false)
}

/// [`next_lane`] with the seed's own budget, [`MAX_FREE_ATTEMPTS`] (seed 000 `next_lane` as
/// written: `next_lane(free_attempts, pinned, last_outcome)`).
pub fn next_lane_seed(free_attempts: u32, pinned: bool, last_outcome: &str) -> (&'static str, bool) {
    next_lane(free_attempts, pinned, last_outcome, MAX_FREE_ATTEMPTS)
}

#[cfg(test)]
mod tests {
    use super::*;

    // seed 000 test_pin_on_ambiguous
    #[test]
    fn test_pin_on_ambiguous() {
        assert_eq!(next_lane_seed(1, false, "ambiguous"), ("paid", true));
    }

    // seed 000 test_retryable_stays_free_once_more
    #[test]
    fn test_retryable_stays_free_once_more() {
        assert_eq!(next_lane_seed(1, false, "retryable"), ("free", false));
    }

    // seed 000 test_budget_exhausted_pins
    #[test]
    fn test_budget_exhausted_pins() {
        assert_eq!(next_lane_seed(2, false, "retryable"), ("paid", true));
    }

    // The explicit-budget form agrees with the seed form at the seed's constant.
    #[test]
    fn explicit_budget_matches_seed_constant() {
        for outcome in ["ok", "retryable", "ambiguous", "permanent", ""] {
            for free in 0..4 {
                for pinned in [false, true] {
                    assert_eq!(
                        next_lane(free, pinned, outcome, MAX_FREE_ATTEMPTS),
                        next_lane_seed(free, pinned, outcome)
                    );
                }
            }
        }
        assert_eq!(next_lane(0, true, "ok", 5), ("paid", true));
        assert_eq!(next_lane(0, false, "permanent", 5), ("paid", true));
        assert_eq!(next_lane(4, false, "retryable", 5), ("free", false));
        assert_eq!(next_lane(5, false, "retryable", 5), ("paid", true));
    }
}
