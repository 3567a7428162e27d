//! A real rate-limiting reverse proxy nobody here wrote: nginx's
//! `limit_req` (a leaky bucket per client address) in front of a static
//! file, on a free loopback port, with its own configuration, logs and
//! process. `.ci/run` installs nginx (`nginx-light`) where it is missing.
//!
//! The access log is the upstream's own count: every request nginx saw,
//! with its status and the instant it was logged.

use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How nginx answers past its limit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limit {
    /// Requests per second.
    pub(crate) rate: u32,
    /// Requests beyond the rate nginx takes (queued, or at once with
    /// `nodelay`) before it refuses.
    pub(crate) burst: u32,
    /// Serve the burst at once instead of delaying it to the rate.
    pub(crate) nodelay: bool,
    /// The `Retry-After` of its 429s, in seconds.
    pub(crate) retry_after: u32,
}

/// One request nginx logged.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Logged {
    /// Seconds since the Unix epoch, to the millisecond.
    pub(crate) at: f64,
    pub(crate) status: u16,
}

/// An nginx process; stopped when dropped.
pub(crate) struct Nginx {
    pub(crate) addr: SocketAddr,
    dir: tempfile::TempDir,
    child: Child,
}

impl Nginx {
    /// Starts nginx with `limit` on a free loopback port, or says the
    /// test was skipped and returns `None` where nginx is not installed.
    pub(crate) fn start(limit: Limit) -> Option<Self> {
        let Some(binary) = binary() else {
            super::skip(
                "nginx",
                "nginx is not installed: `apt-get install nginx-light` (scripts/test does)",
            );
            return None;
        };
        let dir = tempfile::tempdir().expect("a temporary directory");
        // nginx's workers drop root for `nobody`: let them in.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::create_dir(dir.path().join("www")).unwrap();
        fs::write(dir.path().join("www/index.html"), "ok\n").unwrap();
        let addr = free_port();
        write_config(dir.path(), addr, limit);
        let child = Command::new(&binary)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {}: {error}", binary.display()));
        let nginx = Self { addr, dir, child };
        nginx.wait_until_listening();
        Some(nginx)
    }

    fn wait_until_listening(&self) {
        for _ in 0..100 {
            if std::net::TcpStream::connect(self.addr).is_ok() {
                return;
            }
            // Waits on a real process: real time.
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "nginx did not listen on {}; its error log: {}",
            self.addr,
            fs::read_to_string(self.dir.path().join("logs/error.log")).unwrap_or_default()
        );
    }

    /// Changes the limit while nginx runs (a configuration reload: the new
    /// workers take over within a few milliseconds).
    pub(crate) fn set_limit(&self, limit: Limit) {
        write_config(self.dir.path(), self.addr, limit);
        assert!(self.signal("-HUP"), "could not reload nginx");
    }

    /// Every request logged so far.
    pub(crate) fn log(&self) -> Vec<Logged> {
        let text = fs::read_to_string(self.dir.path().join("logs/access.log")).unwrap_or_default();
        text.lines()
            .filter_map(|line| {
                let (at, status) = line.split_once(' ')?;
                Some(Logged {
                    at: at.parse().ok()?,
                    status: status.trim().parse().ok()?,
                })
            })
            .collect()
    }

    /// The URL of the limited file.
    pub(crate) fn url(&self) -> String {
        format!("http://{}/index.html", self.addr)
    }
}

impl Nginx {
    /// Sends `signal` to the master process.
    fn signal(&self, signal: &str) -> bool {
        Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .is_ok_and(|status| status.success())
    }
}

impl Drop for Nginx {
    /// Stops the master, which stops its workers (killing only the master
    /// would leave them running, listening on their ports).
    fn drop(&mut self) {
        if self.signal("-TERM") {
            for _ in 0..100 {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                // Waits on a real process: real time.
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Seconds since the Unix epoch now, as the access log writes them.
pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn binary() -> Option<PathBuf> {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|path| path.exists())
}

fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

fn write_config(dir: &Path, addr: SocketAddr, limit: Limit) {
    let d = dir.display();
    let nodelay = if limit.nodelay { " nodelay" } else { "" };
    let config = format!(
        "worker_processes 1;
daemon off;
master_process on;
pid {d}/nginx.pid;
error_log {d}/logs/error.log warn;
events {{ worker_connections 1024; }}
http {{
  log_format timed '$msec $status';
  access_log {d}/logs/access.log timed;
  limit_req_zone $binary_remote_addr zone=upstream:1m rate={rate}r/s;
  limit_req_status 429;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  keepalive_requests 100000;
  server {{
    listen {addr};
    location / {{
      limit_req zone=upstream burst={burst}{nodelay};
      add_header Retry-After {retry_after} always;
      root {d}/www;
    }}
  }}
}}
",
        rate = limit.rate,
        burst = limit.burst,
        retry_after = limit.retry_after,
    );
    fs::create_dir_all(dir.join("logs")).unwrap();
    fs::write(dir.join("nginx.conf"), config).unwrap();
}
