//! `lane.yaml` `prices`: what an attempt cost, for the review's spend figures (issue 31).
//!
//! An attempt's cost is, in order: the cost its router reported (`attrs.response_cost`, which the
//! LiteLLM, OpenRouter and Langfuse mappings keep), else its tokens at the price of its model
//! (`prices.models`), else at the price of its lane (`prices.lanes`), else nothing: the attempt is
//! counted as unpriced and its cost is never guessed. A free lane costs 0 only when `lane.yaml`
//! says so.
//!
//! ```
//! use laneledger_store::LaneConfig;
//! use laneledger_store::config::prices::AttemptCost;
//! let config = LaneConfig::from_yaml_str(
//!     "prices:\n  models:\n    gpt-4o: {input_per_million: 2.5, output_per_million: 10}\n",
//!     "lane.yaml",
//! )?;
//! let cost = config.prices.cost_of("paid", Some("gpt-4o"), 1_000, 500, None);
//! assert_eq!(cost, AttemptCost::Table(0.0075));
//! assert_eq!(config.prices.cost_of("free", Some("glm-4.6"), 10, 10, None), AttemptCost::Unpriced);
//! # Ok::<(), laneledger_store::config::ConfigError>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Unexpected, Visitor};

/// `prices`: prices per million tokens by model and by lane. Every key is optional; with none, no
/// attempt is priced but by its router.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PricesConfig {
    /// `prices.currency`: the label shown beside each spend figure (`USD`). Without it the figures
    /// are plain numbers. Routers report their costs in US dollars.
    pub currency: Option<String>,
    /// `prices.models`: a price per model name, as the attempts' `model` column spells it. A
    /// model's price wins over its lane's.
    pub models: BTreeMap<String, Price>,
    /// `prices.lanes`: a price per lane (`free`, `paid`), for attempts whose model has none.
    pub lanes: BTreeMap<String, Price>,
}

/// One price: per million input tokens and per million output tokens, both required.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per million input tokens (`tokens_in`), a finite number ≥ 0.
    #[serde(deserialize_with = "non_negative")]
    pub input_per_million: f64,
    /// Per million output tokens (`tokens_out`), a finite number ≥ 0.
    #[serde(deserialize_with = "non_negative")]
    pub output_per_million: f64,
}

impl Price {
    /// The cost of `tokens_in` and `tokens_out` at this price.
    pub fn cost(&self, tokens_in: i64, tokens_out: i64) -> f64 {
        (tokens_in as f64 * self.input_per_million + tokens_out as f64 * self.output_per_million) / 1_000_000.0
    }
}

/// What one attempt cost, and where the figure came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AttemptCost {
    /// The router reported it (`attrs.response_cost`).
    Router(f64),
    /// Its tokens at the price of its model or lane.
    Table(f64),
    /// No reported cost and no price for its model or lane.
    Unpriced,
}

impl AttemptCost {
    /// The figure, when there is one.
    pub fn value(self) -> Option<f64> {
        match self {
            AttemptCost::Router(v) | AttemptCost::Table(v) => Some(v),
            AttemptCost::Unpriced => None,
        }
    }
}

/// The `attrs` key a router's own cost of an attempt is kept under.
pub const RESPONSE_COST: &str = "response_cost";

/// The `attrs` key the time of an attempt's first output token is kept under (an RFC 3339 time,
/// as a mapping's time conversions write it): the time to first token is it less `started_at`.
pub const FIRST_TOKEN_AT: &str = "first_token_at";

impl PricesConfig {
    /// The price of an attempt on `lane` with `model`: the model's, else the lane's.
    pub fn price_of(&self, lane: &str, model: Option<&str>) -> Option<&Price> {
        model.and_then(|m| self.models.get(m)).or_else(|| self.lanes.get(lane))
    }

    /// What an attempt cost: the router's figure in `attrs` (JSON text), else its tokens at
    /// [`PricesConfig::price_of`], else [`AttemptCost::Unpriced`].
    pub fn cost_of(
        &self,
        lane: &str,
        model: Option<&str>,
        tokens_in: i64,
        tokens_out: i64,
        attrs: Option<&str>,
    ) -> AttemptCost {
        if let Some(v) = attrs.and_then(router_cost) {
            return AttemptCost::Router(v);
        }
        match self.price_of(lane, model) {
            Some(p) => AttemptCost::Table(p.cost(tokens_in, tokens_out)),
            None => AttemptCost::Unpriced,
        }
    }
}

/// The router's cost in `attrs`: `response_cost` as a number or numeric text (LiteLLM's spend
/// table writes text), finite and ≥ 0; anything else is no cost.
pub fn router_cost(attrs: &str) -> Option<f64> {
    if !attrs.contains(RESPONSE_COST) {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(attrs).ok()?;
    let x = match v.get(RESPONSE_COST)? {
        serde_json::Value::Number(n) => n.as_f64()?,
        serde_json::Value::String(s) => s.trim().parse::<f64>().ok()?,
        _ => return None,
    };
    (x.is_finite() && x >= 0.0).then_some(x)
}

/// The first token's time in `attrs` (`first_token_at`, RFC 3339, or µs since the epoch as a
/// number), µs since the epoch.
pub fn first_token_at(attrs: &str) -> Option<i64> {
    if !attrs.contains(FIRST_TOKEN_AT) {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(attrs).ok()?;
    match v.get(FIRST_TOKEN_AT)? {
        serde_json::Value::String(s) => crate::model::time::parse_timestamp(s).ok(),
        serde_json::Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

/// A price: a finite number ≥ 0. Checked in the visitor so that the error names the value's line.
fn non_negative<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    struct PriceVisitor;
    impl Visitor<'_> for PriceVisitor {
        type Value = f64;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a price: a finite number ≥ 0")
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
            if v.is_finite() && v >= 0.0 {
                Ok(v)
            } else {
                Err(E::invalid_value(Unexpected::Float(v), &self))
            }
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
            if v >= 0 {
                Ok(v as f64)
            } else {
                Err(E::invalid_value(Unexpected::Signed(v), &self))
            }
        }
    }
    deserializer.deserialize_f64(PriceVisitor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LaneConfig;

    fn err(text: &str) -> String {
        LaneConfig::from_yaml_str(text, "lane.yaml").unwrap_err().to_string()
    }

    #[test]
    fn model_price_wins_over_lane_price_and_router_cost_over_both() {
        let c = LaneConfig::from_yaml_str(
            "prices:\n  currency: USD\n  models:\n    big: {input_per_million: 10, output_per_million: 30}\n  lanes:\n    paid: {input_per_million: 1, output_per_million: 2}\n    free: {input_per_million: 0, output_per_million: 0}\n",
            "lane.yaml",
        )
        .unwrap();
        let p = &c.prices;
        assert_eq!(p.currency.as_deref(), Some("USD"));
        assert_eq!(
            p.cost_of("paid", Some("big"), 100_000, 10_000, None),
            AttemptCost::Table(1.3)
        );
        assert_eq!(
            p.cost_of("paid", Some("small"), 100_000, 10_000, None),
            AttemptCost::Table(0.12)
        );
        assert_eq!(p.cost_of("paid", None, 100_000, 10_000, None), AttemptCost::Table(0.12));
        assert_eq!(
            p.cost_of("free", Some("small"), 100_000, 10_000, None),
            AttemptCost::Table(0.0)
        );
        assert_eq!(
            p.cost_of("paid", Some("big"), 100_000, 10_000, Some(r#"{"response_cost":0.25}"#)),
            AttemptCost::Router(0.25)
        );
        assert_eq!(
            p.cost_of("paid", Some("big"), 0, 0, Some(r#"{"response_cost":"0.000475"}"#)),
            AttemptCost::Router(0.000475)
        );
        // Not a cost: the price table answers.
        assert_eq!(
            p.cost_of("paid", Some("big"), 100_000, 0, Some(r#"{"response_cost":"n/a"}"#)),
            AttemptCost::Table(1.0)
        );
        assert_eq!(
            PricesConfig::default().cost_of("free", Some("x"), 1, 1, Some(r#"{"mapping":"litellm"}"#)),
            AttemptCost::Unpriced
        );
    }

    #[test]
    fn first_token_time_is_read_from_attrs() {
        assert_eq!(
            first_token_at(r#"{"first_token_at":"2026-11-16T10:00:01.250000Z"}"#),
            Some(crate::model::time::parse_timestamp("2026-11-16T10:00:01.25Z").unwrap())
        );
        assert_eq!(first_token_at(r#"{"first_token_at":1000}"#), Some(1000));
        assert_eq!(first_token_at(r#"{"completionStartTime":1.5}"#), None);
    }

    #[test]
    fn bad_prices_name_the_key_and_line() {
        assert_eq!(
            err("prices:\n  models:\n    big:\n      input_per_million: -1\n      output_per_million: 2\n"),
            "lane.yaml:4: prices.models.big.input_per_million: invalid value: floating point `-1.0`, expected a price: a \
             finite number ≥ 0"
        );
        assert_eq!(
            err("prices:\n  lanes:\n    paid: {input_per_million: 1}\n"),
            "lane.yaml:3: prices.lanes.paid: missing field `output_per_million`"
        );
        assert_eq!(
            err("prices:\n  lanes:\n    paid: {input_per_million: 1, output_per_million: 1, cached: 0}\n"),
            "lane.yaml:3: unknown key prices.lanes.paid.cached (expected `input_per_million` or `output_per_million`)"
        );
        assert_eq!(
            err("prices:\n  currenc: USD\n"),
            "lane.yaml:2: unknown key prices.currenc (expected one of `currency`, `models`, `lanes`)"
        );
        assert_eq!(
            err("prices:\n  lanes:\n    paid: {input_per_million: cheap, output_per_million: 1}\n"),
            "lane.yaml:3: prices.lanes.paid.input_per_million: invalid type: string \"cheap\", expected a price: a \
             finite number ≥ 0"
        );
    }
}
