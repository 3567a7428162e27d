//! Redis for the tests: the shared server named by `REDIS_URL`, private
//! `redis-server`s on free loopback ports, and a fake server that answers
//! garbage.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tower_limits::store::RedisStore;

use super::conformance::unique;

/// The URL of the shared Redis, or `None` after saying on stderr that the
/// test `what` is skipped.
pub(crate) fn url(what: &str) -> Option<String> {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!(
                "skipped {what}: REDIS_URL is not set (run `.ci/run`, or set \
                 REDIS_URL=redis://127.0.0.1:6379 with a Redis running)"
            );
            None
        }
    }
}

/// A store on the shared Redis under a key prefix of its own; `None` if
/// `REDIS_URL` is unset. Panics if it is set but unreachable.
pub(crate) async fn store(what: &str) -> Option<RedisStore> {
    let url = url(what)?;
    let store = RedisStore::builder(url.clone())
        .prefix(format!("{}:", unique("test")))
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap_or_else(|error| panic!("REDIS_URL={url} is set but unreachable: {error}"));
    Some(store)
}

/// A port nobody listens on right now.
pub(crate) fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A `redis-server` of the test's own on `port`, killed when dropped.
pub(crate) struct PrivateRedis {
    pub(crate) port: u16,
    child: Child,
}

impl PrivateRedis {
    /// Starts `redis-server` on `port` and waits until it answers.
    pub(crate) fn start(port: u16) -> Self {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (apt-get install redis-server)");
        let server = Self { port, child };
        server.wait_until_up();
        server
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn wait_until_up(&self) {
        for _ in 0..200 {
            if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = stream.write_all(b"PING\r\n");
                let mut reply = [0; 7];
                if stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n" {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server on port {} did not start", self.port);
    }

    /// Kills the server at once (no shutdown), as a crash would.
    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fake server on a free port answering every command with `reply` (raw
/// RESP), for as long as the test runs. Answers `HELLO` and `CLIENT` with
/// errors, as an old server would, so the client connects.
pub(crate) fn garbage_server(reply: &'static [u8]) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || answer_commands(stream, reply));
        }
    });
    port
}

/// Reads RESP commands (arrays of bulk strings) and answers each.
fn answer_commands(stream: TcpStream, reply: &[u8]) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Some(command) = read_command(&mut reader) {
        let answer: &[u8] = match command.to_ascii_uppercase().as_str() {
            "HELLO" | "CLIENT" => b"-ERR unknown command\r\n",
            "PING" => b"+PONG\r\n",
            _ => reply,
        };
        if writer.write_all(answer).is_err() {
            return;
        }
    }
}

/// The name of the next command, having read the rest of it.
fn read_command(reader: &mut impl BufRead) -> Option<String> {
    let mut line = String::new();
    reader.read_line(&mut line).ok().filter(|&n| n > 0)?;
    let count: usize = line.trim().strip_prefix('*')?.parse().ok()?;
    let mut name = None;
    for _ in 0..count {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let length: usize = line.trim().strip_prefix('$')?.parse().ok()?;
        let mut bulk = vec![0; length + 2];
        reader.read_exact(&mut bulk).ok()?;
        bulk.truncate(length);
        name.get_or_insert_with(|| String::from_utf8_lossy(&bulk).into_owned());
    }
    name
}
