//! `Rate`: parsing rate strings, printing them back, errors, serde.

mod common;

use std::time::Duration;

use common::{ms, secs};
use proptest::prelude::*;
use tower_limits::Rate;
use tower_limits::rate::ParseRateError;
use tower_limits::rate::ParseRateErrorKind;

// ---------------------------------------------------------------- helpers

fn rate(text: &str) -> Rate {
    text.parse()
        .unwrap_or_else(|error| panic!("{text:?} should parse: {error}"))
}

fn error(text: &str) -> ParseRateError {
    match text.parse::<Rate>() {
        Ok(rate) => panic!("{text:?} should not parse, got {rate:?}"),
        Err(error) => error,
    }
}

/// Prints, parses the printed form, and checks it is the same value (and
/// that printing is stable).
fn assert_round_trips(rate: Rate) {
    let printed = rate.to_string();
    let reparsed: Rate = printed
        .parse()
        .unwrap_or_else(|error| panic!("{rate:?} printed as {printed:?}, which fails: {error}"));
    assert_eq!(reparsed, rate, "{rate:?} printed as {printed:?}");
    assert_eq!(reparsed.to_string(), printed);
}

// ---------------------------------------------------------------- parsing

#[test]
fn the_issue_examples_parse_to_their_count_and_period() {
    let cases = [
        ("10/s", 10, secs(1)),
        ("100/m", 100, secs(60)),
        ("5000/h", 5000, secs(3600)),
        ("2/500ms", 2, ms(500)),
        ("1/1.5s", 1, ms(1500)),
    ];
    for (text, count, per) in cases {
        let parsed = rate(text);
        assert_eq!((parsed.count(), parsed.per()), (count, per), "{text}");
        assert_eq!(parsed, Rate::new(count, per).unwrap());
    }
}

#[test]
fn every_unit_and_number_form_parses_exactly() {
    let cases = [
        ("7/10ns", 7, Duration::from_nanos(10)),
        ("1/250us", 1, Duration::from_micros(250)),
        ("1/250µs", 1, Duration::from_micros(250)), // micro sign
        ("1/250μs", 1, Duration::from_micros(250)), // Greek mu
        ("1/0.1s", 1, ms(100)),
        ("1/0.25s", 1, ms(250)),
        ("1/1.50s", 1, ms(1500)),
        ("1/0.001ms", 1, Duration::from_micros(1)),
        ("1/0.000000001s", 1, Duration::from_nanos(1)),
        ("1/90s", 1, secs(90)),
        ("1/1.5m", 1, secs(90)),
        ("1/1.5h", 1, secs(5400)),
        ("3/d", 3, secs(86_400)),
        ("3/1d", 3, secs(86_400)),
        ("3/0.5d", 3, secs(43_200)),
        ("1/1s", 1, secs(1)),
        ("010/s", 10, secs(1)),
        ("1/007s", 1, secs(7)),
        ("4294967295/s", u32::MAX, secs(1)),
        ("1/18446744073709551615s", 1, secs(u64::MAX)),
        ("1/18446744073709551615.999999999s", 1, Duration::MAX),
    ];
    for (text, count, per) in cases {
        let parsed = rate(text);
        assert_eq!((parsed.count(), parsed.per()), (count, per), "{text}");
    }
}

#[test]
fn long_unit_names_are_accepted_in_any_case() {
    let cases = [
        ("10/nanoseconds", Duration::from_nanos(1)),
        ("10/Microsecond", Duration::from_micros(1)),
        ("10/milliseconds", ms(1)),
        ("10/sec", secs(1)),
        ("10/secs", secs(1)),
        ("10/second", secs(1)),
        ("10/Seconds", secs(1)),
        ("10/min", secs(60)),
        ("10/mins", secs(60)),
        ("10/minute", secs(60)),
        ("10/MINUTES", secs(60)),
        ("10/hr", secs(3600)),
        ("10/hrs", secs(3600)),
        ("10/hour", secs(3600)),
        ("10/Hours", secs(3600)),
        ("10/day", secs(86_400)),
        ("10/2days", secs(172_800)),
    ];
    for (text, per) in cases {
        assert_eq!(rate(text), Rate::new(10, per).unwrap(), "{text}");
    }
}

#[test]
fn short_units_are_lower_case_only() {
    for text in ["10/S", "10/M", "10/MS", "10/H", "10/D", "10/NS", "10/Us"] {
        assert_eq!(error(text).kind(), ParseRateErrorKind::Unit, "{text}");
    }
}

#[test]
fn whitespace_is_allowed_around_the_rate_the_slash_and_the_unit() {
    let expected = Rate::new(10, ms(1500)).unwrap();
    for text in [
        " 10/1.5s",
        "10/1.5s\n",
        "\t10 / 1.5s",
        "10/ 1.5 s",
        " 10 /1.5\u{a0}s ",
    ] {
        assert_eq!(rate(text), expected, "{text:?}");
    }
    // Nowhere else: not inside the count, the number or the unit.
    assert_eq!(error("1 0/s").kind(), ParseRateErrorKind::Count);
    assert_eq!(error("10/1 .5s").kind(), ParseRateErrorKind::Unit);
    assert_eq!(error("10/m s").kind(), ParseRateErrorKind::Unit);
}

#[test]
fn try_from_str_is_parse() {
    assert_eq!(Rate::try_from("100/m").unwrap(), rate("100/m"));
    assert_eq!(Rate::try_from("0/m").unwrap_err(), error("0/m"));
}

// ---------------------------------------------------------------- building

#[test]
fn new_rejects_a_zero_count_or_period_with_a_config_error() {
    let zero_count = Rate::new(0, secs(1)).unwrap_err();
    assert_eq!(zero_count.field(), "count");
    assert_eq!(zero_count.rule(), "must be at least 1");
    let zero_period = Rate::new(1, Duration::ZERO).unwrap_err();
    assert_eq!(zero_period.field(), "per");
    assert_eq!(
        zero_period.to_string(),
        "invalid `per` (0ns): must be longer than zero"
    );
    let largest = Rate::new(u32::MAX, Duration::MAX).unwrap();
    assert_eq!((largest.count(), largest.per()), (u32::MAX, Duration::MAX));
}

#[test]
fn per_unit_helpers_match_the_strings_and_never_panic_on_zero() {
    assert_eq!(Rate::per_second(10).unwrap(), rate("10/s"));
    assert_eq!(Rate::per_minute(100).unwrap(), rate("100/m"));
    assert_eq!(Rate::per_hour(5000).unwrap(), rate("5000/h"));
    for zero in [Rate::per_second(0), Rate::per_minute(0), Rate::per_hour(0)] {
        assert_eq!(zero.unwrap_err().field(), "count");
    }
}

#[test]
fn interval_is_per_over_count_rounded_up_to_a_nanosecond() {
    assert_eq!(rate("10/s").interval(), ms(100));
    assert_eq!(rate("2/500ms").interval(), ms(250));
    assert_eq!(rate("1/1.5s").interval(), ms(1500));
    assert_eq!(rate("3/s").interval(), Duration::from_nanos(333_333_334));
    assert_eq!(rate("7/10ns").interval(), Duration::from_nanos(2));
    // Faster than one per nanosecond: never zero.
    assert_eq!(rate("1000/ns").interval(), Duration::from_nanos(1));
    let fastest = Rate::new(u32::MAX, Duration::from_nanos(1)).unwrap();
    assert_eq!(fastest.interval(), Duration::from_nanos(1));
    // The longest period is its own interval.
    assert_eq!(
        Rate::new(1, Duration::MAX).unwrap().interval(),
        Duration::MAX
    );
}

#[test]
fn per_second_f64_is_the_average_rate() {
    assert_eq!(rate("10/s").as_per_second_f64(), 10.0);
    assert_eq!(rate("2/500ms").as_per_second_f64(), 4.0);
    assert_eq!(rate("3600/h").as_per_second_f64(), 1.0);
    assert!((rate("100/m").as_per_second_f64() - 100.0 / 60.0).abs() < 1e-12);
}

// ---------------------------------------------------------------- printing

#[test]
fn display_prints_the_issue_examples_as_written() {
    for text in ["10/s", "100/m", "5000/h", "2/500ms", "1/1.5s"] {
        assert_eq!(rate(text).to_string(), text);
        assert_round_trips(rate(text));
    }
}

#[test]
fn display_picks_the_largest_exact_unit_with_at_most_three_decimals() {
    let cases = [
        ("1/1s", "1/s"),
        ("1/1000ms", "1/s"),
        ("1/60s", "1/m"),
        ("1/90s", "1/1.5m"),
        ("1/0.1s", "1/100ms"),
        ("1/1500ms", "1/1.5s"),
        ("1/1.001s", "1/1.001s"),
        ("1/1.0001s", "1/1000.1ms"),
        ("1/61s", "1/61s"),
        ("1/36h", "1/1.5d"),
        ("1/45min", "1/45m"),
        ("1/1.125m", "1/1.125m"),
        ("1/1.0625m", "1/63.75s"),
        ("1/250µs", "1/250us"),
        ("1/1001ns", "1/1.001us"),
        ("1/1ns", "1/ns"),
        ("4/ 2 Days ", "4/2d"),
        ("1/007s", "1/7s"),
        ("010/s", "10/s"),
    ];
    for (text, printed) in cases {
        assert_eq!(rate(text).to_string(), printed, "{text}");
        assert_round_trips(rate(text));
    }
    let largest = Rate::new(u32::MAX, Duration::MAX).unwrap();
    assert_eq!(
        largest.to_string(),
        "4294967295/18446744073709551615999999.999us"
    );
    assert_round_trips(largest);
}

// ---------------------------------------------------------------- errors

#[test]
fn each_malformed_rate_names_its_bad_part() {
    use ParseRateErrorKind::{Count, Format, Period, Unit};
    let cases: [(&str, ParseRateErrorKind, &str); 20] = [
        (
            "10/x",
            Unit,
            r#"invalid rate "10/x": unknown unit "x" (expected ns, us, ms, s, m, h or d)"#,
        ),
        (
            "0/s",
            Count,
            r#"invalid rate "0/s": the count must be at least 1"#,
        ),
        (
            "/s",
            Count,
            r#"invalid rate "/s": missing the count before "/" (such as the 10 in 10/s)"#,
        ),
        (
            "10/",
            Period,
            r#"invalid rate "10/": missing the period after "/" (such as s, m or 500ms)"#,
        ),
        (
            "10/0s",
            Period,
            r#"invalid rate "10/0s": the period "0s" must be longer than zero"#,
        ),
        (
            "1/0.000s",
            Period,
            r#"invalid rate "1/0.000s": the period "0.000s" must be longer than zero"#,
        ),
        (
            "-1/s",
            Count,
            r#"invalid rate "-1/s": the count "-1" is not a whole number (write digits only, such as 10)"#,
        ),
        (
            "+1/s",
            Count,
            r#"invalid rate "+1/s": the count "+1" is not a whole number (write digits only, such as 10)"#,
        ),
        (
            "1/-1s",
            Period,
            r#"invalid rate "1/-1s": the period "-1s" has a sign (write it without one, such as 1.5s)"#,
        ),
        (
            "1/1e3s",
            Period,
            r#"invalid rate "1/1e3s": the period "1e3s" has an exponent, which is not supported (write the number out, such as 1000s)"#,
        ),
        (
            "99999999999999999999999/s",
            Count,
            r#"invalid rate "99999999999999999999999/s": the count "99999999999999999999999" is too large (at most 4294967295)"#,
        ),
        (
            "1/0.0000000001s",
            Period,
            r#"invalid rate "1/0.0000000001s": the period "0.0000000001s" is not a whole number of nanoseconds"#,
        ),
        (
            "1/18446744073709551616s",
            Period,
            r#"invalid rate "1/18446744073709551616s": the period "18446744073709551616s" is too long (at most 18446744073709551615 s)"#,
        ),
        (
            "10/s/s",
            Format,
            r#"invalid rate "10/s/s": unexpected "/s" after the period (a rate has exactly one "/")"#,
        ),
        (
            "",
            Format,
            r#"invalid rate "": expected <count>/<period>, such as 10/s or 100/m"#,
        ),
        (
            " \t\n",
            Format,
            r#"invalid rate " \t\n": expected <count>/<period>, such as 10/s or 100/m"#,
        ),
        (
            "abc",
            Format,
            r#"invalid rate "abc": expected <count>/<period>, such as 10/s or 100/m"#,
        ),
        (
            "1.5/s",
            Count,
            r#"invalid rate "1.5/s": the count "1.5" is not a whole number (write digits only, such as 10)"#,
        ),
        (
            "1/.5s",
            Period,
            r#"invalid rate "1/.5s": the period's number ".5" is not a decimal number (such as 500 or 1.5)"#,
        ),
        (
            "1/500",
            Unit,
            r#"invalid rate "1/500": missing the unit after "500" (expected ns, us, ms, s, m, h or d)"#,
        ),
    ];
    for (text, kind, message) in cases {
        let error = error(text);
        assert_eq!(error.to_string(), message);
        assert_eq!(error.kind(), kind, "{text:?}");
        assert_eq!(error.input(), text);
    }
}

#[test]
fn more_malformed_periods_are_rejected() {
    use ParseRateErrorKind::{Count, Period, Unit};
    let cases = [
        ("1/5.s", Period),
        ("1/1.2.3s", Period),
        ("1/.s", Period),
        ("1/1E3s", Period),
        ("1/1e-3s", Period),
        ("1/+1s", Period),
        ("1/1_000s", Unit),
        ("1/1,5s", Unit),
        ("1_000/s", Count),
        ("1,000/s", Count),
        ("１０/s", Count), // full-width digits
        ("10/fortnight", Unit),
        ("10/ss", Unit),
        ("10/w", Unit),
        ("10/s2", Unit),
        ("1/0.5ns", Period),
        ("1/1.0001ns", Period),
        ("1/0.00000000000000000000000000000000000001s", Period),
        ("1/213503982334601.3d", Period),
        (
            "1/99999999999999999999999999999999999999999999999999s",
            Period,
        ),
    ];
    for (text, kind) in cases {
        let error = error(text);
        assert_eq!(error.kind(), kind, "{text:?}: {error}");
        assert!(error.to_string().starts_with("invalid rate "), "{error}");
    }
}

#[test]
fn the_error_is_a_std_error_that_boxes() {
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(error("10/x"));
    assert!(boxed.source().is_none());
    let error = boxed.downcast::<ParseRateError>().unwrap();
    assert_eq!(error.input(), "10/x");
}

// ---------------------------------------------------------------- properties

/// Periods from the whole range of `Duration`, weighted toward the round
/// values people write.
fn period() -> impl Strategy<Value = Duration> {
    let units = [1u64, 1_000, 1_000_000, 1_000_000_000, 60_000_000_000];
    prop_oneof![
        (1u64..=u64::MAX).prop_map(Duration::from_nanos),
        (any::<u64>(), 0u32..1_000_000_000)
            .prop_filter("longer than zero", |&(s, n)| s > 0 || n > 0)
            .prop_map(|(s, n)| Duration::new(s, n)),
        (1u64..100_000, prop::sample::select(units.to_vec()))
            .prop_map(|(n, unit)| Duration::from_nanos(n * unit)),
        (1u64..10_000, 1u64..1_000)
            .prop_map(|(n, hours)| Duration::from_secs(hours * 3600)
                + Duration::from_nanos(n * 1_000_000)),
        Just(Duration::MAX),
        Just(Duration::from_nanos(1)),
    ]
}

fn count() -> impl Strategy<Value = u32> {
    prop_oneof![1u32..1000, 1u32..=u32::MAX, Just(u32::MAX)]
}

/// A character that is valid nowhere in a rate.
fn junk() -> impl Strategy<Value = char> {
    prop::sample::select(vec![
        '#', '!', '_', ',', ';', '*', '\0', '\u{7f}', 'é', '€', '🦀', '\u{200b}', 'ß', '٣',
    ])
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_valid_rate_round_trips_through_display(count in count(), per in period()) {
        let rate = Rate::new(count, per).unwrap();
        let printed = rate.to_string();
        let reparsed: Rate = printed.parse().map_err(|e: ParseRateError| {
            TestCaseError::fail(format!("{rate:?} printed as {printed:?}: {e}"))
        })?;
        prop_assert_eq!(reparsed, rate);
        prop_assert_eq!(reparsed.to_string(), printed);
        prop_assert!(rate.interval() > Duration::ZERO && rate.interval() <= per);
    }

    #[test]
    fn arbitrary_strings_never_panic_and_what_parses_round_trips(text in any::<String>()) {
        match text.parse::<Rate>() {
            Ok(rate) => prop_assert_eq!(rate.to_string().parse::<Rate>(), Ok(rate)),
            Err(error) => {
                prop_assert_eq!(error.input(), text.as_str());
                prop_assert!(error.to_string().starts_with("invalid rate "));
            }
        }
    }

    #[test]
    fn rate_like_strings_never_panic(
        text in "[ 0-9+\\-]{0,25}/? ?[0-9.eE+\\-]{0,40} ?(ns|us|µs|ms|s|m|h|d|x|sec|Minutes|S|/s)?",
    ) {
        if let Ok(rate) = text.parse::<Rate>() {
            prop_assert_eq!(rate.to_string().parse::<Rate>(), Ok(rate));
        }
    }

    #[test]
    fn strings_without_a_slash_are_rejected(text in "[^/]*") {
        let error = text.parse::<Rate>().unwrap_err();
        prop_assert_eq!(error.kind(), ParseRateErrorKind::Format);
    }

    #[test]
    fn a_junk_character_anywhere_makes_a_valid_rate_invalid(
        count in count(),
        per in period(),
        junk in junk(),
        at in any::<prop::sample::Index>(),
    ) {
        let printed = Rate::new(count, per).unwrap().to_string();
        let mut chars: Vec<char> = printed.chars().collect();
        chars.insert(at.index(chars.len() + 1), junk);
        let text: String = chars.into_iter().collect();
        match text.parse::<Rate>() {
            Ok(rate) => prop_assert!(false, "{:?} parsed as {:?}", text, rate),
            Err(error) => prop_assert_eq!(error.input(), text.as_str()),
        }
    }

    #[test]
    fn huge_numbers_are_rejected_not_wrapped(
        digits in "[1-9][0-9]{20,80}",
        unit in prop::sample::select(vec!["ns", "s", "d"]),
    ) {
        prop_assert_eq!(
            format!("{digits}/s").parse::<Rate>().unwrap_err().kind(),
            ParseRateErrorKind::Count
        );
        // 21+ digits of nanoseconds may still fit a Duration; 30+ never do.
        let period = format!("1/{digits}{digits}{unit}").parse::<Rate>();
        prop_assert_eq!(period.unwrap_err().kind(), ParseRateErrorKind::Period);
    }
}

// ---------------------------------------------------------------- serde

#[cfg(feature = "serde")]
mod serde_support {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Config {
        rate: Rate,
        burst: Option<Rate>,
    }

    #[test]
    fn a_rate_serializes_as_its_string() {
        let config = Config {
            rate: rate("100/m"),
            burst: Some(rate("1/1500ms")),
        };
        let json = serde_json::to_string(&config).unwrap();
        assert_eq!(json, r#"{"rate":"100/m","burst":"1/1.5s"}"#);
        assert_eq!(serde_json::from_str::<Config>(&json).unwrap(), config);
    }

    #[test]
    fn a_rate_deserializes_from_any_accepted_string() {
        let config: Config =
            serde_json::from_str(r#"{ "rate": " 5000 / Hours ", "burst": null }"#).unwrap();
        assert_eq!(config.rate, Rate::per_hour(5000).unwrap());
        assert_eq!(config.burst, None);
        // From an owned (escaped) string too.
        let escaped: Rate = serde_json::from_str(r#""2\/500ms""#).unwrap();
        assert_eq!(escaped, rate("2/500ms"));
    }

    #[test]
    fn a_bad_string_fails_with_the_parse_error_message() {
        let error = serde_json::from_str::<Config>(r#"{ "rate": "10/x" }"#).unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains(&super::error("10/x").to_string()),
            "{message}"
        );
    }

    #[test]
    fn a_non_string_is_rejected_with_the_expected_form() {
        let error = serde_json::from_str::<Rate>("10").unwrap_err();
        assert!(
            error
                .to_string()
                .contains(r#"a rate string such as "10/s""#),
            "{error}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 256,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn every_valid_rate_round_trips_through_json(count in count(), per in period()) {
            let rate = Rate::new(count, per).unwrap();
            let json = serde_json::to_string(&rate).unwrap();
            prop_assert_eq!(serde_json::from_str::<Rate>(&json).unwrap(), rate);
        }
    }
}

proptest! {
    /// The shares of a split add up to exactly the rate, over the same
    /// period, and differ by at most one call.
    #[test]
    fn shares_add_up_to_the_rate(count in 1u32..1_000_000, shards in 1u32..=64) {
        let rate = Rate::new(count, Duration::from_secs(1)).unwrap();
        let shares: Result<Vec<Rate>, _> = (0..shards).map(|shard| rate.share(shard, shards)).collect();
        if shards > count {
            prop_assert_eq!(shares.unwrap_err().field(), "shards");
        } else {
            let shares = shares.unwrap();
            prop_assert_eq!(shares.iter().map(Rate::count).sum::<u32>(), count);
            prop_assert!(shares.iter().all(|share| share.per() == rate.per()));
            let most = shares.iter().map(Rate::count).max().unwrap();
            let least = shares.iter().map(Rate::count).min().unwrap();
            prop_assert!(most - least <= 1);
        }
    }
}

#[test]
fn a_share_outside_the_shards_is_a_config_error() {
    let rate: Rate = "10/s".parse().unwrap();
    assert_eq!(rate.share(0, 0).unwrap_err().field(), "shards");
    let error = rate.share(4, 4).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid `shard` (4): must be below the number of shards, 4"
    );
}
