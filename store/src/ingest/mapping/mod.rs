//! Mappings: routers' logs as they are (OpenTelemetry GenAI spans, LiteLLM, OpenRouter, Langfuse
//! exports…) turned into attempts by a declarative YAML file, with no converter to write.
//!
//! A mapping says where the records are in each input value, which nested array holds a
//! record's tries (`explode`), which records are attempts at all (`filter`), where each attempt
//! field is (a list of JSON Pointers, the first that resolves wins) and how it is converted (a
//! closed set: epoch seconds / milliseconds / Unix nanoseconds / RFC 3339 / naive UTC to a
//! timestamp, integer, text, JSON text, a regex capture, a value map with a default, a constant),
//! how the attempt number is read or derived, how the lane and the outcome are decided, and
//! where the idempotency key comes from. Everything the mapping does not use is kept in `attrs`.
//!
//! The built-in mappings are such files (`store/mappings/*.yaml`), shipped in the binary; a user
//! copies one and edits it. [`source`] frames inputs into records; [`otlp`] flattens OpenTelemetry
//! export requests into one record per span.

mod engine;
pub mod feed;
pub mod otlp;
pub mod source;
pub mod spec;

use std::path::PathBuf;

pub use engine::{COUNTED_FIELDS, FALLBACK_PREFIX, Mapped, NoPrior, PriorAttempt, PriorAttempts, SourceRecord};
pub use feed::{MappedFeed, MappedReport, ingest_mapped};
pub use spec::InputShape;
use spec::Spec;

use crate::config::ConfigError;
use crate::storage::ledger::Ledger;

/// The built-in mappings: name and YAML text.
pub const BUILTIN: [(&str, &str); 5] = [
    ("otlp", include_str!("../../../mappings/otlp.yaml")),
    ("litellm", include_str!("../../../mappings/litellm.yaml")),
    (
        "litellm-spendlogs",
        include_str!("../../../mappings/litellm-spendlogs.yaml"),
    ),
    ("openrouter", include_str!("../../../mappings/openrouter.yaml")),
    ("langfuse", include_str!("../../../mappings/langfuse.yaml")),
];

/// Why a mapping cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum MappingError {
    /// Not a built-in name, and no file by that name.
    #[error(
        "no mapping {name:?}: give a built-in name ({}) or the path of a mapping file",
        builtin_names()
    )]
    Unknown {
        /// What was asked for.
        name: String,
    },
    /// The file could not be read.
    #[error("{}: cannot read the mapping: {error}", path.display())]
    Read {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// The file is not a valid mapping: the message names its line and key.
    #[error("bad mapping: {0}")]
    Invalid(#[from] ConfigError),
}

fn builtin_names() -> String {
    BUILTIN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// A mapping, read and checked.
#[derive(Debug, Clone)]
pub struct Mapping {
    spec: Spec,
    allow_fallback: bool,
}

impl Mapping {
    /// A built-in mapping by name, or a mapping file by path (a path is anything with a `/`, or
    /// ending `.yaml`/`.yml`, or an existing file).
    ///
    /// Errors: [`MappingError::Unknown`], [`MappingError::Read`], [`MappingError::Invalid`].
    pub fn resolve(name_or_path: &str) -> Result<Mapping, MappingError> {
        if let Some((name, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Mapping::from_yaml(text, &format!("built-in mapping {name}"));
        }
        let path = PathBuf::from(name_or_path);
        let looks_like_path = name_or_path.contains('/')
            || name_or_path.ends_with(".yaml")
            || name_or_path.ends_with(".yml")
            || path.is_file();
        if !looks_like_path {
            return Err(MappingError::Unknown {
                name: name_or_path.to_string(),
            });
        }
        let text = std::fs::read_to_string(&path).map_err(|error| MappingError::Read {
            path: path.clone(),
            error,
        })?;
        Mapping::from_yaml(&text, name_or_path)
    }

    /// Reads a mapping from YAML text; `file` names it in errors.
    pub fn from_yaml(text: &str, file: &str) -> Result<Mapping, MappingError> {
        Ok(Mapping {
            spec: Spec::from_yaml(text, file)?,
            allow_fallback: false,
        })
    }

    /// The mapping's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// One line on what it reads.
    pub fn about(&self) -> &str {
        &self.spec.about
    }

    /// How its input is framed.
    pub fn input(&self) -> InputShape {
        self.spec.input
    }

    /// Whether attempt numbers are derived per job from the ledger (so that writers of the same
    /// job must not map concurrently).
    pub fn derives_attempt_numbers(&self) -> bool {
        self.spec.attempt_no.derive.is_some()
    }

    /// Allows the declared idempotency-key fallback (`--idem-fallback`, `?idem_fallback=1`).
    pub fn allow_idem_fallback(&mut self, yes: bool) {
        self.allow_fallback = yes;
    }

    /// Maps source records to attempts (or rejects naming every bad field), in input order.
    /// Derived attempt numbers continue what `prior` holds for the job; a record delivered again
    /// gets the number it got before. Records the filter leaves out are counted in
    /// [`Mapped::skipped`].
    pub fn map(&self, source: &str, records: Vec<SourceRecord>, prior: &dyn PriorAttempts) -> Mapped {
        self.spec
            .map(source, records, prior, self.allow_fallback, &self.spec.name)
    }
}

impl PriorAttempts for Ledger {
    fn attempts_of(&self, job_id: &str) -> Vec<PriorAttempt> {
        // A read error shows again, named, when the batch is written.
        self.job_attempts(job_id)
            .unwrap_or_default()
            .into_iter()
            .map(|s| PriorAttempt {
                attempt_no: s.attempt.attempt_no,
                started_at: s.attempt.started_at,
                attempt_key: s.attempt.attrs.as_deref().and_then(attempt_key),
            })
            .collect()
    }
}

/// `attrs.attempt_key` of a stored attempt.
pub fn attempt_key(attrs: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(attrs).ok()?;
    v.get("attempt_key")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests;
