//! Cron schedules with the semantics of upstream Kubernetes' CronJob controller.
//!
//! Upstream parses `spec.schedule` with `cron.ParseStandard` from
//! `github.com/robfig/cron/v3` (v3.0.1) and asks the parsed schedule for its
//! `Next` activation. This module reimplements both, plus the controller's
//! `mostRecentScheduleTime` and `nextScheduleTimeDuration` helpers from
//! `pkg/controller/cronjob/utils.go`, so that rudder fires jobs at exactly the
//! instants Kubernetes would, including robfig's quirks:
//!
//! * a standard spec has five fields (minute, hour, day of month, month, day
//!   of week); seconds are always zero;
//! * day of month and day of week are ORed when both are restricted and ANDed
//!   when either one starts with `*` or `?` (note that `*/2` is *not* a star);
//! * the search runs on the zone's wall clock and reproduces Go's `time.Date`
//!   normalisation, so spring-forward skips the missing hour and fall-back
//!   fires twice for times inside the repeated hour;
//! * `@every <duration>` is accepted (Kubernetes validation only calls
//!   `ParseStandard`, so it is valid in a CronJob) and ignores the time zone;
//! * no activation within five years of the search start yields `None`.
//!
//! For a CronJob, the zone is `spec.timeZone` when set and otherwise the
//! controller's local zone (upstream uses kube-controller-manager's
//! `time.Local`, usually UTC in a container).
//!
//! Where this deliberately differs from upstream:
//!
//! * any spec containing `TZ` (as in a `TZ=` or `CRON_TZ=` prefix) is refused
//!   with [`ScheduleError::TimeZoneInSpec`], as upstream validation refuses it
//!   on create; the legacy in-spec zones upstream still honours for old
//!   objects are not supported;
//! * where a whole day is missing from a zone (Pacific/Apia, 30 December
//!   2011) robfig loops forever; here the search steps over that day;
//! * where robfig returns Go's zero time, this returns `None`, and
//!   [`most_recent_schedule_time`] reports an error instead of computing from
//!   the year 1 (where upstream can end up looping forever);
//! * time differences are exact rather than saturating at Go's 292-year
//!   `time.Duration` limit.

use std::fmt;
use std::num::IntErrorKind;

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::{Offset, TimeZone};
use jiff::{SignedDuration, Span, Timestamp};

/// How many calendar years past the search start [`Schedule::next_after`]
/// looks before giving up, as robfig does.
const SEARCH_YEARS: i32 = 5;

/// Upstream's threshold above which a CronJob has "too many" missed starts.
const TOO_MANY_MISSED: i64 = 100;

/// Upstream's `nextScheduleDelta`: padding added to the requeue delay to
/// absorb clock skew.
pub const NEXT_SCHEDULE_DELTA: SignedDuration = SignedDuration::from_millis(100);

const NANOS_PER_SECOND: i128 = 1_000_000_000;

/// Why a schedule could not be parsed or evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleError {
    /// The spec names a time zone (`TZ=` / `CRON_TZ=`); upstream validation
    /// rejects every schedule containing `TZ` and asks for `spec.timeZone`.
    TimeZoneInSpec,
    /// The spec is malformed, or (from [`most_recent_schedule_time`]) can
    /// never fire; the message is the one robfig or upstream would give.
    Invalid(String),
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TimeZoneInSpec => {
                f.write_str("cannot use TZ or CRON_TZ in schedule, use timeZone field instead")
            }
            Self::Invalid(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for ScheduleError {}

fn invalid(message: impl Into<String>) -> ScheduleError {
    ScheduleError::Invalid(message.into())
}

/// The legal values of one cron field, and the names it accepts.
#[derive(Clone, Copy)]
struct Bounds {
    min: u64,
    max: u64,
    names: &'static [(&'static str, u64)],
}

const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DAYS_OF_MONTH: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        ("jan", 1),
        ("feb", 2),
        ("mar", 3),
        ("apr", 4),
        ("may", 5),
        ("jun", 6),
        ("jul", 7),
        ("aug", 8),
        ("sep", 9),
        ("oct", 10),
        ("nov", 11),
        ("dec", 12),
    ],
};
/// Sunday is 0; robfig does not accept 7.
const DAYS_OF_WEEK: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &[
        ("sun", 0),
        ("mon", 1),
        ("tue", 2),
        ("wed", 3),
        ("thu", 4),
        ("fri", 5),
        ("sat", 6),
    ],
};

/// The set of values one field allows, as a bitset indexed by value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field {
    bits: u64,
    /// Whether some list item was `*` or `?` without a step above 1; only
    /// meaningful for the two day fields, where it selects AND over OR.
    star: bool,
}

impl Field {
    const EMPTY: Field = Field {
        bits: 0,
        star: false,
    };

    const fn single(value: u64) -> Field {
        Field {
            bits: 1 << value,
            star: false,
        }
    }

    /// Every value within `bounds`, as `*` gives.
    fn all(bounds: Bounds) -> Field {
        Field {
            bits: bits_in(bounds.min, bounds.max, 1),
            star: true,
        }
    }

    fn union(self, other: Field) -> Field {
        Field {
            bits: self.bits | other.bits,
            star: self.star || other.star,
        }
    }

    /// Whether `value` (a calendar component, never negative) is allowed.
    fn contains(self, value: i8) -> bool {
        u32::try_from(value)
            .ok()
            .and_then(|shift| self.bits.checked_shr(shift))
            .is_some_and(|shifted| shifted & 1 == 1)
    }
}

/// The bits of `start..=end` taken every `step` values (`end` is at most 63).
fn bits_in(start: u64, end: u64, step: u64) -> u64 {
    let step = usize::try_from(step).unwrap_or(usize::MAX);
    (start..=end)
        .step_by(step)
        .fold(0, |bits, value| bits | 1 << value)
}

/// A parsed five-field spec; the implicit seconds field is always `0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CronFields {
    minute: Field,
    hour: Field,
    day_of_month: Field,
    month: Field,
    day_of_week: Field,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A crontab spec or one of the calendar descriptors.
    Cron(CronFields),
    /// `@every <duration>`: a fixed delay in whole seconds, at least one.
    Every(SignedDuration),
}

/// A parsed cron schedule, as `cron.ParseStandard` would produce it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    kind: Kind,
}

impl Schedule {
    /// Parses a standard five-field cron spec or a descriptor, as robfig/cron
    /// v3's `ParseStandard` does, after rejecting specs that name a zone.
    ///
    /// Fields are `minute hour day-of-month month day-of-week`, split on
    /// whitespace. Each is a comma-separated list (empty items are skipped) of
    /// `*` or `?`, `n`, `a-b`, each optionally followed by `/step`; `n/step`
    /// means `n-max/step`. Months accept `jan`..`dec` and weekdays `sun`..`sat`
    /// in any case; weekdays run 0-6 with Sunday 0 (7 is out of range).
    /// Descriptors are `@yearly`, `@annually`, `@monthly`, `@weekly`,
    /// `@daily`, `@midnight`, `@hourly` and `@every <Go duration>`; a delay
    /// below one second becomes one second and fractions of a second are
    /// dropped.
    ///
    /// Any spec containing `TZ` gives [`ScheduleError::TimeZoneInSpec`], as
    /// upstream validation refuses it (no valid spec contains `TZ` otherwise).
    pub fn parse(spec: &str) -> Result<Schedule, ScheduleError> {
        if spec.is_empty() {
            return Err(invalid("empty spec string"));
        }
        if spec.contains("TZ") {
            return Err(ScheduleError::TimeZoneInSpec);
        }
        if spec.starts_with('@') {
            return parse_descriptor(spec);
        }
        let fields: Vec<&str> = spec.split_whitespace().collect();
        let [minute, hour, day_of_month, month, day_of_week] = fields.as_slice() else {
            return Err(invalid(format!(
                "expected exactly 5 fields, found {}: [{}]",
                fields.len(),
                fields.join(" ")
            )));
        };
        let fields = CronFields {
            minute: parse_field(minute, MINUTES)?,
            hour: parse_field(hour, HOURS)?,
            day_of_month: parse_field(day_of_month, DAYS_OF_MONTH)?,
            month: parse_field(month, MONTHS)?,
            day_of_week: parse_field(day_of_week, DAYS_OF_WEEK)?,
        };
        Ok(Schedule {
            kind: Kind::Cron(fields),
        })
    }

    /// The first activation strictly after `after`, evaluated on the wall
    /// clock of `tz`, with robfig's `Next` semantics (see the module docs).
    ///
    /// Returns `None` when nothing matches within five years (e.g. Feb 30),
    /// where robfig returns Go's zero time. `@every` schedules ignore `tz`
    /// and return `after`, truncated to the second, plus the delay.
    pub fn next_after(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        match self.kind {
            Kind::Cron(fields) => fields.next_after(after, &WallClock { tz }),
            Kind::Every(delay) => floor_to_second(after)?.checked_add(delay).ok(),
        }
    }
}

/// Parses an `@`-prefixed spec; the match is exact and case-sensitive.
fn parse_descriptor(spec: &str) -> Result<Schedule, ScheduleError> {
    let daily = CronFields {
        minute: Field::single(0),
        hour: Field::single(0),
        day_of_month: Field::all(DAYS_OF_MONTH),
        month: Field::all(MONTHS),
        day_of_week: Field::all(DAYS_OF_WEEK),
    };
    let first_of_month = Field::single(DAYS_OF_MONTH.min);
    let fields = match spec {
        "@yearly" | "@annually" => CronFields {
            day_of_month: first_of_month,
            month: Field::single(MONTHS.min),
            ..daily
        },
        "@monthly" => CronFields {
            day_of_month: first_of_month,
            ..daily
        },
        "@weekly" => CronFields {
            day_of_week: Field::single(DAYS_OF_WEEK.min),
            ..daily
        },
        "@daily" | "@midnight" => daily,
        "@hourly" => CronFields {
            hour: Field::all(HOURS),
            ..daily
        },
        _ => return parse_every(spec),
    };
    Ok(Schedule {
        kind: Kind::Cron(fields),
    })
}

/// Parses `@every <duration>` into a delay of whole seconds, at least one.
fn parse_every(spec: &str) -> Result<Schedule, ScheduleError> {
    let Some(duration) = spec.strip_prefix("@every ") else {
        return Err(invalid(format!("unrecognized descriptor: {spec}")));
    };
    let nanos = parse_go_duration(duration)
        .map_err(|reason| invalid(format!("failed to parse duration {spec}: {reason}")))?;
    let whole_seconds = if nanos < 1_000_000_000 {
        1
    } else {
        nanos / 1_000_000_000
    };
    Ok(Schedule {
        kind: Kind::Every(SignedDuration::from_secs(whole_seconds)),
    })
}

/// Parses a comma-separated list of ranges into the union of their values.
fn parse_field(text: &str, bounds: Bounds) -> Result<Field, ScheduleError> {
    text.split(',')
        .filter(|item| !item.is_empty())
        .try_fold(Field::EMPTY, |field, item| {
            Ok(field.union(parse_range(item, bounds)?))
        })
}

/// Parses one list item: `*`, `?`, `n` or `a-b`, optionally with `/step`.
///
/// Errors are checked in robfig's order: the range's numbers, too many
/// hyphens, the step, too many slashes, then the bounds.
fn parse_range(item: &str, bounds: Bounds) -> Result<Field, ScheduleError> {
    let (range, step) = match item.split_once('/') {
        Some((range, step)) => (range, Some(step)),
        None => (item, None),
    };
    let (low, high) = match range.split_once('-') {
        Some((low, high)) => (low, Some(high)),
        None => (range, None),
    };
    let mut star = low == "*" || low == "?";
    let (start, mut end) = if star {
        // robfig ignores whatever follows a leading `*-`.
        (bounds.min, bounds.max)
    } else {
        let start = parse_value(low, bounds)?;
        match high {
            None => (start, start),
            Some(high) if high.contains('-') => {
                return Err(invalid(format!("too many hyphens: {item}")));
            }
            Some(high) => (start, parse_value(high, bounds)?),
        }
    };
    let step = match step {
        None => 1,
        Some(step) if step.contains('/') => {
            return Err(invalid(format!("too many slashes: {item}")));
        }
        Some(step) => {
            let step = parse_number(step)?;
            if high.is_none() {
                end = bounds.max;
            }
            if step > 1 {
                star = false;
            }
            step
        }
    };
    check_range(item, bounds, start, end, step)?;
    Ok(Field {
        bits: bits_in(start, end, step),
        star,
    })
}

/// Rejects a range outside `bounds`, reversed, or with a zero step.
fn check_range(
    item: &str,
    bounds: Bounds,
    start: u64,
    end: u64,
    step: u64,
) -> Result<(), ScheduleError> {
    if start < bounds.min {
        return Err(invalid(format!(
            "beginning of range ({start}) below minimum ({}): {item}",
            bounds.min
        )));
    }
    if end > bounds.max {
        return Err(invalid(format!(
            "end of range ({end}) above maximum ({}): {item}",
            bounds.max
        )));
    }
    if start > end {
        return Err(invalid(format!(
            "beginning of range ({start}) beyond end of range ({end}): {item}"
        )));
    }
    if step == 0 {
        return Err(invalid(format!(
            "step of range should be a positive number: {item}"
        )));
    }
    Ok(())
}

/// Parses a field value: one of the field's names (any case) or a number.
fn parse_value(text: &str, bounds: Bounds) -> Result<u64, ScheduleError> {
    let lower = text.to_lowercase();
    match bounds.names.iter().find(|(name, _)| *name == lower) {
        Some(&(_, value)) => Ok(value),
        None => parse_number(text),
    }
}

/// Parses a non-negative decimal integer as Go's `strconv.Atoi` would
/// (optional sign, digits only), with robfig's error messages.
fn parse_number(text: &str) -> Result<u64, ScheduleError> {
    let value: i64 = text.parse().map_err(|error: std::num::ParseIntError| {
        let reason = match error.kind() {
            IntErrorKind::PosOverflow | IntErrorKind::NegOverflow => "value out of range",
            _ => "invalid syntax",
        };
        invalid(format!(
            "failed to parse int from {text}: strconv.Atoi: parsing {text:?}: {reason}"
        ))
    })?;
    u64::try_from(value)
        .map_err(|_| invalid(format!("negative number ({value}) not allowed: {text}")))
}

/// Parses a Go duration (`time.ParseDuration`) into nanoseconds: an optional
/// sign, then one or more `<decimal><unit>` terms with units `ns`, `us`
/// (`µs`, `μs`), `ms`, `s`, `m` and `h`; a bare `0` is allowed.
fn parse_go_duration(text: &str) -> Result<i64, String> {
    let invalid_duration = || format!("time: invalid duration {text:?}");
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid_duration());
    }
    // Go accumulates in a u64 and lets this sum wrap; so does this.
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let (term, after) = parse_duration_term(rest, text)?;
        total = total.wrapping_add(term);
        if total > 1 << 63 {
            return Err(invalid_duration());
        }
        rest = after;
    }
    if negative {
        // `total` is at most 2^63, so its negation always fits.
        return Ok(0_i64.wrapping_sub_unsigned(total));
    }
    i64::try_from(total).map_err(|_| invalid_duration())
}

/// Parses one `<decimal><unit>` term of a Go duration into nanoseconds,
/// returning it with the rest of the input. `whole` is for error messages.
fn parse_duration_term<'a>(term: &'a str, whole: &str) -> Result<(u64, &'a str), String> {
    let invalid_duration = || format!("time: invalid duration {whole:?}");
    if !term.starts_with(|c: char| c == '.' || c.is_ascii_digit()) {
        return Err(invalid_duration());
    }
    let (integer, integer_digits, rest) = leading_integer(term).ok_or_else(invalid_duration)?;
    let (fraction, scale, fraction_digits, rest) = match rest.strip_prefix('.') {
        Some(rest) => leading_fraction(rest),
        None => (0, 1.0, 0, rest),
    };
    if integer_digits == 0 && fraction_digits == 0 {
        return Err(invalid_duration());
    }
    let unit_len = rest
        .find(|c: char| c == '.' || c.is_ascii_digit())
        .unwrap_or(rest.len());
    if unit_len == 0 {
        return Err(format!("time: missing unit in duration {whole:?}"));
    }
    let (unit, rest) = rest.split_at(unit_len);
    let unit_nanos = match unit {
        "ns" => 1,
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return Err(format!("time: unknown unit {unit:?} in duration {whole:?}")),
    };
    if integer > (1 << 63) / unit_nanos {
        return Err(invalid_duration());
    }
    let mut nanos = integer * unit_nanos;
    if fraction > 0 {
        // As Go does: f64 keeps fractions of an hour nanosecond-accurate.
        nanos += (fraction as f64 * (unit_nanos as f64 / scale)) as u64;
        if nanos > 1 << 63 {
            return Err(invalid_duration());
        }
    }
    Ok((nanos, rest))
}

/// Go's `leadingInt`: the leading decimal digits as an integer of at most
/// 2^63, their count, and the rest; `None` on overflow.
fn leading_integer(text: &str) -> Option<(u64, usize, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, rest) = text.split_at(digits);
    let mut value: u64 = 0;
    for digit in number.bytes() {
        if value > (1 << 63) / 10 {
            return None;
        }
        value = value * 10 + u64::from(digit - b'0');
        if value > 1 << 63 {
            return None;
        }
    }
    Some((value, digits, rest))
}

/// Go's `leadingFraction`: the leading digits after a decimal point as a
/// numerator and a power-of-ten scale (digits past u64 precision are
/// consumed but ignored), their count, and the rest.
fn leading_fraction(text: &str) -> (u64, f64, usize, &str) {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, rest) = text.split_at(digits);
    let mut value: u64 = 0;
    let mut scale = 1.0;
    let mut overflowed = false;
    for digit in number.bytes() {
        if overflowed || value > ((1 << 63) - 1) / 10 {
            overflowed = true;
            continue;
        }
        let next = value * 10 + u64::from(digit - b'0');
        if next > 1 << 63 {
            overflowed = true;
            continue;
        }
        value = next;
        scale *= 10.0;
    }
    (value, scale, digits, rest)
}

/// The calendar units robfig's search walks, from the largest down.
#[derive(Clone, Copy)]
enum Unit {
    Month,
    Day,
    Hour,
    Minute,
    Second,
}

impl Unit {
    const ALL: [Unit; 5] = [
        Unit::Month,
        Unit::Day,
        Unit::Hour,
        Unit::Minute,
        Unit::Second,
    ];

    /// Whether stepping this unit just carried into the next larger unit,
    /// which sends the search back to re-check the larger fields.
    fn wrapped(self, wall: DateTime) -> bool {
        match self {
            Unit::Month => wall.month() == 1,
            Unit::Day => wall.day() == 1,
            Unit::Hour => wall.hour() == 0,
            Unit::Minute => wall.minute() == 0,
            Unit::Second => wall.second() == 0,
        }
    }
}

/// What happened when the search advanced one unit.
enum Advance {
    /// The unit now matches; go on to the next smaller unit.
    Matched(Timestamp),
    /// The unit carried over; start again from the month.
    Wrapped(Timestamp),
}

impl CronFields {
    /// robfig's `SpecSchedule.Next`: starting one second after `after`, step
    /// each unit forward until it matches, restarting from the month whenever
    /// a step carries. The first mismatch also truncates the smaller units.
    fn next_after(&self, after: Timestamp, clock: &WallClock<'_>) -> Option<Timestamp> {
        let mut t = floor_to_second(after)?
            .checked_add(SignedDuration::from_secs(1))
            .ok()?;
        let year_limit = i32::from(clock.wall(t).year()) + SEARCH_YEARS;
        let mut truncated = false;
        'search: loop {
            if i32::from(clock.wall(t).year()) > year_limit {
                return None;
            }
            for unit in Unit::ALL {
                match self.advance(unit, t, &mut truncated, clock)? {
                    Advance::Matched(next) => t = next,
                    Advance::Wrapped(next) => {
                        t = next;
                        continue 'search;
                    }
                }
            }
            return Some(t);
        }
    }

    /// Steps `unit` forward from `t` until it matches or carries over. The
    /// first time any unit must move, the smaller units are reset to zero.
    fn advance(
        &self,
        unit: Unit,
        mut t: Timestamp,
        truncated: &mut bool,
        clock: &WallClock<'_>,
    ) -> Option<Advance> {
        while !self.matches(unit, clock.wall(t)) {
            if !*truncated {
                *truncated = true;
                t = clock.truncate(unit, t)?;
            }
            t = clock.step(unit, t)?;
            if unit.wrapped(clock.wall(t)) {
                return Some(Advance::Wrapped(t));
            }
        }
        Some(Advance::Matched(t))
    }

    /// Whether the wall-clock `unit` of `wall` is allowed by the schedule.
    fn matches(&self, unit: Unit, wall: DateTime) -> bool {
        match unit {
            Unit::Month => self.month.contains(wall.month()),
            Unit::Day => self.day_matches(wall),
            Unit::Hour => self.hour.contains(wall.hour()),
            Unit::Minute => self.minute.contains(wall.minute()),
            Unit::Second => wall.second() == 0,
        }
    }

    /// Day of month and day of week must both match if either field was
    /// written with a star; otherwise matching either one is enough.
    fn day_matches(&self, wall: DateTime) -> bool {
        let dom = self.day_of_month.contains(wall.day());
        let dow = self
            .day_of_week
            .contains(wall.weekday().to_sunday_zero_offset());
        if self.day_of_month.star || self.day_of_week.star {
            dom && dow
        } else {
            dom || dow
        }
    }
}

/// The Go `time.Time` operations robfig's search uses, in one time zone:
/// calendar fields are read on the wall clock, `Add` moves the instant, and
/// `time.Date`/`AddDate` build wall-clock times resolved as Go resolves them.
struct WallClock<'a> {
    tz: &'a TimeZone,
}

impl WallClock<'_> {
    fn wall(&self, t: Timestamp) -> DateTime {
        self.tz.to_datetime(t)
    }

    /// Resets the units below `unit` to zero (robfig's first-mismatch reset).
    fn truncate(&self, unit: Unit, t: Timestamp) -> Option<Timestamp> {
        let wall = self.wall(t);
        let (year, month, day) = (wall.year(), wall.month().into(), wall.day().into());
        match unit {
            Unit::Month => self.date(year, month, 1, Time::midnight()),
            Unit::Day => self.date(year, month, day, Time::midnight()),
            Unit::Hour => self.date(year, month, day, Time::new(wall.hour(), 0, 0, 0).ok()?),
            // Go truncates these two on the absolute time line; instants here
            // are always whole seconds, so only the minute needs work.
            Unit::Minute => Timestamp::from_second(t.as_second().div_euclid(60) * 60).ok(),
            Unit::Second => Some(t),
        }
    }

    /// Moves `t` one `unit` forward, as robfig does.
    fn step(&self, unit: Unit, t: Timestamp) -> Option<Timestamp> {
        let wall = self.wall(t);
        let elapsed = match unit {
            Unit::Month => {
                let month = i32::from(wall.month()) + 1;
                return self.date(wall.year(), month, wall.day().into(), wall.time());
            }
            Unit::Day => return self.step_day(t),
            Unit::Hour => SignedDuration::from_hours(1),
            Unit::Minute => SignedDuration::from_mins(1),
            Unit::Second => SignedDuration::from_secs(1),
        };
        t.checked_add(elapsed).ok()
    }

    /// `AddDate(0, 0, 1)`, then robfig's fix for zones where midnight can be
    /// skipped: an hour past noon moves on to the next midnight, an earlier
    /// one moves back to the previous midnight.
    ///
    /// Where a whole day is missing (Pacific/Apia skipped 30 December 2011),
    /// Go resolves the missing date to a time that is not after `t` and robfig
    /// loops forever; this steps 24 hours instead, onto the following day.
    fn step_day(&self, t: Timestamp) -> Option<Timestamp> {
        let wall = self.wall(t);
        let day = i32::from(wall.day()) + 1;
        let next = self.date(wall.year(), wall.month().into(), day, wall.time())?;
        let hour = i64::from(self.wall(next).hour());
        let correction = match hour {
            0 => 0,
            13.. => 24 - hour,
            _ => -hour,
        };
        let next = next
            .checked_add(SignedDuration::from_hours(correction))
            .ok()?;
        if next > t {
            Some(next)
        } else {
            t.checked_add(SignedDuration::from_hours(24)).ok()
        }
    }

    /// Go's `time.Date`: an overflowing month or day carries into the year or
    /// month, and the wall-clock result is resolved as Go resolves it.
    fn date(&self, year: i16, month: i32, day: i32, time: Time) -> Option<Timestamp> {
        let months = i32::from(year) * 12 + month - 1;
        let year = i16::try_from(months.div_euclid(12)).ok()?;
        let month = i8::try_from(months.rem_euclid(12) + 1).ok()?;
        let first = Date::new(year, month, 1).ok()?;
        let date = first
            .checked_add(Span::new().try_days(day - 1).ok()?)
            .ok()?;
        self.resolve(date.to_datetime(time))
    }

    /// Maps a wall-clock time to an instant exactly as Go's `time.Date` does:
    /// take the offset in force at the wall time read as UTC, and if that
    /// offset does not hold at the resulting instant, use the one that does.
    /// In a gap this lands an hour early in zones west of Greenwich and an
    /// hour late east of it; in a fold it picks the offset the first guess
    /// settles on.
    fn resolve(&self, wall: DateTime) -> Option<Timestamp> {
        let guess = self.tz.to_offset(Offset::UTC.to_timestamp(wall).ok()?);
        let candidate = guess.to_timestamp(wall).ok()?;
        self.tz.to_offset(candidate).to_timestamp(wall).ok()
    }
}

/// `t` rounded down to a whole second (Go's `t.Add(-t.Nanosecond())`).
fn floor_to_second(t: Timestamp) -> Option<Timestamp> {
    let second = i64::try_from(t.as_nanosecond().div_euclid(NANOS_PER_SECOND)).ok()?;
    Timestamp::from_second(second).ok()
}

/// `later - earlier` in nanoseconds. Unlike Go's `Time.Sub`, this does not
/// saturate at about 292 years, where upstream would walk for ages.
fn nanos_between(later: Timestamp, earlier: Timestamp) -> i128 {
    later.as_nanosecond() - earlier.as_nanosecond()
}

/// The outcome of [`most_recent_schedule_time`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MostRecent {
    /// Where the search started: the last schedule time (or the creation
    /// time), moved up to `now - startingDeadlineSeconds` when that is later.
    pub earliest: Timestamp,
    /// The latest schedule time at or before `now` that upstream finds, or
    /// `None` if there is none. Like upstream, this can be `None` even though
    /// a time was missed, when the interval estimate overshoots for a
    /// schedule with uneven gaps (see the "another complex schedule" test).
    pub most_recent: Option<Timestamp>,
    /// Upstream's estimate of the number of missed schedule times:
    /// `(now - t1) / (t2 - t1) + 1` for the first two times `t1`, `t2` after
    /// `earliest`. It is 0 ("none missed") whenever `now` is before `t2`,
    /// even if `t1` itself was missed.
    pub missed: i64,
    /// Whether `missed` exceeds 100 (upstream's `manyMissed`), when the
    /// controller warns "too many missed start times".
    pub too_many_missed: bool,
}

/// Upstream's `mostRecentScheduleTime`: the most recent unmet schedule time
/// at or before `now`, found without walking every missed time.
///
/// `earliest` is the CronJob's last schedule time, or its creation time if it
/// never ran. `starting_deadline_seconds` is applied only when `Some`; pass
/// `None` where upstream passes `includeStartingDeadlineSeconds = false`.
///
/// When `now` is past the second schedule time, upstream estimates the count
/// from the gap between the first two times, jumps to two gaps before the
/// estimated last one, and walks forward from there.
///
/// Fails when the schedule never fires (or fires once) within the search
/// window, which upstream reports as "time difference between two schedules
/// is less than 1 second".
pub fn most_recent_schedule_time(
    schedule: &Schedule,
    tz: &TimeZone,
    earliest: Timestamp,
    now: Timestamp,
    starting_deadline_seconds: Option<i64>,
) -> Result<MostRecent, ScheduleError> {
    let earliest = apply_starting_deadline(earliest, now, starting_deadline_seconds);
    let none_missed = |most_recent| MostRecent {
        earliest,
        most_recent,
        missed: 0,
        too_many_missed: false,
    };
    let Some(first) = schedule.next_after(earliest, tz) else {
        return Err(interval_too_short());
    };
    if now < first {
        return Ok(none_missed(None));
    }
    let Some(second) = schedule.next_after(first, tz) else {
        return Err(interval_too_short());
    };
    if now < second {
        return Ok(none_missed(Some(first)));
    }
    let interval = round_to_seconds(nanos_between(second, first));
    if interval < 1 {
        return Err(interval_too_short());
    }
    let elapsed = nanos_between(now, first) / NANOS_PER_SECOND;
    let missed = i64::try_from(elapsed).unwrap_or(i64::MAX) / interval + 1;
    // Two intervals before the estimated last time, so that schedules with
    // uneven gaps still land on a real time below `now`.
    let jump = (missed - 2).saturating_mul(interval);
    let most_recent = first
        .checked_add(SignedDuration::from_secs(jump))
        .ok()
        .and_then(|start| last_time_not_after(schedule, tz, start, now));
    Ok(MostRecent {
        earliest,
        most_recent,
        missed,
        too_many_missed: missed > TOO_MANY_MISSED,
    })
}

/// Moves `earliest` up to `now - deadline` when that is later.
fn apply_starting_deadline(
    earliest: Timestamp,
    now: Timestamp,
    deadline_seconds: Option<i64>,
) -> Timestamp {
    deadline_seconds
        .and_then(|seconds| now.checked_sub(SignedDuration::from_secs(seconds)).ok())
        .map_or(earliest, |deadline| deadline.max(earliest))
}

/// Go's `Duration.Round(time.Second)` in whole seconds (halves away from zero).
fn round_to_seconds(nanos: i128) -> i64 {
    let half = NANOS_PER_SECOND / 2;
    let away_from_zero = if nanos < 0 {
        nanos - half
    } else {
        nanos + half
    };
    let rounded = away_from_zero / NANOS_PER_SECOND;
    i64::try_from(rounded).unwrap_or(i64::MAX)
}

/// The last schedule time after `start` that is not after `now`.
fn last_time_not_after(
    schedule: &Schedule,
    tz: &TimeZone,
    start: Timestamp,
    now: Timestamp,
) -> Option<Timestamp> {
    let mut last = None;
    let mut cursor = start;
    while let Some(next) = schedule.next_after(cursor, tz).filter(|next| *next <= now) {
        last = Some(next);
        cursor = next;
    }
    last
}

fn interval_too_short() -> ScheduleError {
    invalid("time difference between two schedules is less than 1 second")
}

/// Upstream's `nextScheduleTimeDuration`: how long the controller waits
/// before looking at the CronJob again, [`NEXT_SCHEDULE_DELTA`] past the next
/// schedule time.
///
/// The base is the most recent missed time (starting deadline ignored); if
/// none was found it is `earliest` when nothing was missed, and `now` when
/// something was or the schedule is invalid. Returns `None` if the schedule
/// never fires again, where upstream's arithmetic on Go's zero time yields a
/// meaningless negative duration.
pub fn next_schedule_time_duration(
    schedule: &Schedule,
    tz: &TimeZone,
    earliest: Timestamp,
    now: Timestamp,
) -> Option<SignedDuration> {
    let base = match most_recent_schedule_time(schedule, tz, earliest, now, None) {
        Ok(MostRecent {
            most_recent: Some(time),
            ..
        }) => time,
        Ok(MostRecent {
            missed: 0,
            earliest,
            ..
        }) => earliest,
        Ok(_) | Err(_) => now,
    };
    let next = schedule.next_after(base, tz)?;
    next.duration_since(now).checked_add(NEXT_SCHEDULE_DELTA)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(text: &str) -> Timestamp {
        text.parse().expect("test timestamp should parse")
    }

    fn zone(name: &str) -> TimeZone {
        TimeZone::get(name).expect("test zone should be in the tz database")
    }

    fn parse(spec: &str) -> Schedule {
        Schedule::parse(spec).expect("test spec should parse")
    }

    fn next(spec: &str, tz: &TimeZone, after: &str) -> Option<Timestamp> {
        parse(spec).next_after(ts(after), tz)
    }

    /// robfig's TestActivation: `expected` says whether the schedule fires
    /// exactly at `time` (checked as the next time after one second before).
    #[test]
    fn activation() {
        let cases = [
            // Every fifteen minutes.
            ("2012-07-09T15:00:00Z", "0/15 * * * *", true),
            ("2012-07-09T15:45:00Z", "0/15 * * * *", true),
            ("2012-07-09T15:40:00Z", "0/15 * * * *", false),
            // Every fifteen minutes, starting at 5 minutes.
            ("2012-07-09T15:05:00Z", "5/15 * * * *", true),
            ("2012-07-09T15:20:00Z", "5/15 * * * *", true),
            ("2012-07-09T15:50:00Z", "5/15 * * * *", true),
            // Named months.
            ("2012-07-15T15:00:00Z", "0/15 * * Jul *", true),
            ("2012-07-15T15:00:00Z", "0/15 * * Jun *", false),
            // Everything set.
            ("2012-07-15T08:30:00Z", "30 08 ? Jul Sun", true),
            ("2012-07-15T08:30:00Z", "30 08 15 Jul ?", true),
            ("2012-07-16T08:30:00Z", "30 08 ? Jul Sun", false),
            ("2012-07-16T08:30:00Z", "30 08 15 Jul ?", false),
            // Predefined schedules.
            ("2012-07-09T15:00:00Z", "@hourly", true),
            ("2012-07-09T15:04:00Z", "@hourly", false),
            ("2012-07-09T15:00:00Z", "@daily", false),
            ("2012-07-09T00:00:00Z", "@daily", true),
            ("2012-07-09T00:00:00Z", "@weekly", false),
            ("2012-07-08T00:00:00Z", "@weekly", true),
            ("2012-07-08T01:00:00Z", "@weekly", false),
            ("2012-07-08T00:00:00Z", "@monthly", false),
            ("2012-07-01T00:00:00Z", "@monthly", true),
            ("2013-01-01T00:00:00Z", "@yearly", true),
            ("2012-07-01T00:00:00Z", "@annually", false),
            // Both day fields restricted: either one matching is enough.
            ("2012-07-15T00:00:00Z", "* * 1,15 * Sun", true),
            ("2012-06-15T00:00:00Z", "* * 1,15 * Sun", true),
            ("2012-08-01T00:00:00Z", "* * 1,15 * Sun", true),
            ("2012-07-15T00:00:00Z", "* * */10 * Sun", true),
            // One day field starred: both must match.
            ("2012-07-15T00:00:00Z", "* * * * Mon", false),
            ("2012-07-09T00:00:00Z", "* * 1,15 * *", false),
            ("2012-07-15T00:00:00Z", "* * 1,15 * *", true),
            ("2012-07-15T00:00:00Z", "* * */2 * Sun", true),
        ];
        for (time, spec, expected) in cases {
            let before = ts(time)
                .checked_sub(SignedDuration::from_secs(1))
                .expect("in range");
            let fires = parse(spec).next_after(before, &TimeZone::UTC) == Some(ts(time));
            assert_eq!(fires, expected, "{spec} at {time}");
        }
    }

    /// robfig's TestNext cases that fit a five-field spec (seconds dropped).
    #[test]
    fn next_in_utc() {
        let cases = [
            // Simple cases.
            (
                "2012-07-09T14:45:00Z",
                "0/15 * * * *",
                Some("2012-07-09T15:00:00Z"),
            ),
            (
                "2012-07-09T14:59:00Z",
                "0/15 * * * *",
                Some("2012-07-09T15:00:00Z"),
            ),
            (
                "2012-07-09T14:59:59Z",
                "0/15 * * * *",
                Some("2012-07-09T15:00:00Z"),
            ),
            (
                "2012-07-09T15:00:00Z",
                "* * * * *",
                Some("2012-07-09T15:01:00Z"),
            ),
            (
                "2012-07-09T15:00:00.5Z",
                "* * * * *",
                Some("2012-07-09T15:01:00Z"),
            ),
            // Wrap around hours.
            (
                "2012-07-09T15:45:00Z",
                "20-35/15 * * * *",
                Some("2012-07-09T16:20:00Z"),
            ),
            // Wrap around days.
            (
                "2012-07-09T23:46:00Z",
                "*/15 * * * *",
                Some("2012-07-10T00:00:00Z"),
            ),
            (
                "2012-07-09T23:45:00Z",
                "20-35/15 * * * *",
                Some("2012-07-10T00:20:00Z"),
            ),
            (
                "2012-07-09T23:35:51Z",
                "20-35/15 1/2 * * *",
                Some("2012-07-10T01:20:00Z"),
            ),
            (
                "2012-07-09T23:35:51Z",
                "20-35/15 10-12 * * *",
                Some("2012-07-10T10:20:00Z"),
            ),
            (
                "2012-07-09T23:35:51Z",
                "20-35/15 1/2 */2 * *",
                Some("2012-07-11T01:20:00Z"),
            ),
            (
                "2012-07-09T23:35:51Z",
                "20-35/15 * 9-20 * *",
                Some("2012-07-10T00:20:00Z"),
            ),
            (
                "2012-07-09T23:35:51Z",
                "20-35/15 * 9-20 Jul *",
                Some("2012-07-10T00:20:00Z"),
            ),
            // Wrap around months.
            (
                "2012-07-09T23:35:00Z",
                "0 0 9 Apr-Oct ?",
                Some("2012-08-09T00:00:00Z"),
            ),
            (
                "2012-07-09T23:35:00Z",
                "0 0 */5 Apr,Aug,Oct Mon",
                Some("2012-08-01T00:00:00Z"),
            ),
            (
                "2012-07-09T23:35:00Z",
                "0 0 */5 Oct Mon",
                Some("2012-10-01T00:00:00Z"),
            ),
            // Wrap around years.
            (
                "2012-07-09T23:35:00Z",
                "0 0 * Feb Mon",
                Some("2013-02-04T00:00:00Z"),
            ),
            (
                "2012-07-09T23:35:00Z",
                "0 0 * Feb Mon/2",
                Some("2013-02-01T00:00:00Z"),
            ),
            // Wrap around minute, hour, day, month and year.
            (
                "2012-12-31T23:59:45Z",
                "* * * * *",
                Some("2013-01-01T00:00:00Z"),
            ),
            // Leap years.
            (
                "2012-07-09T23:35:00Z",
                "0 0 29 Feb ?",
                Some("2016-02-29T00:00:00Z"),
            ),
            (
                "2016-02-29T00:00:00Z",
                "0 0 29 2 *",
                Some("2020-02-29T00:00:00Z"),
            ),
            // Unsatisfiable.
            ("2012-07-09T23:35:00Z", "0 0 30 Feb ?", None),
            ("2012-07-09T23:35:00Z", "0 0 31 Apr ?", None),
            // 2100 is not a leap year: the next Feb 29 is more than 5 years away.
            ("2096-03-01T00:00:00Z", "0 0 29 2 *", None),
            // Descriptors.
            (
                "2012-07-09T15:04:00Z",
                "@hourly",
                Some("2012-07-09T16:00:00Z"),
            ),
            (
                "2012-07-09T15:04:00Z",
                "@daily",
                Some("2012-07-10T00:00:00Z"),
            ),
            (
                "2012-07-09T15:04:00Z",
                "@midnight",
                Some("2012-07-10T00:00:00Z"),
            ),
            (
                "2012-07-09T15:04:00Z",
                "@weekly",
                Some("2012-07-15T00:00:00Z"),
            ),
            (
                "2012-07-09T15:04:00Z",
                "@monthly",
                Some("2012-08-01T00:00:00Z"),
            ),
            (
                "2012-07-09T15:04:00Z",
                "@yearly",
                Some("2013-01-01T00:00:00Z"),
            ),
        ];
        for (after, spec, expected) in cases {
            assert_eq!(
                next(spec, &TimeZone::UTC, after),
                expected.map(ts),
                "{spec} after {after}"
            );
        }
    }

    /// robfig's DST cases in America/New_York: 2am EST jumps to 3am EDT on
    /// 2012-03-11, and 2am EDT falls back to 1am EST on 2012-11-04.
    #[test]
    fn next_across_new_york_dst() {
        let new_york = zone("America/New_York");
        let cases = [
            // Spring forward: 02:30 does not exist that day, so wait a year.
            (
                "2012-03-11T00:00:00-05:00",
                "30 2 11 Mar ?",
                "2013-03-11T02:30:00-04:00",
            ),
            // Hourly job skips the missing hour.
            (
                "2012-03-11T00:00:00-05:00",
                "0 * * * ?",
                "2012-03-11T01:00:00-05:00",
            ),
            (
                "2012-03-11T01:00:00-05:00",
                "0 * * * ?",
                "2012-03-11T03:00:00-04:00",
            ),
            (
                "2012-03-11T03:00:00-04:00",
                "0 * * * ?",
                "2012-03-11T04:00:00-04:00",
            ),
            (
                "2012-03-11T04:00:00-04:00",
                "0 * * * ?",
                "2012-03-11T05:00:00-04:00",
            ),
            // 1am nightly job.
            (
                "2012-03-11T00:00:00-05:00",
                "0 1 * * ?",
                "2012-03-11T01:00:00-05:00",
            ),
            (
                "2012-03-11T01:00:00-05:00",
                "0 1 * * ?",
                "2012-03-12T01:00:00-04:00",
            ),
            // 2am nightly job is skipped on the transition day.
            (
                "2012-03-11T00:00:00-05:00",
                "0 2 * * ?",
                "2012-03-12T02:00:00-04:00",
            ),
            // Fall back: the repeated hour fires twice.
            (
                "2012-11-04T00:00:00-04:00",
                "30 2 04 Nov ?",
                "2012-11-04T02:30:00-05:00",
            ),
            (
                "2012-11-04T01:45:00-04:00",
                "30 1 04 Nov ?",
                "2012-11-04T01:30:00-05:00",
            ),
            // Hourly job.
            (
                "2012-11-04T00:00:00-04:00",
                "0 * * * ?",
                "2012-11-04T01:00:00-04:00",
            ),
            (
                "2012-11-04T01:00:00-04:00",
                "0 * * * ?",
                "2012-11-04T01:00:00-05:00",
            ),
            (
                "2012-11-04T01:00:00-05:00",
                "0 * * * ?",
                "2012-11-04T02:00:00-05:00",
            ),
            // 1am nightly job runs twice.
            (
                "2012-11-04T00:00:00-04:00",
                "0 1 * * ?",
                "2012-11-04T01:00:00-04:00",
            ),
            (
                "2012-11-04T01:00:00-04:00",
                "0 1 * * ?",
                "2012-11-04T01:00:00-05:00",
            ),
            (
                "2012-11-04T01:00:00-05:00",
                "0 1 * * ?",
                "2012-11-05T01:00:00-05:00",
            ),
            // 2am and 3am nightly jobs run once.
            (
                "2012-11-04T00:00:00-04:00",
                "0 2 * * ?",
                "2012-11-04T02:00:00-05:00",
            ),
            (
                "2012-11-04T02:00:00-05:00",
                "0 2 * * ?",
                "2012-11-05T02:00:00-05:00",
            ),
            (
                "2012-11-04T00:00:00-04:00",
                "0 3 * * ?",
                "2012-11-04T03:00:00-05:00",
            ),
            (
                "2012-11-04T03:00:00-05:00",
                "0 3 * * ?",
                "2012-11-05T03:00:00-05:00",
            ),
            // Monthly job.
            (
                "2012-11-04T00:00:00-04:00",
                "0 3 3 * ?",
                "2012-12-03T03:00:00-05:00",
            ),
        ];
        for (after, spec, expected) in cases {
            assert_eq!(
                next(spec, &new_york, after),
                Some(ts(expected)),
                "{spec} after {after}"
            );
        }
    }

    /// robfig issue 157: in America/Sao_Paulo, DST used to start at midnight,
    /// so midnight itself did not exist on some days.
    #[test]
    fn next_when_midnight_is_skipped() {
        let sao_paulo = zone("America/Sao_Paulo");
        let cases = [
            (
                "2018-10-17T05:00:00-04:00",
                "0 9 10 * ?",
                "2018-11-10T06:00:00-05:00",
            ),
            (
                "2018-02-14T05:00:00-05:00",
                "0 9 22 * ?",
                "2018-02-22T07:00:00-05:00",
            ),
        ];
        for (after, spec, expected) in cases {
            assert_eq!(
                next(spec, &sao_paulo, after),
                Some(ts(expected)),
                "{spec} after {after}"
            );
        }
    }

    /// robfig loops forever here: Samoa skipped 30 December 2011 entirely.
    #[test]
    fn next_across_a_skipped_day_terminates() {
        let apia = zone("Pacific/Apia");
        let found = next("0 12 * * *", &apia, "2011-12-29T12:00:00-10:00");
        assert_eq!(found, Some(ts("2011-12-31T12:00:00+14:00")));
    }

    /// robfig's TestNextWithTz: a fixed +05:30 zone.
    #[test]
    fn next_in_a_fixed_offset_zone() {
        let india = TimeZone::fixed(Offset::from_seconds(5 * 3600 + 1800).expect("valid offset"));
        let cases = [
            ("2016-01-03T13:09:03+05:30", "14 14 * * *"),
            ("2016-01-03T04:09:03+05:30", "14 14 * * ?"),
            ("2016-01-03T14:09:03+05:30", "14 14 * * *"),
            ("2016-01-03T14:00:00+05:30", "14 14 * * ?"),
        ];
        for (after, spec) in cases {
            assert_eq!(
                next(spec, &india, after),
                Some(ts("2016-01-03T14:14:00+05:30")),
                "{spec}"
            );
        }
    }

    #[test]
    fn every_adds_whole_seconds_and_ignores_the_zone() {
        let new_york = zone("America/New_York");
        let cases = [
            (
                "@every 5m",
                "2012-03-11T06:59:30.25Z",
                "2012-03-11T07:04:30Z",
            ),
            (
                "@every 1h30m",
                "2012-03-11T06:30:00Z",
                "2012-03-11T08:00:00Z",
            ),
            (
                "@every 1.5h",
                "2012-03-11T06:30:00Z",
                "2012-03-11T08:00:00Z",
            ),
            (
                "@every 0.5s",
                "2012-03-11T06:30:00Z",
                "2012-03-11T06:30:01Z",
            ),
            (
                "@every 2500ms",
                "2012-03-11T06:30:00Z",
                "2012-03-11T06:30:02Z",
            ),
            ("@every -1h", "2012-03-11T06:30:00Z", "2012-03-11T06:30:01Z"),
        ];
        for (spec, after, expected) in cases {
            assert_eq!(next(spec, &new_york, after), Some(ts(expected)), "{spec}");
        }
    }

    #[test]
    fn equivalent_specs_parse_alike() {
        let cases = [
            ("@yearly", "0 0 1 1 *"),
            ("@annually", "0 0 1 1 *"),
            ("@monthly", "0 0 1 * *"),
            ("@weekly", "0 0 * * 0"),
            ("@daily", "0 0 * * *"),
            ("@midnight", "0 0 * * *"),
            ("@hourly", "0 * * * *"),
            ("? ? ? ? ?", "* * * * *"),
            ("5/15 * * * *", "5-59/15 * * * *"),
            ("*/1 * * * *", "* * * * *"),
            ("1,,2 * * * *", "1,2 * * * *"),
            ("0 0 * jan-MAR Mon-Fri", "0 0 * 1-3 1-5"),
            ("0 0 * JUL sun,SAT", "0 0 * 7 0,6"),
            ("0\t0  *\n* *", "0 0 * * *"),
            // robfig ignores anything after a leading `*-`.
            ("*-5 * * * *", "* * * * *"),
        ];
        for (spec, same_as) in cases {
            assert_eq!(parse(spec), parse(same_as), "{spec} vs {same_as}");
        }
        // A star with a step above 1 is no star, so it ORs with day of week.
        assert_eq!(parse("0 0 */2 * 1"), parse("0 0 1-31/2 * 1"));
        assert_ne!(parse("0 0 */1 * 1"), parse("0 0 1-31 * 1"));
        let tuesday = "2012-07-10T00:00:00Z";
        assert_eq!(
            next("0 0 1-31 * 1", &TimeZone::UTC, tuesday),
            Some(ts("2012-07-11T00:00:00Z"))
        );
        assert_eq!(
            next("0 0 */1 * 1", &TimeZone::UTC, tuesday),
            Some(ts("2012-07-16T00:00:00Z"))
        );
    }

    /// Error messages from robfig's TestErrors, TestRange and
    /// TestParseScheduleErrors, completed to the exact text robfig gives.
    #[test]
    fn parse_errors_match_robfig() {
        let cases = [
            ("", "empty spec string"),
            ("xyz", "expected exactly 5 fields, found 1: [xyz]"),
            ("* * * *", "expected exactly 5 fields, found 4: [* * * *]"),
            (
                "0 * * * * *",
                "expected exactly 5 fields, found 6: [0 * * * * *]",
            ),
            (" @daily", "expected exactly 5 fields, found 1: [@daily]"),
            ("60 0 * * *", "end of range (60) above maximum (59): 60"),
            ("0-60 * * * *", "end of range (60) above maximum (59): 0-60"),
            ("0 60 * * *", "end of range (60) above maximum (23): 60"),
            ("0 0 0 * *", "beginning of range (0) below minimum (1): 0"),
            ("0 0 * 13 *", "end of range (13) above maximum (12): 13"),
            ("0 0 * * 7", "end of range (7) above maximum (6): 7"),
            (
                "0 0 * * XYZ",
                "failed to parse int from XYZ: strconv.Atoi: parsing \"XYZ\": invalid syntax",
            ),
            (
                "5 j * * *",
                "failed to parse int from j: strconv.Atoi: parsing \"j\": invalid syntax",
            ),
            ("5--5 * * * *", "too many hyphens: 5--5"),
            (
                "* * * jan-x *",
                "failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax",
            ),
            ("*/-12 * * * *", "negative number (-12) not allowed: -12"),
            ("*//2 * * * *", "too many slashes: *//2"),
            (
                "5-3 * * * *",
                "beginning of range (5) beyond end of range (3): 5-3",
            ),
            (
                "*/0 * * * *",
                "step of range should be a positive number: */0",
            ),
            (
                "15/0 * * * *",
                "step of range should be a positive number: 15/0",
            ),
            (
                "99999999999999999999 * * * *",
                "failed to parse int from 99999999999999999999: strconv.Atoi: parsing \
                 \"99999999999999999999\": value out of range",
            ),
            ("@unrecognized", "unrecognized descriptor: @unrecognized"),
            ("@DAILY", "unrecognized descriptor: @DAILY"),
            ("@every", "unrecognized descriptor: @every"),
            (
                "@every Xm",
                "failed to parse duration @every Xm: time: invalid duration \"Xm\"",
            ),
            (
                "@every 1",
                "failed to parse duration @every 1: time: missing unit in duration \"1\"",
            ),
            (
                "@every 1d",
                "failed to parse duration @every 1d: time: unknown unit \"d\" in duration \"1d\"",
            ),
        ];
        for (spec, message) in cases {
            let error = Schedule::parse(spec).expect_err("spec should be rejected");
            assert_eq!(
                error,
                ScheduleError::Invalid(message.to_string()),
                "{spec:?}"
            );
            assert_eq!(error.to_string(), message);
        }
    }

    #[test]
    fn time_zone_in_spec_is_rejected() {
        for spec in [
            "TZ=America/New_York 0 0 * * *",
            "CRON_TZ=UTC 5 * * * *",
            "TZ=UTC @daily",
        ] {
            assert_eq!(
                Schedule::parse(spec),
                Err(ScheduleError::TimeZoneInSpec),
                "{spec}"
            );
        }
        assert_eq!(
            ScheduleError::TimeZoneInSpec.to_string(),
            "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
        );
    }

    /// Upstream's test anchor: 2016-05-19 (a Thursday) at 10:00 UTC.
    fn top_of_the_hour() -> Timestamp {
        ts("2016-05-19T10:00:00Z")
    }

    fn after_top(duration: SignedDuration) -> Timestamp {
        top_of_the_hour().checked_add(duration).expect("in range")
    }

    fn hours_mins(hours: i64, mins: i64) -> SignedDuration {
        SignedDuration::from_mins(hours * 60 + mins)
    }

    /// A row of upstream's TestMostRecentScheduleTime (plus a few more).
    struct MostRecentCase {
        name: &'static str,
        spec: &'static str,
        earliest: Timestamp,
        now: Timestamp,
        deadline: Option<i64>,
        expected_earliest: Timestamp,
        expected_recent: Option<Timestamp>,
        expected_missed: i64,
    }

    #[test]
    fn most_recent_schedule_time_matches_upstream() {
        let top = top_of_the_hour();
        let half_past = after_top(hours_mins(0, 30));
        let cases = [
            MostRecentCase {
                name: "now before next schedule",
                spec: "0 * * * *",
                earliest: top,
                now: after_top(SignedDuration::from_secs(30)),
                deadline: None,
                expected_earliest: top,
                expected_recent: None,
                expected_missed: 0,
            },
            MostRecentCase {
                name: "now just after next schedule",
                spec: "0 * * * *",
                earliest: top,
                now: after_top(hours_mins(1, 1)),
                deadline: None,
                expected_earliest: top,
                expected_recent: Some(after_top(hours_mins(1, 0))),
                expected_missed: 0,
            },
            MostRecentCase {
                name: "missed 5 schedules",
                spec: "0 * * * *",
                earliest: after_top(SignedDuration::from_secs(10)),
                now: after_top(hours_mins(5, 1)),
                deadline: None,
                expected_earliest: after_top(SignedDuration::from_secs(10)),
                expected_recent: Some(after_top(hours_mins(5, 0))),
                expected_missed: 5,
            },
            MostRecentCase {
                name: "complex schedule",
                spec: "30 6-16/4 * * 1-5",
                earliest: half_past,
                now: after_top(hours_mins(24, 31)),
                deadline: None,
                expected_earliest: half_past,
                expected_recent: Some(after_top(hours_mins(24, 30))),
                expected_missed: 2,
            },
            MostRecentCase {
                // The estimate overshoots Friday 12:30, so nothing is found.
                name: "another complex schedule",
                spec: "30 10,11,12 * * 1-5",
                earliest: half_past,
                now: after_top(hours_mins(30, 30)),
                deadline: None,
                expected_earliest: half_past,
                expected_recent: None,
                expected_missed: 30,
            },
            MostRecentCase {
                name: "complex schedule with longer diff between executions",
                spec: "30 6-16/4 * * 1-5",
                earliest: half_past,
                now: after_top(hours_mins(96, 31)),
                deadline: None,
                expected_earliest: half_past,
                expected_recent: Some(after_top(hours_mins(96, 30))),
                expected_missed: 6,
            },
            MostRecentCase {
                name: "complex schedule with shorter diff between executions",
                spec: "30 6-16/4 * * 1-5",
                earliest: top,
                now: after_top(hours_mins(24, 31)),
                deadline: None,
                expected_earliest: top,
                expected_recent: Some(after_top(hours_mins(24, 30))),
                expected_missed: 7,
            },
            MostRecentCase {
                name: "@every schedule",
                spec: "@every 1h",
                earliest: after_top(hours_mins(0, 1)),
                now: after_top(hours_mins(7 * 24, 0)),
                deadline: None,
                expected_earliest: after_top(hours_mins(0, 1)),
                expected_recent: Some(after_top(hours_mins(6 * 24 + 23, 1))),
                expected_missed: 167,
            },
            MostRecentCase {
                name: "more than 100 missed every-minute schedules",
                spec: "* * * * *",
                earliest: top,
                now: after_top(SignedDuration::from_secs(2 * 3600 + 30)),
                deadline: None,
                expected_earliest: top,
                expected_recent: Some(after_top(hours_mins(2, 0))),
                expected_missed: 120,
            },
            MostRecentCase {
                name: "earliestTime being CreationTimestamp and LastScheduleTime",
                spec: "0 * * * *",
                earliest: top,
                now: after_top(SignedDuration::from_secs(30)),
                deadline: None,
                expected_earliest: top,
                expected_recent: None,
                expected_missed: 0,
            },
            MostRecentCase {
                name: "earliestTime being LastScheduleTime",
                spec: "*/5 * * * *",
                earliest: half_past,
                now: after_top(hours_mins(0, 31)),
                deadline: None,
                expected_earliest: half_past,
                expected_recent: None,
                expected_missed: 0,
            },
            MostRecentCase {
                name: "earliestTime being LastScheduleTime (within StartingDeadlineSeconds)",
                spec: "*/5 * * * *",
                earliest: half_past,
                now: after_top(hours_mins(0, 31)),
                deadline: Some(60),
                expected_earliest: half_past,
                expected_recent: None,
                expected_missed: 0,
            },
            MostRecentCase {
                name: "earliestTime being LastScheduleTime (outside StartingDeadlineSeconds)",
                spec: "*/5 * * * *",
                earliest: half_past,
                now: after_top(hours_mins(0, 32)),
                deadline: Some(60),
                expected_earliest: after_top(hours_mins(0, 31)),
                expected_recent: None,
                expected_missed: 0,
            },
            MostRecentCase {
                // Upstream TestNextScheduleTime case 7: a short deadline
                // bounds the search to the last two hours.
                name: "way behind with a short deadline",
                spec: "0 * * * ?",
                earliest: after_top(hours_mins(-1, 0)),
                now: after_top(hours_mins(24 * 10 + 1, 0)),
                deadline: Some(2 * 3600),
                expected_earliest: after_top(hours_mins(24 * 10 - 1, 0)),
                expected_recent: Some(after_top(hours_mins(24 * 10 + 1, 0))),
                expected_missed: 2,
            },
        ];
        for case in cases {
            let result = most_recent_schedule_time(
                &parse(case.spec),
                &TimeZone::UTC,
                case.earliest,
                case.now,
                case.deadline,
            )
            .expect("schedule should be valid");
            let expected = MostRecent {
                earliest: case.expected_earliest,
                most_recent: case.expected_recent,
                missed: case.expected_missed,
                too_many_missed: case.expected_missed > 100,
            };
            assert_eq!(result, expected, "{}", case.name);
        }
    }

    #[test]
    fn most_recent_schedule_time_rejects_a_schedule_that_never_fires() {
        let result = most_recent_schedule_time(
            &parse("59 23 31 2 *"),
            &TimeZone::UTC,
            after_top(SignedDuration::from_secs(10)),
            after_top(hours_mins(1, 0)),
            None,
        );
        assert_eq!(
            result,
            Err(ScheduleError::Invalid(
                "time difference between two schedules is less than 1 second".to_string()
            ))
        );
    }

    /// Upstream's TestNextScheduleTimeDuration.
    #[test]
    fn next_schedule_time_duration_matches_upstream() {
        let cases = [
            (
                "complex schedule skipping weekend",
                "30 6-16/4 * * 1-5",
                after_top(hours_mins(0, 30)),
                after_top(hours_mins(24, 31)),
                hours_mins(3, 59),
            ),
            (
                "another complex schedule skipping weekend",
                "30 10,11,12 * * 1-5",
                after_top(hours_mins(0, 30)),
                after_top(hours_mins(30, 30)),
                hours_mins(66, 0),
            ),
            (
                "once a week cronjob, missed two runs",
                "0 12 * * 4",
                after_top(hours_mins(2, 0)),
                after_top(hours_mins(19 * 24 + 1, 30)),
                hours_mins(48, 30),
            ),
            (
                "no previous run of a cronjob",
                "0 12 * * 5",
                top_of_the_hour(),
                after_top(hours_mins(6, 0)),
                hours_mins(20, 0),
            ),
        ];
        for (name, spec, earliest, now, wait) in cases {
            let got = next_schedule_time_duration(&parse(spec), &TimeZone::UTC, earliest, now);
            assert_eq!(got, wait.checked_add(NEXT_SCHEDULE_DELTA), "{name}");
        }
    }
}
