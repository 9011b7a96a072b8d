//! Which alerts each webhook was last told are red, so that `serve` posts an alert once when its
//! card turns red and once when it clears, across restarts.
//!
//! The table [`WEBHOOK_SENT`] holds one key (webhook, ISO week, alert) per red alert a webhook
//! received, with the time it was posted; a "cleared" post removes the key. It is state of the
//! server, not a record: not chained, not part of `verify`'s proof, and written without changing
//! [`Ledger::generation`] (the figures did not change). A webhook is named by a digest of its
//! URL, so the URL itself (often a secret) is not kept in the file.

use std::collections::BTreeSet;

use redb::{ReadableTable, TableDefinition};
use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::storage::ledger::Ledger;

/// (webhook id, ISO week, alert) → when the red alert was posted, µs since the epoch, UTC.
pub const WEBHOOK_SENT: TableDefinition<(&str, &str, &str), i64> = TableDefinition::new("webhook_sent");

/// One red alert a webhook was told of.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Sent {
    /// [`webhook_id`] of the webhook's URL.
    pub webhook: String,
    /// The ISO week, `2026-W47`.
    pub week: String,
    /// The alert's name, e.g. `same_key_retries_per_100_refusals`.
    pub alert: String,
}

/// The id a webhook's state is kept under: the first 8 bytes of the SHA-256 of its URL, in hex.
pub fn webhook_id(url: &str) -> String {
    Sha256::digest(url.as_bytes())[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Every red alert a webhook was told of and not yet told cleared.
///
/// Errors: the file could not be read.
pub fn sent(ledger: &Ledger) -> Result<BTreeSet<Sent>> {
    let txn = ledger.database().begin_read()?;
    let table = match txn.open_table(WEBHOOK_SENT) {
        Ok(t) => t,
        // A file no webhook has written to yet.
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(BTreeSet::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = BTreeSet::new();
    for row in table.iter()? {
        let (k, _) = row?;
        let (webhook, week, alert) = k.value();
        out.insert(Sent {
            webhook: webhook.to_owned(),
            week: week.to_owned(),
            alert: alert.to_owned(),
        });
    }
    Ok(out)
}

/// Notes that the webhook was told `s` is red (at `at`, µs), or with `at` `None` that it was told
/// `s` cleared; one commit.
///
/// Errors: the file cannot be written (read-only) or the commit failed.
pub fn set(ledger: &Ledger, s: &Sent, at: Option<i64>) -> Result<()> {
    let txn = ledger.database().begin_write()?;
    {
        let mut table = txn.open_table(WEBHOOK_SENT)?;
        let key = (s.webhook.as_str(), s.week.as_str(), s.alert.as_str());
        match at {
            Some(t) => {
                table.insert(key, t)?;
            }
            None => {
                table.remove(key)?;
            }
        }
    }
    txn.commit()?;
    Ok(())
}

/// Forgets what was sent for weeks before `oldest_week` and for webhooks not in `webhooks` (ids):
/// those are no longer evaluated, so their keys would only grow the table. One commit, none when
/// nothing is to be forgotten.
///
/// Errors: the file cannot be written or the commit failed.
pub fn forget_except(ledger: &Ledger, oldest_week: &str, webhooks: &[String]) -> Result<usize> {
    let stale: Vec<Sent> = sent(ledger)?
        .into_iter()
        .filter(|s| s.week.as_str() < oldest_week || !webhooks.contains(&s.webhook))
        .collect();
    if stale.is_empty() {
        return Ok(0);
    }
    let txn = ledger.database().begin_write()?;
    {
        let mut table = txn.open_table(WEBHOOK_SENT)?;
        for s in &stale {
            table.remove((s.webhook.as_str(), s.week.as_str(), s.alert.as_str()))?;
        }
    }
    txn.commit()?;
    Ok(stale.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent_at(webhook: &str, week: &str, alert: &str) -> Sent {
        Sent {
            webhook: webhook.into(),
            week: week.into(),
            alert: alert.into(),
        }
    }

    #[test]
    fn red_alerts_are_kept_until_cleared_or_forgotten_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.redb");
        let ledger = Ledger::open(&path).unwrap();
        assert!(sent(&ledger).unwrap().is_empty());
        let a = sent_at("h1", "2026-W47", "cross_lane_retries_per_job");
        let b = sent_at("h1", "2026-W46", "refusals_per_100_attempts");
        let c = sent_at("h2", "2026-W47", "cross_lane_retries_per_job");
        for s in [&a, &b, &c] {
            set(&ledger, s, Some(1)).unwrap();
        }
        let generation = ledger.generation();
        set(&ledger, &c, None).unwrap();
        assert_eq!(ledger.generation(), generation, "the figures did not change");
        drop(ledger);
        let ledger = Ledger::open(&path).unwrap();
        assert_eq!(sent(&ledger).unwrap(), BTreeSet::from([a.clone(), b.clone()]));
        assert_eq!(forget_except(&ledger, "2026-W47", &["h1".into()]).unwrap(), 1);
        assert_eq!(sent(&ledger).unwrap(), BTreeSet::from([a.clone()]));
        assert_eq!(forget_except(&ledger, "2026-W47", &["h1".into()]).unwrap(), 0);
        assert_eq!(forget_except(&ledger, "2026-W47", &[]).unwrap(), 1);
        assert!(sent(&ledger).unwrap().is_empty());
    }

    #[test]
    fn a_webhook_is_named_by_a_digest_of_its_url() {
        // `printf 'https://hooks.example/a' | sha256sum` begins f318d4b47ffef874.
        let id = webhook_id("https://hooks.example/a");
        assert_eq!(id, "f318d4b47ffef874");
        assert_ne!(id, webhook_id("https://hooks.example/b"));
        assert_eq!(id, webhook_id("https://hooks.example/a"));
    }
}
