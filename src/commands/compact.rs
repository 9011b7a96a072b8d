//! `laneledger compact`: give the ledger file's free pages back to the file system.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

pub fn run(db: &Path) -> anyhow::Result<ExitCode> {
    let size = || std::fs::metadata(db).map(|m| m.len());
    // The sizes a user sees: before the file is opened (opening writes), and after it is closed.
    let before = size();
    let ledger = super::open_existing(db)?;
    let before = before.with_context(|| format!("reading the size of {}", db.display()))?;
    ledger
        .compact()
        .with_context(|| format!("compacting {}", db.display()))?;
    let after = size().with_context(|| format!("reading the size of {}", db.display()))?;
    super::print(&format!(
        "compacted {}: {before} -> {after} bytes ({:.1}% smaller)\n",
        db.display(),
        percent_smaller(before, after)
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// How much smaller `after` is than `before`, in percent of `before` (negative when it grew).
fn percent_smaller(before: u64, after: u64) -> f64 {
    if before == 0 {
        return 0.0;
    }
    (before as f64 - after as f64) * 100.0 / before as f64
}

#[cfg(test)]
mod tests {
    use super::percent_smaller;

    #[test]
    fn percent_smaller_is_taken_of_the_size_before() {
        assert_eq!(percent_smaller(200, 150), 25.0);
        assert_eq!(percent_smaller(100, 100), 0.0);
        assert_eq!(percent_smaller(100, 110), -10.0);
        assert_eq!(percent_smaller(0, 0), 0.0);
    }
}
