//! Alerts out: each alert of the weekly review is posted to lane.yaml's `webhooks` once when its
//! card turns red and once when it clears, as Slack incoming-webhook JSON (`text`, `blocks`) with
//! the figure, its threshold, the week and a link to the card on the week page.
//!
//! [`Notifier::evaluate`] checks the current ISO week and the one before it (each alert of
//! [`laneledger_query::review::metrics::week_alerts`]) against what each webhook was last told, kept in the ledger
//! file ([`laneledger_store::storage::webhook_sent`]) so that a restart posts nothing twice, and posts the
//! changes. [`Notifier::spawn`] runs it in `serve` on a task of its own: at start, within
//! [`WebhookOptions::debounce`] of a committed write, every [`WebhookOptions::every`] (a new week
//! begins without a write), and sooner after a failed post. The HTTP client is blocking (ureq) and
//! runs on tokio's blocking pool with connect and total time limits, so neither writes nor pages
//! ever wait for a webhook; a post that fails after [`WebhookOptions::tries`] tries is logged and
//! tried again at the next evaluation.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use laneledger_query::review::metrics::alert_decimals;
use laneledger_query::{AlertCheck, AlertState, Session, Thresholds, format_ratio};
use laneledger_store::config::{AlertSelection, WebhookConfig};
use laneledger_store::storage::webhook_sent::{self, Sent};
use serde_json::{Value, json};

use crate::error::Result;

/// Time limits, retries and the schedule of [`Notifier`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebhookOptions {
    /// Time to connect to a webhook (TLS included). Default 5 s.
    pub connect_timeout: Duration,
    /// Time for one post, from the connect to the end of the answer. Default 10 s.
    pub total_timeout: Duration,
    /// Tries of one post within an evaluation. Default 3.
    pub tries: u32,
    /// Wait before the second try, doubled before each later one. Default 1 s.
    pub backoff: Duration,
    /// The least time between two evaluations after writes; also the first wait after a failure
    /// (doubled after each failure in a row, up to `every`). Default 15 s.
    pub debounce: Duration,
    /// Time between evaluations without a write. Default 5 min.
    pub every: Duration,
}

impl Default for WebhookOptions {
    fn default() -> Self {
        WebhookOptions {
            connect_timeout: Duration::from_secs(5),
            total_timeout: Duration::from_secs(10),
            tries: 3,
            backoff: Duration::from_secs(1),
            debounce: Duration::from_secs(15),
            every: Duration::from_secs(300),
        }
    }
}

/// One configured webhook.
#[derive(Debug, Clone)]
struct Hook {
    url: String,
    /// [`webhook_sent::webhook_id`] of the URL.
    id: String,
    /// Where links point, without a trailing `/`.
    site_url: String,
    alerts: AlertSelection,
}

/// What one evaluation did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Evaluation {
    /// Posts a webhook accepted (a 2xx answer).
    pub sent: usize,
    /// Changes not posted: the post failed every try, or came after a failed one to the same
    /// webhook in this evaluation. They are posted at a later evaluation.
    pub pending: usize,
}

/// Posts the review's alerts to lane.yaml's webhooks when they turn red or clear.
#[derive(Debug, Clone)]
pub struct Notifier {
    session: Session,
    thresholds: Thresholds,
    hooks: Vec<Hook>,
    options: WebhookOptions,
    agent: ureq::Agent,
}

impl Notifier {
    /// A notifier over `session` checking `thresholds`, posting to `webhooks`; links go to each
    /// webhook's `site_url`, else to `default_site_url` (the address `serve` listens on).
    pub fn new(
        session: Session,
        thresholds: Thresholds,
        webhooks: &[WebhookConfig],
        default_site_url: &str,
        options: WebhookOptions,
    ) -> Self {
        let hooks = webhooks
            .iter()
            .map(|w| Hook {
                url: w.url.clone(),
                id: webhook_sent::webhook_id(&w.url),
                site_url: w
                    .site_url
                    .as_deref()
                    .unwrap_or(default_site_url)
                    .trim_end_matches('/')
                    .to_string(),
                alerts: w.alerts.clone(),
            })
            .collect();
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(options.connect_timeout))
            .timeout_global(Some(options.total_timeout))
            .http_status_as_error(false)
            .user_agent(concat!("laneledger/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Notifier {
            session,
            thresholds,
            hooks,
            options,
            agent,
        }
    }

    /// Checks the alerts of the ISO week of `now` (µs since the epoch, UTC) and of the week before
    /// it, for each week that has data, against what each webhook was last told; posts each
    /// change (red, or cleared) and notes it in the ledger file once the webhook accepted it.
    /// What was noted for older weeks, or for webhooks no longer configured, is forgotten.
    ///
    /// Errors: the review's queries failed, or the ledger file could not be read or written (a
    /// failed post is not an error: it is counted in [`Evaluation::pending`] and logged).
    pub async fn evaluate(&self, now: i64) -> Result<Evaluation> {
        const WEEK: i64 = 7 * 86_400 * 1_000_000;
        let weeks = [
            laneledger_query::derived::audits::iso_week_of(now.saturating_sub(WEEK)),
            laneledger_query::derived::audits::iso_week_of(now),
        ];
        let mut reviewed: Vec<(&str, Vec<AlertCheck>)> = Vec::new();
        for week in &weeks {
            match self.session.review(Some(week), &self.thresholds).await {
                Ok(r) => reviewed.push((week, r.alerts)),
                // No job started in the week (yet, or any more): nothing to say about it.
                Err(laneledger_query::Error::UnknownWeek(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let ledger = self.session.ledger().clone();
        let ids: Vec<String> = self.hooks.iter().map(|h| h.id.clone()).collect();
        let oldest = weeks[0].clone();
        let told: BTreeSet<Sent> = tokio::task::spawn_blocking(move || {
            webhook_sent::forget_except(&ledger, &oldest, &ids)?;
            webhook_sent::sent(&ledger)
        })
        .await??;
        let mut out = Evaluation::default();
        for hook in &self.hooks {
            let mut down = false;
            for (week, alerts) in &reviewed {
                for a in alerts.iter().filter(|a| hook.alerts.includes(a.metric)) {
                    let key = Sent {
                        webhook: hook.id.clone(),
                        week: week.to_string(),
                        alert: a.metric.to_string(),
                    };
                    let red = a.state == AlertState::Alert;
                    if red == told.contains(&key) {
                        continue;
                    }
                    if down {
                        out.pending += 1;
                        continue;
                    }
                    let body = message(a, week, red, &hook.site_url);
                    if let Err(e) = self.post(&hook.url, &body).await {
                        // The URL may hold a secret: name the webhook by its id.
                        tracing::warn!(
                            "webhook {} did not take the {} alert {} of {week}: {e}; it is tried again at the next \
                             evaluation",
                            hook.id,
                            if red { "red" } else { "cleared" },
                            a.metric
                        );
                        down = true;
                        out.pending += 1;
                        continue;
                    }
                    let ledger = self.session.ledger().clone();
                    tokio::task::spawn_blocking(move || webhook_sent::set(&ledger, &key, red.then_some(now))).await??;
                    tracing::info!(
                        "webhook {}: {} {} of {week}",
                        hook.id,
                        a.metric,
                        if red { "red" } else { "cleared" }
                    );
                    out.sent += 1;
                }
            }
        }
        Ok(out)
    }

    /// Posts `body` to `url`, up to [`WebhookOptions::tries`] times, waiting
    /// [`WebhookOptions::backoff`] (doubled each time) between tries. A 2xx answer is success.
    async fn post(&self, url: &str, body: &Value) -> std::result::Result<(), String> {
        let text = body.to_string();
        let mut wait = self.options.backoff;
        let mut last = String::new();
        for attempt in 1..=self.options.tries.max(1) {
            if attempt > 1 {
                tokio::time::sleep(wait).await;
                wait = wait.saturating_mul(2);
            }
            let agent = self.agent.clone();
            let (url, text) = (url.to_string(), text.clone());
            let answer = tokio::task::spawn_blocking(move || {
                agent
                    .post(&url)
                    .header("content-type", "application/json")
                    .send(text.as_str())
                    .map(|r| r.status().as_u16())
            })
            .await
            .map_err(|e| e.to_string())?;
            match answer {
                Ok(status) if (200..300).contains(&status) => return Ok(()),
                Ok(status) => last = format!("it answered HTTP {status}"),
                Err(e) => last = e.to_string(),
            }
        }
        Err(format!("{last} (after {} tries)", self.options.tries.max(1)))
    }

    /// Runs [`Notifier::evaluate`] on a task of its own until the task is aborted: at once,
    /// then at most every [`WebhookOptions::debounce`] while writes land, every
    /// [`WebhookOptions::every`] without them, and after a failure again after `debounce`,
    /// doubled for each failure in a row (at most `every`). Returns `None` when there is no
    /// webhook, or the ledger file cannot be written (what was posted could not be kept, so every
    /// evaluation would post again).
    pub fn spawn(self) -> Option<tokio::task::JoinHandle<()>> {
        if self.hooks.is_empty() {
            return None;
        }
        if self.session.ledger().is_read_only() {
            tracing::warn!("webhooks are off: the ledger file cannot be written, so what was posted cannot be kept");
            return None;
        }
        tracing::info!("posting alerts to {} webhook(s)", self.hooks.len());
        Some(tokio::spawn(async move {
            let o = self.options;
            let mut evaluated: Option<(u64, Instant)> = None;
            let mut failures: u32 = 0;
            let mut retry_at: Option<Instant> = None;
            loop {
                let generation = self.session.ledger().generation();
                let due = match evaluated {
                    None => true,
                    Some((g, at)) => {
                        g != generation || at.elapsed() >= o.every || retry_at.is_some_and(|t| Instant::now() >= t)
                    }
                };
                if due {
                    evaluated = Some((generation, Instant::now()));
                    let ok = match self.evaluate(laneledger_store::now_micros()).await {
                        Ok(e) => e.pending == 0,
                        Err(e) => {
                            tracing::warn!("evaluating the alerts for the webhooks failed: {e}");
                            false
                        }
                    };
                    if ok {
                        failures = 0;
                        retry_at = None;
                    } else {
                        failures = failures.saturating_add(1);
                        let wait = o
                            .debounce
                            .saturating_mul(1u32 << failures.min(16).saturating_sub(1))
                            .min(o.every);
                        retry_at = Some(Instant::now() + wait);
                    }
                }
                tokio::time::sleep(o.debounce).await;
            }
        }))
    }
}

/// Slack's mrkdwn escapes: `&`, `<` and `>` are the only characters it reads as markup.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The JSON posted for alert `a` of `week` turning red (`red`) or clearing: Slack's `text` and
/// `blocks`, and the same facts as fields under `laneledger` for receivers that are not Slack.
pub fn message(a: &AlertCheck, week: &str, red: bool, site_url: &str) -> Value {
    let link = format!("{site_url}/weeks/{week}#alert-{}", a.metric);
    let value = format_ratio(a.value, alert_decimals(a.metric));
    let threshold = a.threshold.to_string();
    let (head, figure) = match (red, a.value) {
        (true, _) => ("Alert", format!("{value}, above its threshold of {threshold}")),
        // Above the threshold yet not red: too few jobs in the week to alert (the detail says so).
        (false, Some(v)) if v > a.threshold => (
            "Cleared",
            format!("{value}, above its threshold of {threshold} but no longer an alert"),
        ),
        (false, Some(_)) => ("Cleared", format!("{value}, at or below its threshold of {threshold}")),
        (false, None) => (
            "Cleared",
            format!("nothing to count now (its threshold is {threshold})"),
        ),
    };
    let label = escape(a.label);
    let detail = escape(&a.detail);
    let text = format!("{head}, week {week}: {label} is {figure}. {detail}. <{link}|Open the week's review>");
    let section = format!("*{head}* · week {week}\n*{label}*: {figure}\n{detail}\n<{link}|Open the week's review>");
    json!({
        "text": text,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": section}}],
        "laneledger": {
            "state": if red { "red" } else { "cleared" },
            "week": week,
            "alert": a.metric,
            "label": a.label,
            "value": a.value,
            "threshold": a.threshold,
            "detail": a.detail,
            "url": link,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(value: Option<f64>, state: AlertState, detail: &str) -> AlertCheck {
        AlertCheck {
            metric: "same_key_retries_per_100_refusals",
            label: "retries on the key that just refused, per 100 refusals",
            value,
            threshold: 0.0,
            state,
            detail: detail.to_string(),
            section: "same_key_retry",
        }
    }

    #[test]
    fn a_cleared_post_says_why_the_card_is_no_longer_red() {
        let link = "<http://h/weeks/2026-W42#alert-same_key_retries_per_100_refusals|Open the week's review>";
        let none = check(
            None,
            AlertState::NoData,
            "0 retries went to the key that had just refused, of 0 refused attempts",
        );
        assert_eq!(
            message(&none, "2026-W42", false, "http://h")["text"],
            format!(
                "Cleared, week 2026-W42: retries on the key that just refused, per 100 refusals is nothing to count \
                 now (its threshold is 0). 0 retries went to the key that had just refused, of 0 refused attempts. \
                 {link}"
            )
        );
        let few = check(Some(10.0), AlertState::TooFewJobs, "3 retries <of> 30 & more");
        let m = message(&few, "2026-W42", false, "http://h");
        assert_eq!(
            m["text"],
            format!(
                "Cleared, week 2026-W42: retries on the key that just refused, per 100 refusals is 10.00, above its \
                 threshold of 0 but no longer an alert. 3 retries &lt;of&gt; 30 &amp; more. {link}"
            )
        );
        // The fields for other receivers are not escaped.
        assert_eq!(m["laneledger"]["detail"], "3 retries <of> 30 & more");
        assert_eq!(m["laneledger"]["state"], "cleared");
        assert_eq!(m["laneledger"]["value"], 10.0);
    }
}
