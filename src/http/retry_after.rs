//! [`RetryAfter`]: the `Retry-After` header of RFC 9110 (section 10.2.3).

use std::str::FromStr;
use std::time::{Duration, SystemTime};

use http::HeaderValue;

use super::error::InvalidHeader;

const NAME: &str = "retry-after";
const EXPECTED: &str = "expected delay-seconds (digits) or an HTTP-date";

/// A `Retry-After` value: a delay in seconds, or an HTTP-date.
///
/// Parsing accepts `delay-seconds` (ASCII digits; values too large for a
/// `u64` saturate, so a cap applies to them like to any other long wait) and
/// the three HTTP-date forms of RFC 9110: IMF-fixdate
/// (`Sun, 06 Nov 1994 08:49:37 GMT`), the obsolete RFC 850 form
/// (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime (`Sun Nov  6 08:49:37 1994`),
/// through the `httpdate` crate. Anything else (a sign, a fraction,
/// non-ASCII bytes, an impossible date) is an [`InvalidHeader`] error.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use tower_limits::http::RetryAfter;
///
/// # fn main() -> Result<(), tower_limits::http::InvalidHeader> {
/// let delay: RetryAfter = "120".parse()?;
/// assert_eq!(delay, RetryAfter::Delay(Duration::from_secs(120)));
///
/// let date: RetryAfter = "Sun, 06 Nov 1994 08:49:37 GMT".parse()?;
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_767); // 10 s earlier
/// assert_eq!(date.wait_from(now), Duration::from_secs(10));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryAfter {
    /// Retry after this long.
    Delay(Duration),
    /// Retry at this date.
    Date(SystemTime),
}

impl RetryAfter {
    /// Reads a header value.
    ///
    /// # Errors
    ///
    /// [`InvalidHeader`] when the value is neither delay-seconds nor an
    /// HTTP-date.
    ///
    /// ```
    /// use http::HeaderValue;
    /// use tower_limits::http::RetryAfter;
    ///
    /// let value = HeaderValue::from_static("Sunday, 06-Nov-94 08:49:37 GMT");
    /// assert!(matches!(RetryAfter::parse(&value), Ok(RetryAfter::Date(_))));
    /// assert!(RetryAfter::parse(&HeaderValue::from_static("1.5")).is_err());
    /// ```
    pub fn parse(value: &HeaderValue) -> Result<Self, InvalidHeader> {
        Self::from_bytes(value.as_bytes())
    }

    /// Reads raw header bytes (any bytes; never panics).
    ///
    /// # Errors
    ///
    /// [`InvalidHeader`] when the bytes are neither delay-seconds nor an
    /// HTTP-date.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::RetryAfter;
    ///
    /// let huge = RetryAfter::from_bytes(b"99999999999999999999999").unwrap();
    /// assert_eq!(huge, RetryAfter::Delay(Duration::from_secs(u64::MAX)));
    /// assert!(RetryAfter::from_bytes(b"\xff\xfe").is_err());
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, InvalidHeader> {
        let invalid = || InvalidHeader::new(NAME, bytes, EXPECTED);
        let text = std::str::from_utf8(bytes).map_err(|_| invalid())?.trim();
        if !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()) {
            return Ok(Self::Delay(Duration::from_secs(saturating_seconds(text))));
        }
        httpdate::parse_http_date(text)
            .map(Self::Date)
            .map_err(|_| invalid())
    }

    /// How long to wait from `now`: the delay, or the time until the date
    /// (zero for a date in the past).
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use tower_limits::http::RetryAfter;
    ///
    /// let past = RetryAfter::Date(SystemTime::UNIX_EPOCH);
    /// assert_eq!(past.wait_from(SystemTime::now()), Duration::ZERO);
    /// ```
    pub fn wait_from(&self, now: SystemTime) -> Duration {
        match *self {
            Self::Delay(delay) => delay,
            Self::Date(date) => date.duration_since(now).unwrap_or(Duration::ZERO),
        }
    }

    /// The header value a server sends for a wait of `wait`: whole seconds,
    /// rounded up, so a positive wait is never advertised as `0`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::RetryAfter;
    ///
    /// assert_eq!(RetryAfter::header_value(Duration::from_millis(1)), "1");
    /// assert_eq!(RetryAfter::header_value(Duration::from_millis(2_001)), "3");
    /// assert_eq!(RetryAfter::header_value(Duration::ZERO), "0");
    /// ```
    pub fn header_value(wait: Duration) -> HeaderValue {
        HeaderValue::from(whole_seconds_up(wait))
    }
}

impl FromStr for RetryAfter {
    type Err = InvalidHeader;

    fn from_str(text: &str) -> Result<Self, InvalidHeader> {
        Self::from_bytes(text.as_bytes())
    }
}

/// Whole seconds in `wait`, rounded up.
pub(crate) fn whole_seconds_up(wait: Duration) -> u64 {
    let seconds = wait.as_secs();
    if wait.subsec_nanos() > 0 {
        seconds.saturating_add(1)
    } else {
        seconds
    }
}

/// ASCII digits as a number, saturating at `u64::MAX` (callers check that
/// every byte is a digit; no byte can make it panic).
pub(crate) fn saturating_seconds(digits: &str) -> u64 {
    digits.bytes().fold(0_u64, |total, digit| {
        let value = u64::from(digit.wrapping_sub(b'0')).min(9);
        total.saturating_mul(10).saturating_add(value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_waits_up_to_whole_seconds() {
        assert_eq!(whole_seconds_up(Duration::from_nanos(1)), 1);
        assert_eq!(whole_seconds_up(Duration::from_secs(2)), 2);
        assert_eq!(whole_seconds_up(Duration::MAX), u64::MAX);
    }

    #[test]
    fn trims_surrounding_whitespace() {
        assert_eq!(
            " 7 ".parse::<RetryAfter>(),
            Ok(RetryAfter::Delay(Duration::from_secs(7)))
        );
    }
}
