//! Timestamps: RFC 3339 in, microseconds since the epoch (UTC) stored, RFC 3339 `Z` out.

use chrono::{DateTime, SecondsFormat, Utc};

/// The earliest timestamp the ledger takes: 1970-01-01T00:00:00Z, µs.
pub const MIN_TIMESTAMP: i64 = 0;
/// The first timestamp the ledger refuses: 2200-01-01T00:00:00Z, µs. Week and percentile SQL
/// works in nanoseconds, which end in 2262; no attempt of an LLM call is dated anywhere near.
pub const MAX_TIMESTAMP: i64 = 7_258_118_400_000_000;

/// Parses an RFC 3339 timestamp with `Z` or an offset into µs since the epoch, UTC.
///
/// `…Z` and `…+02:00` for the same instant give the same value; digits past the microsecond are
/// truncated. Errors: a timestamp with no offset (`timestamp has no UTC offset`), one outside
/// [`MIN_TIMESTAMP`] … [`MAX_TIMESTAMP`], or any other text that is not RFC 3339.
pub fn parse_timestamp(s: &str) -> Result<i64, String> {
    match DateTime::parse_from_rfc3339(s.trim()) {
        Ok(t) => {
            let micros = t.with_timezone(&Utc).timestamp_micros();
            if (MIN_TIMESTAMP..MAX_TIMESTAMP).contains(&micros) {
                Ok(micros)
            } else {
                Err("timestamp outside 1970-01-01 … 2200-01-01 UTC".to_string())
            }
        }
        Err(_) => {
            let naive = s.trim().replace(' ', "T");
            if chrono::NaiveDateTime::parse_from_str(&naive, "%Y-%m-%dT%H:%M:%S%.f").is_ok() {
                Err("timestamp has no UTC offset (add Z or +HH:MM)".to_string())
            } else {
                Err(format!("not an RFC 3339 timestamp: {s:?}"))
            }
        }
    }
}

/// Formats µs since the epoch as RFC 3339 in UTC with a `Z`, microsecond precision when needed
/// (`2026-11-16T09:00:00Z`, `2026-11-16T09:00:00.250000Z`).
pub fn format_timestamp(micros: i64) -> String {
    match DateTime::<Utc>::from_timestamp_micros(micros) {
        Some(t) if t.timestamp_subsec_micros() == 0 => t.to_rfc3339_opts(SecondsFormat::Secs, true),
        Some(t) => t.to_rfc3339_opts(SecondsFormat::Micros, true),
        None => micros.to_string(),
    }
}

/// The current time, µs since the epoch, UTC.
pub fn now_micros() -> i64 {
    Utc::now().timestamp_micros()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn z_and_offset_for_the_same_instant_store_the_same_value() {
        let z = parse_timestamp("2026-11-16T09:00:00Z").unwrap();
        let plus2 = parse_timestamp("2026-11-16T11:00:00+02:00").unwrap();
        assert_eq!(z, plus2);
        assert_eq!(z, 1_794_819_600_000_000);
    }

    #[test]
    fn a_timestamp_without_offset_is_rejected() {
        assert_eq!(
            parse_timestamp("2026-11-16T09:00:00").unwrap_err(),
            "timestamp has no UTC offset (add Z or +HH:MM)"
        );
        assert_eq!(
            parse_timestamp("2023-11-16 18:17:03.9799600").unwrap_err(),
            "timestamp has no UTC offset (add Z or +HH:MM)"
        );
        assert!(parse_timestamp("yesterday").unwrap_err().starts_with("not an RFC 3339"));
    }

    #[test]
    fn timestamps_outside_1970_to_2200_are_refused() {
        for t in [
            "0001-01-01T00:00:00Z",
            "1969-12-31T23:59:59Z",
            "2200-01-01T00:00:00Z",
            "9999-12-31T23:59:59Z",
        ] {
            assert_eq!(
                parse_timestamp(t).unwrap_err(),
                "timestamp outside 1970-01-01 … 2200-01-01 UTC",
                "{t}"
            );
        }
        assert_eq!(parse_timestamp("1970-01-01T00:00:00Z").unwrap(), MIN_TIMESTAMP);
        assert_eq!(
            parse_timestamp("2199-12-31T23:59:59.999999Z").unwrap(),
            MAX_TIMESTAMP - 1
        );
    }

    #[test]
    fn sub_microsecond_digits_are_truncated_and_round_trip() {
        let t = parse_timestamp("2023-11-16T18:17:03.9799600Z").unwrap();
        assert_eq!(format_timestamp(t), "2023-11-16T18:17:03.979960Z");
        assert_eq!(
            format_timestamp(parse_timestamp("2026-11-16T09:00:00Z").unwrap()),
            "2026-11-16T09:00:00Z"
        );
    }
}
