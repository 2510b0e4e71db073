//! RFC 3339 timestamps as the API writes them (`2026-11-30T09:00:00Z`) and
//! upstream's human durations (`apimachinery/pkg/util/duration`). Pure: the
//! caller supplies the current time — read from a [`Clock`], the seam that
//! lets tests run time-driven behaviour (grace periods, leases, backoffs) on
//! a fake clock they advance.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where the current time comes from.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    fn now(&self) -> SystemTime;

    /// Unix seconds now.
    fn now_seconds(&self) -> i64 {
        unix_seconds(self.now())
    }

    /// Now, as the API writes timestamps (RFC 3339, seconds).
    fn now_rfc3339(&self) -> String {
        format_rfc3339(self.now_seconds())
    }
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// Unix seconds of a time (negative before 1970).
pub fn unix_seconds(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(since) => since.as_secs() as i64,
        Err(before) => -(before.duration().as_secs() as i64),
    }
}

/// The time of Unix seconds.
pub fn from_unix_seconds(seconds: i64) -> SystemTime {
    if seconds >= 0 {
        UNIX_EPOCH + Duration::from_secs(seconds as u64)
    } else {
        UNIX_EPOCH - Duration::from_secs(seconds.unsigned_abs())
    }
}

/// A time as `metav1.MicroTime` writes it: `2026-11-30T09:00:00.123456Z`.
pub fn format_rfc3339_micros(time: SystemTime) -> String {
    let seconds = unix_seconds(time);
    let micros = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_micros())
        .unwrap_or(0);
    let base = format_rfc3339(seconds);
    format!("{}.{micros:06}Z", base.trim_end_matches('Z'))
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Unix seconds of an RFC 3339 timestamp (`Z` or a numeric offset,
/// fractional seconds ignored).
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| text.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, s) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    let mut rest = &text[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        rest = frac.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (oh, om) = (
                rest.get(1..3)?.parse::<i64>().ok()?,
                rest.get(4..6)?.parse::<i64>().ok()?,
            );
            sign * (oh * 3600 + om * 60)
        }
    };
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s - offset)
}

/// The RFC 3339 form of unix seconds, in UTC.
pub fn format_rfc3339(seconds: i64) -> String {
    let (y, m, d) = civil_from_days(seconds.div_euclid(86_400));
    let rem = seconds.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Upstream's `HumanDuration`: `42s`, `5m3s`, `3h`, `2d5h`, `400d`, `3y20d`.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let s = seconds.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86_400);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        let rest = s % 60;
        if rest == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{rest}s")
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        let rest = m % 60;
        if rest == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{rest}m")
        }
    } else if h < 48 {
        format!("{h}h")
    } else if d < 8 {
        let rest = h % 24;
        if rest == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{rest}h")
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else if d < 365 * 8 {
        let (y, rest) = (d / 365, d % 365);
        if rest == 0 {
            format!("{y}y")
        } else {
            format!("{y}y{rest}d")
        }
    } else {
        format!("{}y", d / 365)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip() {
        let t = parse_rfc3339("2026-11-30T09:00:00Z").expect("valid");
        assert_eq!(format_rfc3339(t), "2026-11-30T09:00:00Z");
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2026-11-30T10:00:00.123+01:00"), Some(t));
        assert_eq!(
            parse_rfc3339("2024-02-29T00:00:00Z")
                .map(format_rfc3339)
                .as_deref(),
            Some("2024-02-29T00:00:00Z")
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
    }

    #[test]
    fn durations_read_as_kubectl_prints_them() {
        for (s, text) in [
            (5, "5s"),
            (119, "119s"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600 + 120, "3h2m"),
            (20 * 3600, "20h"),
            (3 * 86_400 + 3600, "3d1h"),
            (30 * 86_400, "30d"),
            (3 * 365 * 86_400, "3y"),
            (-5, "<invalid>"),
        ] {
            assert_eq!(human_duration(s), text);
        }
    }

    #[test]
    fn micro_times_and_unix_seconds_round_trip() {
        let t = from_unix_seconds(1_764_493_200) + Duration::from_micros(123_456);
        assert_eq!(format_rfc3339_micros(t), "2025-11-30T09:00:00.123456Z");
        assert_eq!(unix_seconds(t), 1_764_493_200);
        assert_eq!(unix_seconds(from_unix_seconds(-5)), -5);
    }
}
