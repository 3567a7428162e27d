//! Runs `examples/quickstart.rs` end to end and checks its report.
//!
//! The example's logic lives in its `main`, so instead of duplicating it this
//! test runs the example the way a user does (`cargo run --example
//! quickstart`), with a timeout, and reads the report it prints: the run must
//! succeed and the upstream must never have answered 429.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Room for cargo to build the example if it is not built yet, plus the run
/// itself (about 5 s).
const TIMEOUT: Duration = Duration::from_secs(300);

#[test]
fn quickstart_runs_and_never_hits_a_429() {
    let mut command = Command::new(env!("CARGO"));
    command
        .args([
            "run",
            "--quiet",
            "--example",
            "quickstart",
            "--manifest-path",
        ])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"));
    if !cfg!(debug_assertions) {
        // Built by `cargo test --release`: reuse the release build.
        command.arg("--release");
    }
    let run = run_with_timeout(command, TIMEOUT);
    let output = format!(
        "status: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        run.status, run.stdout, run.stderr
    );

    assert!(
        run.status.is_some_and(|status| status.success()),
        "the example failed or timed out after {TIMEOUT:?}\n{output}"
    );
    assert_eq!(
        report_value(&run.stdout, "requests sent:"),
        Some(300),
        "the report should say how many requests were sent\n{output}"
    );
    assert_eq!(
        report_value(&run.stdout, "429 responses:"),
        Some(0),
        "the client stays under the upstream's limit, so no request may get a 429\n{output}"
    );
}

/// The number on the report line starting with `label`, such as
/// `  429 responses:  0`.
fn report_value(stdout: &str, label: &str) -> Option<u64> {
    stdout
        .lines()
        .find_map(|line| line.trim_start().strip_prefix(label))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse().ok())
}

/// What a finished (or killed) child printed; `status` is `None` on timeout.
struct Run {
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
}

/// Runs `command` without stdin, capturing its output, and kills it if it
/// has not exited within `timeout`.
fn run_with_timeout(mut command: Command, timeout: Duration) -> Run {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cargo should start");
    // Drain both pipes on their own threads, so a full pipe never blocks the
    // child while we wait for it.
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());

    let status = wait_with_timeout(&mut child, timeout);
    if status.is_none() {
        // `cargo run` execs the example on Unix, so this stops the example.
        let _ = child.kill();
        let _ = child.wait();
    }
    Run {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

fn wait_with_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
            Ok(None) => return None,
            Err(error) => panic!("could not wait for cargo: {error}"),
        }
    }
}
