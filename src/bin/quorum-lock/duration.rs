//! Human durations on the command line: `500ms`, `30s`, `2m`, `1h`, `1m30s`, `1.5s`.

use std::time::Duration;

/// Parses a duration made of one or more `<number><unit>` parts, units `ms`, `s`, `m`
/// and `h`; numbers may have a fractional part (`1.5s`). A bare number is rejected: its
/// unit would be a guess.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration; expected e.g. 500ms, 30s, 2m".into());
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        if number.is_empty() {
            return Err(format!(
                "{s:?} is not a duration; expected a number with a unit, e.g. 500ms, 30s, 2m"
            ));
        }
        // The unit runs up to the next number (`1m30s`).
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let scale = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => {
                return Err(format!(
                    "duration {s:?} has no unit; write e.g. {number}s or {number}ms \
                     (units: ms, s, m, h)"
                ));
            }
            other => {
                return Err(format!(
                    "unknown unit {other:?} in duration {s:?}; use ms, s, m or h"
                ));
            }
        };
        let value: f64 = number
            .parse()
            .map_err(|_| format!("{number:?} in duration {s:?} is not a number"))?;
        let part = Duration::try_from_secs_f64(value * scale)
            .map_err(|_| format!("duration {s:?} is out of range"))?;
        // Whole milliseconds: finer precision means nothing to Redis expiry.
        let part = Duration::from_millis(u64::try_from(part.as_millis()).unwrap_or(u64::MAX));
        total = total
            .checked_add(part)
            .ok_or_else(|| format!("duration {s:?} is out of range"))?;
        rest = after;
    }
    Ok(total)
}

/// A duration for messages, in the same notation the parser reads: `500ms`, `30s`, `2m`,
/// `1m30s`, `1500ms`.
pub(crate) fn display(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let secs = ms / 1000;
    match (secs / 3600, secs % 3600 / 60, secs % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, 0) => format!("{h}h"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

/// A duration for people, rounded to what matters at its size: `340µs`, `1.2ms`, `230ms`,
/// `1.98s`, `12.4s`, `1m30s` (whole seconds from a minute on, as [`display`] writes them).
pub(crate) fn human(d: Duration) -> String {
    let us = d.as_micros();
    match us {
        0 => "0s".into(),
        1..=999 => format!("{us}µs"),
        1000..=9_999 => trimmed(us as f64 / 1e3, 1, "ms"),
        10_000..=999_999 => format!("{}ms", (us + 500) / 1000),
        1_000_000..=9_999_999 => trimmed(us as f64 / 1e6, 2, "s"),
        10_000_000..=59_999_999 => trimmed(us as f64 / 1e6, 1, "s"),
        _ => display(Duration::from_secs(
            u64::try_from((us + 500_000) / 1_000_000).unwrap_or(u64::MAX),
        )),
    }
}

/// `value` with `decimals` places, trailing zeros (and point) removed, then `unit`.
fn trimmed(value: f64, decimals: usize, unit: &str) -> String {
    let text = format!("{value:.decimals$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        &text
    };
    format!("{text}{unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn reads_the_documented_forms() {
        assert_eq!(parse("500ms"), Ok(MS(500)));
        assert_eq!(parse("30s"), Ok(MS(30_000)));
        assert_eq!(parse("2m"), Ok(MS(120_000)));
        assert_eq!(parse("1h"), Ok(MS(3_600_000)));
        assert_eq!(parse("1m30s"), Ok(MS(90_000)));
        assert_eq!(parse("1.5s"), Ok(MS(1500)));
        assert_eq!(parse(" 0s "), Ok(Duration::ZERO));
        assert_eq!(parse("0.0001s"), Ok(Duration::ZERO));
    }

    #[test]
    fn errors_name_the_problem() {
        let err = |s: &str| parse(s).expect_err(s);
        assert!(err("30").contains("no unit"), "{}", err("30"));
        assert!(err("30x").contains("unknown unit \"x\""), "{}", err("30x"));
        assert!(err("5 s").contains("unknown unit \" s\""), "{}", err("5 s"));
        assert!(err("-1s").contains("not a duration"));
        assert!(err("").contains("empty"));
        assert!(err("s").contains("not a duration"));
        assert!(err("1.2.3s").contains("not a number"));
        assert!(err("-1s").contains("not a duration"));
        assert!(err("99999999999999999999h").contains("out of range"));
    }

    #[test]
    fn human_rounds_to_what_matters() {
        let us = Duration::from_micros;
        for (d, s) in [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(400), "0s"),
            (us(1), "1µs"),
            (us(340), "340µs"),
            (us(1000), "1ms"),
            (us(1234), "1.2ms"),
            (us(9_960), "10ms"),
            (us(10_400), "10ms"),
            (us(230_600), "231ms"),
            (us(999_700), "1000ms"),
            (MS(1000), "1s"),
            (MS(1978), "1.98s"),
            (MS(1500), "1.5s"),
            (MS(12_449), "12.4s"),
            (MS(30_000), "30s"),
            (MS(59_960), "60s"),
            (MS(90_400), "1m30s"),
            (MS(3_600_000), "1h"),
            (Duration::MAX, "5124095576030431h0m15s"),
        ] {
            assert_eq!(human(d), s, "{d:?}");
        }
    }

    #[test]
    fn displays_in_parser_notation() {
        for (d, s) in [
            (MS(0), "0s"),
            (MS(500), "500ms"),
            (MS(1500), "1500ms"),
            (MS(30_000), "30s"),
            (MS(120_000), "2m"),
            (MS(90_000), "1m30s"),
            (MS(3_600_000), "1h"),
            (MS(3_661_000), "1h1m1s"),
        ] {
            assert_eq!(display(d), s);
            assert_eq!(parse(s), Ok(d));
        }
    }
}
