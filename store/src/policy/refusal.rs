//! Seed 002 (`specs/queen/key_failover.t27`): a worker whose key is refused moves to another key,
//! then another pool.
//!
//! The rule, in the seed's four steps:
//!
//! 1. classify the refusal: transient, quota, auth or a bad request ([`error_kind`]);
//! 2. a transient refusal rests the key for seconds ([`cooldown_seconds`]), a quota or auth refusal
//!    closes it for the long break ([`KEY_BREAK_SECONDS`]); 1302 and 1305 never close a key and
//!    never retire work;
//! 3. the next attempt goes to the next free key of the pool, never the key that just failed
//!    ([`next_free`]); once [`POOL_OVERLOAD_KEYS`] distinct keys of one pool answered 1305 inside
//!    [`OVERLOAD_WINDOW_SECONDS`] the worker moves to the next pool ([`pool_overloaded`]);
//! 4. at most [`MAX_ATTEMPTS_PER_TURN`] attempts, then the turn gives up, and that end is not
//!    charged to the issue ([`charges_issue`]).
//!
//! Masks: bit `i` of a `u32` mask is key `i` of the pool (or pool `i` of the pool list); a pool
//! holds at most [`POOL_MAX`] keys. [`NO_KEY`] means "none left". The host keeps the clock and the
//! masks; this module decides. The seed works on raw `u8` kinds and steps, so the functions do too;
//! [`ErrorKind`] and [`classify`] are a typed convenience over the same values.

/// Refusal kind `KE_OK`: the request was answered (seed 002 `KE_OK = 0`).
pub const KE_OK: u8 = 0;
/// Refusal kind `KE_TRANSIENT`: refused for now, another key or a moment later may pass (seed 002
/// `KE_TRANSIENT = 1`).
pub const KE_TRANSIENT: u8 = 1;
/// Refusal kind `KE_QUOTA`: the key's quota, plan or balance is spent (seed 002 `KE_QUOTA = 2`).
pub const KE_QUOTA: u8 = 2;
/// Refusal kind `KE_AUTH`: the key itself is refused (seed 002 `KE_AUTH = 3`).
pub const KE_AUTH: u8 = 3;
/// Refusal kind `KE_REQUEST`: the request is wrong; every key would answer the same (seed 002
/// `KE_REQUEST = 4`).
pub const KE_REQUEST: u8 = 4;

/// The z.ai rate-limit business code; arrives as HTTP 429 and clears on its own (seed 002
/// `ZAI_RATE_LIMIT = 1302`).
pub const ZAI_RATE_LIMIT: u32 = 1302;
/// The z.ai temporary-overload business code; arrives as HTTP 429 and clears on its own. It is an
/// overload of the pool's model, not of one key (seed 002 `ZAI_OVERLOAD = 1305`).
pub const ZAI_OVERLOAD: u32 = 1305;

/// A transient refusal rests the key this many seconds, doubled per strike in a row (seed 002
/// `COOL_BASE_SECONDS = 15`).
pub const COOL_BASE_SECONDS: u32 = 15;
/// The longest transient rest, in seconds: the base doubled exactly four times (seed 002
/// `COOL_CAP_SECONDS = 240`).
pub const COOL_CAP_SECONDS: u32 = 240;
/// A spent quota or a refused key closes for this long break, in seconds (30 minutes) (seed 002
/// `KEY_BREAK_SECONDS = 1800`).
pub const KEY_BREAK_SECONDS: u32 = 1800;

/// The most keys a pool (or pools a pool list) may hold: one per bit of a `u32` mask (seed 002
/// `POOL_MAX = 32`).
pub const POOL_MAX: u32 = 32;
/// "None left": no index a mask can hold (seed 002 `NO_KEY = 255`).
pub const NO_KEY: u32 = 255;

/// 1305 from this many distinct keys of one pool inside [`OVERLOAD_WINDOW_SECONDS`] means the
/// pool's model is overloaded, a count of keys (seed 002 `POOL_OVERLOAD_KEYS = 3`).
pub const POOL_OVERLOAD_KEYS: u32 = 3;
/// The window, in seconds, in which distinct keys' 1305 answers are counted (seed 002
/// `OVERLOAD_WINDOW_SECONDS = 60`).
pub const OVERLOAD_WINDOW_SECONDS: u32 = 60;

/// Step `FA_DONE`: answered, go on (seed 002 `FA_DONE = 0`).
pub const FA_DONE: u8 = 0;
/// Step `FA_NEXT_KEY`: retry on [`next_free`]'s key (seed 002 `FA_NEXT_KEY = 1`).
pub const FA_NEXT_KEY: u8 = 1;
/// Step `FA_NEXT_POOL`: retry on the next pool (seed 002 `FA_NEXT_POOL = 2`).
pub const FA_NEXT_POOL: u8 = 2;
/// Step `FA_GIVE_UP`: no key left; the turn ends as provider_overloaded (seed 002 `FA_GIVE_UP = 3`).
pub const FA_GIVE_UP: u8 = 3;
/// Step `FA_FAIL`: the request is wrong (seed 002 `FA_FAIL = 4`).
pub const FA_FAIL: u8 = 4;

/// The bound on attempts in one turn, the failed one included, a count of attempts: three keys of
/// the first pool to see an overload, three of the second, and two to spare (seed 002
/// `MAX_ATTEMPTS_PER_TURN = 8`).
pub const MAX_ATTEMPTS_PER_TURN: u32 = 8;

/// A refusal kind as a typed value; the discriminants are the seed's `KE_*` codes (seed 002
/// `KE_OK` .. `KE_REQUEST`).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The request was answered ([`KE_OK`]).
    Ok = KE_OK,
    /// Refused for now; another key or a moment later may pass ([`KE_TRANSIENT`]).
    Transient = KE_TRANSIENT,
    /// The key's quota, plan or balance is spent ([`KE_QUOTA`]).
    Quota = KE_QUOTA,
    /// The key itself is refused ([`KE_AUTH`]).
    Auth = KE_AUTH,
    /// The request is wrong; every key would answer the same ([`KE_REQUEST`]).
    Request = KE_REQUEST,
}

impl ErrorKind {
    /// The kind's name: `"ok"`, `"transient"`, `"quota"`, `"auth"` or `"request"` (seed 002 kind
    /// names).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Ok => "ok",
            ErrorKind::Transient => "transient",
            ErrorKind::Quota => "quota",
            ErrorKind::Auth => "auth",
            ErrorKind::Request => "request",
        }
    }

    /// The kind for a raw seed code `0..=4`, `None` for any other byte (seed 002 `KE_*` values).
    /// Note that the seed's [`step`] reads an unknown kind as a wrong request; this does not guess.
    pub fn from_u8(kind: u8) -> Option<Self> {
        match kind {
            KE_OK => Some(ErrorKind::Ok),
            KE_TRANSIENT => Some(ErrorKind::Transient),
            KE_QUOTA => Some(ErrorKind::Quota),
            KE_AUTH => Some(ErrorKind::Auth),
            KE_REQUEST => Some(ErrorKind::Request),
            _ => None,
        }
    }

    /// The raw seed code of this kind (seed 002 `KE_*`).
    pub fn as_u8(self) -> u8 {
        self as u8
    }
}

/// Whether a z.ai business code means a spent quota, plan or balance: 1113 and 1308-1321 except
/// 1312, the closed list `ZAI_QUOTA_EXHAUSTED_CODES` of the runtime (seed 002 `is_quota_code`).
pub fn is_quota_code(code: u32) -> bool {
    if code == 1113 {
        return true;
    }
    if code == 1312 {
        return false;
    }
    if code < 1308 {
        return false;
    }
    code <= 1321
}

/// Classify a provider answer into a raw `KE_*` kind (seed 002 `error_kind`).
///
/// `status` is the HTTP status, 0 when no response came at all (timeout, reset, abort). `zai_code`
/// is the business code in the body, 0 when there is none. The code wins over the status, because
/// z.ai sends a spent quota and a passing overload with the same 429. Always returns `0..=4`.
pub fn error_kind(status: u32, zai_code: u32) -> u8 {
    if is_quota_code(zai_code) {
        return KE_QUOTA;
    }
    if zai_code == ZAI_RATE_LIMIT {
        return KE_TRANSIENT;
    }
    if zai_code == ZAI_OVERLOAD {
        return KE_TRANSIENT;
    }
    if status == 0 {
        return KE_TRANSIENT;
    }
    if status == 402 {
        return KE_QUOTA;
    }
    if status == 401 {
        return KE_AUTH;
    }
    if status == 403 {
        return KE_AUTH;
    }
    if status == 408 {
        return KE_TRANSIENT;
    }
    if status == 429 {
        return KE_TRANSIENT;
    }
    if status >= 600 {
        return KE_REQUEST;
    }
    if status >= 500 {
        return KE_TRANSIENT;
    }
    if status >= 400 {
        return KE_REQUEST;
    }
    KE_OK
}

/// The `error_kind` of an attempt (the `job_attempt` column): seed 002 `error_kind(http_status,
/// provider_code)` where either is present, else `None`; an absent one counts as 0, as the seed's
/// "0 when there is none".
pub fn error_kind_of(http_status: Option<u16>, provider_code: Option<u32>) -> Option<ErrorKind> {
    if http_status.is_none() && provider_code.is_none() {
        return None;
    }
    Some(classify(
        u32::from(http_status.unwrap_or(0)),
        provider_code.unwrap_or(0),
    ))
}

/// [`error_kind`] as a typed [`ErrorKind`] (seed 002 `error_kind`). `status` is the HTTP status (0
/// for no response), `code` the z.ai business code (0 for none).
pub fn classify(status: u32, code: u32) -> ErrorKind {
    // error_kind only ever returns KE_OK..=KE_REQUEST, so the fallback is unreachable.
    ErrorKind::from_u8(error_kind(status, code)).unwrap_or(ErrorKind::Request)
}

/// How long, in seconds, a refused key rests (seed 002 `cooldown_seconds`).
///
/// A quota or auth refusal closes the key for [`KEY_BREAK_SECONDS`]; any kind other than transient
/// rests 0 seconds. A transient refusal rests [`COOL_BASE_SECONDS`] doubled once per strike, and
/// stops at [`COOL_CAP_SECONDS`] as soon as the wait has reached it. `strikes` is the key's
/// transient refusals in a row before this one. The loop returns the cap before the wait can grow
/// past it, so it never overflows and ends after at most five rounds, whatever `strikes` is.
pub fn cooldown_seconds(kind: u8, strikes: u32) -> u32 {
    if kind == KE_QUOTA {
        return KEY_BREAK_SECONDS;
    }
    if kind == KE_AUTH {
        return KEY_BREAK_SECONDS;
    }
    if kind != KE_TRANSIENT {
        return 0;
    }
    let mut wait: u32 = COOL_BASE_SECONDS;
    let mut n: u32 = 0;
    while n < strikes {
        if wait >= COOL_CAP_SECONDS {
            return COOL_CAP_SECONDS;
        }
        wait *= 2;
        n += 1;
    }
    wait
}

/// Whether the refusal closes the key for the long break ([`KEY_BREAK_SECONDS`]); a transient
/// refusal never does (seed 002 `key_closes`).
pub fn key_closes(kind: u8) -> bool {
    if kind == KE_QUOTA {
        return true;
    }
    kind == KE_AUTH
}

/// The mask bit of index `i`, 0 when `i` is at or past [`POOL_MAX`] (seed 002 `bit`).
pub fn bit(i: u32) -> u32 {
    if i >= POOL_MAX {
        return 0;
    }
    1 << i
}

/// Whether index `i` is set in `mask`; never for `i` at or past [`POOL_MAX`] (seed 002 `is_set`).
pub fn is_set(mask: u32, i: u32) -> bool {
    (mask & bit(i)) != 0
}

/// The next index after `last`, wrapping, that is neither tried in this turn nor blocked (resting
/// or closed), and never `last` itself (seed 002 `next_free`).
///
/// The scan visits the `size - 1` other indices only, as `(start + k) % size`. `last` out of range
/// (e.g. [`NO_KEY`]) visits all of them from index 0. [`NO_KEY`] when none is free. A list longer
/// than [`POOL_MAX`] does not fit a mask and is refused ([`NO_KEY`]). The same rule picks a key
/// inside a pool and a pool inside the pool list.
pub fn next_free(tried: u32, blocked: u32, size: u32, last: u32) -> u32 {
    if size > POOL_MAX {
        return NO_KEY;
    }
    let mut start: u32 = 0;
    let mut count: u32 = size;
    if last < size {
        start = last + 1;
        count = size - 1;
    }
    let mut k: u32 = 0;
    while k < count {
        let i: u32 = (start + k) % size;
        if !is_set(tried | blocked, i) {
            return i;
        }
        k += 1;
    }
    NO_KEY
}

/// Whether a pool's model is overloaded: [`POOL_OVERLOAD_KEYS`] distinct keys answered 1305 inside
/// [`OVERLOAD_WINDOW_SECONDS`] seconds, or, for a smaller pool, every key did; an empty pool never
/// is (seed 002 `pool_overloaded`).
pub fn pool_overloaded(distinct_keys_1305: u32, pool_size: u32) -> bool {
    if distinct_keys_1305 >= POOL_OVERLOAD_KEYS {
        return true;
    }
    if pool_size == 0 {
        return false;
    }
    distinct_keys_1305 >= pool_size
}

/// The step after an answer or refusal, a raw `FA_*` code (seed 002 `step`).
///
/// `kind` is a `KE_*` kind (any kind at or above [`KE_REQUEST`] fails). `attempts` counts the
/// attempts of this turn so far, this one included. `next_key` and `next_pool` are [`next_free`]'s
/// answers for the current pool and for the pool list ([`NO_KEY`] when none).
/// `distinct_keys_1305` counts the pool's distinct keys that answered 1305 inside
/// [`OVERLOAD_WINDOW_SECONDS`] seconds, and `pool_size` is the pool's key count.
pub fn step(kind: u8, attempts: u32, next_key: u32, distinct_keys_1305: u32, pool_size: u32, next_pool: u32) -> u8 {
    if kind == KE_OK {
        return FA_DONE;
    }
    if kind >= KE_REQUEST {
        return FA_FAIL;
    }
    if attempts >= MAX_ATTEMPTS_PER_TURN {
        return FA_GIVE_UP;
    }
    let mut pool_out: bool = false;
    if kind == KE_TRANSIENT {
        pool_out = pool_overloaded(distinct_keys_1305, pool_size);
    }
    if !pool_out && next_key != NO_KEY {
        return FA_NEXT_KEY;
    }
    if next_pool != NO_KEY {
        return FA_NEXT_POOL;
    }
    FA_GIVE_UP
}

/// Whether a turn that ended on this kind counts against the issue: only [`KE_REQUEST`] charges; an
/// overloaded, spent or refusing provider says nothing about the work (seed 002 `charges_issue`).
pub fn charges_issue(kind: u8) -> bool {
    kind == KE_REQUEST
}

#[cfg(test)]
mod tests {
    use super::*;

    // --- seed 002, section 5: tests ---

    #[test]
    fn the_quota_list_is_the_closed_list_of_the_runtime() {
        assert!(is_quota_code(1113));
        assert!(is_quota_code(1308));
        assert!(is_quota_code(1311));
        assert!(!is_quota_code(1312));
        assert!(is_quota_code(1313));
        assert!(is_quota_code(1321));
        assert!(!is_quota_code(1322));
        assert!(!is_quota_code(1307));
        assert!(!is_quota_code(1112));
        assert!(!is_quota_code(1114));
        assert!(!is_quota_code(ZAI_RATE_LIMIT));
        assert!(!is_quota_code(ZAI_OVERLOAD));
        assert!(!is_quota_code(0));
    }

    #[test]
    fn the_code_wins_over_the_status() {
        assert_eq!(error_kind(429, 1305), KE_TRANSIENT);
        assert_eq!(error_kind(429, 1302), KE_TRANSIENT);
        assert_eq!(error_kind(429, 1113), KE_QUOTA);
        assert_eq!(error_kind(429, 1316), KE_QUOTA);
        assert_eq!(error_kind(200, 1308), KE_QUOTA);
        assert_eq!(error_kind(400, 1305), KE_TRANSIENT);
        assert_eq!(error_kind(400, 1302), KE_TRANSIENT);
        assert_eq!(error_kind(429, 1312), KE_TRANSIENT);
    }

    #[test]
    fn a_status_without_a_code_falls_in_its_kind() {
        assert_eq!(error_kind(0, 0), KE_TRANSIENT);
        assert_eq!(error_kind(200, 0), KE_OK);
        assert_eq!(error_kind(399, 0), KE_OK);
        assert_eq!(error_kind(400, 0), KE_REQUEST);
        assert_eq!(error_kind(401, 0), KE_AUTH);
        assert_eq!(error_kind(402, 0), KE_QUOTA);
        assert_eq!(error_kind(403, 0), KE_AUTH);
        assert_eq!(error_kind(404, 0), KE_REQUEST);
        assert_eq!(error_kind(407, 0), KE_REQUEST);
        assert_eq!(error_kind(408, 0), KE_TRANSIENT);
        assert_eq!(error_kind(409, 0), KE_REQUEST);
        assert_eq!(error_kind(428, 0), KE_REQUEST);
        assert_eq!(error_kind(429, 0), KE_TRANSIENT);
        assert_eq!(error_kind(430, 0), KE_REQUEST);
        assert_eq!(error_kind(499, 0), KE_REQUEST);
        assert_eq!(error_kind(500, 0), KE_TRANSIENT);
        assert_eq!(error_kind(503, 0), KE_TRANSIENT);
        assert_eq!(error_kind(529, 0), KE_TRANSIENT);
        assert_eq!(error_kind(599, 0), KE_TRANSIENT);
        assert_eq!(error_kind(600, 0), KE_REQUEST);
    }

    #[test]
    fn a_transient_refusal_rests_seconds_and_a_spent_key_closes() {
        assert_eq!(cooldown_seconds(KE_TRANSIENT, 0), 15);
        assert_eq!(cooldown_seconds(KE_TRANSIENT, 1), 30);
        assert_eq!(cooldown_seconds(KE_TRANSIENT, 2), 60);
        assert_eq!(cooldown_seconds(KE_TRANSIENT, 3), 120);
        assert_eq!(cooldown_seconds(KE_TRANSIENT, 4), COOL_CAP_SECONDS);
        assert_eq!(cooldown_seconds(KE_TRANSIENT, 5), COOL_CAP_SECONDS);
        assert_eq!(cooldown_seconds(KE_TRANSIENT, 4000000000), COOL_CAP_SECONDS);
        assert_eq!(cooldown_seconds(KE_QUOTA, 0), KEY_BREAK_SECONDS);
        assert_eq!(cooldown_seconds(KE_AUTH, 7), KEY_BREAK_SECONDS);
        assert_eq!(cooldown_seconds(KE_OK, 3), 0);
        assert_eq!(cooldown_seconds(KE_REQUEST, 3), 0);
        assert!(key_closes(KE_QUOTA));
        assert!(key_closes(KE_AUTH));
        assert!(!key_closes(KE_TRANSIENT));
        assert!(!key_closes(KE_OK));
        assert!(!key_closes(KE_REQUEST));
    }

    #[test]
    fn bits_name_keys() {
        assert_eq!(bit(0), 1);
        assert_eq!(bit(3), 8);
        assert_eq!(bit(31), 2147483648);
        assert_eq!(bit(32), 0);
        assert!(is_set(8, 3));
        assert!(!is_set(8, 2));
        assert!(is_set(4294967295, 31));
        assert!(!is_set(4294967295, 32));
    }

    #[test]
    fn the_next_key_is_never_the_one_that_failed() {
        // the #9967 case: pool 2 has 10 keys, key 9 answered 1305; the next try wraps to key 0
        assert_eq!(next_free(bit(9), 0, 10, 9), 0);
        // even when the failed key is not marked tried, it is skipped
        assert_eq!(next_free(0, 0, 10, 9), 0);
        assert_eq!(next_free(0, 0, 10, 4), 5);
        // a pool of one key has no other key
        assert_eq!(next_free(0, 0, 1, 0), NO_KEY);
        // tried and resting keys are both skipped
        assert_eq!(next_free(bit(5), bit(6), 10, 4), 7);
        assert_eq!(next_free(bit(0) | bit(1), 0, 3, 2), NO_KEY);
        // a fresh turn starts at key 0
        assert_eq!(next_free(0, 0, 24, NO_KEY), 0);
        assert_eq!(next_free(bit(0), 0, 24, NO_KEY), 1);
        // every key but the failed one is taken
        assert_eq!(next_free(4294967295 - bit(9), 0, 10, 9), NO_KEY);
        // an empty pool has nothing
        assert_eq!(next_free(0, 0, 0, NO_KEY), NO_KEY);
        // `last` just past the end is out of range: the scan starts at 0
        assert_eq!(next_free(0, 0, 10, 10), 0);
        // a full mask of POOL_MAX keys wraps from the top index
        assert_eq!(next_free(0, 0, 32, 31), 0);
        assert_eq!(next_free(0, 0, 32, NO_KEY), 0);
        assert_eq!(next_free(0, 4294967295 - bit(31), 32, 30), 31);
        // a list longer than POOL_MAX does not fit a mask and is refused
        assert_eq!(next_free(0, 0, 33, NO_KEY), NO_KEY);
        assert_eq!(next_free(0, 0, 40, 31), NO_KEY);
    }

    #[test]
    fn an_overload_seen_on_three_keys_is_the_pools_model() {
        assert!(!pool_overloaded(0, 24));
        assert!(!pool_overloaded(2, 24));
        assert!(pool_overloaded(3, 24));
        assert!(pool_overloaded(16, 24));
        assert!(pool_overloaded(2, 2));
        assert!(!pool_overloaded(1, 2));
        assert!(pool_overloaded(1, 1));
        assert!(!pool_overloaded(0, 0));
    }

    /// The conformance table: one assert per row. Columns: kind, attempts, next key, distinct keys
    /// that answered 1305 in the window, pool size, next pool.
    #[test]
    fn conformance_rows() {
        // r01 answered: go on
        assert_eq!(step(KE_OK, 1, 5, 0, 24, 1), FA_DONE);
        // r02 a wrong request fails, whatever keys are left
        assert_eq!(step(KE_REQUEST, 1, 5, 0, 24, 1), FA_FAIL);
        // r03 an unknown kind is read as a wrong request
        assert_eq!(step(9, 1, 5, 0, 24, 1), FA_FAIL);
        // r04 the #9967 case: first 1305 on pool 2, keys left: next key, not the same key
        assert_eq!(step(KE_TRANSIENT, 1, 0, 1, 10, 0), FA_NEXT_KEY);
        // r05 a rate limit (1302) on a fresh pool: next key
        assert_eq!(step(KE_TRANSIENT, 1, 3, 0, 24, 1), FA_NEXT_KEY);
        // r06 the third distinct key said 1305: the model is overloaded, next pool
        assert_eq!(step(KE_TRANSIENT, 3, 4, 3, 24, 1), FA_NEXT_POOL);
        // r07 the 14:08 burst: overloaded and no other pool: give up, do not burn the rest
        assert_eq!(step(KE_TRANSIENT, 3, 4, 3, 24, NO_KEY), FA_GIVE_UP);
        // r08 a spent quota on one key does not mean an overloaded pool: next key
        assert_eq!(step(KE_QUOTA, 1, 2, 5, 24, 1), FA_NEXT_KEY);
        // r09 a refused key: next key
        assert_eq!(step(KE_AUTH, 1, 2, 0, 24, 1), FA_NEXT_KEY);
        // r10 no key left in the pool: next pool
        assert_eq!(step(KE_TRANSIENT, 2, NO_KEY, 1, 24, 1), FA_NEXT_POOL);
        // r11 no key and no pool left: give up
        assert_eq!(step(KE_QUOTA, 2, NO_KEY, 0, 24, NO_KEY), FA_GIVE_UP);
        // r12 the attempt bound stops a turn with keys still left
        assert_eq!(step(KE_TRANSIENT, MAX_ATTEMPTS_PER_TURN, 4, 0, 24, 1), FA_GIVE_UP);
        // r13 one attempt below the bound still moves on
        assert_eq!(step(KE_TRANSIENT, MAX_ATTEMPTS_PER_TURN - 1, 4, 0, 24, 1), FA_NEXT_KEY);
        // r14 a two-key pool where both said 1305 is overloaded
        assert_eq!(step(KE_TRANSIENT, 2, NO_KEY, 2, 2, 0), FA_NEXT_POOL);
        // r15 a 503 with no 1305 seen keeps to the pool
        assert_eq!(step(KE_TRANSIENT, 2, 7, 0, 24, 1), FA_NEXT_KEY);
        // r16 the bound beats a wrong request? no: a wrong request fails first
        assert_eq!(step(KE_REQUEST, MAX_ATTEMPTS_PER_TURN, 4, 0, 24, 1), FA_FAIL);
        // r17 an answer after many attempts is still an answer
        assert_eq!(step(KE_OK, MAX_ATTEMPTS_PER_TURN, NO_KEY, 9, 24, NO_KEY), FA_DONE);
    }

    #[test]
    fn an_overloaded_provider_never_retires_the_issue() {
        assert!(!charges_issue(KE_TRANSIENT));
        assert!(!charges_issue(KE_QUOTA));
        assert!(!charges_issue(KE_AUTH));
        assert!(charges_issue(KE_REQUEST));
        assert!(!charges_issue(KE_OK));
        assert!(!charges_issue(9));
    }

    // --- seed 002, section 6: invariants (checked at compile time, as they are on constants) ---

    #[test]
    fn the_kinds_and_steps_are_distinct() {
        const {
            assert!(KE_OK == 0 && KE_TRANSIENT == 1 && KE_QUOTA == 2 && KE_AUTH == 3 && KE_REQUEST == 4);
            assert!(FA_DONE == 0 && FA_NEXT_KEY == 1 && FA_NEXT_POOL == 2 && FA_GIVE_UP == 3 && FA_FAIL == 4);
        }
    }

    /// A transient rest is always shorter than the long break, so a 1305 can never close a key.
    #[test]
    fn a_rest_is_shorter_than_a_break() {
        const {
            assert!(COOL_BASE_SECONDS > 0 && COOL_CAP_SECONDS == COOL_BASE_SECONDS * 16);
            assert!(COOL_CAP_SECONDS < KEY_BREAK_SECONDS && KEY_BREAK_SECONDS == 1800);
        }
    }

    /// The bound leaves room to see an overload in one pool and still try the next: the overload
    /// is detected before the bound stops the turn.
    #[test]
    fn the_bound_leaves_room_for_a_second_pool() {
        const {
            assert!(MAX_ATTEMPTS_PER_TURN > POOL_OVERLOAD_KEYS * 2);
            assert!(POOL_OVERLOAD_KEYS >= 2 && OVERLOAD_WINDOW_SECONDS > 0);
        }
    }

    /// NO_KEY is no index a mask can hold.
    #[test]
    fn no_key_is_out_of_range() {
        const {
            assert!(POOL_MAX == 32 && NO_KEY >= POOL_MAX);
            assert!(ZAI_RATE_LIMIT == 1302 && ZAI_OVERLOAD == 1305);
        }
    }

    // --- the brief's classification pairs, through the typed convenience ---

    #[test]
    fn refusal_classification_pairs() {
        assert_eq!(classify(429, 1302), ErrorKind::Transient);
        assert_eq!(classify(529, 1305), ErrorKind::Transient);
        assert_eq!(classify(429, 1113), ErrorKind::Quota);
        assert_eq!(classify(429, 1308), ErrorKind::Quota);
        assert_eq!(classify(429, 1312), ErrorKind::Transient);
        // no response at all, no code
        assert_eq!(classify(0, 0), ErrorKind::Transient);
        assert_eq!(classify(401, 0), ErrorKind::Auth);
        assert_eq!(classify(402, 0), ErrorKind::Quota);
        assert_eq!(classify(404, 0), ErrorKind::Request);
    }

    #[test]
    fn error_kind_round_trips_through_u8_and_str() {
        let all = [
            (ErrorKind::Ok, KE_OK, "ok"),
            (ErrorKind::Transient, KE_TRANSIENT, "transient"),
            (ErrorKind::Quota, KE_QUOTA, "quota"),
            (ErrorKind::Auth, KE_AUTH, "auth"),
            (ErrorKind::Request, KE_REQUEST, "request"),
        ];
        for (kind, raw, name) in all {
            assert_eq!(kind as u8, raw);
            assert_eq!(kind.as_u8(), raw);
            assert_eq!(ErrorKind::from_u8(raw), Some(kind));
            assert_eq!(kind.as_str(), name);
        }
        assert_eq!(ErrorKind::from_u8(5), None);
        assert_eq!(ErrorKind::from_u8(9), None);
        // classify agrees with error_kind over a sweep of statuses and codes
        for status in [0, 200, 399, 400, 401, 402, 403, 404, 408, 429, 500, 529, 599, 600, 999] {
            for code in [0, 1113, 1302, 1305, 1308, 1312, 1321, 1322] {
                assert_eq!(classify(status, code).as_u8(), error_kind(status, code));
            }
        }
    }
}
