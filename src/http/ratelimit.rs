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
///
/// ```
/// use std::time::Duration;
/// use tower_limits::http::RateLimitStatus;
///
/// # fn main() -> Result<(), tower_limits::http::InvalidHeader> {
/// let statuses = RateLimitStatus::parse_list(r#""burst";r=0;t=1, "daily";r=450;t=3600"#)?;
/// assert_eq!(statuses[0].name(), "burst");
/// assert_eq!(statuses[0].remaining(), 0);
/// assert_eq!(statuses[0].reset(), Some(Duration::from_secs(1)));
/// assert_eq!(statuses[1].remaining(), 450);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitStatus {
    name: String,
    remaining: u64,
    reset: Option<Duration>,
}

impl RateLimitStatus {
    /// A status for the policy `name`: `remaining` units left, and more
    /// after `reset` (none to come: `None`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::RateLimitStatus;
    ///
    /// let status = RateLimitStatus::new("default", 0, Some(Duration::from_millis(1_500)));
    /// assert_eq!(status.to_string(), "\"default\";r=0;t=2"); // seconds, rounded up
    /// ```
    pub fn new(name: impl Into<String>, remaining: u64, reset: Option<Duration>) -> Self {
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
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::RateLimitStatus;
    ///
    /// let old = RateLimitStatus::parse_list("limit=100, remaining=0, reset=30").unwrap();
    /// assert_eq!(old, [RateLimitStatus::new("", 0, Some(Duration::from_secs(30)))]);
    /// assert!(RateLimitStatus::parse_list("\"default\";t=10").is_err()); // no `r`
    /// ```
    pub fn parse_list(value: &str) -> Result<Vec<Self>, InvalidHeader> {
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
    ///
    /// ```
    /// use tower_limits::http::RateLimitStatus;
    ///
    /// assert_eq!(RateLimitStatus::new("daily", 3, None).name(), "daily");
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Units left in the current window (`r`).
    ///
    /// ```
    /// use tower_limits::http::RateLimitStatus;
    ///
    /// assert_eq!(RateLimitStatus::new("daily", 3, None).remaining(), 3);
    /// ```
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Time until more than [`remaining`](RateLimitStatus::remaining) is
    /// available (`t`), if given.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::RateLimitStatus;
    ///
    /// let status = RateLimitStatus::new("daily", 3, Some(Duration::from_secs(9)));
    /// assert_eq!(status.reset(), Some(Duration::from_secs(9)));
    /// ```
    pub fn reset(&self) -> Option<Duration> {
        self.reset
    }

    /// The `RateLimit` header value listing `statuses`; `None` when a name
    /// cannot be sent as a structured-field string.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::RateLimitStatus;
    ///
    /// let value = RateLimitStatus::header_value(&[
    ///     RateLimitStatus::new("burst", 0, Some(Duration::from_secs(1))),
    ///     RateLimitStatus::new("daily", 10, Some(Duration::from_secs(60))),
    /// ]);
    /// assert_eq!(value.unwrap(), r#""burst";r=0;t=1, "daily";r=10;t=60"#);
    /// ```
    pub fn header_value(statuses: &[Self]) -> Option<HeaderValue> {
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
///
/// ```
/// use std::time::Duration;
/// use tower_limits::http::RateLimitPolicy;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let policy = RateLimitPolicy::new("default", 100, Duration::from_secs(60))?;
/// assert_eq!(policy.to_string(), "\"default\";q=100;w=60");
///
/// let read = RateLimitPolicy::parse_list(r#""default";q=100;w=60"#)?;
/// assert_eq!(read, [policy]);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitPolicy {
    name: String,
    quota: u64,
    window: Option<Duration>,
}

impl RateLimitPolicy {
    /// A policy named `name` of `quota` units per `window`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if the name is not printable ASCII (it is sent as a
    /// structured-field string), the quota is 0 or the window is shorter
    /// than a second (the field counts whole seconds).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::RateLimitPolicy;
    ///
    /// let error = RateLimitPolicy::new("défaut", 10, Duration::from_secs(1)).unwrap_err();
    /// assert_eq!(error.field(), "name");
    /// let error = RateLimitPolicy::new("burst", 10, Duration::from_millis(10)).unwrap_err();
    /// assert_eq!(error.field(), "window");
    /// ```
    pub fn new(name: impl Into<String>, quota: u64, window: Duration) -> Result<Self, ConfigError> {
        let name = checked_name(name.into())?;
        if quota == 0 {
            return Err(ConfigError::new("quota", quota, "must be at least 1"));
        }
        if window < Duration::from_secs(1) {
            return Err(ConfigError::new("window", window, "must be at least 1s"));
        }
        Ok(Self {
            name,
            quota,
            window: Some(window),
        })
    }

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
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::RateLimitPolicy;
    /// use tower_limits::{Limiter, RateLimiter};
    /// use tower_limits::store::Quota;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let hourly = RateLimiter::builder("api", 1_000, Duration::from_secs(3_600)).build()?;
    /// let status = hourly.quota_status().await?.expect("a windowed quota");
    /// assert_eq!(RateLimitPolicy::for_quota("hourly", &status)?.to_string(), "\"hourly\";q=1000;w=3600");
    ///
    /// let paced = RateLimiter::in_memory(Quota::gcra(100, Duration::from_secs(1))?); // every 10 ms
    /// let status = paced.quota_status().await?.expect("a quota");
    /// assert_eq!(RateLimitPolicy::for_quota("paced", &status)?.to_string(), "\"paced\";q=100;w=1");
    /// # Ok(())
    /// # }
    /// ```
    pub fn for_quota(name: impl Into<String>, quota: &QuotaStatus) -> Result<Self, ConfigError> {
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
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::RateLimitPolicy;
    ///
    /// let policies = RateLimitPolicy::parse_list(r#""burst";q=10;w=1, "daily";q=1000;w=86400"#).unwrap();
    /// assert_eq!(policies[1].window(), Some(Duration::from_secs(86_400)));
    /// assert!(RateLimitPolicy::parse_list("\"burst\";q=ten").is_err());
    /// ```
    pub fn parse_list(value: &str) -> Result<Vec<Self>, InvalidHeader> {
        let invalid = |reason| InvalidHeader::new(RATELIMIT_POLICY, value.as_bytes(), reason);
        let members = sf::parse_members(value).map_err(invalid)?;
        members
            .iter()
            .map(policy_item)
            .collect::<Result<_, _>>()
            .map_err(invalid)
    }

    /// The policy's name.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::RateLimitPolicy;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// assert_eq!(RateLimitPolicy::new("burst", 5, Duration::from_secs(1))?.name(), "burst");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Units allowed per window (`q`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::RateLimitPolicy;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// assert_eq!(RateLimitPolicy::new("burst", 5, Duration::from_secs(1))?.quota(), 5);
    /// # Ok(())
    /// # }
    /// ```
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// The window (`w`), if given.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::RateLimitPolicy;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let policy = RateLimitPolicy::new("burst", 5, Duration::from_secs(2))?;
    /// assert_eq!(policy.window(), Some(Duration::from_secs(2)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn window(&self) -> Option<Duration> {
        self.window
    }

    /// The `RateLimit-Policy` header value listing `policies`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_limits::http::RateLimitPolicy;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let policy = RateLimitPolicy::new("default", 100, Duration::from_secs(60))?;
    /// let value = RateLimitPolicy::header_value(&[policy]);
    /// assert_eq!(value.unwrap(), "\"default\";q=100;w=60");
    /// # Ok(())
    /// # }
    /// ```
    pub fn header_value(policies: &[Self]) -> Option<HeaderValue> {
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
