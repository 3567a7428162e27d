//! Redis for the tests: the shared server named by `REDIS_URL`, private
//! `redis-server`s on free loopback ports, private Redis Clusters of three
//! masters (with replicas if asked), and a fake server that answers garbage.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use tower_limits::store::RedisStore;

use super::conformance::unique;

/// The URL of the shared Redis, or `None` after saying (see
/// [`skip`](super::skip)) that the test `what` is skipped.
pub(crate) fn url(what: &str) -> Option<String> {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            super::skip(
                what,
                "REDIS_URL is not set (run `scripts/test`, or set \
                 REDIS_URL=redis://127.0.0.1:6379 with a Redis running)",
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
        wait_until_up(self.port);
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

/// Waits until the server on `port` answers `PING`.
fn wait_until_up(port: u16) {
    for _ in 0..200 {
        if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = stream.write_all(b"PING\r\n");
            let mut reply = [0; 7];
            if stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n" {
                return;
            }
        }
        // A real process is starting: paused tokio time cannot hurry it.
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("redis-server on port {port} did not start");
}

/// Whether `program --version` runs.
fn on_path(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// `Some(())` if `redis-server` and `redis-cli` are on `PATH`. Otherwise
/// says so, then fails if `REDIS_URL` is set (CI, where `.ci/run` installs
/// them) or returns `None` after saying that `what` is skipped.
pub(crate) fn redis_binaries(what: &str) -> Option<()> {
    let missing: Vec<_> = ["redis-server", "redis-cli"]
        .into_iter()
        .filter(|program| !on_path(program))
        .collect();
    if missing.is_empty() {
        return Some(());
    }
    let missing = missing.join(" and ");
    if std::env::var_os("REDIS_URL").is_some() {
        panic!(
            "{what} needs {missing} on PATH, and REDIS_URL is set: install them \
             (`apt-get install redis-server`, which `scripts/test` does)"
        );
    }
    super::skip(
        what,
        &format!("{missing} not on PATH (apt-get install redis-server)"),
    );
    None
}

/// A node of a [`RedisCluster`]: `redis-server` under a `sh` that stops it
/// (and removes its directory) when its stdin closes, so the node goes away
/// when it is dropped and also when the test binary exits without dropping
/// it (the cluster lives in a static).
struct ClusterNode {
    port: u16,
    guard: Child,
}

impl ClusterNode {
    const GUARD: &'static str = r#"dir=$1; shift
redis-server "$@" & server=$!
read -r _
kill "$server"; wait "$server"; rm -rf "$dir""#;

    /// A node on `port`; one that cannot reach a peer for `node_timeout`
    /// counts it as failing (and a replica takes over a failed master).
    fn start(port: u16, node_timeout: Duration) -> Self {
        let timeout_arg = node_timeout.as_millis().to_string();
        let dir = std::env::temp_dir().join(unique(&format!("redis-cluster-{port}")));
        std::fs::create_dir_all(&dir).unwrap();
        let dir = dir
            .to_str()
            .expect("a UTF-8 temporary directory")
            .to_owned();
        let port_arg = port.to_string();
        let conf = format!("{dir}/nodes-{port}.conf");
        let guard = Command::new("sh")
            .args(["-c", Self::GUARD, "sh", &dir])
            .args(["--port", &port_arg, "--bind", "127.0.0.1", "--dir", &dir])
            .args(["--cluster-enabled", "yes", "--cluster-config-file", &conf])
            .args(["--cluster-node-timeout", &timeout_arg])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh");
        let node = Self { port, guard };
        wait_until_up(port);
        node
    }
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        drop(self.guard.stdin.take()); // the guard stops the server
        let _ = self.guard.wait();
    }
}

/// A Redis Cluster of three masters on free loopback ports, each with
/// `replicas` replicas, private to one test binary.
pub(crate) struct RedisCluster {
    nodes: Vec<ClusterNode>,
}

/// Redis's default: a node is failing after 15 s of silence.
const NODE_TIMEOUT: Duration = Duration::from_secs(15);

impl RedisCluster {
    /// The binary's cluster, started on first use (`redis-server
    /// --cluster-enabled yes` three times, `redis-cli --cluster create`,
    /// then until every node reports `cluster_state:ok`). `None` if the
    /// Redis binaries are missing and `REDIS_URL` is unset (see
    /// [`redis_binaries`]); panics if the cluster does not come up.
    pub(crate) fn shared(what: &str) -> Option<&'static Self> {
        static CLUSTER: OnceLock<Result<RedisCluster, String>> = OnceLock::new();
        redis_binaries(what)?;
        let started = CLUSTER.get_or_init(|| {
            std::panic::catch_unwind(|| Self::start(0, NODE_TIMEOUT)).map_err(|panic| {
                let message = panic.downcast_ref::<String>().map(String::as_str);
                let message = message.or_else(|| panic.downcast_ref::<&str>().copied());
                message.unwrap_or("a panic").to_owned()
            })
        });
        match started {
            Ok(cluster) => Some(cluster),
            Err(error) => panic!("the Redis Cluster did not start: {error}"),
        }
    }

    /// A cluster of this test's own: three masters with `replicas`
    /// replicas each, where a master silent for `node_timeout` fails over
    /// to a replica. `None` if the Redis binaries are missing (see
    /// [`redis_binaries`]).
    pub(crate) fn private(what: &str, replicas: usize, node_timeout: Duration) -> Option<Self> {
        redis_binaries(what)?;
        Some(Self::start(replicas, node_timeout))
    }

    fn start(replicas: usize, node_timeout: Duration) -> Self {
        let nodes: Vec<_> = (0..3 * (1 + replicas))
            .map(|_| ClusterNode::start(free_port(), node_timeout))
            .collect();
        let addresses: Vec<_> = nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli");
        assert!(
            created.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        let cluster = Self { nodes };
        cluster.wait_until_ok();
        cluster
    }

    fn wait_until_ok(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        for url in self.urls() {
            loop {
                let info: Option<String> = ::redis::Client::open(url.as_str())
                    .and_then(|client| client.get_connection())
                    .and_then(|mut node| ::redis::cmd("CLUSTER").arg("INFO").query(&mut node))
                    .ok();
                if info.is_some_and(|info| info.contains("cluster_state:ok")) {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{url} never reported cluster_state:ok"
                );
                // Real servers agreeing on slots: paused time cannot apply.
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Stops the node listening on `port`, as a crash would for its peers.
    pub(crate) fn stop(&mut self, port: u16) {
        self.nodes.retain(|node| node.port != port);
    }

    /// The URL of each node.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|node| format!("redis://127.0.0.1:{}", node.port))
            .collect()
    }

    /// A store on this cluster, reached through every node, under a key
    /// prefix of its own.
    #[cfg(feature = "redis-cluster")]
    pub(crate) async fn store(&self) -> RedisStore {
        RedisStore::cluster_builder(self.urls())
            .prefix(format!("{}:", unique("test")))
            .timeout(Duration::from_secs(2))
            .connect()
            .await
            .unwrap()
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
