//! The `RateLimit` and `RateLimit-Policy` fields of
//! draft-ietf-httpapi-ratelimit-headers: [`RateLimitStatus`] and
//! [`RateLimitPolicy`].

use std::fmt::{self, Write as _};
use std::time::Duration;

use http::HeaderValue;

use super::error::InvalidHeader;
use super::retry_after::whole_seconds_up;
use super::sf::{self, Member};
use crate::error::ConfigError;
use crate::quota_status::QuotaStatus;

/// The `RateLimit` field (lowercase, as `http` names headers).
pub(crate) const RATELIMIT: &str = "ratelimit";
/// The `RateLimit-Policy` field.
pub(crate) const RATELIMIT_POLICY: &str = "ratelimit-policy";

/// One item of a `RateLimit` field: how much of a quota policy is left now
/// (`r`), and how long until more of it is made available (`t`):
/// `"default";r=0;t=10`.
///
/// `t` follows draft-ietf-httpapi-ratelimit-headers (-10 onwards): the
/// number of seconds until quota beyond `r` is available again, the span
/// within which a client can use no more than `r`; not the time until the
/// whole quota is back. It means the same on every response: with `r=0`
/// (a `429`, say), the time until the next unit is available.
///
/// Also read from the draft-07 dictionary (`limit=10, remaining=0,
/// reset=5`), whose status has an empty name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RateLimitStatus {
    name: String,
    remaining: u64,
    reset: Option<Duration>,
}

impl RateLimitStatus {
    /// A status for the policy `name`: `remaining` units left, and more
    /// after `reset` (none to come: `None`).
    pub(crate) fn new(name: impl Into<String>, remaining: u64, reset: Option<Duration>) -> Self {
        Self {
            name: name.into(),
            remaining,
            reset,
        }
    }

    /// Reads a `RateLimit` field value: a list of `"name";r=..;t=..` items,
    /// or the draft-07 dictionary `limit=.., remaining=.., reset=..`.
    ///
    /// # Errors
    ///
    /// [`InvalidHeader`] when the value is not a structured list, or an item
    /// lacks a non-negative `r`, or has a negative or non-integer `t`.
    pub(crate) fn parse_list(value: &str) -> Result<Vec<Self>, InvalidHeader> {
        let invalid = |reason| InvalidHeader::new(RATELIMIT, value.as_bytes(), reason);
        let members = sf::parse_members(value).map_err(invalid)?;
        if !members.is_empty() && dictionary(&members) {
            return draft_07(&members)
                .map(|status| vec![status])
                .map_err(invalid);
        }
        members
            .iter()
            .map(status_item)
            .collect::<Result<_, _>>()
            .map_err(invalid)
    }

    /// The quota policy's name (empty for the older header forms).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Units left in the current window (`r`).
    pub(crate) fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Time until more than [`remaining`](RateLimitStatus::remaining) is
    /// available (`t`), if given.
    pub(crate) fn reset(&self) -> Option<Duration> {
        self.reset
    }

    /// The `RateLimit` header value listing `statuses`; `None` when a name
    /// cannot be sent as a structured-field string.
    pub(crate) fn header_value(statuses: &[Self]) -> Option<HeaderValue> {
        list_value(statuses)
    }
}

impl fmt::Display for RateLimitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_string(f, &self.name)?;
        write!(f, ";r={}", self.remaining)?;
        if let Some(reset) = self.reset {
            write!(f, ";t={}", whole_seconds_up(reset))?;
        }
        Ok(())
    }
}

/// One item of a `RateLimit-Policy` field: a quota of `q` units per window
/// of `w` seconds (`"default";q=100;w=60`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RateLimitPolicy {
    name: String,
    quota: u64,
    window: Option<Duration>,
}

impl RateLimitPolicy {
    /// The policy `name` of a limiter's quota, as
    /// [`Limiter::quota_status`](crate::Limiter::quota_status) reports it:
    /// what [`TooManyRequestsLayer::advertise`](super::TooManyRequestsLayer::advertise)
    /// sends, so the policy is never written by hand beside the limiter.
    ///
    /// The field counts whole seconds: a window that is not a whole number
    /// of seconds is rounded up, and its quota scaled to the longer window
    /// and rounded down, so the policy never states a higher rate than the
    /// limiter's (a GCRA of 100 a second, one at a time, is
    /// `q=100;w=1`).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if the name is not printable ASCII, or the quota is
    /// empty (a limit of 0, or a window of zero).
    pub(crate) fn for_quota(
        name: impl Into<String>,
        quota: &QuotaStatus,
    ) -> Result<Self, ConfigError> {
        let name = checked_name(name.into())?;
        let (limit, window) = (quota.limit(), quota.window());
        if limit == 0 || window.is_zero() {
            let rule = "must be at least 1 unit per window longer than zero";
            return Err(ConfigError::new(
                "quota",
                format!("{limit} per {window:?}"),
                rule,
            ));
        }
        let seconds = whole_seconds_up(window).max(1);
        let nanos = u128::from(seconds) * 1_000_000_000;
        let scaled = u128::from(limit).saturating_mul(nanos) / window.as_nanos();
        Ok(Self {
            name,
            quota: u64::try_from(scaled).unwrap_or(u64::MAX),
            window: Some(Duration::from_secs(seconds)),
        })
    }

    /// Reads a `RateLimit-Policy` field value.
    ///
    /// # Errors
    ///
    /// [`InvalidHeader`] when the value is not a structured list, or an item
    /// lacks a non-negative integer `q`, or has a bad `w`.
    pub(crate) fn parse_list(value: &str) -> Result<Vec<Self>, InvalidHeader> {
        let invalid = |reason| InvalidHeader::new(RATELIMIT_POLICY, value.as_bytes(), reason);
        let members = sf::parse_members(value).map_err(invalid)?;
        members
            .iter()
            .map(policy_item)
            .collect::<Result<_, _>>()
            .map_err(invalid)
    }

    /// The policy's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Units allowed per window (`q`).
    pub(crate) fn quota(&self) -> u64 {
        self.quota
    }

    /// The window (`w`), if given.
    pub(crate) fn window(&self) -> Option<Duration> {
        self.window
    }

    /// The `RateLimit-Policy` header value listing `policies`.
    pub(crate) fn header_value(policies: &[Self]) -> Option<HeaderValue> {
        list_value(policies)
    }
}

impl fmt::Display for RateLimitPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_string(f, &self.name)?;
        write!(f, ";q={}", self.quota)?;
        if let Some(window) = self.window {
            write!(f, ";w={}", whole_seconds_up(window))?;
        }
        Ok(())
    }
}

/// `name`, if it can be sent as a structured-field string.
pub(crate) fn checked_name(name: String) -> Result<String, ConfigError> {
    if !name.bytes().all(|byte| (0x20..=0x7e).contains(&byte)) {
        return Err(ConfigError::new("name", name, "must be printable ASCII"));
    }
    Ok(name)
}

/// Whether every member is a `key=value` pair of a dictionary.
fn dictionary(members: &[Member]) -> bool {
    members.iter().all(|member| {
        member
            .key
            .as_ref()
            .is_some_and(|key| Some(key.as_str()) != member.item.as_name())
    })
}

/// The draft-07 form: `limit=.., remaining=.., reset=..`.
fn draft_07(members: &[Member]) -> Result<RateLimitStatus, &'static str> {
    let value = |name: &str| {
        members
            .iter()
            .rev()
            .find(|member| member.key.as_deref() == Some(name))
            .map(|member| {
                member
                    .item
                    .as_count()
                    .ok_or("a count must be a non-negative integer")
            })
            .transpose()
    };
    let remaining = value("remaining")?.ok_or("missing `remaining`")?;
    let reset = value("reset")?.map(Duration::from_secs);
    Ok(RateLimitStatus::new("", remaining, reset))
}

fn status_item(member: &Member) -> Result<RateLimitStatus, &'static str> {
    let name = member
        .item
        .as_name()
        .ok_or("an item must be a policy name")?;
    let remaining = member
        .param("r")
        .ok_or("missing `r` (remaining)")?
        .as_count()
        .ok_or("`r` must be a non-negative integer")?;
    let reset = seconds_param(member, "t")?;
    Ok(RateLimitStatus::new(name, remaining, reset))
}

fn policy_item(member: &Member) -> Result<RateLimitPolicy, &'static str> {
    let name = member
        .item
        .as_name()
        .ok_or("an item must be a policy name")?;
    let quota = member
        .param("q")
        .ok_or("missing `q` (quota)")?
        .as_count()
        .ok_or("`q` must be a non-negative integer")?;
    let window = seconds_param(member, "w")?;
    Ok(RateLimitPolicy {
        name: name.to_owned(),
        quota,
        window,
    })
}

/// An optional parameter counting whole seconds.
fn seconds_param(member: &Member, name: &str) -> Result<Option<Duration>, &'static str> {
    member
        .param(name)
        .map(|item| {
            item.as_count()
                .map(Duration::from_secs)
                .ok_or("a number of seconds must be a non-negative integer")
        })
        .transpose()
}

/// Writes `name` as a structured-field string.
fn write_string(f: &mut fmt::Formatter<'_>, name: &str) -> fmt::Result {
    f.write_char('"')?;
    for c in name.chars() {
        if matches!(c, '"' | '\\') {
            f.write_char('\\')?;
        }
        f.write_char(c)?;
    }
    f.write_char('"')
}

/// `items` joined by `, `, as a header value.
fn list_value<T: fmt::Display>(items: &[T]) -> Option<HeaderValue> {
    let text = items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    HeaderValue::try_from(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_fields_read_back() {
        let name = "a \"quoted\" \\ name";
        let status = RateLimitStatus::new(name, 4, Some(Duration::from_millis(2_500)));
        let value = RateLimitStatus::header_value(std::slice::from_ref(&status));
        let read = RateLimitStatus::parse_list(value.unwrap().to_str().unwrap());
        // `t` counts whole seconds, rounded up.
        let expected = RateLimitStatus::new(name, 4, Some(Duration::from_secs(3)));
        assert_eq!(read, Ok(vec![expected]));

        let quota = QuotaStatus::new(100, Duration::from_secs(60), 7, None);
        let policy = RateLimitPolicy::for_quota("default", &quota).unwrap();
        let value = RateLimitPolicy::header_value(std::slice::from_ref(&policy));
        let read = RateLimitPolicy::parse_list(value.unwrap().to_str().unwrap());
        assert_eq!(read, Ok(vec![policy]));
    }
}
