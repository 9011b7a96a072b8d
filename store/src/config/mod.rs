//! `lane.yaml`, typed (SPEC 7): seed 000's router settings plus the extensions for seeds 002 and 003.
//!
//! Seed 000's file (under "Config You Can Copy") parses unchanged. Every key is optional: a key
//! left out, a section left out, an empty file and no file at all all mean the seeds' values, which
//! are what [`LaneConfig::default`] returns. A key the file format does not define is an error at
//! every level, and so is a value of the wrong type; the [`ConfigError`] names the file, the line
//! and the dotted key (`keys.cooldown_base_s`, `lanes.free.pin_on[2]`).
//!
//! Units are in the key names: `_s` is seconds, `_rate` and `_per_job` are ratios (0.01 = 1%),
//! `max_attempts*` and `*_keys` are counts.
//!
//! ```
//! use laneledger_store::LaneConfig;
//! let config = LaneConfig::from_yaml_str("gate: {free_admit_miss_rate: 0.02}\n", "lane.yaml")?;
//! assert_eq!(config.gate.free_admit_miss_rate, 0.02);
//! assert_eq!(config.lanes.free.max_attempts, 2);
//! let err = LaneConfig::from_yaml_str("keys:\n  cooldwn_s: 3\n", "lane.yaml").unwrap_err();
//! assert!(err.to_string().starts_with("lane.yaml:2: unknown key keys.cooldwn_s (expected one of"));
//! # Ok::<(), laneledger_store::config::ConfigError>(())
//! ```
//!
//! The `config` folder holds this file (the `lane.yaml` schema and its loader) and [`prices`] (its
//! `prices:` section). May import [`crate::model`] and [`crate::policy`]; nothing above.

pub mod prices;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Deserializer, Unexpected, Visitor};

use crate::model::record::Outcome;
use crate::policy::{gate, lane, refusal};

/// The whole of `lane.yaml` (SPEC 7). Every section and key is optional; missing ones take the
/// seeds' values ([`LaneConfig::default`]).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LaneConfig {
    /// `lanes`: the per-lane attempt budgets and the pin rule (seed 000).
    pub lanes: LanesConfig,
    /// `reconcile`: how late completions are matched to their job (seed 000).
    pub reconcile: ReconcileConfig,
    /// `alerts`: the weekly review's two alert thresholds (seed 000).
    pub alerts: AlertsConfig,
    /// `free_lane_enabled`: whether the router may use the free lane at all (seed 000 lane.yaml
    /// `free_lane_enabled: true`).
    pub free_lane_enabled: bool,
    /// `gate`: the free-path dwell gate (seed 003), an extension of seed 000's file.
    pub gate: GateConfig,
    /// `keys`: key cool-downs and failover bounds (seed 002), an extension of seed 000's file.
    pub keys: KeysConfig,
    /// `retention`: how long the ledger keeps finished jobs (SPEC 6), an extension.
    pub retention: RetentionConfig,
    /// `webhooks`: where `serve` posts an alert when its card turns red and when it clears (Slack
    /// incoming-webhook JSON), an extension. Default none.
    pub webhooks: Vec<WebhookConfig>,
    /// `prices`: prices per million tokens by model and lane, for the review's spend figures
    /// ([`crate::config::prices`]), an extension. Default none: only router-reported costs are counted.
    pub prices: crate::config::prices::PricesConfig,
}

impl Default for LaneConfig {
    /// The seeds' values: seed 000's lane.yaml as written, seed 002's and seed 003's constants.
    fn default() -> Self {
        LaneConfig {
            lanes: LanesConfig::default(),
            reconcile: ReconcileConfig::default(),
            alerts: AlertsConfig::default(),
            free_lane_enabled: true,
            gate: GateConfig::default(),
            keys: KeysConfig::default(),
            retention: RetentionConfig::default(),
            webhooks: Vec::new(),
            prices: crate::config::prices::PricesConfig::default(),
        }
    }
}

/// `lanes` (seed 000 lane.yaml), and the tiers of a router whose lanes are other than free and
/// paid (issue 31).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LanesConfig {
    /// `lanes.free`: the free lane.
    pub free: FreeLaneConfig,
    /// `lanes.paid`: the paid fallback.
    pub paid: PaidLaneConfig,
    /// `lanes.tiers`: the router's lanes in the order a job moves down them, each with its
    /// budget and the outcomes that move a job on; given, it replaces `free` and `paid`, which
    /// must then be left out. Default none: the tiers are `free` then `paid` ([`Self::tiers`]).
    pub tiers: Option<Vec<TierConfig>>,
    /// `lanes.audit`: whether the review replays the lane policy (`lane_policy_violation`);
    /// `false` for a router whose policy is not this one. Default true.
    pub audit: bool,
}

impl Default for LanesConfig {
    fn default() -> Self {
        LanesConfig {
            free: FreeLaneConfig::default(),
            paid: PaidLaneConfig::default(),
            tiers: None,
            audit: true,
        }
    }
}

/// One entry of `lanes.tiers`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierConfig {
    /// `lanes.tiers[].name`: the lane's name as records spell it (matched exactly, case
    /// included), 1–64 bytes, no control characters, no space at either end.
    pub name: String,
    /// `lanes.tiers[].max_attempts`: attempts a job may use on this tier before it moves to the
    /// next, a count (default 1). The last tier's is not enforced: there is nowhere to move.
    #[serde(default = "one")]
    pub max_attempts: u32,
    /// `lanes.tiers[].pin_on`: outcomes on this tier that move the job to the next tier at once
    /// (default none), spelled as `lanes.free.pin_on`.
    #[serde(default, deserialize_with = "outcome_names")]
    pub pin_on: Vec<Outcome>,
}

fn one() -> u32 {
    1
}

impl LanesConfig {
    /// The tiers in order: `lanes.tiers` as written, or `free` (its budget and `pin_on`) then
    /// `paid` (its budget, nothing pins further).
    pub fn tiers(&self) -> Vec<TierConfig> {
        self.tiers.clone().unwrap_or_else(|| {
            vec![
                TierConfig {
                    name: "free".into(),
                    max_attempts: self.free.max_attempts,
                    pin_on: self.free.pin_on.clone(),
                },
                TierConfig {
                    name: "paid".into(),
                    max_attempts: self.paid.max_attempts,
                    pin_on: Vec::new(),
                },
            ]
        })
    }

    /// Makes these tiers the lanes this process takes in records ([`crate::model::lanes::activate`]).
    pub fn activate(&self) {
        let tiers = self.tiers();
        crate::model::lanes::activate(&tiers.iter().map(|t| t.name.as_str()).collect::<Vec<_>>());
    }
}

/// `lanes.free` (seed 000 lane.yaml).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FreeLaneConfig {
    /// `lanes.free.max_attempts`: free-lane attempts a job may use before it is pinned to paid, a
    /// count of attempts (seed 000 `MAX_FREE_ATTEMPTS = 2`, [`lane::MAX_FREE_ATTEMPTS`]).
    pub max_attempts: u32,
    /// `lanes.free.pin_on`: the outcomes that pin a job to the paid lane, spelled
    /// `ok | retryable | ambiguous | permanent`; any other name is an error (seed 000
    /// `PIN_ON = {"ambiguous", "permanent"}`, [`lane::PIN_ON`]).
    #[serde(deserialize_with = "outcome_names")]
    pub pin_on: Vec<Outcome>,
}

impl Default for FreeLaneConfig {
    fn default() -> Self {
        FreeLaneConfig {
            max_attempts: lane::MAX_FREE_ATTEMPTS,
            pin_on: lane::PIN_ON.iter().filter_map(|name| Outcome::parse(name)).collect(),
        }
    }
}

/// `lanes.paid` (seed 000 lane.yaml).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PaidLaneConfig {
    /// `lanes.paid.max_attempts`: paid-lane attempts per job, a count of attempts (seed 000
    /// lane.yaml `lanes.paid.max_attempts: 1`).
    pub max_attempts: u32,
}

impl Default for PaidLaneConfig {
    fn default() -> Self {
        PaidLaneConfig { max_attempts: 1 }
    }
}

/// `reconcile` (seed 000 lane.yaml).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReconcileConfig {
    /// `reconcile.late_completion_window_s`: seconds after a client timeout within which a slow
    /// completion is still reconciled to its job rather than counted a duplicate (seed 000
    /// lane.yaml `late_completion_window_s: 900`).
    pub late_completion_window_s: u32,
    /// `reconcile.dedup_key`: the request header that carries the job's idempotency key (seed 000
    /// lane.yaml `dedup_key: Idempotency-Key`).
    pub dedup_key: String,
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        ReconcileConfig {
            late_completion_window_s: 900,
            dedup_key: "Idempotency-Key".to_owned(),
        }
    }
}

/// `alerts` (seed 000 lane.yaml, extended): an alert fires when a week's value is above its
/// threshold. Seed 000 gives the first two; the others put a threshold on each audit of the
/// weekly review (an extension), each a rate a reviewer reads: per 100 jobs, per 100 attempts,
/// per 100 refused attempts, or a count a week. A threshold of 0 means any occurrence alerts.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlertsConfig {
    /// `alerts.min_jobs`: the fewest jobs a week needs for its ratios to raise an alert. A week
    /// with fewer shows each ratio, but one above its threshold reads "too few jobs", not red,
    /// and does not fire (counts such as pool overload episodes and the dwell gate's ratios,
    /// which do not divide by jobs, are judged as usual). Default 20.
    pub min_jobs: u64,
    /// `alerts.cross_lane_retries_per_job`: a ratio of jobs, those with attempts on both lanes ÷
    /// all jobs (seed 000 lane.yaml `cross_lane_retries_per_job: 0.20`).
    pub cross_lane_retries_per_job: f64,
    /// `alerts.duplicate_artifacts_per_100_jobs`: duplicate artifacts per 100 jobs; an integer in
    /// the file reads as a number (seed 000 lane.yaml `duplicate_artifacts_per_100_jobs: 1`).
    pub duplicate_artifacts_per_100_jobs: f64,
    /// `alerts.lane_policy_violations_per_100_jobs`: jobs with an attempt on the wrong lane (the
    /// lane policy replayed) per 100 jobs. Default 1.
    pub lane_policy_violations_per_100_jobs: f64,
    /// `alerts.late_duplicates_per_100_jobs`: duplicate artifacts that came after the reconcile
    /// window per 100 jobs: the window was too short for them. Default 0 (any alerts).
    pub late_duplicates_per_100_jobs: f64,
    /// `alerts.refusals_per_100_attempts`: attempts a provider refused (any kind) per 100
    /// attempts. Default 50.
    pub refusals_per_100_attempts: f64,
    /// `alerts.same_key_retries_per_100_refusals`: attempts sent to the very key that had just
    /// refused the job per 100 refused attempts. Default 0 (any alerts).
    pub same_key_retries_per_100_refusals: f64,
    /// `alerts.key_rest_violations_per_100_keyed_attempts`: uses of a key inside its rest or
    /// break per 100 attempts that name a key. Default 1.
    pub key_rest_violations_per_100_keyed_attempts: f64,
    /// `alerts.pool_overload_episodes_per_week`: pool overload episodes in the week, a count.
    /// Default 0 (any alerts).
    pub pool_overload_episodes_per_week: f64,
    /// `alerts.jobs_past_attempt_bound_per_100_jobs`: jobs with more attempts than
    /// `keys.max_attempts_per_turn` per 100 jobs. Default 0 (any alerts).
    pub jobs_past_attempt_bound_per_100_jobs: f64,
    /// `alerts.outcome_mismatches_per_100_refusals`: attempts whose logged outcome contradicts
    /// the refusal's code per 100 refused attempts. Default 0 (any alerts).
    pub outcome_mismatches_per_100_refusals: f64,
    /// `alerts.gate_decision_mismatches_per_100_decisions`: gate decisions that differ from the
    /// safe decision on the same figures per 100 decisions. Default 0 (any alerts).
    pub gate_decision_mismatches_per_100_decisions: f64,
    /// `alerts.data_quality_findings_per_100_attempts`: rows of the `data_quality` audit (attempt
    /// number gaps, artifacts reported twice, ok without artifact or tokens_out, impossible
    /// times, conflicts and rejects received, fallback keys) per 100 attempts. Default 1.
    pub data_quality_findings_per_100_attempts: f64,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        AlertsConfig {
            min_jobs: 20,
            cross_lane_retries_per_job: 0.20,
            duplicate_artifacts_per_100_jobs: 1.0,
            lane_policy_violations_per_100_jobs: 1.0,
            late_duplicates_per_100_jobs: 0.0,
            refusals_per_100_attempts: 50.0,
            same_key_retries_per_100_refusals: 0.0,
            key_rest_violations_per_100_keyed_attempts: 1.0,
            pool_overload_episodes_per_week: 0.0,
            jobs_past_attempt_bound_per_100_jobs: 0.0,
            outcome_mismatches_per_100_refusals: 0.0,
            gate_decision_mismatches_per_100_decisions: 0.0,
            data_quality_findings_per_100_attempts: 1.0,
        }
    }
}

/// `gate` (seed 003, the free-path dwell gate), an extension (SPEC 7).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GateConfig {
    /// `gate.max_queue_age_s`: seconds a job may wait in the queue before the gate defers it
    /// (seed 003 `Job.max_queue_age_s = 30.0`, [`gate::DEFAULT_MAX_QUEUE_AGE_S`]).
    pub max_queue_age_s: f64,
    /// `gate.free_admit_miss_rate`: a ratio, free admits that later missed their slack ÷ free
    /// admits, above which the gate's flag should be frozen (seed 003 "If misses exceed one
    /// percent of free admits, freeze the flag": 0.01).
    pub free_admit_miss_rate: f64,
    /// `gate.reserved_service_s`: seconds one turn takes on a reserved worker, used when a decision
    /// does not record its own (seed 003 "an eight-second reserved turn", samples'
    /// `expected_service_s = 8`).
    pub reserved_service_s: f64,
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            max_queue_age_s: gate::DEFAULT_MAX_QUEUE_AGE_S,
            free_admit_miss_rate: 0.01,
            reserved_service_s: 8.0,
        }
    }
}

/// `keys` (seed 002, `key_failover.t27`), an extension (SPEC 7). All whole numbers.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeysConfig {
    /// `keys.cooldown_base_s`: seconds a transient refusal rests a key, doubled per strike in a row
    /// (seed 002 `COOL_BASE_SECONDS = 15`, [`refusal::COOL_BASE_SECONDS`]).
    pub cooldown_base_s: u32,
    /// `keys.cooldown_cap_s`: the longest transient rest, in seconds (seed 002
    /// `COOL_CAP_SECONDS = 240`, [`refusal::COOL_CAP_SECONDS`]).
    pub cooldown_cap_s: u32,
    /// `keys.key_break_s`: seconds a spent quota or a refused key stays closed (seed 002
    /// `KEY_BREAK_SECONDS = 1800`, [`refusal::KEY_BREAK_SECONDS`]).
    pub key_break_s: u32,
    /// `keys.pool_overload_keys`: distinct keys of one pool answering 1305 within
    /// `overload_window_s` that mark the pool overloaded, a count of keys (seed 002
    /// `POOL_OVERLOAD_KEYS = 3`, [`refusal::POOL_OVERLOAD_KEYS`]).
    pub pool_overload_keys: u32,
    /// `keys.overload_window_s`: the window, in seconds, in which those 1305 answers are counted
    /// (seed 002 `OVERLOAD_WINDOW_SECONDS = 60`, [`refusal::OVERLOAD_WINDOW_SECONDS`]).
    pub overload_window_s: u32,
    /// `keys.max_attempts_per_turn`: the bound on attempts in one turn, a count of attempts (seed
    /// 002 `MAX_ATTEMPTS_PER_TURN = 8`, [`refusal::MAX_ATTEMPTS_PER_TURN`]).
    pub max_attempts_per_turn: u32,
}

impl Default for KeysConfig {
    fn default() -> Self {
        KeysConfig {
            cooldown_base_s: refusal::COOL_BASE_SECONDS,
            cooldown_cap_s: refusal::COOL_CAP_SECONDS,
            key_break_s: refusal::KEY_BREAK_SECONDS,
            pool_overload_keys: refusal::POOL_OVERLOAD_KEYS,
            overload_window_s: refusal::OVERLOAD_WINDOW_SECONDS,
            max_attempts_per_turn: refusal::MAX_ATTEMPTS_PER_TURN,
        }
    }
}

/// `retention` (SPEC 6), an extension (SPEC 7).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// `retention.days`: days, counted back from now, within which a finished job is kept by the
    /// retention sweep (SPEC 6 `retention.days`, default 30).
    pub days: u32,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig { days: 30 }
    }
}

/// One entry of `webhooks`: a URL that takes a JSON POST, such as a Slack incoming webhook.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// `webhooks[].url`: where each alert is posted, an `http://` or `https://` URL (a Slack
    /// incoming webhook, or anything that takes Slack's `{"text": …}` JSON).
    #[serde(deserialize_with = "http_url")]
    pub url: String,
    /// `webhooks[].site_url`: the review site's address as readers reach it, e.g.
    /// `https://review.example.com`; each message links to the week's card there. Default: the
    /// address `serve` listens on.
    #[serde(default, deserialize_with = "optional_http_url")]
    pub site_url: Option<String>,
    /// `webhooks[].alerts`: `all` (the default), or a list of the alerts to post, by their
    /// `alerts.*` name (and `free_admit_miss_rate`, the dwell gate's).
    #[serde(default)]
    pub alerts: AlertSelection,
}

/// Which alerts a webhook posts (`webhooks[].alerts`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AlertSelection {
    /// `all`: every alert of the review.
    #[default]
    All,
    /// A list of alert names.
    Only(Vec<String>),
}

impl AlertSelection {
    /// Whether the alert named `metric` is posted.
    pub fn includes(&self, metric: &str) -> bool {
        match self {
            AlertSelection::All => true,
            AlertSelection::Only(names) => names.iter().any(|n| n == metric),
        }
    }
}

/// The names of the review's alerts: each threshold of `alerts` (every key but `min_jobs`), and
/// the dwell gate's `free_admit_miss_rate`.
pub fn alert_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = struct_fields::<AlertsConfig>()
        .iter()
        .copied()
        .filter(|k| *k != "min_jobs")
        .collect();
    names.push("free_admit_miss_rate");
    names
}

/// The field names of a struct that derives `Deserialize`: serde hands them to
/// `deserialize_struct`, so `alerts` keys added later are webhook names without a second list.
fn struct_fields<T: for<'de> Deserialize<'de>>() -> &'static [&'static str] {
    struct Fields<'a>(&'a mut &'static [&'static str]);
    impl<'de> Deserializer<'de> for Fields<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("only the field names were asked for"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
            unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Fields(&mut fields));
    fields
}

impl<'de> Deserialize<'de> for AlertSelection {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SelectionVisitor;
        impl<'de> Visitor<'de> for SelectionVisitor {
            type Value = AlertSelection;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("`all` or a list of alert names")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<AlertSelection, E> {
                match v {
                    "all" => Ok(AlertSelection::All),
                    _ => Err(E::invalid_value(Unexpected::Str(v), &self)),
                }
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<AlertSelection, A::Error> {
                let mut names = Vec::new();
                while let Some(AlertName(name)) = seq.next_element()? {
                    names.push(name);
                }
                Ok(AlertSelection::Only(names))
            }
        }
        deserializer.deserialize_any(SelectionVisitor)
    }
}

/// One name in `webhooks[].alerts`. Checked in `visit_str` so that the error carries its line.
struct AlertName(String);

impl<'de> Deserialize<'de> for AlertName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl Visitor<'_> for NameVisitor {
            type Value = AlertName;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "an alert name: one of {}", alert_names().join(", "))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<AlertName, E> {
                if alert_names().contains(&v) {
                    Ok(AlertName(v.to_owned()))
                } else {
                    Err(E::invalid_value(Unexpected::Str(v), &self))
                }
            }
        }
        deserializer.deserialize_str(NameVisitor)
    }
}

/// Reads an `http://` or `https://` URL with a host, without spaces.
fn http_url<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    struct UrlVisitor;
    impl Visitor<'_> for UrlVisitor {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an http:// or https:// URL")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
            let rest = v.strip_prefix("https://").or_else(|| v.strip_prefix("http://"));
            match rest {
                Some(rest) if !rest.is_empty() && !rest.starts_with('/') && !v.contains(char::is_whitespace) => {
                    Ok(v.to_owned())
                }
                _ => Err(E::invalid_value(Unexpected::Str(v), &self)),
            }
        }
    }
    deserializer.deserialize_str(UrlVisitor)
}

fn optional_http_url<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    http_url(deserializer).map(Some)
}

/// Why `lane.yaml` could not be used. Every variant's message begins with the file (and the line,
/// when the YAML parser reported one): `lane.yaml:14: unknown key keys.cooldwn_s (expected ...)`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file asked for could not be read: it does not exist, is unreadable, or is not UTF-8.
    #[error("{}: cannot read: {error}", path.display())]
    Read {
        /// The path as given.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// A key the file format does not define, at any level.
    #[error("{}: unknown key {key} ({expected})", at(file, *line))]
    UnknownKey {
        /// The file's name as shown to the user.
        file: String,
        /// 1-based line of the key, when known.
        line: Option<usize>,
        /// 1-based column of the key, when known.
        column: Option<usize>,
        /// The dotted path of the unknown key, e.g. `keys.cooldwn_s`.
        key: String,
        /// The keys allowed there, e.g. ``expected one of `cooldown_base_s`, ...``.
        expected: String,
    },
    /// A known key whose value does not fit: the wrong type, out of range, an outcome name that
    /// is not one, or YAML that stops parsing inside it.
    #[error("{}: {key}: {message}", at(file, *line))]
    Invalid {
        /// The file's name as shown to the user.
        file: String,
        /// 1-based line of the value, when known.
        line: Option<usize>,
        /// 1-based column of the value, when known.
        column: Option<usize>,
        /// The dotted path of the key, e.g. `lanes.free.max_attempts` or `lanes.free.pin_on[2]`.
        key: String,
        /// What was wrong, e.g. `invalid type: string "two", expected u32`.
        message: String,
    },
    /// The document as a whole is unusable: not YAML, not a mapping, a top-level key repeated,
    /// or more than one document.
    #[error("{}: {message}", at(file, *line))]
    Malformed {
        /// The file's name as shown to the user.
        file: String,
        /// 1-based line, when known.
        line: Option<usize>,
        /// 1-based column, when known.
        column: Option<usize>,
        /// What was wrong.
        message: String,
    },
}

/// `file:line`, or `file` when the line is unknown.
fn at(file: &str, line: Option<usize>) -> String {
    match line {
        Some(line) => format!("{file}:{line}"),
        None => file.to_owned(),
    }
}

impl LaneConfig {
    /// Parses `lane.yaml` text. `source` names the file in error messages (e.g. `lane.yaml`).
    /// Empty text, or text that is only comments, means all defaults.
    pub fn from_yaml_str(text: &str, source: &str) -> Result<LaneConfig, ConfigError> {
        let deserializer = serde_yaml_ng::Deserializer::from_str(text);
        // An empty document deserializes as `None`: all defaults.
        let config = match serde_path_to_error::deserialize::<_, Option<LaneConfig>>(deserializer) {
            Ok(config) => config.unwrap_or_default(),
            Err(err) => return Err(ConfigError::from_yaml(err, source)),
        };
        config.check_values(text, source)?;
        Ok(config)
    }

    /// Values that parse but make no sense: NaN or negative seconds and thresholds, a rate above
    /// 1, a cooldown cap below its base, a zero bound or window. The error names the key and the
    /// line where it is written.
    fn check_values(&self, text: &str, file: &str) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| {
            let last = key.rsplit('.').next().unwrap_or(key);
            let line = text
                .lines()
                .position(|l| l.contains(&format!("{last}:")))
                .map(|i| i + 1);
            Err(ConfigError::Invalid {
                file: file.to_string(),
                line,
                column: None,
                key: key.to_string(),
                message,
            })
        };
        let a = &self.alerts;
        let seconds_or_ratio: [(&str, f64); 14] = [
            ("alerts.cross_lane_retries_per_job", a.cross_lane_retries_per_job),
            (
                "alerts.duplicate_artifacts_per_100_jobs",
                a.duplicate_artifacts_per_100_jobs,
            ),
            (
                "alerts.lane_policy_violations_per_100_jobs",
                a.lane_policy_violations_per_100_jobs,
            ),
            ("alerts.late_duplicates_per_100_jobs", a.late_duplicates_per_100_jobs),
            ("alerts.refusals_per_100_attempts", a.refusals_per_100_attempts),
            (
                "alerts.same_key_retries_per_100_refusals",
                a.same_key_retries_per_100_refusals,
            ),
            (
                "alerts.key_rest_violations_per_100_keyed_attempts",
                a.key_rest_violations_per_100_keyed_attempts,
            ),
            (
                "alerts.pool_overload_episodes_per_week",
                a.pool_overload_episodes_per_week,
            ),
            (
                "alerts.jobs_past_attempt_bound_per_100_jobs",
                a.jobs_past_attempt_bound_per_100_jobs,
            ),
            (
                "alerts.outcome_mismatches_per_100_refusals",
                a.outcome_mismatches_per_100_refusals,
            ),
            (
                "alerts.gate_decision_mismatches_per_100_decisions",
                a.gate_decision_mismatches_per_100_decisions,
            ),
            ("gate.max_queue_age_s", self.gate.max_queue_age_s),
            ("gate.reserved_service_s", self.gate.reserved_service_s),
            ("gate.free_admit_miss_rate", self.gate.free_admit_miss_rate),
        ];
        for (key, v) in seconds_or_ratio {
            if !v.is_finite() || v < 0.0 {
                return invalid(key, format!("{v} is not a finite number ≥ 0"));
            }
        }
        if self.gate.free_admit_miss_rate > 1.0 {
            return invalid(
                "gate.free_admit_miss_rate",
                format!("{} is a ratio: at most 1", self.gate.free_admit_miss_rate),
            );
        }
        if self.keys.cooldown_cap_s < self.keys.cooldown_base_s {
            return invalid(
                "keys.cooldown_cap_s",
                format!(
                    "{} is below keys.cooldown_base_s ({})",
                    self.keys.cooldown_cap_s, self.keys.cooldown_base_s
                ),
            );
        }
        let at_least_one: [(&str, u32); 4] = [
            ("keys.pool_overload_keys", self.keys.pool_overload_keys),
            ("keys.overload_window_s", self.keys.overload_window_s),
            ("keys.max_attempts_per_turn", self.keys.max_attempts_per_turn),
            ("retention.days", self.retention.days),
        ];
        for (key, v) in at_least_one {
            if v == 0 {
                return invalid(key, "must be at least 1".to_string());
            }
        }
        self.check_tiers(text, file)?;
        Ok(())
    }

    /// `lanes.tiers`: at least one, names 1–64 bytes without control characters or a space at
    /// either end, no name twice, each budget at least 1, and `free` / `paid` left out.
    fn check_tiers(&self, text: &str, file: &str) -> Result<(), ConfigError> {
        let Some(tiers) = &self.lanes.tiers else {
            return Ok(());
        };
        // The first line holding `needle` after the `tiers:` key, else that key's line.
        let line_of = |needle: &str| {
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.iter().position(|l| l.contains("tiers:")).unwrap_or(0);
            let found = lines[start..]
                .iter()
                .position(|l| !needle.is_empty() && l.contains(needle));
            Some(start + found.unwrap_or(0) + 1)
        };
        let invalid = |key: String, needle: &str, message: String| {
            Err(ConfigError::Invalid {
                file: file.to_string(),
                line: line_of(needle),
                column: None,
                key,
                message,
            })
        };
        if tiers.is_empty() {
            return invalid("lanes.tiers".into(), "", "names no tier: give at least one".into());
        }
        if self.lanes.free != FreeLaneConfig::default() || self.lanes.paid != PaidLaneConfig::default() {
            return invalid(
                "lanes.tiers".into(),
                "",
                "replaces lanes.free and lanes.paid: leave those out and give their budgets in the tiers".into(),
            );
        }
        for (i, tier) in tiers.iter().enumerate() {
            let name = tier.name.as_str();
            let bad = if name.is_empty() {
                Some("is empty".to_string())
            } else if name.len() > crate::model::lanes::MAX_NAME_BYTES {
                Some(format!(
                    "is {} bytes, more than {}",
                    name.len(),
                    crate::model::lanes::MAX_NAME_BYTES
                ))
            } else if name.chars().any(char::is_control) || name.trim() != name {
                Some(format!("{name:?} has a control character or a space at an end"))
            } else if tiers[..i].iter().any(|t| t.name == name) {
                Some(format!("{name:?} names an earlier tier again"))
            } else {
                None
            };
            if let Some(message) = bad {
                return invalid(format!("lanes.tiers[{i}].name"), name, message);
            }
            if tier.max_attempts == 0 {
                return invalid(
                    format!("lanes.tiers[{i}].max_attempts"),
                    name,
                    "must be at least 1".into(),
                );
            }
        }
        Ok(())
    }

    /// Reads `lane.yaml` from `path`; `None` means no file, so all defaults. A path that was given
    /// but cannot be read (including one that does not exist) is an error naming it.
    pub fn load(path: Option<&Path>) -> Result<LaneConfig, ConfigError> {
        let Some(path) = path else {
            return Ok(LaneConfig::default());
        };
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            error,
        })?;
        LaneConfig::from_yaml_str(&text, &path.display().to_string())
    }
}

impl ConfigError {
    /// Sorts a YAML error into a variant, with the dotted key from `serde_path_to_error` and the
    /// line and column from the YAML parser.
    pub(crate) fn from_yaml(err: serde_path_to_error::Error<serde_yaml_ng::Error>, file: &str) -> ConfigError {
        let key = err.path().to_string();
        let inner = err.into_inner();
        let location = inner.location();
        let line = location.as_ref().map(|l| l.line());
        let column = location.as_ref().map(|l| l.column());
        let message = bare_message(&inner, &key);
        let file = file.to_owned();
        if key == "." {
            return ConfigError::Malformed {
                file,
                line,
                column,
                message,
            };
        }
        // serde's `Error::unknown_field` wording: "unknown field `k`, expected one of `a`, `b`"
        // (or "expected `a`", "expected `a` or `b`").
        if let Some((_, expected)) = message
            .strip_prefix("unknown field `")
            .and_then(|rest| rest.split_once("`, "))
        {
            return ConfigError::UnknownKey {
                file,
                line,
                column,
                key,
                expected: expected.to_owned(),
            };
        }
        ConfigError::Invalid {
            file,
            line,
            column,
            key,
            message,
        }
    }
}

/// The YAML error's message without the decorations `serde_yaml_ng` adds to its `Display`: the
/// position (` at line L column C`, which [`ConfigError`] shows as `file:L`) and its own path
/// prefix (`keys: `), which is the dotted key or, for an unknown key, the mapping holding it.
fn bare_message(err: &serde_yaml_ng::Error, key: &str) -> String {
    let mut message = err.to_string();
    if let Some(location) = err.location() {
        let position = format!(" at line {} column {}", location.line(), location.column());
        message = match message.strip_suffix(&position) {
            Some(stripped) => stripped.to_owned(),
            None => message.replacen(&position, "", 1),
        };
    }
    let mut prefix = key;
    while !prefix.is_empty() && prefix != "." {
        if let Some(rest) = message.strip_prefix(prefix).and_then(|rest| rest.strip_prefix(": ")) {
            return rest.to_owned();
        }
        prefix = match prefix.rfind(['.', '[']) {
            Some(end) => &prefix[..end],
            None => "",
        };
    }
    message
}

/// Reads `pin_on`: a list of outcome names in the seed's spelling.
fn outcome_names<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Outcome>, D::Error> {
    let names: Vec<OutcomeName> = Vec::deserialize(deserializer)?;
    Ok(names.into_iter().map(|name| name.0).collect())
}

/// One `pin_on` entry. Checked in `visit_str` so that the error carries the entry's own line.
struct OutcomeName(Outcome);

impl<'de> Deserialize<'de> for OutcomeName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl Visitor<'_> for NameVisitor {
            type Value = OutcomeName;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("one of ok, retryable, ambiguous, permanent")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<OutcomeName, E> {
                Outcome::parse(v)
                    .map(OutcomeName)
                    .ok_or_else(|| E::invalid_value(Unexpected::Str(v), &self))
            }
        }
        deserializer.deserialize_str(NameVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seed 000's file under "Config You Can Copy", verbatim.
    const SEED_000: &str = "\
# lane.yaml
lanes:
  free:
    max_attempts: 2
    pin_on: [ambiguous, permanent]
  paid:
    max_attempts: 1
reconcile:
  late_completion_window_s: 900
  dedup_key: Idempotency-Key
alerts:
  cross_lane_retries_per_job: 0.20
  duplicate_artifacts_per_100_jobs: 1
free_lane_enabled: true
";

    fn err(text: &str) -> String {
        LaneConfig::from_yaml_str(text, "lane.yaml").unwrap_err().to_string()
    }

    #[test]
    fn seed_000_file_parses_unchanged() {
        let c = LaneConfig::from_yaml_str(SEED_000, "lane.yaml").unwrap();
        assert_eq!(c.lanes.free.max_attempts, 2);
        assert_eq!(c.lanes.free.pin_on, vec![Outcome::Ambiguous, Outcome::Permanent]);
        assert_eq!(c.lanes.paid.max_attempts, 1);
        assert_eq!(c.reconcile.late_completion_window_s, 900);
        assert_eq!(c.reconcile.dedup_key, "Idempotency-Key");
        assert_eq!(c.alerts.cross_lane_retries_per_job, 0.20);
        assert_eq!(c.alerts.duplicate_artifacts_per_100_jobs, 1.0);
        assert!(c.free_lane_enabled);
        assert_eq!(c.gate, GateConfig::default());
        assert_eq!(c.keys, KeysConfig::default());
        assert_eq!(c.retention, RetentionConfig::default());
        assert_eq!(c, LaneConfig::default());
    }

    #[test]
    fn unknown_top_level_key_names_key_and_line() {
        let text = format!("{SEED_000}free_lane_enable: false\n");
        assert_eq!(
            err(&text),
            "lane.yaml:15: unknown key free_lane_enable (expected one of `lanes`, `reconcile`, `alerts`, \
             `free_lane_enabled`, `gate`, `keys`, `retention`, `webhooks`, `prices`)"
        );
    }

    #[test]
    fn unknown_nested_key_names_dotted_key_and_line() {
        let expected = "(expected one of `cooldown_base_s`, `cooldown_cap_s`, `key_break_s`, \
                        `pool_overload_keys`, `overload_window_s`, `max_attempts_per_turn`)";
        let text = format!("{SEED_000}keys:\n  cooldown_base_s: 15\n  cooldwn_s: 3\n");
        assert_eq!(
            err(&text),
            format!("lane.yaml:17: unknown key keys.cooldwn_s {expected}")
        );
        assert_eq!(
            err("keys: {cooldwn_s: 3}"),
            format!("lane.yaml:1: unknown key keys.cooldwn_s {expected}")
        );
        assert_eq!(
            err("lanes:\n  free:\n    max_attempts: 2\n  paid:\n    retries: 1\n"),
            "lane.yaml:5: unknown key lanes.paid.retries (expected `max_attempts`)"
        );
    }

    #[test]
    fn wrong_type_names_dotted_key_and_line() {
        assert_eq!(
            err("lanes:\n  free:\n    max_attempts: two\n"),
            "lane.yaml:3: lanes.free.max_attempts: invalid type: string \"two\", expected u32"
        );
        assert_eq!(
            err("# lane.yaml\nkeys:\n  cooldown_base_s: -1\n"),
            "lane.yaml:3: keys.cooldown_base_s: invalid type: integer `-1`, expected u32"
        );
        assert_eq!(
            err("gate:\n  free_admit_miss_rate: [1]\n"),
            "lane.yaml:2: gate.free_admit_miss_rate: invalid type: sequence, expected f64"
        );
        assert_eq!(
            err("free_lane_enabled: 3\n"),
            "lane.yaml:1: free_lane_enabled: invalid type: integer `3`, expected a boolean"
        );
        assert!(matches!(
            LaneConfig::from_yaml_str("retention: {days: x}", "lane.yaml"),
            Err(ConfigError::Invalid { line: Some(1), column: Some(19), ref key, .. }) if key == "retention.days"
        ));
    }

    #[test]
    fn pin_on_rejects_unknown_outcome_naming_the_entry() {
        assert_eq!(
            err("lanes:\n  free:\n    pin_on:\n      - ambiguous\n      - sometimes\n"),
            "lane.yaml:5: lanes.free.pin_on[1]: invalid value: string \"sometimes\", expected one of ok, \
             retryable, ambiguous, permanent"
        );
        let c = LaneConfig::from_yaml_str("lanes: {free: {pin_on: [retryable]}}", "lane.yaml").unwrap();
        assert_eq!(c.lanes.free.pin_on, vec![Outcome::Retryable]);
        let c = LaneConfig::from_yaml_str("lanes: {free: {pin_on: []}}", "lane.yaml").unwrap();
        assert!(c.lanes.free.pin_on.is_empty());
    }

    #[test]
    fn malformed_documents() {
        assert_eq!(
            err("- 1\n"),
            "lane.yaml:1: invalid type: sequence, expected struct LaneConfig"
        );
        let e = err("lanes:\n  free:\n    max_attempts: 'two\n");
        assert!(
            e.starts_with("lane.yaml:4: lanes.free.max_attempts: found unexpected end of stream"),
            "{e}"
        );
    }

    #[test]
    fn empty_or_comment_only_file_is_defaults() {
        for text in ["", "\n", "# lane.yaml\n", "---\n"] {
            assert_eq!(
                LaneConfig::from_yaml_str(text, "lane.yaml").unwrap(),
                LaneConfig::default(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn no_file_is_defaults_and_defaults_are_the_seeds() {
        let c = LaneConfig::load(None).unwrap();
        assert_eq!(c, LaneConfig::default());
        // seed 000
        assert_eq!(c.lanes.free.max_attempts, lane::MAX_FREE_ATTEMPTS);
        let pin_on: Vec<&str> = c.lanes.free.pin_on.iter().map(|o| o.as_str()).collect();
        assert_eq!(pin_on, lane::PIN_ON);
        assert_eq!(c.lanes.paid.max_attempts, 1);
        assert_eq!(c.reconcile.late_completion_window_s, 900);
        assert_eq!(c.reconcile.dedup_key, "Idempotency-Key");
        assert_eq!(c.alerts.cross_lane_retries_per_job, 0.20);
        assert_eq!(c.alerts.duplicate_artifacts_per_100_jobs, 1.0);
        assert!(c.free_lane_enabled);
        // the audits' alerts (an extension)
        let a = &c.alerts;
        assert_eq!(a.lane_policy_violations_per_100_jobs, 1.0);
        assert_eq!(a.late_duplicates_per_100_jobs, 0.0);
        assert_eq!(a.refusals_per_100_attempts, 50.0);
        assert_eq!(a.same_key_retries_per_100_refusals, 0.0);
        assert_eq!(a.key_rest_violations_per_100_keyed_attempts, 1.0);
        assert_eq!(a.pool_overload_episodes_per_week, 0.0);
        assert_eq!(a.jobs_past_attempt_bound_per_100_jobs, 0.0);
        assert_eq!(a.outcome_mismatches_per_100_refusals, 0.0);
        assert_eq!(a.gate_decision_mismatches_per_100_decisions, 0.0);
        // seed 003
        assert_eq!(c.gate.max_queue_age_s, gate::DEFAULT_MAX_QUEUE_AGE_S);
        assert_eq!(c.gate.free_admit_miss_rate, 0.01);
        assert_eq!(c.gate.reserved_service_s, 8.0);
        // seed 002
        assert_eq!(c.keys.cooldown_base_s, refusal::COOL_BASE_SECONDS);
        assert_eq!(c.keys.cooldown_cap_s, refusal::COOL_CAP_SECONDS);
        assert_eq!(c.keys.key_break_s, refusal::KEY_BREAK_SECONDS);
        assert_eq!(c.keys.pool_overload_keys, refusal::POOL_OVERLOAD_KEYS);
        assert_eq!(c.keys.overload_window_s, refusal::OVERLOAD_WINDOW_SECONDS);
        assert_eq!(c.keys.max_attempts_per_turn, refusal::MAX_ATTEMPTS_PER_TURN);
        // SPEC 6
        assert_eq!(c.retention.days, 30);
    }

    #[test]
    fn missing_file_is_an_error_naming_it() {
        let path = Path::new("/nonexistent/laneledger/lane.yaml");
        let e = LaneConfig::load(Some(path)).unwrap_err();
        assert!(
            matches!(e, ConfigError::Read { ref path, .. } if path == Path::new("/nonexistent/laneledger/lane.yaml"))
        );
        assert!(
            e.to_string()
                .starts_with("/nonexistent/laneledger/lane.yaml: cannot read: "),
            "{e}"
        );
    }

    #[test]
    fn load_names_the_path_in_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lane.yaml");
        std::fs::write(&path, "keys:\n  cooldown_cap_s: lots\n").unwrap();
        let e = LaneConfig::load(Some(&path)).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}:2: keys.cooldown_cap_s: invalid type: string \"lots\", expected u32",
                path.display()
            )
        );
    }

    #[test]
    fn extension_overrides_are_read() {
        let text = format!(
            "{SEED_000}gate: {{free_admit_miss_rate: 0.02}}\nkeys:\n  cooldown_base_s: 10\n  \
             max_attempts_per_turn: 5\nretention:\n  days: 7\n"
        );
        let c = LaneConfig::from_yaml_str(&text, "lane.yaml").unwrap();
        assert_eq!(c.gate.free_admit_miss_rate, 0.02);
        assert_eq!(c.gate.max_queue_age_s, 30.0);
        assert_eq!(c.gate.reserved_service_s, 8.0);
        assert_eq!(c.keys.cooldown_base_s, 10);
        assert_eq!(c.keys.max_attempts_per_turn, 5);
        assert_eq!(c.keys.cooldown_cap_s, 240);
        assert_eq!(c.retention.days, 7);
        assert_eq!(c.lanes, LanesConfig::default());
    }

    #[test]
    fn sample_data_lane_yaml_is_the_seed_plus_the_defaults() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../sample-data/lane.yaml"));
        let text = std::fs::read_to_string(path).unwrap();
        // Seed 000's lines, each verbatim and in order; the extension keys sit between them
        // (under `alerts:`) and after them.
        let mut lines = text.lines();
        for want in SEED_000.lines() {
            assert!(
                lines.any(|l| l == want),
                "sample-data/lane.yaml must hold seed 000's line {want:?} in order"
            );
        }
        // Prices have no default (no cost is guessed): the sample's are for the demo's spend.
        let loaded = LaneConfig::load(Some(path)).unwrap();
        assert_eq!(loaded.prices.currency.as_deref(), Some("USD"));
        assert_eq!(loaded.prices.lanes.len(), 2);
        let defaults_but_prices = LaneConfig {
            prices: Default::default(),
            ..loaded
        };
        assert_eq!(defaults_but_prices, LaneConfig::default());
    }

    #[test]
    fn webhooks_are_read_and_bad_entries_named_by_line() {
        let text = "webhooks:\n  - url: https://hooks.slack.com/services/T0/B0/x\n    site_url: http://review.example.com:8080\n    alerts: [same_key_retries_per_100_refusals, free_admit_miss_rate]\n  - url: http://127.0.0.1:9000/hook\n";
        let c = LaneConfig::from_yaml_str(text, "lane.yaml").unwrap();
        assert_eq!(
            c.webhooks,
            vec![
                WebhookConfig {
                    url: "https://hooks.slack.com/services/T0/B0/x".into(),
                    site_url: Some("http://review.example.com:8080".into()),
                    alerts: AlertSelection::Only(vec![
                        "same_key_retries_per_100_refusals".into(),
                        "free_admit_miss_rate".into()
                    ]),
                },
                WebhookConfig {
                    url: "http://127.0.0.1:9000/hook".into(),
                    site_url: None,
                    alerts: AlertSelection::All,
                },
            ]
        );
        assert!(c.webhooks[0].alerts.includes("free_admit_miss_rate"));
        assert!(!c.webhooks[0].alerts.includes("cross_lane_retries_per_job"));
        assert!(c.webhooks[1].alerts.includes("cross_lane_retries_per_job"));
        let names = alert_names();
        for name in ["cross_lane_retries_per_job", "same_key_retries_per_100_refusals"] {
            assert!(names.contains(&name), "{names:?}");
        }
        assert!(!names.contains(&"min_jobs"), "{names:?}");
        assert_eq!(names.last(), Some(&"free_admit_miss_rate"));
        assert_eq!(
            err("webhooks:\n  - url: https://x.example/h\n    alerts:\n      - cross_lane_retries\n"),
            format!(
                "lane.yaml:4: webhooks[0].alerts[0]: invalid value: string \"cross_lane_retries\", expected an alert \
                 name: one of {}",
                names.join(", ")
            )
        );
        assert_eq!(
            err("webhooks:\n  - url: hooks.slack.com/x\n"),
            "lane.yaml:2: webhooks[0].url: invalid value: string \"hooks.slack.com/x\", expected an http:// or \
             https:// URL"
        );
        assert_eq!(
            err("webhooks:\n  - url: https://x.example/h\n    alerts: some\n"),
            "lane.yaml:3: webhooks[0].alerts: invalid value: string \"some\", expected `all` or a list of alert names"
        );
        assert_eq!(
            err("webhooks:\n  - url: https://x.example/h\n    channel: '#ops'\n"),
            "lane.yaml:3: unknown key webhooks[0].channel (expected one of `url`, `site_url`, `alerts`)"
        );
    }

    #[test]
    fn values_that_parse_but_make_no_sense_are_refused_naming_key_and_line() {
        let cases = [
            (
                "alerts:\n  duplicate_artifacts_per_100_jobs: .nan\n",
                "x.yaml:2: alerts.duplicate_artifacts_per_100_jobs: NaN is not a finite number ≥ 0",
            ),
            (
                "alerts:\n  cross_lane_retries_per_job: 0.2\n  same_key_retries_per_100_refusals: -1\n",
                "x.yaml:3: alerts.same_key_retries_per_100_refusals: -1 is not a finite number ≥ 0",
            ),
            (
                "gate:\n  max_queue_age_s: -30\n",
                "x.yaml:2: gate.max_queue_age_s: -30 is not a finite number ≥ 0",
            ),
            (
                "gate:\n  free_admit_miss_rate: 5\n",
                "x.yaml:2: gate.free_admit_miss_rate: 5 is a ratio: at most 1",
            ),
            (
                "keys:\n  cooldown_base_s: 300\n  cooldown_cap_s: 10\n",
                "x.yaml:3: keys.cooldown_cap_s: 10 is below keys.cooldown_base_s (300)",
            ),
            (
                "keys:\n  max_attempts_per_turn: 0\n",
                "x.yaml:2: keys.max_attempts_per_turn: must be at least 1",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(LaneConfig::from_yaml_str(text, "x.yaml").unwrap_err().to_string(), want);
        }
    }
}
