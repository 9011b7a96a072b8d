//! A `laneledger serve` child process and a small HTTP client for it, shared by the crash test
//! (`tests/crash.rs`) and the load benchmark (`benches/http_load.rs`).

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The token the child is started with.
pub const TOKEN: &str = "crash-and-load-token-0123456789";

/// A free loopback port (bound, then released for the child).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A running `laneledger serve`.
pub struct ServerProcess {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

impl ServerProcess {
    /// Starts `bin serve --db db` on a free port with [`TOKEN`] and waits until `/healthz`
    /// answers 200 (at most `wait`). `None` when it did not come up. The server's log goes to the
    /// file LANELEDGER_SERVE_LOG names, if set, else nowhere.
    pub fn start(bin: &Path, db: &Path, extra: &[&str], wait: Duration) -> Option<ServerProcess> {
        let port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        let child = Command::new(bin)
            .args(["serve", "--db"])
            .arg(db)
            .args(["--addr", &format!("127.0.0.1:{port}")])
            .args(extra)
            .env("LANELEDGER_TOKEN", TOKEN)
            .env("LANELEDGER_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(match std::env::var_os("LANELEDGER_SERVE_LOG") {
                Some(path) => Stdio::from(std::fs::File::create(path).expect("create LANELEDGER_SERVE_LOG")),
                None => Stdio::null(),
            })
            .spawn()
            .expect("start laneledger serve");
        let mut server = ServerProcess { child, base };
        let agent = agent(Duration::from_secs(2));
        let start = Instant::now();
        while start.elapsed() < wait {
            if let Ok(Some(_)) = server.child.try_wait() {
                return None;
            }
            if let Ok(r) = agent.get(format!("{}/healthz", server.base)).call()
                && r.status() == 200
            {
                return Some(server);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        server.kill();
        None
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, then reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        self.child.wait().expect("wait for laneledger serve")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A blocking HTTP client that reports every status as a response, not an error.
pub fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into()
}

/// POSTs `body` to `base/path` with the bearer token: `Ok((status, body))`, or `Err` when no
/// answer came (the server died, the connection was refused or reset).
pub fn post(agent: &ureq::Agent, base: &str, path: &str, body: &[u8]) -> Result<(u16, String), String> {
    let mut r = agent
        .post(format!("{base}{path}"))
        .header("Authorization", &format!("Bearer {TOKEN}"))
        .header("Content-Type", "application/x-ndjson")
        .send(body)
        .map_err(|e| e.to_string())?;
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
    Ok((status, text))
}

/// The NDJSON line of generated attempt `i` (job `{prefix}{i}`, attempt 1, every field set).
pub fn attempt_line(prefix: &str, i: usize) -> String {
    format!(
        r#"{{"job_id":"{prefix}{i:08}","idem_key":"{prefix}idem-{i:08}","attempt_no":1,"lane":"{}","started_at":"2026-11-23T{:02}:{:02}:{:02}Z","ended_at":"2026-11-23T{:02}:{:02}:{:02}.9Z","outcome":"ok","tokens_in":{},"tokens_out":700,"artifact_id":"{prefix}art-{i:08}"}}"#,
        if i.is_multiple_of(8) { "paid" } else { "free" },
        (i / 3600) % 24,
        (i / 60) % 60,
        i % 60,
        (i / 3600) % 24,
        (i / 60) % 60,
        i % 60,
        100 + i % 1000
    )
}

/// The binary under test.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_laneledger"))
}
