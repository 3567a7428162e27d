//! Draws how each algorithm admits the same bursty traffic, one panel each.
//!
//! ```sh
//! cargo run -p integration --example algorithms_picture            # writes docs/algorithms.svg
//! cargo run -p integration --example algorithms_picture -- out.svg # or anywhere else
//! ```
//!
//! Every limiter allows 10 calls a second. The same 54 callers arrive in
//! bursts (12 just before the one-second mark and 12 just after it, a trickle
//! of 5 a second from 3 s to 5 s, 20 at once at 6 s), each waits at most
//! 1.5 s for admission, and calls take no time. Time is tokio's paused
//! clock, so the picture is the same on every run and every machine. The
//! windows (kept, as every quota, in a memory store, which puts their
//! boundaries on whole seconds of Unix time) start on a boundary: paused
//! time moves there first.
//!
//! Each panel shows, per 100 ms, arrivals (grey), admissions (blue) and
//! callers that gave up (red): the burst a token bucket lets through, the
//! fixed window's double burst across its boundary, the sliding window's
//! smoothing, the leaky bucket's and the evenly spaced limiter's steady drip.

use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use plotters::prelude::*;
use tokio::time::{Instant, advance, sleep_until, timeout};
use tower_limits::error::ConfigError;
use tower_limits::limiters::FreshLimiter;
use tower_limits::store::Quota;
use tower_limits::{EvenlySpacedRateLimiter, LeakyBucketLimiter, Limiter, LimiterExt, RateLimiter};

/// How long the picture runs.
const SPAN: Duration = Duration::from_secs(8);
/// How long a caller waits for admission before it gives up.
const PATIENCE: Duration = Duration::from_millis(1_500);
/// The width of a bar.
const BUCKET: Duration = Duration::from_millis(100);

/// What one algorithm did with the arrivals, in offsets from the start.
#[derive(Debug)]
pub struct Run {
    /// The algorithm and its parameters.
    pub label: String,
    /// When callers were admitted, in order.
    pub admitted: Vec<Duration>,
    /// When callers gave up (waited too long, or a full queue refused them).
    pub gave_up: Vec<Duration>,
}

/// When callers arrive: two bursts straddling the one-second mark, a
/// trickle, and a last burst.
fn arrivals() -> Vec<Duration> {
    let ms = Duration::from_millis;
    let mut arrivals = vec![ms(950); 12];
    arrivals.extend([ms(1_050); 12]);
    arrivals.extend((0..10).map(|k| ms(3_000 + 200 * k)));
    arrivals.extend([ms(6_000); 20]);
    arrivals
}

/// Makes a limiter; called inside the paused runtime, so that the
/// limiter's clock starts at its start.
type Make = fn() -> Result<Made, ConfigError>;

/// A limiter to run the arrivals through.
enum Made {
    /// Runs from now.
    Now(Arc<dyn Limiter>),
    /// A window quota: runs from the start of its next window, so that its
    /// boundaries fall on the picture's whole seconds.
    AtWindowStart(RateLimiter),
}

/// `limiter`, run from now.
fn now(limiter: impl Limiter + 'static) -> Result<Made, ConfigError> {
    Ok(Made::Now(Arc::new(limiter)))
}

/// A window quota in a memory store of its own, run from a window start.
fn windows(quota: Quota) -> Result<Made, ConfigError> {
    Ok(Made::AtWindowStart(RateLimiter::in_memory(quota)))
}

/// Moves paused time to the next start of `limiter`'s windows: a probe on
/// the same store (its window boundaries), a fixed window of the same
/// length filled at once, can proceed again there.
async fn to_window_start(limiter: &RateLimiter) -> Result<(), Box<dyn Error>> {
    let quota = limiter.quota();
    let probe = limiter.fresh();
    probe.set_quota(Quota::fixed_window(quota.capacity(), quota.window())?);
    probe.try_acquire_many(quota.capacity()).await?;
    let start = probe.next_available_time().await?;
    advance(start.saturating_duration_since(Instant::now())).await;
    Ok(())
}

/// The limiters, each allowing 10 a second.
fn limiters() -> Vec<(&'static str, Make)> {
    const SECOND: Duration = Duration::from_secs(1);
    vec![
        ("Token bucket (capacity 10)", || {
            let quota = Quota::token_bucket(10, 10, SECOND)?.with_pacing_tolerance()?;
            now(RateLimiter::in_memory(quota))
        }),
        ("GCRA (burst 3)", || {
            let quota = Quota::gcra(10, SECOND)?
                .with_burst(3)?
                .with_pacing_tolerance()?;
            now(RateLimiter::in_memory(quota))
        }),
        ("Fixed window", || windows(Quota::fixed_window(10, SECOND)?)),
        ("Sliding window counter", || {
            windows(Quota::sliding_window_counter(10, SECOND)?)
        }),
        ("Sliding log (RateLimiter, no backoff)", || {
            let log = RateLimiter::builder("log", 10, SECOND).without_backoff();
            now(log.build()?)
        }),
        ("Leaky bucket (queue 10)", || {
            now(LeakyBucketLimiter::new(10, SECOND, 10)?)
        }),
        ("Evenly spaced", || {
            now(EvenlySpacedRateLimiter::new(10, SECOND)?)
        }),
    ]
}

/// Sends the arrivals through `limiter`: each caller waits up to
/// [`PATIENCE`]; a limiter's error (a full leaky bucket) is giving up too.
async fn run(label: &str, limiter: Arc<dyn Limiter>) -> Run {
    let start = Instant::now();
    let callers: Vec<_> = arrivals()
        .into_iter()
        .map(|arrival| {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move {
                sleep_until(start + arrival).await;
                let admitted = matches!(timeout(PATIENCE, limiter.acquire()).await, Ok(Ok(_)));
                (admitted, start.elapsed())
            })
        })
        .collect();
    let mut run = Run {
        label: label.to_owned(),
        admitted: Vec::new(),
        gave_up: Vec::new(),
    };
    for caller in callers {
        let (admitted, at) = caller.await.expect("callers do not panic");
        if admitted {
            run.admitted.push(at);
        } else {
            run.gave_up.push(at);
        }
    }
    run.admitted.sort();
    run
}

/// The most admissions in any one-second window.
pub fn busiest_second(admitted: &[Duration]) -> usize {
    let second = Duration::from_secs(1);
    (0..admitted.len())
        .map(|first| admitted[first..].partition_point(|&at| at < admitted[first] + second))
        .max()
        .unwrap_or(0)
}

/// Counts per [`BUCKET`] over [`SPAN`], as (bucket start in seconds, count).
fn per_bucket(times: &[Duration]) -> Vec<(f64, u32)> {
    let buckets = (SPAN.as_millis() / BUCKET.as_millis()) as usize;
    let mut counts = vec![0_u32; buckets];
    for at in times {
        let bucket = (at.as_millis() / BUCKET.as_millis()) as usize;
        if let Some(count) = counts.get_mut(bucket) {
            *count += 1;
        }
    }
    let width = BUCKET.as_secs_f64();
    counts
        .into_iter()
        .enumerate()
        .map(|(index, count)| (index as f64 * width, count))
        .collect()
}

fn bars(series: Vec<(f64, u32)>, style: ShapeStyle) -> impl Iterator<Item = Rectangle<(f64, f64)>> {
    let width = BUCKET.as_secs_f64();
    series
        .into_iter()
        .filter(|&(_, count)| count > 0)
        .map(move |(at, count)| {
            Rectangle::new([(at + 0.01, 0.0), (at + width - 0.01, count as f64)], style)
        })
}

fn draw(runs: &[Run], path: &str) -> Result<(), Box<dyn Error>> {
    let panel_height = 130;
    let height = panel_height * runs.len() as u32;
    let root = SVGBackend::new(path, (900, height + 30)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "10 calls a second each. Per 100 ms: arrivals (grey), admissions (blue), \
         callers that gave up after waiting 1.5 s (red)",
        ("sans-serif", 15),
    )?;
    let arrivals = per_bucket(&arrivals());
    let tallest = arrivals.iter().map(|&(_, count)| count).max().unwrap_or(1) as f64;
    for (run, area) in runs.iter().zip(root.split_evenly((runs.len(), 1))) {
        let caption = format!(
            "{}: {} admitted, {} gave up, busiest second {}",
            run.label,
            run.admitted.len(),
            run.gave_up.len(),
            busiest_second(&run.admitted)
        );
        let mut chart = ChartBuilder::on(&area)
            .caption(caption, ("sans-serif", 15))
            .margin(6)
            .x_label_area_size(18)
            .y_label_area_size(32)
            .build_cartesian_2d(0.0..SPAN.as_secs_f64(), 0.0..tallest)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(9)
            .y_labels(3)
            .x_label_formatter(&|seconds| format!("{seconds:.0} s"))
            .y_label_formatter(&|count| format!("{count:.0}"))
            .draw()?;
        chart.draw_series(bars(arrivals.clone(), RGBColor(210, 210, 210).filled()))?;
        chart.draw_series(bars(per_bucket(&run.admitted), BLUE.mix(0.8).filled()))?;
        chart.draw_series(bars(per_bucket(&run.gave_up), RED.mix(0.7).filled()))?;
    }
    root.present()?;
    Ok(())
}

/// Runs every algorithm and draws the picture to `path`.
pub fn render(path: &str) -> Result<Vec<Run>, Box<dyn Error>> {
    let mut runs = Vec::new();
    for (label, make) in limiters() {
        // A paused runtime per algorithm: each starts at its own time zero.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()?;
        let run = runtime.block_on(async {
            let limiter: Arc<dyn Limiter> = match make()? {
                Made::Now(limiter) => limiter,
                Made::AtWindowStart(limiter) => {
                    to_window_start(&limiter).await?;
                    Arc::new(limiter)
                }
            };
            Ok::<_, Box<dyn Error>>(run(label, limiter).await)
        })?;
        runs.push(run);
    }
    if let Some(parent) = std::path::Path::new(path).parent() {
        std::fs::create_dir_all(parent)?;
    }
    draw(&runs, path)?;
    Ok(runs)
}

fn main() -> Result<(), Box<dyn Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "docs/algorithms.svg".to_owned());
    for run in render(&path)? {
        println!(
            "{:<40} admitted {:>2}, gave up {:>2}, busiest second {:>2}",
            run.label,
            run.admitted.len(),
            run.gave_up.len(),
            busiest_second(&run.admitted)
        );
    }
    println!("wrote {path}");
    Ok(())
}
