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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RetryAfter {
    /// Retry after this long.
    Delay(Duration),
    /// Retry at this date.
    Date(SystemTime),
}

impl RetryAfter {
    /// Reads raw header bytes (any bytes; never panics).
    ///
    /// # Errors
    ///
    /// [`InvalidHeader`] when the bytes are neither delay-seconds nor an
    /// HTTP-date.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Self, InvalidHeader> {
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
    pub(crate) fn wait_from(&self, now: SystemTime) -> Duration {
        match *self {
            Self::Delay(delay) => delay,
            Self::Date(date) => date.duration_since(now).unwrap_or(Duration::ZERO),
        }
    }

    /// The header value a server sends for a wait of `wait`: whole seconds,
    /// rounded up, so a positive wait is never advertised as `0`.
    pub(crate) fn header_value(wait: Duration) -> HeaderValue {
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
