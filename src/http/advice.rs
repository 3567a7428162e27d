//! [`Advice`]: what a response's status and headers say about when the next
//! request may go.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::RETRY_AFTER;
use http::{HeaderMap, Response, StatusCode};

use super::error::InvalidHeader;
use super::ratelimit::{RATELIMIT, RATELIMIT_POLICY, RateLimitPolicy, RateLimitStatus};
use super::retry_after::{RetryAfter, saturating_seconds};
use crate::rate::Rate;

const RATELIMIT_REMAINING: &str = "ratelimit-remaining";
const RATELIMIT_RESET: &str = "ratelimit-reset";
const X_RATELIMIT_REMAINING: &str = "x-ratelimit-remaining";
const X_RATELIMIT_RESET: &str = "x-ratelimit-reset";
/// tower_governor's wait, in whole seconds, beside `Retry-After`.
const X_RATELIMIT_AFTER: &str = "x-ratelimit-after";
/// gRPC server pushback (gRFC A6), in milliseconds.
const GRPC_RETRY_PUSHBACK_MS: &str = "grpc-retry-pushback-ms";
/// gRPC's `RESOURCE_EXHAUSTED`: a gRPC 429.
const GRPC_RESOURCE_EXHAUSTED: &str = "8";
/// gRPC's `UNAVAILABLE`: a gRPC 503.
const GRPC_UNAVAILABLE: &str = "14";

/// An `X-RateLimit-Reset` at or above this is a unix time in seconds
/// (2001-09-09), not a delay: no API resets a quota 31 years from now.
const UNIX_SECONDS_FROM: u64 = 1_000_000_000;
/// At or above this, a unix time in milliseconds.
const UNIX_MILLIS_FROM: u64 = 1_000_000_000_000;

/// What a response says about when the next request may go.
///
/// Read by [`Advice::from_parts`], in this order:
///
/// 1. On `429 Too Many Requests` and `503 Service Unavailable`, a valid
///    `Retry-After` (delay-seconds or an HTTP-date) decides; without one,
///    tower_governor's `X-RateLimit-After` (seconds), then gRPC's
///    `grpc-retry-pushback-ms`. A gRPC response with `grpc-status: 8`
///    (`RESOURCE_EXHAUSTED`) in its headers counts as a 429, and one with
///    `grpc-status: 14` (`UNAVAILABLE`) as a 503. A wait of zero on a
///    refusal (`Retry-After: 0`, as tower_governor sends for any wait
///    under a second) is still a refusal: `Wait(ZERO)`, which
///    [`FeedbackLayer`](super::FeedbackLayer) turns into a short pause.
/// 2. Otherwise, on any status, an exhausted quota in the rate-limit
///    headers asks for a wait until it resets (the longest when several
///    say so). On a 429 every advertised reset counts, exhausted or not.
///    * `RateLimit` (`"default";r=0;t=10`); an item with `r=0` and no `t`
///      waits for the window `w` of the `RateLimit-Policy` item of the same
///      name;
///    * the draft-06 `RateLimit-Remaining: 0` with `RateLimit-Reset`
///      (delay-seconds), and the draft-07 `RateLimit: remaining=0, reset=10`;
///    * the common `X-RateLimit-Remaining: 0` with `X-RateLimit-Reset`,
///      read with a heuristic, as APIs disagree on its unit: a value below
///      10⁹ is a delay in seconds, one below 10¹² a unix time in seconds, and
///      a larger one a unix time in milliseconds (fractions allowed).
/// 3. A 429 or 503 with none of these is [`Advice::BackOff`], and so is an
///    exhausted quota that says nothing of when it resets
///    (`X-RateLimit-Remaining: 0` alone): the next request would be refused.
///    A reset already past asks for no wait: [`Advice::Proceed`], or
///    `Wait(ZERO)` on a 429.
///
/// A malformed header is ignored with a `tracing` warning; no header value
/// can make it panic.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::{HeaderMap, HeaderValue, StatusCode};
/// use tower_limits::http::Advice;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("retry-after", HeaderValue::from_static("30"));
/// let advice = Advice::from_parts(StatusCode::TOO_MANY_REQUESTS, &headers, SystemTime::now());
/// assert_eq!(advice, Advice::Wait(Duration::from_secs(30)));
///
/// let mut headers = HeaderMap::new();
/// headers.insert("ratelimit", HeaderValue::from_static("\"default\";r=0;t=5"));
/// let advice = Advice::from_parts(StatusCode::OK, &headers, SystemTime::now());
/// assert_eq!(advice, Advice::Wait(Duration::from_secs(5))); // quota used up: pause early
///
/// let advice = Advice::from_parts(StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new(), SystemTime::now());
/// assert_eq!(advice, Advice::BackOff);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// Nothing to wait for.
    Proceed,
    /// Wait this long before the next request.
    Wait(Duration),
    /// Throttled without a usable hint: back off.
    BackOff,
}

impl Advice {
    /// The advice of `response`, now.
    ///
    /// ```
    /// use http::{Response, StatusCode};
    /// use tower_limits::http::Advice;
    ///
    /// let response = Response::builder().status(StatusCode::OK).body(()).unwrap();
    /// assert_eq!(Advice::from_response(&response), Advice::Proceed);
    /// ```
    pub fn from_response<B>(response: &Response<B>) -> Self {
        Self::from_parts(response.status(), response.headers(), SystemTime::now())
    }

    /// The advice of a response with `status` and `headers`, with `now` the
    /// current wall-clock time (for HTTP-dates and unix times).
    ///
    /// ```
    /// use std::time::{Duration, SystemTime, UNIX_EPOCH};
    /// use http::{HeaderMap, HeaderValue, StatusCode};
    /// use tower_limits::http::Advice;
    ///
    /// let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    /// let mut headers = HeaderMap::new();
    /// headers.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
    /// headers.insert("x-ratelimit-reset", HeaderValue::from_static("1700000042")); // a unix time
    /// let advice = Advice::from_parts(StatusCode::OK, &headers, now);
    /// assert_eq!(advice, Advice::Wait(Duration::from_secs(42)));
    /// ```
    pub fn from_parts(status: StatusCode, headers: &HeaderMap, now: SystemTime) -> Self {
        let throttled = status == StatusCode::TOO_MANY_REQUESTS
            || grpc_status(headers, GRPC_RESOURCE_EXHAUSTED);
        let unavailable =
            status == StatusCode::SERVICE_UNAVAILABLE || grpc_status(headers, GRPC_UNAVAILABLE);
        if (throttled || unavailable)
            && let Some(wait) = refusal_wait(headers, now)
        {
            return Self::Wait(wait);
        }
        let waits = [
            ratelimit_wait(headers, throttled),
            remaining_reset_wait(
                headers,
                RATELIMIT_REMAINING,
                RATELIMIT_RESET,
                throttled,
                |reset| Ok(Duration::from_secs(seconds(reset)?)),
            ),
            remaining_reset_wait(
                headers,
                X_RATELIMIT_REMAINING,
                X_RATELIMIT_RESET,
                throttled,
                |reset| x_reset_wait(reset, now),
            ),
        ];
        match waits.into_iter().flatten().max() {
            Some(wait) if throttled || !wait.is_zero() => Self::Wait(wait),
            Some(_) => Self::Proceed, // the quota has already reset
            None if throttled || unavailable || exhausted(headers) => Self::BackOff,
            None => Self::Proceed,
        }
    }
}

/// The quota the upstream states in `RateLimit-Policy`: the slowest of
/// its policies with a window, as a rate.
pub(crate) fn stated_quota(headers: &HeaderMap) -> Option<Rate> {
    let policies = read(headers, RATELIMIT_POLICY, RateLimitPolicy::parse_list)?;
    policies
        .iter()
        .filter_map(|policy| Rate::new(u32::try_from(policy.quota()).ok()?, policy.window()?).ok())
        .min_by(|a, b| a.as_per_second_f64().total_cmp(&b.as_per_second_f64()))
}

/// Whether the response is a trailers-only gRPC response with `status` in
/// its headers (as [`TooManyRequests`](super::TooManyRequests) answers).
fn grpc_status(headers: &HeaderMap, status: &str) -> bool {
    headers
        .get("grpc-status")
        .is_some_and(|value| value == status)
}

/// The wait a refusal names: `Retry-After`, else `X-RateLimit-After`, else
/// `grpc-retry-pushback-ms`.
fn refusal_wait(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    read(headers, RETRY_AFTER.as_str(), str::parse::<RetryAfter>)
        .map(|retry_after| retry_after.wait_from(now))
        .or_else(|| {
            read(headers, X_RATELIMIT_AFTER, count(X_RATELIMIT_AFTER)).map(Duration::from_secs)
        })
        .or_else(|| {
            read(
                headers,
                GRPC_RETRY_PUSHBACK_MS,
                count(GRPC_RETRY_PUSHBACK_MS),
            )
            .map(Duration::from_millis)
        })
}

/// Whether a quota header says nothing remains (whether or not it says
/// when it resets).
fn exhausted(headers: &HeaderMap) -> bool {
    let none_left = |name| read(headers, name, count(name)) == Some(0);
    none_left(RATELIMIT_REMAINING)
        || none_left(X_RATELIMIT_REMAINING)
        || read(headers, RATELIMIT, RateLimitStatus::parse_list)
            .is_some_and(|statuses| statuses.iter().any(|status| status.remaining() == 0))
}

/// The header `name`, all its lines joined by `, ` (a list field), read with
/// `parse`; `None` when absent or malformed (with a warning).
fn read<T>(
    headers: &HeaderMap,
    name: &'static str,
    parse: impl FnOnce(&str) -> Result<T, InvalidHeader>,
) -> Option<T> {
    let mut lines = headers.get_all(name).iter().peekable();
    lines.peek()?;
    let mut joined = String::new();
    for line in lines {
        let Ok(text) = line.to_str() else {
            let error = InvalidHeader::new(name, line.as_bytes(), "not visible ASCII");
            tracing::warn!(%error, "ignoring a malformed rate-limit header");
            return None;
        };
        if !joined.is_empty() {
            joined.push_str(", ");
        }
        joined.push_str(text);
    }
    parse(&joined)
        .inspect_err(|error| tracing::warn!(%error, "ignoring a malformed rate-limit header"))
        .ok()
}

/// The wait the `RateLimit` field asks for.
fn ratelimit_wait(headers: &HeaderMap, throttled: bool) -> Option<Duration> {
    let statuses = read(headers, RATELIMIT, RateLimitStatus::parse_list)?;
    let mut policies = None;
    statuses
        .iter()
        .filter(|status| throttled || status.remaining() == 0)
        .filter_map(|status| {
            status.reset().or_else(|| {
                let policies = policies.get_or_insert_with(|| {
                    read(headers, RATELIMIT_POLICY, RateLimitPolicy::parse_list).unwrap_or_default()
                });
                let policy = policies
                    .iter()
                    .find(|policy| policy.name() == status.name());
                policy.and_then(RateLimitPolicy::window)
            })
        })
        .max()
}

/// The wait a `*-Remaining` / `*-Reset` header pair asks for: the reset,
/// when nothing remains (or the response is a 429).
fn remaining_reset_wait(
    headers: &HeaderMap,
    remaining: &'static str,
    reset: &'static str,
    throttled: bool,
    wait_of: impl FnOnce(&str) -> Result<Duration, &'static str>,
) -> Option<Duration> {
    let exhausted = throttled || read(headers, remaining, count(remaining))? == 0;
    if !exhausted {
        return None;
    }
    read(headers, reset, |value| {
        wait_of(value.trim()).map_err(|reason| InvalidHeader::new(reset, value.as_bytes(), reason))
    })
}

/// A parser of a non-negative integer header named `name`.
fn count(name: &'static str) -> impl FnOnce(&str) -> Result<u64, InvalidHeader> {
    move |value| {
        seconds(value.trim()).map_err(|reason| InvalidHeader::new(name, value.as_bytes(), reason))
    }
}

/// ASCII digits as a number (saturating).
fn seconds(value: &str) -> Result<u64, &'static str> {
    if value.is_empty() || !value.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err("expected a non-negative integer");
    }
    Ok(saturating_seconds(value))
}

/// `X-RateLimit-Reset`: a delay, a unix time in seconds or one in
/// milliseconds (see [`Advice`]), with an optional fraction.
fn x_reset_wait(value: &str, now: SystemTime) -> Result<Duration, &'static str> {
    const EXPECTED: &str = "expected seconds, or a unix time in seconds or milliseconds";
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    let whole = seconds(whole).map_err(|_| EXPECTED)?;
    let nanos = fraction_nanos(fraction).ok_or(EXPECTED)?;
    if whole < UNIX_SECONDS_FROM {
        return Ok(Duration::new(whole, nanos));
    }
    let at = if whole < UNIX_MILLIS_FROM {
        Duration::new(whole, nanos)
    } else {
        Duration::from_millis(whole)
    };
    let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    Ok(at.saturating_sub(since_epoch))
}

/// The nanoseconds of a decimal fraction's digits (`"5"` is half a second).
fn fraction_nanos(digits: &str) -> Option<u32> {
    if !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let padded = format!("{:0<9}", &digits[..digits.len().min(9)]);
    padded.parse().ok()
}
