//! Header parsing: every RFC 9110 date form, delta-seconds, rate-limit
//! fields, and garbage that must be ignored without a panic.
#![cfg(feature = "http")]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue, StatusCode};
use proptest::prelude::*;
use tower_limits::http::Advice;

/// 1994-11-06 08:49:37 UTC, the date of RFC 9110's examples.
fn rfc_date() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(784_111_777)
}

fn headers(pairs: &[(&'static str, &[u8])]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            *name,
            HeaderValue::from_bytes(value).expect("a header value"),
        );
    }
    map
}

fn advice(status: u16, pairs: &[(&'static str, &[u8])]) -> Advice {
    let status = StatusCode::from_u16(status).expect("a status");
    Advice::from_parts(
        status,
        &headers(pairs),
        rfc_date() - Duration::from_secs(30),
    )
}

/// What a 429 with `Retry-After: value` advises.
fn retry_after(value: &[u8]) -> Advice {
    advice(429, &[("retry-after", value)])
}

#[test]
fn retry_after_reads_all_three_http_date_forms() {
    for form in [
        "Sun, 06 Nov 1994 08:49:37 GMT",  // IMF-fixdate
        "Sunday, 06-Nov-94 08:49:37 GMT", // obsolete RFC 850
        "Sun Nov  6 08:49:37 1994",       // asctime
    ] {
        assert_eq!(
            retry_after(form.as_bytes()),
            Advice::Wait(Duration::from_secs(30)),
            "{form}"
        );
    }
}

#[test]
fn retry_after_reads_delta_seconds_and_saturates_huge_ones() {
    assert_eq!(retry_after(b"0"), Advice::Wait(Duration::ZERO));
    assert_eq!(retry_after(b" 7 "), Advice::Wait(Duration::from_secs(7)));
    assert_eq!(retry_after(b"120"), Advice::Wait(Duration::from_secs(120)));
    let huge = "9".repeat(400);
    assert_eq!(
        retry_after(huge.as_bytes()),
        Advice::Wait(Duration::from_secs(u64::MAX))
    );
}

#[test]
fn retry_after_rejects_negative_fractional_and_garbage_values() {
    for bad in [
        "-1",
        "-120",
        "+5",
        "1.5",
        "",
        "soon",
        "5 s",
        "Sun, 06 Nov 1994 25:49:37 GMT",
        "Sun, 31 Feb 1994 08:49:37 GMT",
        "Sun, 06 Nov 1969 08:49:37 GMT",
        "\u{e9}t\u{e9}",
    ] {
        assert_eq!(retry_after(bad.as_bytes()), Advice::BackOff, "{bad:?}");
    }
}

#[test]
fn past_dates_mean_no_wait() {
    // A minute before the date of the examples: 30 s before `advice`'s now.
    let past = b"Sun, 06 Nov 1994 08:48:37 GMT";
    assert_eq!(retry_after(past), Advice::Wait(Duration::ZERO));
}

#[test]
fn garbage_retry_after_falls_back_to_backoff_not_a_panic() {
    assert_eq!(advice(429, &[("retry-after", b"-5")]), Advice::BackOff);
    assert_eq!(
        advice(429, &[("retry-after", b"\xff\xfe")]),
        Advice::BackOff
    );
    // Two values of a singleton field: ambiguous, ignored.
    assert_eq!(
        advice(429, &[("retry-after", b"5"), ("retry-after", b"7")]),
        Advice::BackOff
    );
}

/// A 503 is a server that cannot keep up: without a hint it backs off,
/// with one it waits as told.
#[test]
fn a_503_backs_off_or_waits_as_it_says() {
    assert_eq!(advice(503, &[]), Advice::BackOff);
    assert_eq!(
        advice(503, &[("retry-after", b"4")]),
        Advice::Wait(Duration::from_secs(4))
    );
    // Retry-After on a success is not a throttle.
    assert_eq!(advice(200, &[("retry-after", b"4")]), Advice::Proceed);
}

#[test]
fn ratelimit_field_pauses_when_a_quota_is_exhausted() {
    let exhausted: &[u8] = br#""burst";r=0;t=3, "daily";r=0;t=60"#;
    assert_eq!(
        advice(200, &[("ratelimit", exhausted)]),
        Advice::Wait(Duration::from_secs(60))
    );
    assert_eq!(
        advice(200, &[("ratelimit", br#""daily";r=5;t=60"#)]),
        Advice::Proceed
    );
    // On a 429 any advertised reset counts.
    assert_eq!(
        advice(429, &[("ratelimit", br#""daily";r=5;t=60"#)]),
        Advice::Wait(Duration::from_secs(60))
    );
}

#[test]
fn ratelimit_without_reset_waits_for_the_policy_window() {
    let pairs: &[(&'static str, &[u8])] = &[
        ("ratelimit", br#""default";r=0"#),
        ("ratelimit-policy", br#""default";q=100;w=60"#),
    ];
    assert_eq!(advice(200, pairs), Advice::Wait(Duration::from_secs(60)));
}

#[test]
fn older_draft_fields_are_read() {
    assert_eq!(
        advice(
            200,
            &[
                ("ratelimit-remaining", b"0"),
                ("ratelimit-reset", b"7"),
                ("ratelimit-limit", b"10")
            ]
        ),
        Advice::Wait(Duration::from_secs(7))
    );
    assert_eq!(
        advice(200, &[("ratelimit", b"limit=10, remaining=0, reset=9")]),
        Advice::Wait(Duration::from_secs(9))
    );
}

#[test]
fn x_ratelimit_reset_is_a_delay_or_a_unix_time() {
    let unix = 1_700_000_000;
    let now = UNIX_EPOCH + Duration::from_secs(unix);
    let advice = |status: u16, pairs: &[(&'static str, &[u8])]| {
        Advice::from_parts(StatusCode::from_u16(status).unwrap(), &headers(pairs), now)
    };
    let cases = [
        (b"12".to_vec(), Duration::from_secs(12)),
        (
            (unix + 40).to_string().into_bytes(),
            Duration::from_secs(40),
        ),
        (
            ((unix + 5) * 1000).to_string().into_bytes(),
            Duration::from_secs(5),
        ),
        (
            format!("{}.5", unix + 1).into_bytes(),
            Duration::from_millis(1_500),
        ),
        ((unix - 100).to_string().into_bytes(), Duration::ZERO), // already reset
    ];
    for (reset, wait) in cases {
        let got = advice(
            200,
            &[
                ("x-ratelimit-remaining", b"0"),
                ("x-ratelimit-reset", &reset),
            ],
        );
        let expected = if wait.is_zero() {
            Advice::Proceed
        } else {
            Advice::Wait(wait)
        };
        assert_eq!(got, expected, "{}", String::from_utf8_lossy(&reset));
    }
    // Quota left: no pause.
    let left = advice(
        200,
        &[
            ("x-ratelimit-remaining", b"3"),
            ("x-ratelimit-reset", b"12"),
        ],
    );
    assert_eq!(left, Advice::Proceed);
}

#[test]
fn malformed_rate_limit_fields_are_ignored() {
    for value in [
        &b"\"default\";r=-1;t=5"[..],
        b"\"default\";r=0;t=-5",
        b"\"default\";r=0;t=1.5",
        b"\"open;r=0",
        b"\"default\";r=99999999999999999999",
        b"\xc3\xa9",
        b"r=0,,",
    ] {
        assert_eq!(
            advice(200, &[("ratelimit", value)]),
            Advice::Proceed,
            "{value:?}"
        );
    }
    // Nothing left, and no usable reset: the next request would be
    // refused, so back off (the malformed reset is ignored).
    assert_eq!(
        advice(
            200,
            &[
                ("x-ratelimit-remaining", b"0"),
                ("x-ratelimit-reset", b"-3")
            ]
        ),
        Advice::BackOff
    );
    assert_eq!(
        advice(
            200,
            &[
                ("x-ratelimit-remaining", b"zero"),
                ("x-ratelimit-reset", b"3")
            ]
        ),
        Advice::Proceed
    );
}

#[test]
fn huge_rate_limit_values_saturate_instead_of_overflowing() {
    let reset = format!("{}", u64::MAX).repeat(3);
    let got = advice(
        200,
        &[
            ("x-ratelimit-remaining", b"0"),
            ("x-ratelimit-reset", reset.as_bytes()),
        ],
    );
    assert!(matches!(got, Advice::Wait(wait) if wait > Duration::from_secs(1 << 40)));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn no_header_value_panics(
        bytes in proptest::collection::vec(any::<u8>(), 0..80),
        status in prop::sample::select(vec![200_u16, 429, 503]),
        name in prop::sample::select(vec![
            "retry-after", "ratelimit", "ratelimit-policy", "ratelimit-reset",
            "x-ratelimit-reset", "x-ratelimit-remaining",
        ]),
    ) {
        if let Ok(value) = HeaderValue::from_bytes(&bytes) {
            let mut map = HeaderMap::new();
            map.insert(name, value);
            map.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
            map.insert("ratelimit-remaining", HeaderValue::from_static("0"));
            let status = StatusCode::from_u16(status).unwrap();
            let _ = Advice::from_parts(status, &map, SystemTime::now());
        }
    }

    #[test]
    fn structured_looking_values_never_panic(
        text in r#"[ "a-z0-9;=,.\-?*\\:]{0,60}"#,
        status in prop::sample::select(vec![200_u16, 429, 503]),
    ) {
        let value = text.as_bytes();
        for name in ["ratelimit", "ratelimit-policy", "retry-after"] {
            let _ = advice(status, &[(name, value), ("ratelimit-remaining", b"0")]);
        }
    }

    #[test]
    fn delta_seconds_round_trip(seconds in any::<u64>()) {
        prop_assert_eq!(
            retry_after(seconds.to_string().as_bytes()),
            Advice::Wait(Duration::from_secs(seconds))
        );
    }
}
