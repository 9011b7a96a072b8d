//! Lane names beyond `free` and `paid` (issue 31): the tiers a router's `lane.yaml` names, in
//! its order, and which of them this process takes in records.
//!
//! A [`Lane`] is `Copy` and its name a `&'static str` everywhere in the code, so a configured
//! name is interned here once: from the `lane.yaml` that is loaded, or from a stored row that
//! holds it. Input records never intern a name; a name that is not configured is refused before
//! it could be ([`Lane::configured`]). The names interned are therefore bounded by what the
//! configuration and the ledger file hold.
//!
//! The tiers records are checked against are the process's: one `lane.yaml` a process (the
//! binary loads it once, [`activate`]); until then they are `free` and `paid`, the original note's.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use crate::model::record::Lane;

/// The longest lane name `lane.yaml` takes, in bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// Every lane name interned so far, besides `free` and `paid`.
static NAMES: RwLock<Option<HashSet<&'static str>>> = RwLock::new(None);

/// The configured tiers, in order, when they are not the default `free`, `paid`.
static ACTIVE: RwLock<Option<Arc<[Lane]>>> = RwLock::new(None);

/// Whether [`ACTIVE`] holds tiers: without, a lane is read as the original `free | paid` check
/// without taking a lock (the ingest hot path).
static CUSTOM: AtomicBool = AtomicBool::new(false);

/// The lane named `name`, exactly as spelled: `free` and `paid` are [`Lane::Free`] and
/// [`Lane::Paid`]; any other name is interned. For names from `lane.yaml` and from stored rows.
pub fn intern(name: &str) -> Lane {
    match name {
        "free" => return Lane::Free,
        "paid" => return Lane::Paid,
        _ => {}
    }
    if let Some(held) = NAMES
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|names| names.get(name).copied())
    {
        return Lane::Named(held);
    }
    let mut names = NAMES.write().unwrap_or_else(|e| e.into_inner());
    let names = names.get_or_insert_with(HashSet::new);
    if let Some(held) = names.get(name) {
        return Lane::Named(held);
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    Lane::Named(leaked)
}

/// Makes `tiers` (in order, names as configured) the lanes this process takes in records.
/// `free` then `paid` is the default and restores the original check.
pub fn activate(tiers: &[&str]) {
    let lanes: Vec<Lane> = tiers.iter().map(|name| intern(name)).collect();
    let custom = lanes != [Lane::Free, Lane::Paid];
    *ACTIVE.write().unwrap_or_else(|e| e.into_inner()) = custom.then(|| Arc::from(lanes));
    CUSTOM.store(custom, Ordering::Release);
}

/// The lanes records may name, in tier order.
pub fn active() -> Vec<Lane> {
    if !CUSTOM.load(Ordering::Acquire) {
        return vec![Lane::Free, Lane::Paid];
    }
    match ACTIVE.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        Some(lanes) => lanes.to_vec(),
        None => vec![Lane::Free, Lane::Paid],
    }
}

/// The configured lane spelled exactly `name` (matching is case-sensitive: `Free` is not
/// `free`), or `None` when no configured tier has that name.
pub fn configured(name: &str) -> Option<Lane> {
    if !CUSTOM.load(Ordering::Acquire) {
        return Lane::parse(name);
    }
    let active = ACTIVE.read().unwrap_or_else(|e| e.into_inner());
    match active.as_ref() {
        Some(lanes) => lanes.iter().copied().find(|l| l.as_str() == name),
        None => Lane::parse(name),
    }
}

/// The configured names as a reader lists them: `free or paid`, `a, b or c`.
pub fn expected() -> String {
    let names: Vec<&str> = active().iter().map(|l| l.as_str()).collect();
    match names.split_last() {
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}
