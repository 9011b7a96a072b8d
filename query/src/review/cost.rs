//! Cost and latency of one ISO week (issue 31): the drill table's spend figures ([`WeekSpend`]) and
//! two sections, spend and latency by lane and model.
//!
//! An attempt's cost is its router's figure (`attrs.response_cost`), else its tokens at the price
//! `lane.yaml` gives its model or lane ([`laneledger_store::config::prices`]); an attempt with neither is
//! counted as unpriced, never guessed. Latency is `ended_at − started_at`; the time to first token
//! is `attrs.first_token_at − started_at`, where a mapping kept it. Percentiles interpolate
//! linearly between the two nearest ranks (p95 of 1, 2, 3, 4 s is 3.85 s).
//! Attempts that ended before they started are left out of the percentiles and counted.

use std::hash::BuildHasher;

use datafusion::arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use datafusion::arrow::datatypes::{Int32Type, Int64Type, TimestampMicrosecondType};
use hashbrown::hash_table::Entry;
use hashbrown::{DefaultHashBuilder, HashTable};
use laneledger_store::config::prices::{AttemptCost, Price, PricesConfig, router_cost};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::review::metrics::parse_iso_week;
use crate::review::sections::{Group, Section};
use crate::session::Session;
use crate::tables::labels::Text;
use crate::words::{format_count, format_ratio};

/// One week's spend: the drill table's cost rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WeekSpend {
    /// `prices.currency` of `lane.yaml` (`USD`), when set; the figures are plain numbers without it.
    pub currency: Option<String>,
    /// Σ cost of the week's priced attempts; `None` when no attempt of the week is priced.
    pub spend: Option<f64>,
    /// spend ÷ unique accepted artifacts; `None` without spend or artifacts.
    pub spend_per_accepted_artifact: Option<f64>,
    /// Σ cost of the attempts that returned a duplicate artifact (every artifact of an idem_key
    /// but the first to land); `None` without spend.
    pub duplicate_artifact_spend: Option<f64>,
    /// The week's attempts.
    pub attempts: i64,
    /// Attempts whose cost the router reported (`attrs.response_cost`).
    pub router_priced_attempts: i64,
    /// Attempts priced by `lane.yaml` `prices` (their model's price, else their lane's).
    pub table_priced_attempts: i64,
    /// Attempts with neither: left out of the spend, never guessed.
    pub unpriced_attempts: i64,
}

impl WeekSpend {
    /// A spend figure for people: 4 decimals (costs of single calls are fractions of a cent),
    /// thousands grouped, the currency after it when set; `—` when there is none.
    pub fn money(&self, v: Option<f64>) -> String {
        match (v, &self.currency) {
            (None, _) => "—".to_string(),
            (Some(v), Some(c)) => format!("{} {c}", format_ratio(Some(v), 4)),
            (Some(v), None) => format_ratio(Some(v), 4),
        }
    }

    /// The counts behind the spend, in words: `412 attempts: 12 priced by the router, 380 by
    /// lane.yaml, 20 unpriced`.
    pub fn basis(&self) -> String {
        format!(
            "{} attempts: {} priced by their router, {} by lane.yaml prices, {} unpriced",
            format_count(self.attempts),
            format_count(self.router_priced_attempts),
            format_count(self.table_priced_attempts),
            format_count(self.unpriced_attempts)
        )
    }
}

/// The drill table's spend rows as text: (name, this week, the week before); `—` where a week
/// has no spend.
pub fn spend_rows(w: &crate::WeekMetrics, p: Option<&crate::WeekMetrics>) -> Vec<(&'static str, String, String)> {
    let cell = |m: Option<&crate::WeekMetrics>, f: fn(&WeekSpend) -> Option<f64>| {
        m.and_then(|m| m.spend.as_ref())
            .map_or("—".to_string(), |s| s.money(f(s)))
    };
    let row = |name, f: fn(&WeekSpend) -> Option<f64>| (name, cell(Some(w), f), cell(p, f));
    vec![
        row("spend", |s| s.spend),
        row("spend per accepted artifact", |s| s.spend_per_accepted_artifact),
        row("spend of duplicate artifacts", |s| s.duplicate_artifact_spend),
    ]
}

/// A week's cost and latency: the spend figures and the two sections.
#[derive(Debug, Clone, PartialEq)]
pub struct WeekCost {
    /// The drill table's spend rows.
    pub spend: WeekSpend,
    /// "Spend by lane and model".
    pub spend_section: Section,
    /// "Latency by lane and model".
    pub latency_section: Section,
}

/// The SQL of the attempts a week's cost and latency are computed from: every attempt of the
/// jobs whose first attempt started in the week (as the drill table counts them).
pub fn week_attempts_sql(week: &str) -> String {
    format!(
        "SELECT a.lane, a.model, a.started_at, a.ended_at, a.tokens_in, a.tokens_out, a.idem_key, a.artifact_id, a.attrs \
         FROM week_attempt a WHERE a.iso_week = '{week}'"
    )
}

/// The `q`-th percentile (0 ≤ q ≤ 1) of `sorted` (ascending), interpolated linearly between the
/// two nearest ranks; `None` when empty.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let rank = q * last as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64))
}

/// The `job_attempt` columns the cost is folded from, beside `week_attempt`'s `iso_week`:
/// idem_key, lane, started_at, ended_at, tokens_in, tokens_out, artifact_id, model, attrs.
const COLUMNS: [usize; 9] = [1, 3, 4, 5, 7, 8, 9, 14, 16];

fn opt(a: &StringArray, i: usize) -> Option<&str> {
    a.is_valid(i).then(|| a.value(i))
}

fn num(a: &Int64Array, i: usize) -> Option<i64> {
    a.is_valid(i).then(|| a.value(i))
}

fn ts(a: &TimestampMicrosecondArray, i: usize) -> Option<i64> {
    a.is_valid(i).then(|| a.value(i))
}

/// One idem_key's artifacts as they landed: each with when it first landed (open ones after every
/// landed one) and the Σ cost of the attempts that returned it.
struct Landed<'a> {
    first: Artifact<'a>,
    more: Vec<Artifact<'a>>,
}

struct Artifact<'a> {
    id: &'a str,
    /// (still open, ended_at): the order in which artifacts landed.
    at: (bool, i64),
    cost: f64,
}

impl<'a> Landed<'a> {
    fn add(&mut self, id: &'a str, at: (bool, i64), cost: f64) {
        match std::iter::once(&mut self.first)
            .chain(&mut self.more)
            .find(|a| a.id == id)
        {
            Some(a) => {
                a.at = a.at.min(at);
                a.cost += cost;
            }
            None => self.more.push(Artifact { id, at, cost }),
        }
    }

    /// Σ cost of the attempts that returned any artifact but the first to land (by landing, then
    /// id).
    fn duplicate_spend(self) -> f64 {
        let mut all: Vec<Artifact<'a>> = std::iter::once(self.first).chain(self.more).collect();
        let first = (0..all.len()).min_by_key(|&i| (all[i].at, all[i].id)).unwrap_or(0);
        all.swap_remove(first);
        all.iter().map(|a| a.cost).fold(0.0, |s, c| s + c)
    }
}

/// What the week's attempts add up to, folded batch by batch (a week can hold millions of them:
/// no row is kept, only the latencies the percentiles need).
#[derive(Default)]
struct Fold {
    /// (lane, model) groups, in the order first seen; sorted at the end.
    groups: Vec<((String, Option<String>), LaneModel)>,
    attempts: i64,
    /// Σ cost of the attempts that returned a duplicate artifact.
    duplicate_spend: f64,
    /// Distinct idem_keys with an artifact.
    keyed_artifacts: i64,
}

impl Fold {
    /// The attempts of the jobs of ISO week `week` (a job's week is its first attempt's) in
    /// `batches`: `week_attempt`'s `iso_week` and the [`COLUMNS`] of `job_attempt`.
    fn of(batches: &[RecordBatch], week: &str, prices: &PricesConfig) -> Result<Fold> {
        let mut fold = Fold::default();
        // Each batch with the week's rows (and its key for the week), and a bound on the week's
        // idem_keys with an artifact: the rows with one whose key differs from the row before's
        // (a job's retries share their key and lie together).
        let mut picked = Vec::with_capacity(batches.len());
        let mut bound = 0;
        for b in batches {
            let c = |name| crate::tables::job_attempt::column(b, name);
            let weeks = c("iso_week")?
                .as_dictionary_opt::<Int32Type>()
                .ok_or_else(|| Error::Internal("cost: iso_week is not a dictionary".into()))?;
            // The week's key in this batch's dictionary; a batch without it holds none of its jobs.
            let labels = weeks.values().as_string::<i32>();
            let Some(key) = (0..labels.len()).find(|&k| labels.value(k) == week) else {
                continue;
            };
            let (keys, key) = (weeks.keys(), key as i32);
            let (idem, artifact) = (c("idem_key")?.as_string::<i32>(), c("artifact_id")?.as_string::<i32>());
            let mut previous = None;
            for i in 0..b.num_rows() {
                if keys.value(i) == key && artifact.is_valid(i) {
                    let k = idem.value(i);
                    bound += usize::from(previous != Some(k));
                    previous = Some(k);
                }
            }
            picked.push((b, keys, key));
        }
        // idem_key → its artifacts, borrowed from the batches (no string is copied), each entry
        // with its key's hash: sized once, never hashed again.
        let hasher = DefaultHashBuilder::default();
        let mut landed: HashTable<(u64, &str, Landed<'_>)> = HashTable::with_capacity(bound);
        for (b, keys, key) in picked {
            let c = |name| crate::tables::job_attempt::column(b, name);
            let (idem, lane, artifact) = (
                c("idem_key")?.as_string::<i32>(),
                Text::of(c("lane")?)?,
                c("artifact_id")?.as_string::<i32>(),
            );
            let (model, attrs) = (Text::of(c("model")?)?, c("attrs")?.as_string::<i32>());
            let (started, ended) = (
                c("started_at")?.as_primitive::<TimestampMicrosecondType>(),
                c("ended_at")?.as_primitive::<TimestampMicrosecondType>(),
            );
            let (tin, tout) = (
                c("tokens_in")?.as_primitive::<Int64Type>(),
                c("tokens_out")?.as_primitive::<Int64Type>(),
            );
            // (group, price) of each (lane, model) pair of the batch's dictionaries, found at the
            // pair's first row: a row costs two key reads instead of string compares.
            let models = model.codes() + 1;
            let dictionaries = matches!((&lane, &model), (Text::Dict { .. }, Text::Dict { .. }));
            let mut pairs: Vec<Option<(usize, Option<Price>)>> = vec![None; (lane.codes() + 1) * models];
            for i in 0..b.num_rows() {
                if keys.value(i) != key {
                    continue;
                }
                // A null is the code after its column's last.
                let pair = dictionaries
                    .then(|| lane.code(i).unwrap_or(lane.codes()) * models + model.code(i).unwrap_or(model.codes()));
                let (g, price) = match pair.and_then(|p| pairs[p]) {
                    Some(found) => found,
                    None => {
                        let (lane_text, model_text) = (lane.get(i).unwrap_or_default(), model.get(i));
                        let found = (
                            fold.group(lane_text, model_text),
                            prices.price_of(lane_text, model_text).copied(),
                        );
                        if let Some(p) = pair {
                            pairs[p] = Some(found);
                        }
                        found
                    }
                };
                let attrs = opt(attrs, i);
                let (tokens_in, tokens_out) = (num(tin, i).unwrap_or(0), num(tout, i).unwrap_or(0));
                let (started_at, ended_at) = (ts(started, i).unwrap_or(0), ts(ended, i));
                // As [`PricesConfig::cost_of`]: the router's figure, else the price table's.
                let cost = match attrs.and_then(router_cost) {
                    Some(v) => AttemptCost::Router(v),
                    None => price.map_or(AttemptCost::Unpriced, |p| {
                        AttemptCost::Table(p.cost(tokens_in, tokens_out))
                    }),
                };
                if let Some(id) = opt(artifact, i) {
                    let at = (ended_at.is_none(), ended_at.unwrap_or(i64::MAX));
                    let value = cost.value().unwrap_or(0.0);
                    let k = idem.value(i);
                    let hash = hasher.hash_one(k);
                    match landed.entry(hash, |e| e.1 == k, |e| e.0) {
                        Entry::Occupied(mut held) => held.get_mut().2.add(id, at, value),
                        Entry::Vacant(new) => {
                            new.insert((
                                hash,
                                k,
                                Landed {
                                    first: Artifact { id, at, cost: value },
                                    more: Vec::new(),
                                },
                            ));
                        }
                    }
                }
                fold.add(g, tokens_in, tokens_out, started_at, ended_at, cost, attrs);
            }
        }
        fold.keyed_artifacts = landed.len() as i64;
        // Summed in idem_key order, so that the figure is the same in every run (a hash map's
        // order is not); only keys with a second artifact add to it.
        let mut duplicates: Vec<(&str, f64)> = landed
            .into_iter()
            .filter(|(_, _, l)| !l.more.is_empty())
            .map(|(_, k, l)| (k, l.duplicate_spend()))
            .collect();
        duplicates.sort_unstable_by(|a, b| a.0.cmp(b.0));
        // An empty f64 sum is −0.0, which would print as "-0.0000": start from 0.0.
        fold.duplicate_spend = duplicates.iter().map(|d| d.1).fold(0.0, |s, c| s + c);
        Ok(fold)
    }

    /// The index of the (lane, model) group, added when new.
    fn group(&mut self, lane: &str, model: Option<&str>) -> usize {
        match self
            .groups
            .iter()
            .position(|((l, m), _)| l == lane && m.as_deref() == model)
        {
            Some(g) => g,
            None => {
                self.groups
                    .push(((lane.to_string(), model.map(str::to_string)), LaneModel::default()));
                self.groups.len() - 1
            }
        }
    }

    /// One attempt of group `g` ([`Fold::group`]).
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        g: usize,
        tokens_in: i64,
        tokens_out: i64,
        started_at: i64,
        ended_at: Option<i64>,
        cost: AttemptCost,
        attrs: Option<&str>,
    ) {
        self.attempts += 1;
        let g = &mut self.groups[g].1;
        g.attempts += 1;
        g.tokens_in += tokens_in;
        g.tokens_out += tokens_out;
        match cost {
            AttemptCost::Router(v) => {
                g.router += 1;
                g.spend += v;
            }
            AttemptCost::Table(v) => {
                g.table += 1;
                g.spend += v;
            }
            AttemptCost::Unpriced => g.unpriced += 1,
        }
        match ended_at {
            None => g.open += 1,
            Some(e) if e < started_at => g.left_out += 1,
            Some(e) => g.latencies.push((e - started_at) as f64 / 1e6),
        }
        if let Some(t) = attrs.and_then(laneledger_store::config::prices::first_token_at) {
            if t < started_at {
                g.left_out += 1;
            } else {
                g.ttfts.push((t - started_at) as f64 / 1e6);
            }
        }
    }
}

/// Seconds with 3 decimals.
fn secs(v: Option<f64>) -> Option<String> {
    v.map(|v| format!("{v:.3}"))
}

/// The figures of one (lane, model) group.
#[derive(Default)]
struct LaneModel {
    attempts: i64,
    tokens_in: i64,
    tokens_out: i64,
    router: i64,
    table: i64,
    unpriced: i64,
    spend: f64,
    latencies: Vec<f64>,
    open: i64,
    left_out: i64,
    ttfts: Vec<f64>,
}

/// The week's cost and latency from its attempts, folded.
fn week_cost(week: &str, fold: Fold, prices: &PricesConfig) -> WeekCost {
    let mut groups = fold.groups;
    groups.sort_by(|a, b| a.0.cmp(&b.0));
    let accepted_artifacts = fold.keyed_artifacts;
    let total = |f: fn(&LaneModel) -> i64| groups.iter().map(|(_, g)| f(g)).sum::<i64>();
    let priced = total(|g| g.router + g.table);
    let spend_sum: f64 = groups.iter().map(|(_, g)| g.spend).fold(0.0, |a, b| a + b);
    let spend_value = (priced > 0).then_some(spend_sum);
    let spend = WeekSpend {
        currency: prices.currency.clone(),
        spend: spend_value,
        spend_per_accepted_artifact: spend_value
            .filter(|_| accepted_artifacts > 0)
            .map(|s| s / accepted_artifacts as f64),
        duplicate_artifact_spend: spend_value.map(|_| fold.duplicate_spend),
        attempts: fold.attempts,
        router_priced_attempts: total(|g| g.router),
        table_priced_attempts: total(|g| g.table),
        unpriced_attempts: total(|g| g.unpriced),
    };
    let n = |v: i64| Some(format_count(v));
    let money = |g: &LaneModel| {
        if g.router + g.table == 0 {
            Some("unpriced".to_string())
        } else {
            Some(spend.money(Some(g.spend)))
        }
    };
    let spend_rows: Vec<Vec<Option<String>>> = groups
        .iter()
        .map(|((lane, model), g)| {
            vec![
                Some(lane.clone()),
                model.clone(),
                n(g.attempts),
                n(g.tokens_in),
                n(g.tokens_out),
                n(g.router),
                n(g.table),
                n(g.unpriced),
                money(g),
            ]
        })
        .collect();
    let latency_rows: Vec<Vec<Option<String>>> = groups
        .iter_mut()
        .map(|((lane, model), g)| {
            g.latencies.sort_by(f64::total_cmp);
            g.ttfts.sort_by(f64::total_cmp);
            let ttft = |q: f64| match percentile(&g.ttfts, q) {
                None => Some("not sent".to_string()),
                v => secs(v),
            };
            vec![
                Some(lane.clone()),
                model.clone(),
                n(g.attempts),
                n(g.latencies.len() as i64),
                n(g.open),
                n(g.left_out),
                secs(percentile(&g.latencies, 0.50)),
                secs(percentile(&g.latencies, 0.95)),
                secs(percentile(&g.latencies, 0.99)),
                n(g.ttfts.len() as i64),
                ttft(0.50),
                ttft(0.95),
            ]
        })
        .collect();
    let sql = week_attempts_sql(week);
    let section = |id, title, description, columns: &[&str], rows: Vec<Vec<Option<String>>>| Section {
        id,
        group: Group::Cost,
        title,
        description,
        sql: sql.clone(),
        columns: columns.iter().map(|c| c.to_string()).collect(),
        total_rows: rows.len(),
        rows,
        summary: None,
    };
    WeekCost {
        spend_section: section(
            "spend_by_lane_model",
            "Spend by lane and model",
            "The week's attempts by lane and model: tokens, how each attempt was priced (the cost its router reported in attrs.response_cost wins; else lane.yaml's prices per million tokens, a model's before its lane's) and the spend. An attempt with neither is unpriced: counted here, left out of the spend, never guessed.",
            &[
                "lane",
                "model",
                "attempts",
                "tokens_in",
                "tokens_out",
                "priced_by_router",
                "priced_by_lane_yaml",
                "unpriced",
                "spend",
            ],
            spend_rows,
        ),
        latency_section: section(
            "latency_by_lane_model",
            "Latency by lane and model",
            "Seconds from started_at to ended_at of the week's attempts, p50, p95 and p99 (interpolated linearly between the nearest ranks), and the time to first token where the router sends it (attrs.first_token_at less started_at). Open attempts have no latency; attempts that ended, or got their first token, before they started are left out of the percentiles and counted in left_out.",
            &[
                "lane",
                "model",
                "attempts",
                "timed",
                "open",
                "left_out",
                "p50_s",
                "p95_s",
                "p99_s",
                "first_token_sent",
                "ttft_p50_s",
                "ttft_p95_s",
            ],
            latency_rows,
        ),
        spend,
    }
}

impl Session {
    /// The cost and latency of ISO week `week` (`2026-W47`): its attempts priced by `lane.yaml`'s
    /// `prices` and their routers' figures, remembered until the next write. A week with no
    /// attempt has every count 0 and no spend.
    ///
    /// Errors: [`Error::BadWeek`] for a label that is not an ISO week; the query's.
    pub async fn week_cost(&self, week: &str) -> Result<WeekCost> {
        parse_iso_week(week)?;
        self.memo(format!("cost:{week}"), || async {
            let prices = self.config().prices.clone();
            let (attempts, week_text, folding) = (self.attempts.clone(), week.to_string(), prices.clone());
            // Read from the attempts' cached columns, not through SQL: a week can hold millions of
            // attempts, which a join with job_week would hold whole in the SQL memory pool.
            let weeks = self.week_column.clone();
            // week_attempt's columns: iso_week (0), then job_attempt's, one further on.
            let columns: Vec<usize> = std::iter::once(0).chain(COLUMNS.iter().map(|c| c + 1)).collect();
            let read = self.read_at_floor(move || Fold::of(&weeks.read(&attempts, &columns)?, &week_text, &folding));
            let fold = self.executor.run(move |_| async move { read() }).await?;
            Ok(week_cost(week, fold, &prices))
        })
        .await
    }
}

impl Session {
    /// Fills `m.spend`, unless a retention sweep touched the week: its removed attempts' costs
    /// were not kept, and a spend of what is left would pass for the week's.
    pub(crate) async fn add_spend(&self, m: &mut crate::WeekMetrics) -> Result<()> {
        let sql = format!(
            "SELECT COUNT(*) AS n FROM week_snapshot WHERE iso_week = '{}'",
            m.iso_week
        );
        let swept = self.query(&sql).await?;
        let swept = swept
            .batches
            .iter()
            .find(|b| b.num_rows() > 0)
            .is_some_and(|b| crate::review::metrics::i64_col(b, "n", 0) > 0);
        if !swept {
            m.spend = Some(self.week_cost(&m.iso_week).await?.spend);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_between_ranks() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.5), Some(2.5));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 1.0), Some(4.0));
        assert!((percentile(&v, 0.95).unwrap() - 3.85).abs() < 1e-12);
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
