//! A mapping file, as written: YAML read into typed sections, every value checked while it is read
//! so that a bad file is refused naming its line and key before anything is written.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde_json::Value;

use crate::config::ConfigError;
use crate::model::record::{Lane, Outcome};

/// A JSON Pointer (RFC 6901) into a record. `^/…` points into the record an exploded item came
/// from (its parent); the empty pointer is the whole record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    /// The pointer text without the `^`.
    pub path: String,
    /// Whether it points into the parent record of an exploded item.
    pub parent: bool,
}

impl fmt::Display for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.parent {
            f.write_str("^")?;
        }
        f.write_str(&self.path)
    }
}

impl<'de> Deserialize<'de> for Pointer {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let (parent, path) = match text.strip_prefix('^') {
            Some(rest) => (true, rest.to_string()),
            None => (false, text.clone()),
        };
        if !path.is_empty() && !path.starts_with('/') {
            return Err(serde::de::Error::custom(format!(
                "{text:?} is not a JSON Pointer: it starts with / (or ^/ for the record an exploded item came from)"
            )));
        }
        Ok(Pointer { path, parent })
    }
}

/// A regular expression, compiled when the file is read.
#[derive(Debug, Clone)]
pub struct Pattern(pub regex::Regex);

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        regex::RegexBuilder::new(&text)
            .size_limit(1 << 20)
            .build()
            .map(Pattern)
            .map_err(|e| serde::de::Error::custom(format!("not a regular expression: {e}")))
    }
}

/// One value or a list of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    /// A single value.
    One(T),
    /// A list.
    Many(Vec<T>),
}

impl<T> OneOrMany<T> {
    /// The values as a slice.
    pub fn as_slice(&self) -> &[T] {
        match self {
            OneOrMany::One(t) => std::slice::from_ref(t),
            OneOrMany::Many(v) => v,
        }
    }
}

/// The closed set of conversions a field's value may go through (`as:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Conversion {
    /// Seconds since the Unix epoch (a number or numeric text, fractions kept to the µs).
    EpochSeconds,
    /// Milliseconds since the Unix epoch.
    EpochMillis,
    /// Nanoseconds since the Unix epoch (OTLP's `…UnixNano`, often a decimal string).
    UnixNanos,
    /// RFC 3339 with `Z` or an offset (a space instead of `T` is taken too).
    Rfc3339,
    /// `YYYY-MM-DD HH:MM:SS[.f]` with no offset, read as UTC (Langfuse, Postgres dumps).
    NaiveUtc,
    /// An integer: a JSON integer, or text holding one.
    Int,
    /// Text: a number or boolean is written out as text.
    String,
    /// Text holding JSON, parsed (a JSON column in a CSV dump).
    Json,
}

/// What a condition looks at: a path in the record, or an attempt field already mapped.
#[derive(Debug, Clone)]
pub enum Subject {
    /// A pointer into the record.
    Path(Pointer),
    /// A mapped attempt field, e.g. `http_status`.
    Field(String),
}

/// What a condition tests.
#[derive(Debug, Clone)]
pub enum Predicate {
    /// Equal to one of these values (numbers compare as numbers, text as text).
    In(Vec<Value>),
    /// A number within `lo..=hi`.
    Range(f64, f64),
    /// Present (not null, not empty text) or absent.
    Exists(bool),
    /// Text that the expression finds.
    Matches(Pattern),
}

/// One test on a record.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "RawCondition")]
pub struct Condition {
    /// What it looks at.
    pub subject: Subject,
    /// What it tests.
    pub predicate: Predicate,
    /// Whether the test is negated.
    pub not: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCondition {
    path: Option<Pointer>,
    field: Option<String>,
    equals: Option<Value>,
    #[serde(rename = "in")]
    one_of: Option<Vec<Value>>,
    range: Option<[f64; 2]>,
    exists: Option<bool>,
    matches: Option<Pattern>,
    #[serde(default)]
    not: bool,
}

/// The attempt fields a condition may name with `field:`.
pub const CONDITION_FIELDS: [&str; 14] = [
    "job_id",
    "idem_key",
    "started_at",
    "ended_at",
    "tokens_in",
    "tokens_out",
    "artifact_id",
    "http_status",
    "provider_code",
    "key_id",
    "pool_id",
    "model",
    "lane",
    "attempt_no",
];

impl TryFrom<RawCondition> for Condition {
    type Error = String;
    fn try_from(r: RawCondition) -> Result<Self, String> {
        let subject = match (r.path, r.field) {
            (Some(p), None) => Subject::Path(p),
            (None, Some(f)) if CONDITION_FIELDS.contains(&f.as_str()) => Subject::Field(f),
            (None, Some(f)) => {
                return Err(format!(
                    "field {f:?} is not an attempt field (one of {})",
                    CONDITION_FIELDS.join(", ")
                ));
            }
            _ => return Err("a condition names exactly one of `path` or `field`".into()),
        };
        let mut predicates = Vec::new();
        if let Some(v) = r.equals {
            predicates.push(Predicate::In(vec![v]));
        }
        if let Some(v) = r.one_of {
            predicates.push(Predicate::In(v));
        }
        if let Some([lo, hi]) = r.range {
            predicates.push(Predicate::Range(lo, hi));
        }
        if let Some(e) = r.exists {
            predicates.push(Predicate::Exists(e));
        }
        if let Some(m) = r.matches {
            predicates.push(Predicate::Matches(m));
        }
        if predicates.len() != 1 {
            return Err("a condition has exactly one of `equals`, `in`, `range`, `exists` or `matches`".into());
        }
        Ok(Condition {
            subject,
            predicate: predicates.pop().expect("one predicate"),
            not: r.not,
        })
    }
}

/// How one attempt field is taken from a record.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldSpec {
    /// Pointers tried in order: the first that holds a value (not null, not empty text, and
    /// matching `regex` when there is one) wins.
    #[serde(default)]
    pub from: Vec<Pointer>,
    /// A constant value instead of `from`.
    #[serde(rename = "const")]
    pub constant: Option<Value>,
    /// Keeps the first capture group of this expression (the whole match when it has none).
    pub regex: Option<Pattern>,
    /// Replaces the value (as text) by the value it maps to; one not listed takes `default`.
    pub map: Option<BTreeMap<String, Value>>,
    /// The value when nothing resolves (or the map has no entry).
    pub default: Option<Value>,
    /// Conversions tried in order; the first that succeeds wins.
    #[serde(rename = "as")]
    pub convert: Option<OneOrMany<Conversion>>,
    /// The field is taken only when these conditions hold.
    pub when: Option<OneOrMany<Condition>>,
}

/// The fields of an attempt that a mapping takes from `fields:`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fields {
    /// The job (required).
    pub job_id: FieldSpec,
    /// When the call started (required).
    pub started_at: FieldSpec,
    /// When it ended.
    pub ended_at: Option<FieldSpec>,
    /// Prompt tokens.
    pub tokens_in: Option<FieldSpec>,
    /// Completion tokens.
    pub tokens_out: Option<FieldSpec>,
    /// The artifact the call produced.
    pub artifact_id: Option<FieldSpec>,
    /// The HTTP status (0 when no answer came).
    pub http_status: Option<FieldSpec>,
    /// The provider's business code from the error body.
    pub provider_code: Option<FieldSpec>,
    /// The provider key (or the deployment standing for it).
    pub key_id: Option<FieldSpec>,
    /// The key pool.
    pub pool_id: Option<FieldSpec>,
    /// The model.
    pub model: Option<FieldSpec>,
}

impl Fields {
    /// The optional fields with their names, in the record's order.
    pub fn optional(&self) -> [(&'static str, Option<&FieldSpec>); 9] {
        [
            ("ended_at", self.ended_at.as_ref()),
            ("tokens_in", self.tokens_in.as_ref()),
            ("tokens_out", self.tokens_out.as_ref()),
            ("artifact_id", self.artifact_id.as_ref()),
            ("http_status", self.http_status.as_ref()),
            ("provider_code", self.provider_code.as_ref()),
            ("key_id", self.key_id.as_ref()),
            ("pool_id", self.pool_id.as_ref()),
            ("model", self.model.as_ref()),
        ]
    }
}

/// Where the idempotency key comes from.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdemSpec {
    /// Pointers to a key the client sent (first that resolves wins).
    #[serde(default)]
    pub from: Vec<Pointer>,
    /// Pointers to a logical request id used as the key only when the fallback is allowed.
    #[serde(default)]
    pub fallback: Vec<Pointer>,
    /// Whether the fallback is allowed by the mapping itself (else `--idem-fallback`).
    #[serde(default)]
    pub allow_fallback: bool,
}

/// How the attempt number is found: read, the exploded item's position, or derived per job.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptNoSpec {
    /// Pointers to a number the router wrote (first that resolves wins).
    #[serde(default)]
    pub from: Vec<Pointer>,
    /// The exploded item's 1-based position.
    #[serde(default)]
    pub index: bool,
    /// Derived: a job's attempts numbered by start time, ties broken by these pointers' value.
    pub derive: Option<DeriveSpec>,
}

/// How derived attempt numbers break ties between attempts that started at the same time.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeriveSpec {
    /// Pointers to a stable id of the record (a span id, a call id), first that resolves wins.
    #[serde(default)]
    pub tiebreak: Vec<Pointer>,
}

/// A lane name in a mapping: `free` or `paid`, or a tier of the `lane.yaml` in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneName(pub Lane);

impl<'de> Deserialize<'de> for LaneName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Lane::configured(&s).map(LaneName).ok_or_else(|| {
            serde::de::Error::custom(format!("{s:?} is not a lane ({})", crate::model::lanes::expected()))
        })
    }
}

/// How the lane is found: a value looked up in a map, by suffix, by prefix, else a default.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaneSpec {
    /// Pointers to the value that names the lane (a model group, a model, a key alias).
    #[serde(default)]
    pub from: Vec<Pointer>,
    /// Exact values.
    #[serde(default)]
    pub map: BTreeMap<String, LaneName>,
    /// Values ending so (`:free`).
    #[serde(default)]
    pub suffix: BTreeMap<String, LaneName>,
    /// Values starting so.
    #[serde(default)]
    pub prefix: BTreeMap<String, LaneName>,
    /// The lane when nothing matches.
    pub default: Option<LaneName>,
}

/// An outcome name in a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutcomeName(pub Outcome);

impl<'de> Deserialize<'de> for OutcomeName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Outcome::parse(&s).map(OutcomeName).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{s:?} is not an outcome (ok, retryable, ambiguous or permanent)"
            ))
        })
    }
}

/// One outcome rule: the first rule whose conditions all hold gives the outcome.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutcomeRule {
    /// The conditions (none: always).
    pub when: Option<OneOrMany<Condition>>,
    /// The outcome.
    pub then: OutcomeName,
}

/// What else is kept in `attrs`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttrsSpec {
    /// Parts of the record not kept (message bodies, say).
    #[serde(default)]
    pub drop: Vec<Pointer>,
    /// Extra named values kept in `attrs` under their name (e.g. `response_cost`).
    #[serde(default)]
    pub fields: BTreeMap<String, FieldSpec>,
}

/// How the input is framed into records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputShape {
    /// NDJSON, a JSON array, or one JSON object (a file each, e.g. a bucket's objects).
    #[default]
    Json,
    /// CSV with a header row; cells holding a JSON object or array are read as JSON.
    Csv,
    /// OpenTelemetry traces (OTLP/JSON export requests): one record per span.
    Otlp,
}

/// A mapping file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The mapping's name.
    pub name: String,
    /// One line on what it reads.
    #[serde(default)]
    pub about: String,
    /// How the input is framed.
    #[serde(default)]
    pub input: InputShape,
    /// Where the records are inside each input value (an object or an array of them).
    pub records: Option<Pointer>,
    /// An array inside each record holding its tries: one attempt per item.
    pub explode: Option<Pointer>,
    /// Records for which these conditions do not all hold are skipped (not attempts).
    pub filter: Option<OneOrMany<Condition>>,
    /// The attempt's fields.
    pub fields: Fields,
    /// The idempotency key.
    pub idem_key: IdemSpec,
    /// The attempt number.
    pub attempt_no: AttemptNoSpec,
    /// The lane.
    pub lane: LaneSpec,
    /// The outcome rules, in order.
    #[serde(default)]
    pub outcome: Vec<OutcomeRule>,
    /// What else is kept.
    #[serde(default)]
    pub attrs: AttrsSpec,
}

impl Spec {
    /// Reads a mapping file's text; `file` names it in errors.
    pub fn from_yaml(text: &str, file: &str) -> Result<Spec, ConfigError> {
        let deserializer = serde_yaml_ng::Deserializer::from_str(text);
        let spec: Spec = serde_path_to_error::deserialize(deserializer).map_err(|e| ConfigError::from_yaml(e, file))?;
        spec.check(text, file)?;
        Ok(spec)
    }

    /// Rules across sections, which the reader of one value cannot see.
    fn check(&self, text: &str, file: &str) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: &str| {
            let last = key.rsplit('.').next().unwrap_or(key);
            let line = text.lines().position(|l| {
                let l = l.trim_start();
                l.starts_with(&format!("{last}:"))
                    || l.contains(&format!(" {last}:"))
                    || l.contains(&format!("{{{last}:"))
            });
            Err(ConfigError::Invalid {
                file: file.to_string(),
                line: line.map(|i| i + 1),
                column: None,
                key: key.to_string(),
                message: message.to_string(),
            })
        };
        if self.idem_key.from.is_empty() && self.idem_key.fallback.is_empty() {
            return invalid(
                "idem_key",
                "names no pointer: give `from` (a key the client sent) or `fallback`",
            );
        }
        let a = &self.attempt_no;
        if a.from.is_empty() && !a.index && a.derive.is_none() {
            return invalid("attempt_no", "give `from`, `index: true` or `derive`");
        }
        if a.index && self.explode.is_none() {
            return invalid("attempt_no.index", "numbers exploded items: it needs `explode`");
        }
        if self.lane.from.is_empty() && self.lane.default.is_none() {
            return invalid("lane", "give `from` with a map, or a `default`");
        }
        let mut all = vec![
            ("fields.job_id", &self.fields.job_id),
            ("fields.started_at", &self.fields.started_at),
        ];
        let names: Vec<String> = self
            .fields
            .optional()
            .iter()
            .map(|(n, _)| format!("fields.{n}"))
            .collect();
        for ((_, spec), name) in self.fields.optional().into_iter().zip(&names) {
            if let Some(spec) = spec {
                all.push((name.as_str(), spec));
            }
        }
        for (name, spec) in all {
            if spec.from.is_empty() && spec.constant.is_none() && spec.default.is_none() {
                return invalid(name, "gives no value: add `from`, `const` or `default`");
            }
        }
        if self.explode.is_none() {
            let parent_pointer = self.pointers().find(|p| p.parent);
            if let Some(p) = parent_pointer {
                return invalid(
                    "explode",
                    &format!("{p} points into an exploded item's parent, but nothing is exploded"),
                );
            }
        }
        Ok(())
    }

    /// Every pointer the mapping reads values from (not the conditions').
    fn pointers(&self) -> impl Iterator<Item = &Pointer> {
        let f = &self.fields;
        let fields = [Some(&f.job_id), Some(&f.started_at)]
            .into_iter()
            .chain(f.optional().into_iter().map(|(_, s)| s))
            .flatten()
            .chain(self.attrs.fields.values())
            .flat_map(|s| s.from.iter());
        fields
            .chain(&self.idem_key.from)
            .chain(&self.idem_key.fallback)
            .chain(&self.attempt_no.from)
            .chain(self.attempt_no.derive.iter().flat_map(|d| &d.tiebreak))
            .chain(&self.lane.from)
    }
}
