//! Rates written as strings: `10/s`, `100/m`, `5000/h`, `2/500ms`, `1/1.5s`.
//!
//! A [`Rate`] is "`count` calls per `per`", the notation Celery and many
//! configuration files use. It parses from a string, prints back to the same
//! value, and (with the `serde` cargo feature) reads from and writes to a
//! configuration file as that string:
//!
//! ```
//! use std::time::Duration;
//! use tower_limits::Rate;
//!
//! let rate: Rate = "100/m".parse()?;
//! assert_eq!(rate.count(), 100);
//! assert_eq!(rate.per(), Duration::from_secs(60));
//! assert_eq!(rate.to_string(), "100/m");
//!
//! let error = "10/x".parse::<Rate>().unwrap_err();
//! assert_eq!(
//!     error.to_string(),
//!     r#"invalid rate "10/x": unknown unit "x" (expected ns, us, ms, s, m, h or d)"#
//! );
//! # Ok::<(), tower_limits::rate::ParseRateError>(())
//! ```
//!
//! # Grammar
//!
//! ```text
//! rate   = count "/" period
//! count  = digit+                      ; a whole number from 1 to 4294967295
//! period = [ number ] unit             ; a missing number means 1: "10/s" is "10/1s"
//! number = digit+ [ "." digit+ ]       ; such as 500, 1.5, 0.25; no sign, no exponent
//! unit   = "ns" | "us" | "µs" | "ms" | "s" | "m" | "h" | "d"
//!        | a long form, in any case: "nanosecond(s)", "microsecond(s)", "millisecond(s)",
//!          "sec(s)", "second(s)", "min(s)", "minute(s)", "hr(s)", "hour(s)", "day(s)"
//! ```
//!
//! * `m` is a **minute** (there is no month unit); a day is 24 hours.
//! * The short units are lower case only (`10/S` and `10/M` are errors, so an
//!   `M` meant as "month" or "mega" is never read as a minute); the long forms
//!   may be in any case (`10/Minute`).
//! * Whitespace is allowed around the whole rate, around the `/` and between
//!   the number and the unit (`" 10 / 1.5 s "`), nowhere else.
//! * The count must be at least 1; signs (`+1`, `-1`), digit separators
//!   (`1_000`, `1,000`) and fractions (`1.5/s`) are rejected.
//! * The period must be longer than zero and a whole number of nanoseconds
//!   no longer than [`Duration::MAX`]. It is converted with integer
//!   arithmetic on the decimal digits, so `1/0.1s` is exactly 100 ms and
//!   `1/1.5s` exactly 1.5 s, never a floating-point neighbour.
//!
//! # Printing
//!
//! [`Rate`]'s [`Display`](fmt::Display) prints the canonical form: the period
//! in the **largest unit in which it is at least 1 and exact with at most three
//! decimals**, the number left out when it is 1, and `us` (not `µs`) for
//! microseconds. So `10/s`, `100/m`, `2/500ms`, `1/1.5s`, `1/90s` prints as
//! `1/1.5m` and `1/1000ms` as `1/s`. Parsing the printed form always gives back
//! an equal [`Rate`].
//!
//! # Configuration files
//!
//! With the `serde` feature, a [`Rate`] serializes as its canonical string and
//! deserializes from any string the grammar accepts. A bad string fails with
//! the [`ParseRateError`] message:
//!
//! ```
//! # #[cfg(feature = "serde")]
//! # {
//! #[derive(serde::Deserialize)]
//! struct Config {
//!     rate: tower_limits::Rate,
//! }
//!
//! let config: Config = serde_json::from_str(r#"{ "rate": "5000/h" }"#).unwrap();
//! assert_eq!(config.rate.count(), 5000);
//!
//! let error = serde_json::from_str::<Config>(r#"{ "rate": "0/s" }"#).err().unwrap();
//! assert!(error.to_string().contains("the count must be at least 1"));
//! # }
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::ConfigError;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The units, largest first: (canonical name, nanoseconds).
const UNITS: [(&str, u128); 7] = [
    ("d", 86_400 * NANOS_PER_SEC),
    ("h", 3_600 * NANOS_PER_SEC),
    ("m", 60 * NANOS_PER_SEC),
    ("s", NANOS_PER_SEC),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

/// The unit list that error messages show.
const EXPECTED_UNITS: &str = "expected ns, us, ms, s, m, h or d";

/// How many decimals [`Rate`]'s `Display` may use before it picks a smaller unit.
const DISPLAY_DECIMALS: u32 = 3;

/// A number of calls per period of time, such as 10 per second or 2 per 500 ms.
///
/// Build one with [`Rate::new`] (or [`Rate::per_second`], [`Rate::per_minute`],
/// [`Rate::per_hour`]), or parse one from a string such as `"10/s"` (see the
/// [module docs](crate::rate) for the grammar). It is a plain value: `Copy`,
/// comparable and hashable.
///
/// Equality is structural: `2/s` and `1/500ms` have the same average rate but
/// are different values, because they allow different bursts.
///
/// ```
/// use std::time::Duration;
/// use tower_limits::Rate;
///
/// let parsed: Rate = "2/500ms".parse()?;
/// let built = Rate::new(2, Duration::from_millis(500))?;
/// assert_eq!(parsed, built);
/// assert_eq!(built.to_string(), "2/500ms");
/// assert_ne!(built, Rate::per_second(4)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    count: u32,
    per: Duration,
}

impl Rate {
    /// `count` calls per `per`.
    ///
    /// Fails with a [`ConfigError`] if `count` is zero (field `count`) or `per`
    /// is zero (field `per`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::Rate;
    ///
    /// let rate = Rate::new(3, Duration::from_secs(2))?;
    /// assert_eq!((rate.count(), rate.per()), (3, Duration::from_secs(2)));
    ///
    /// let error = Rate::new(0, Duration::from_secs(1)).unwrap_err();
    /// assert_eq!(error.to_string(), "invalid `count` (0): must be at least 1");
    /// let error = Rate::new(1, Duration::ZERO).unwrap_err();
    /// assert_eq!(error.field(), "per");
    /// # Ok::<(), tower_limits::error::ConfigError>(())
    /// ```
    pub fn new(count: u32, per: Duration) -> Result<Self, ConfigError> {
        if count == 0 {
            return Err(ConfigError::new("count", count, "must be at least 1"));
        }
        if per.is_zero() {
            return Err(ConfigError::new("per", per, "must be longer than zero"));
        }
        Ok(Self { count, per })
    }

    /// `count` calls per second; fails if `count` is zero.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::Rate;
    ///
    /// let rate = Rate::per_second(10)?;
    /// assert_eq!(rate, "10/s".parse()?);
    /// assert_eq!(rate.per(), Duration::from_secs(1));
    /// assert!(Rate::per_second(0).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn per_second(count: u32) -> Result<Self, ConfigError> {
        Self::new(count, Duration::from_secs(1))
    }

    /// `count` calls per minute; fails if `count` is zero.
    ///
    /// ```
    /// use tower_limits::Rate;
    ///
    /// let rate = Rate::per_minute(100)?;
    /// assert_eq!(rate.to_string(), "100/m");
    /// assert!(Rate::per_minute(0).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn per_minute(count: u32) -> Result<Self, ConfigError> {
        Self::new(count, Duration::from_secs(60))
    }

    /// `count` calls per hour; fails if `count` is zero.
    ///
    /// ```
    /// use tower_limits::Rate;
    ///
    /// let rate = Rate::per_hour(5000)?;
    /// assert_eq!(rate.to_string(), "5000/h");
    /// assert!(Rate::per_hour(0).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn per_hour(count: u32) -> Result<Self, ConfigError> {
        Self::new(count, Duration::from_secs(3600))
    }

    /// How many calls the rate allows per [`per`](Self::per); at least 1.
    ///
    /// ```
    /// use tower_limits::Rate;
    ///
    /// assert_eq!("100/m".parse::<Rate>()?.count(), 100);
    /// # Ok::<(), tower_limits::rate::ParseRateError>(())
    /// ```
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The period over which [`count`](Self::count) calls are allowed; longer
    /// than zero.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::Rate;
    ///
    /// assert_eq!("1/1.5s".parse::<Rate>()?.per(), Duration::from_millis(1500));
    /// # Ok::<(), tower_limits::rate::ParseRateError>(())
    /// ```
    pub fn per(&self) -> Duration {
        self.per
    }

    /// The emission interval: `per / count`, the spacing between calls that
    /// spreads them evenly.
    ///
    /// It is exact when `per` is a multiple of `count` nanoseconds, and
    /// otherwise **rounded up** to the next whole nanosecond, so calls paced
    /// at this interval never exceed the rate. It is therefore never zero,
    /// even for rates faster than one call per nanosecond.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::Rate;
    ///
    /// assert_eq!("10/s".parse::<Rate>()?.interval(), Duration::from_millis(100));
    /// assert_eq!("3/s".parse::<Rate>()?.interval(), Duration::from_nanos(333_333_334));
    /// assert_eq!("5/ns".parse::<Rate>()?.interval(), Duration::from_nanos(1));
    /// # Ok::<(), tower_limits::rate::ParseRateError>(())
    /// ```
    pub fn interval(&self) -> Duration {
        let nanos = self.per.as_nanos().div_ceil(u128::from(self.count));
        // nanos <= per, so it fits a Duration.
        duration_from_nanos(nanos).unwrap_or(self.per)
    }

    /// The average rate in calls per second, as a float (approximate for
    /// periods that are not exact in binary).
    ///
    /// ```
    /// use tower_limits::Rate;
    ///
    /// assert_eq!("100/m".parse::<Rate>()?.as_per_second_f64(), 100.0 / 60.0);
    /// assert_eq!("2/500ms".parse::<Rate>()?.as_per_second_f64(), 4.0);
    /// # Ok::<(), tower_limits::rate::ParseRateError>(())
    /// ```
    pub fn as_per_second_f64(&self) -> f64 {
        self.count as f64 / self.per.as_secs_f64()
    }

    /// Shard `shard` of `shards`: the rate split so that the shares add up
    /// to exactly this rate, over the same period (shares differ by at most
    /// one call). Split a hot limit this way to spread its load over several
    /// limiters, one per worker or per store key ("give each of 4
    /// shards 25 tokens/sec and hash workers to shards").
    ///
    /// The shards together never admit more than this rate. The price is
    /// the other side: a shard that is out of calls waits even while
    /// another has some left, so a busy worker gets its share, not the
    /// whole rate.
    ///
    /// Fails with a [`ConfigError`] if `shards` is zero or above the count
    /// (a shard would get no calls), or if `shard` is not below `shards`.
    ///
    /// ```
    /// use tower_limits::Rate;
    ///
    /// let rate: Rate = "10/s".parse()?;
    /// let shares: Vec<Rate> = (0..4).map(|shard| rate.share(shard, 4)).collect::<Result<_, _>>()?;
    /// assert_eq!(shares, ["3/s".parse()?, "3/s".parse()?, "2/s".parse()?, "2/s".parse()?]);
    ///
    /// let error = rate.share(0, 11).unwrap_err();
    /// assert_eq!(error.to_string(), "invalid `shards` (11): must be at most the count, 10, so that every shard gets a call");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn share(&self, shard: u32, shards: u32) -> Result<Self, ConfigError> {
        if shards == 0 {
            return Err(ConfigError::new("shards", shards, "must be at least 1"));
        }
        if shards > self.count {
            let rule = format!(
                "must be at most the count, {}, so that every shard gets a call",
                self.count
            );
            return Err(ConfigError::new("shards", shards, rule));
        }
        if shard >= shards {
            let rule = format!("must be below the number of shards, {shards}");
            return Err(ConfigError::new("shard", shard, rule));
        }
        let count = self.count / shards + u32::from(shard < self.count % shards);
        Ok(Self { count, ..*self })
    }
}

impl fmt::Display for Rate {
    /// Prints the canonical form, such as `10/s`, `2/500ms` or `1/1.5s`; see
    /// the [module docs](crate::rate#printing).
    ///
    /// ```
    /// use tower_limits::Rate;
    ///
    /// for text in ["10/s", "100/m", "5000/h", "2/500ms", "1/1.5s", "7/2d", "1/1.001s"] {
    ///     assert_eq!(text.parse::<Rate>()?.to_string(), text);
    /// }
    /// assert_eq!("1/90s".parse::<Rate>()?.to_string(), "1/1.5m");
    /// assert_eq!("1/0.1s".parse::<Rate>()?.to_string(), "1/100ms");
    /// assert_eq!("10/ 1 Second ".parse::<Rate>()?.to_string(), "10/s");
    /// # Ok::<(), tower_limits::rate::ParseRateError>(())
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/", self.count)?;
        let nanos = self.per.as_nanos();
        let scale = 10u128.pow(DISPLAY_DECIMALS);
        // `ns` always matches: nanos >= 1 and any integer is exact in ns.
        let (name, unit) = UNITS
            .into_iter()
            .find(|&(_, unit)| nanos >= unit && (nanos * scale).is_multiple_of(unit))
            .unwrap_or(("ns", 1));
        let whole = nanos / unit;
        let mut fraction = (nanos % unit) * scale / unit;
        if whole == 1 && fraction == 0 {
            return f.write_str(name);
        }
        write!(f, "{whole}")?;
        if fraction != 0 {
            let mut digits = DISPLAY_DECIMALS as usize;
            while fraction.is_multiple_of(10) {
                fraction /= 10;
                digits -= 1;
            }
            write!(f, ".{fraction:0digits$}")?;
        }
        f.write_str(name)
    }
}

impl FromStr for Rate {
    type Err = ParseRateError;

    /// Parses a rate such as `10/s` or `2/500ms`; see the
    /// [module docs](crate::rate#grammar) for the grammar.
    ///
    /// ```
    /// use std::str::FromStr;
    /// use std::time::Duration;
    /// use tower_limits::Rate;
    ///
    /// let rate = Rate::from_str("1/1.5s")?;
    /// assert_eq!(rate.per(), Duration::from_millis(1500));
    /// assert!(Rate::from_str("1.5/s").is_err());
    /// # Ok::<(), tower_limits::rate::ParseRateError>(())
    /// ```
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        parse(input).map_err(|reason| ParseRateError {
            input: input.to_owned(),
            reason,
        })
    }
}

impl TryFrom<&str> for Rate {
    type Error = ParseRateError;

    /// The same as [`str::parse`].
    ///
    /// ```
    /// use tower_limits::Rate;
    ///
    /// let rate = Rate::try_from("5000/h")?;
    /// assert_eq!(rate, Rate::per_hour(5000)?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn try_from(input: &str) -> Result<Self, Self::Error> {
        input.parse()
    }
}

/// A string that is not a valid [`Rate`].
///
/// The message quotes the input and the part that is wrong, and says what
/// was expected:
///
/// ```
/// use tower_limits::Rate;
///
/// let error = "0/s".parse::<Rate>().unwrap_err();
/// assert_eq!(error.to_string(), r#"invalid rate "0/s": the count must be at least 1"#);
///
/// let error = "abc".parse::<Rate>().unwrap_err();
/// assert_eq!(
///     error.to_string(),
///     r#"invalid rate "abc": expected <count>/<period>, such as 10/s or 100/m"#
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseRateError {
    input: String,
    reason: Reason,
}

impl ParseRateError {
    /// The string that failed to parse, exactly as given.
    ///
    /// ```
    /// use tower_limits::Rate;
    ///
    /// let error = " 10/x ".parse::<Rate>().unwrap_err();
    /// assert_eq!(error.input(), " 10/x ");
    /// ```
    pub fn input(&self) -> &str {
        &self.input
    }

    /// Which part of the rate is wrong.
    ///
    /// ```
    /// use tower_limits::Rate;
    /// use tower_limits::rate::ParseRateErrorKind;
    ///
    /// let kind = |text: &str| text.parse::<Rate>().unwrap_err().kind();
    /// assert_eq!(kind("10 per second"), ParseRateErrorKind::Format);
    /// assert_eq!(kind("0/s"), ParseRateErrorKind::Count);
    /// assert_eq!(kind("1/0s"), ParseRateErrorKind::Period);
    /// assert_eq!(kind("1/5"), ParseRateErrorKind::Unit);
    /// ```
    pub fn kind(&self) -> ParseRateErrorKind {
        match self.reason {
            Reason::NoSlash | Reason::ExtraSlash(_) => ParseRateErrorKind::Format,
            Reason::MissingCount
            | Reason::NotACount(_)
            | Reason::ZeroCount
            | Reason::CountTooLarge(_) => ParseRateErrorKind::Count,
            Reason::MissingPeriod
            | Reason::SignedPeriod(_)
            | Reason::NotANumber(_)
            | Reason::Exponent(_)
            | Reason::ZeroPeriod(_)
            | Reason::SubNanosecond(_)
            | Reason::PeriodTooLong(_) => ParseRateErrorKind::Period,
            Reason::MissingUnit(_) | Reason::UnknownUnit(_) => ParseRateErrorKind::Unit,
        }
    }
}

impl fmt::Display for ParseRateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid rate {:?}: ", self.input)?;
        match &self.reason {
            Reason::NoSlash => f.write_str("expected <count>/<period>, such as 10/s or 100/m"),
            Reason::ExtraSlash(rest) => write!(
                f,
                "unexpected {rest:?} after the period (a rate has exactly one \"/\")"
            ),
            Reason::MissingCount => {
                f.write_str("missing the count before \"/\" (such as the 10 in 10/s)")
            }
            Reason::NotACount(count) => write!(
                f,
                "the count {count:?} is not a whole number (write digits only, such as 10)"
            ),
            Reason::ZeroCount => f.write_str("the count must be at least 1"),
            Reason::CountTooLarge(count) => {
                write!(f, "the count {count:?} is too large (at most {})", u32::MAX)
            }
            Reason::MissingPeriod => {
                f.write_str("missing the period after \"/\" (such as s, m or 500ms)")
            }
            Reason::SignedPeriod(period) => write!(
                f,
                "the period {period:?} has a sign (write it without one, such as 1.5s)"
            ),
            Reason::NotANumber(number) => write!(
                f,
                "the period's number {number:?} is not a decimal number (such as 500 or 1.5)"
            ),
            Reason::Exponent(period) => write!(
                f,
                "the period {period:?} has an exponent, which is not supported \
                 (write the number out, such as 1000s)"
            ),
            Reason::ZeroPeriod(period) => {
                write!(f, "the period {period:?} must be longer than zero")
            }
            Reason::SubNanosecond(period) => write!(
                f,
                "the period {period:?} is not a whole number of nanoseconds"
            ),
            Reason::PeriodTooLong(period) => write!(
                f,
                "the period {period:?} is too long (at most {} s)",
                u64::MAX
            ),
            Reason::MissingUnit(number) => {
                write!(f, "missing the unit after {number:?} ({EXPECTED_UNITS})")
            }
            Reason::UnknownUnit(unit) => write!(f, "unknown unit {unit:?} ({EXPECTED_UNITS})"),
        }
    }
}

impl std::error::Error for ParseRateError {}

/// Which part of a rate string is wrong; see [`ParseRateError::kind`].
///
/// ```
/// use tower_limits::Rate;
/// use tower_limits::rate::ParseRateErrorKind;
///
/// let error = "10/fortnight".parse::<Rate>().unwrap_err();
/// assert_eq!(error.kind(), ParseRateErrorKind::Unit);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ParseRateErrorKind {
    /// Not of the form `<count>/<period>`: empty, no `/`, or more than one.
    Format,
    /// The count is missing, not a whole number, zero or too large.
    Count,
    /// The period is missing, has a malformed number, is zero, is not a whole
    /// number of nanoseconds, or is longer than [`Duration::MAX`].
    Period,
    /// The unit is missing or unknown.
    Unit,
}

/// What exactly is wrong, with the offending part.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reason {
    NoSlash,
    ExtraSlash(String),
    MissingCount,
    NotACount(String),
    ZeroCount,
    CountTooLarge(String),
    MissingPeriod,
    SignedPeriod(String),
    NotANumber(String),
    Exponent(String),
    ZeroPeriod(String),
    SubNanosecond(String),
    PeriodTooLong(String),
    MissingUnit(String),
    UnknownUnit(String),
}

fn parse(input: &str) -> Result<Rate, Reason> {
    let (count, period) = input.trim().split_once('/').ok_or(Reason::NoSlash)?;
    let (count, period) = (count.trim(), period.trim());
    if let Some(at) = period.find('/') {
        return Err(Reason::ExtraSlash(period[at..].to_owned()));
    }
    let count = parse_count(count)?;
    let per = parse_period(period)?;
    Ok(Rate { count, per })
}

fn parse_count(count: &str) -> Result<u32, Reason> {
    if count.is_empty() {
        return Err(Reason::MissingCount);
    }
    if !count.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(Reason::NotACount(count.to_owned()));
    }
    match count.parse::<u32>() {
        Ok(0) => Err(Reason::ZeroCount),
        Ok(count) => Ok(count),
        // All digits, so the only failure is overflow.
        Err(_) => Err(Reason::CountTooLarge(count.to_owned())),
    }
}

fn parse_period(period: &str) -> Result<Duration, Reason> {
    if period.is_empty() {
        return Err(Reason::MissingPeriod);
    }
    if period.starts_with(['+', '-']) {
        return Err(Reason::SignedPeriod(period.to_owned()));
    }
    // Digits and dots are ASCII, so the first other byte is a char boundary.
    let split = period
        .bytes()
        .position(|byte| !(byte.is_ascii_digit() || byte == b'.'))
        .unwrap_or(period.len());
    let (number, unit) = (&period[..split], period[split..].trim_start());
    let (whole, fraction) = match number.split_once('.') {
        None if number.is_empty() => ("1", ""),
        None => (number, ""),
        Some((whole, fraction))
            if !whole.is_empty() && !fraction.is_empty() && !fraction.contains('.') =>
        {
            (whole, fraction)
        }
        Some(_) => return Err(Reason::NotANumber(number.to_owned())),
    };
    if unit.is_empty() {
        return Err(Reason::MissingUnit(number.to_owned()));
    }
    let Some(unit_nanos) = unit_nanos(unit) else {
        let mut chars = unit.chars();
        let exponent = !number.is_empty()
            && matches!(chars.next(), Some('e' | 'E'))
            && matches!(chars.next(), Some('0'..='9' | '+' | '-'));
        return Err(if exponent {
            Reason::Exponent(period.to_owned())
        } else {
            Reason::UnknownUnit(unit.to_owned())
        });
    };
    match period_nanos(whole, fraction, unit_nanos) {
        Nanos::Exact(0) => Err(Reason::ZeroPeriod(period.to_owned())),
        Nanos::Exact(nanos) => {
            duration_from_nanos(nanos).ok_or_else(|| Reason::PeriodTooLong(period.to_owned()))
        }
        Nanos::Fractional => Err(Reason::SubNanosecond(period.to_owned())),
        Nanos::TooLarge => Err(Reason::PeriodTooLong(period.to_owned())),
    }
}

/// The length of one `unit`, in nanoseconds.
fn unit_nanos(unit: &str) -> Option<u128> {
    let short = match unit {
        "ns" => Some(1),
        "us" | "µs" | "μs" => Some(1_000),
        "ms" => Some(1_000_000),
        "s" => Some(NANOS_PER_SEC),
        "m" => Some(60 * NANOS_PER_SEC),
        "h" => Some(3_600 * NANOS_PER_SEC),
        "d" => Some(86_400 * NANOS_PER_SEC),
        _ => None,
    };
    if short.is_some() {
        return short;
    }
    // Long forms, in any case. No long form is longer than 12 bytes.
    if unit.len() > 12 || !unit.is_ascii() {
        return None;
    }
    let unit = unit.to_ascii_lowercase();
    let singular = unit.strip_suffix('s').unwrap_or(&unit);
    match singular {
        "nanosecond" => Some(1),
        "microsecond" => Some(1_000),
        "millisecond" => Some(1_000_000),
        "sec" | "second" => Some(NANOS_PER_SEC),
        "min" | "minute" => Some(60 * NANOS_PER_SEC),
        "hr" | "hour" => Some(3_600 * NANOS_PER_SEC),
        "day" => Some(86_400 * NANOS_PER_SEC),
        _ => None,
    }
}

/// The outcome of converting a decimal period to nanoseconds.
enum Nanos {
    Exact(u128),
    /// Not a whole number of nanoseconds.
    Fractional,
    /// Past anything a `Duration` holds.
    TooLarge,
}

/// `whole.fraction` units in nanoseconds, computed exactly on the digits.
///
/// `whole` is a non-empty string of ASCII digits, `fraction` a possibly
/// empty one.
fn period_nanos(whole: &str, fraction: &str, unit_nanos: u128) -> Nanos {
    // A Duration holds < 2^64 s < 10^29 ns, so 30 significant integer digits
    // are already too many (and u128 holds them).
    let whole = whole.trim_start_matches('0');
    if whole.len() > 30 {
        return Nanos::TooLarge;
    }
    // At most 30 digits (or none, for a zero): fits a u128.
    let whole: u128 = whole.parse().unwrap_or(0);
    let Some(mut nanos) = whole.checked_mul(unit_nanos) else {
        return Nanos::TooLarge;
    };
    let fraction = fraction.trim_end_matches('0');
    if !fraction.is_empty() {
        // With no trailing zero, `fraction / 10^len` units is a whole number
        // of nanoseconds only if 2^len or 5^len divides the unit; no unit
        // (at most a day, 2^16 * 3^3 * 5^11 ns) allows len > 16.
        if fraction.len() > 16 {
            return Nanos::Fractional;
        }
        let digits: u128 = fraction.parse().unwrap_or(0);
        let scale = 10u128.pow(fraction.len() as u32);
        // digits < 10^16 and unit_nanos < 10^14: no overflow.
        let scaled = digits * unit_nanos;
        if !scaled.is_multiple_of(scale) {
            return Nanos::Fractional;
        }
        let Some(sum) = nanos.checked_add(scaled / scale) else {
            return Nanos::TooLarge;
        };
        nanos = sum;
    }
    Nanos::Exact(nanos)
}

fn duration_from_nanos(nanos: u128) -> Option<Duration> {
    let secs = u64::try_from(nanos / NANOS_PER_SEC).ok()?;
    // The remainder is below 10^9, so it fits a u32.
    let subsec = (nanos % NANOS_PER_SEC) as u32;
    Some(Duration::new(secs, subsec))
}

#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl serde::Serialize for Rate {
    /// Serializes as the canonical string, such as `"100/m"`.
    ///
    /// ```
    /// use tower_limits::Rate;
    ///
    /// let json = serde_json::to_string(&Rate::per_minute(100)?)?;
    /// assert_eq!(json, r#""100/m""#);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl<'de> serde::Deserialize<'de> for Rate {
    /// Deserializes from a string such as `"100/m"`; a bad string fails with
    /// the [`ParseRateError`] message.
    ///
    /// ```
    /// use tower_limits::Rate;
    ///
    /// let rate: Rate = serde_json::from_str(r#""2/500ms""#)?;
    /// assert_eq!(rate.to_string(), "2/500ms");
    ///
    /// let error = serde_json::from_str::<Rate>(r#""10/x""#).unwrap_err();
    /// assert!(error.to_string().contains(r#"unknown unit "x""#));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RateVisitor;

        impl serde::de::Visitor<'_> for RateVisitor {
            type Value = Rate;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a rate string such as \"10/s\" or \"100/m\"")
            }

            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Rate, E> {
                value.parse().map_err(E::custom)
            }
        }

        deserializer.deserialize_str(RateVisitor)
    }
}
