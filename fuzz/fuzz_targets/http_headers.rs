//! Feeds arbitrary bytes to every header parser of `tower_limits::http`:
//! none may panic, whatever the value.
#![no_main]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue, StatusCode};
use libfuzzer_sys::fuzz_target;
use tower_limits::http::{Advice, RateLimitPolicy, RateLimitStatus, RetryAfter};

const NAMES: [&str; 8] = [
    "retry-after",
    "ratelimit",
    "ratelimit-policy",
    "ratelimit-remaining",
    "ratelimit-reset",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "grpc-status",
];

fuzz_target!(|data: &[u8]| {
    let _ = RetryAfter::from_bytes(data);
    let text = String::from_utf8_lossy(data);
    let _ = RateLimitStatus::parse_list(&text);
    let _ = RateLimitPolicy::parse_list(&text);

    // The first byte picks the status and the clock; the rest is split
    // into one value per header.
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let status = [StatusCode::OK, StatusCode::TOO_MANY_REQUESTS, StatusCode::SERVICE_UNAVAILABLE]
        [usize::from(first % 3)];
    let now = UNIX_EPOCH + Duration::from_secs(u64::from(first) << 24);
    let mut headers = HeaderMap::new();
    for (name, value) in NAMES.iter().zip(rest.split(|&byte| byte == b'\n')) {
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.append(*name, value);
        }
    }
    let _ = Advice::from_parts(status, &headers, now);
    let _ = Advice::from_parts(status, &headers, SystemTime::now());
});
