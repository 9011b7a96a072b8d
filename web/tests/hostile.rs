//! Hostile requests against a real listener (issue 36): statements that would run for hours or
//! panic, a full SQL queue, slow and idle connections. Each asserts the status, the answer inside
//! its limit plus slack, `/healthz` answering meanwhile, and the SQL threads going idle after the
//! answer. Bounds are generous (seconds): this runs on a 2-core CI box, in a debug build.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use laneledger_query::Session;
use laneledger_store::{DEFAULT_BATCH, InputFormat, LaneConfig, Ledger, ingest_reader};
use laneledger_web::{AppState, Auth, Options, Token, Writer, serve_until};

/// The token writes need.
const TOKEN: &str = "hostile-token-0123456789abcdef";
use serde_json::Value;

/// A server on a loopback port, stopped when dropped.
struct Served {
    addr: SocketAddr,
    session: Session,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// `n` generated attempts, one job each.
fn attempts(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "{{\"job_id\":\"job-{i:06}\",\"idem_key\":\"idem-{i:06}\",\"attempt_no\":1,\"lane\":\"free\",\
                 \"started_at\":\"2026-11-23T10:{:02}:{:02}Z\",\"ended_at\":\"2026-11-23T10:{:02}:{:02}.5Z\",\
                 \"outcome\":\"ok\",\"tokens_in\":{},\"tokens_out\":700,\"artifact_id\":\"art-{i:06}\"}}\n",
                (i / 60) % 60,
                i % 60,
                (i / 60) % 60,
                i % 60,
                100 + i
            )
        })
        .collect()
}

/// Serves a ledger of `n` attempts with `options` on its own runtime (the test's threads are the
/// clients).
fn serve(n: usize, options: Options) -> Served {
    serve_with_memory(n, options, laneledger_query::session::QUERY_MEMORY_BYTES)
}

/// [`serve`] with `memory` bytes for the SQL memory pool.
fn serve_with_memory(n: usize, options: Options, memory: usize) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("hostile.redb")).unwrap();
    let text = attempts(n);
    ingest_reader(
        &ledger,
        "gen",
        text.as_bytes(),
        InputFormat::Ndjson,
        DEFAULT_BATCH,
        |_| {},
    )
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let session = Session::with_memory_limit(ledger.clone(), LaneConfig::default(), memory)
                .await
                .unwrap();
            let (writer, _writer_thread) = Writer::spawn(ledger, 64).unwrap();
            let auth = Auth {
                token: Some(Token::new(TOKEN).unwrap()),
                reads_need_token: false,
            };
            let state = AppState::new(session.clone(), session.thresholds())
                .with_writer(writer, auth)
                .with_options(options);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send((listener.local_addr().unwrap(), session)).unwrap();
            serve_until(listener, state, async {
                let _ = stop_rx.await;
            })
            .await
            .unwrap();
        });
    });
    let (addr, session) = rx.recv().unwrap();
    Served {
        addr,
        session,
        stop: Some(stop_tx),
        _dir: dir,
    }
}

/// One answer: status, headers (lower-case names) and body.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Sends one request on a new connection (`Connection: close`) and reads the whole answer.
fn request(addr: SocketAddr, method: &str, path: &str, body: &str) -> std::io::Result<Answer> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no answer: {text:?}")))?;
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line: {head:?}")))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok(Answer { status, headers, body })
}

/// A chunked body's data.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&after[..n]);
        rest = &after[n + 2..];
    }
    out
}

fn sql(addr: SocketAddr, statement: &str) -> Answer {
    let body = serde_json::json!({ "sql": statement }).to_string();
    request(addr, "POST", "/v1/sql", &body).unwrap()
}

/// `/healthz`'s status and how long it took.
fn healthz(addr: SocketAddr) -> (u16, Duration) {
    let t = Instant::now();
    let status = request(addr, "GET", "/healthz", "").map_or(0, |a| a.status);
    (status, t.elapsed())
}

/// The SQL threads' CPU ticks used over one second, starting `settle` from now.
fn sql_ticks_over_a_second(session: &Session, settle: Duration) -> u64 {
    std::thread::sleep(settle);
    let before = session.sql_cpu_ticks().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    session.sql_cpu_ticks().unwrap() - before
}

const CROSS_JOIN: &str = "SELECT count(*) FROM job_attempt a, job_attempt b, job_attempt c \
                          WHERE a.tokens_in + b.tokens_in + c.tokens_in >= 0";

#[test]
fn a_cross_join_gets_408_in_time_healthz_answers_meanwhile_and_its_cpu_stops() {
    let s = serve(
        2_000,
        Options {
            sql_timeout: Duration::from_secs(2),
            ..Options::default()
        },
    );
    let addr = s.addr;
    let t = Instant::now();
    let query = std::thread::spawn(move || (sql(addr, CROSS_JOIN), t.elapsed()));
    std::thread::sleep(Duration::from_millis(500));
    // The statement holds both SQL threads; the HTTP workers still answer.
    let mut slowest = Duration::ZERO;
    while !query.is_finished() {
        let (status, took) = healthz(addr);
        assert_eq!(status, 200);
        slowest = slowest.max(took);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        slowest < Duration::from_secs(2),
        "/healthz took {slowest:?} during the statement"
    );
    let (answer, took) = query.join().unwrap();
    assert_eq!(answer.status, 408, "{}", answer.body);
    assert_eq!(answer.json()["error"], "the query ran longer than 2 s and was stopped");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(4),
        "408 after {took:?}"
    );
    let used = sql_ticks_over_a_second(&s.session, Duration::from_secs(1));
    assert!(
        used <= 20,
        "the SQL threads used {used} ticks in the second after the answer"
    );
    // /metrics shows the SQL threads' CPU time: about two cores for two seconds, less when the
    // other tests of this binary (the measuring children among them) share the cores.
    let metrics = request(addr, "GET", "/metrics", "").unwrap();
    let seconds: f64 = metrics
        .body
        .lines()
        .find_map(|l| l.strip_prefix("laneledger_sql_cpu_seconds_total "))
        .expect("the counter")
        .parse()
        .unwrap();
    assert!(seconds >= 0.5, "{seconds}");
}

#[test]
fn repeat_past_the_cap_is_a_json_422_and_the_server_goes_on() {
    let s = serve(2_000, Options::default());
    let a = sql(s.addr, "SELECT max(length(repeat(job_id, 100000))) FROM job_attempt");
    assert_eq!(a.status, 422, "{}", a.body);
    let e = a.json()["error"].as_str().unwrap().to_string();
    assert!(
        e.contains("repeat would build more than 67108864 bytes of text in one batch"),
        "{e}"
    );
    let a = sql(s.addr, "SELECT length(repeat('x', 1000000000)) AS n");
    assert_eq!(a.status, 422, "{}", a.body);
    assert!(
        a.body.contains("past the limit for repeat, lpad and rpad"),
        "{}",
        a.body
    );
    // Under the cap the same functions answer.
    let a = sql(
        s.addr,
        "SELECT max(length(rpad(job_id, 20, '-'))) AS n FROM job_attempt",
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["rows"], serde_json::json!([{ "n": 20 }]));
    assert_eq!(healthz(s.addr).0, 200);
}

#[test]
fn an_answer_past_the_result_caps_is_cut_and_says_so_in_json_csv_and_a_header() {
    let s = serve(
        2_000,
        Options {
            sql_result: laneledger_query::ResultLimits {
                max_rows: 3,
                max_bytes: 1 << 20,
            },
            ..Options::default()
        },
    );
    let notice = "the answer was cut after 3 rows: it reached the limit of 3 rows; add a LIMIT or aggregate, \
                  or use laneledger export for whole tables";
    let a = sql(s.addr, "SELECT value FROM generate_series(1, 5) ORDER BY value");
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.header("laneledger-cut"), Some(notice));
    let v = a.json();
    assert_eq!(v["rows"], serde_json::json!([{"value": 1}, {"value": 2}, {"value": 3}]));
    assert_eq!(v["row_count"], 3);
    assert_eq!(
        v["cut"],
        serde_json::json!({"rows": 3, "limit": "rows", "max": 3, "message": notice})
    );
    let body = serde_json::json!({ "sql": "SELECT value FROM generate_series(1, 5) ORDER BY value" }).to_string();
    let a = request(s.addr, "POST", "/v1/sql?format=csv", &body).unwrap();
    assert_eq!((a.status, a.body.as_str()), (200, "value\r\n1\r\n2\r\n3\r\n"));
    assert_eq!(a.header("laneledger-cut"), Some(notice));
    // Under the caps: no header, and "cut": null.
    let a = sql(s.addr, "SELECT value FROM generate_series(1, 3)");
    assert_eq!(a.header("laneledger-cut"), None);
    assert_eq!(a.json()["cut"], Value::Null);
    // 8,192 rows of 1,000 bytes pass 1 MiB in the first batch.
    let a = sql(s.addr, "SELECT repeat('x', 1000) AS s FROM generate_series(1, 100000)");
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        (a.json()["row_count"].clone(), a.json()["cut"]["limit"].clone()),
        (serde_json::json!(0), serde_json::json!("bytes"))
    );
}

#[test]
fn past_the_sql_queue_a_request_gets_503_with_retry_after() {
    let s = serve(
        2_000,
        Options {
            sql_timeout: Duration::from_secs(3),
            query_concurrency: 1,
            query_queue: 1,
            ..Options::default()
        },
    );
    let addr = s.addr;
    let running = std::thread::spawn(move || sql(addr, CROSS_JOIN).status);
    std::thread::sleep(Duration::from_millis(500));
    let waiting = std::thread::spawn(move || sql(addr, "SELECT 1 AS one").status);
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    let refused = sql(addr, "SELECT 2 AS two");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(refused.json()["error"].as_str().unwrap().contains("--query-queue"));
    assert_eq!(running.join().unwrap(), 408);
    // The waiting one ran once the turn was free.
    assert_eq!(waiting.join().unwrap(), 200);
}

/// Whether the server closed `s` (read gives end of file or an error) within `limit`.
fn closed_within(s: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let t = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut buf = [0u8; 1024];
    while t.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) => return Some(t.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return Some(t.elapsed()),
        }
    }
    None
}

fn short_timeouts() -> Options {
    Options {
        header_timeout: Duration::from_secs(1),
        keep_alive_timeout: Duration::from_secs(1),
        body_timeout: Duration::from_secs(1),
        ..Options::default()
    }
}

#[test]
fn a_slow_header_and_a_silent_connection_are_closed_after_the_header_timeout() {
    let s = serve(10, short_timeouts());
    // Silent from the accept.
    let mut silent = TcpStream::connect(s.addr).unwrap();
    // One byte of the head every 300 ms.
    let mut slow = TcpStream::connect(s.addr).unwrap();
    let writer = {
        let mut w = slow.try_clone().unwrap();
        std::thread::spawn(move || {
            for b in b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" {
                if w.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        })
    };
    let took = closed_within(&mut silent, Duration::from_secs(5)).expect("the silent connection stays open");
    assert!(took >= Duration::from_millis(800), "closed after {took:?}");
    assert!(
        closed_within(&mut slow, Duration::from_secs(5)).is_some(),
        "the slow connection stays open"
    );
    writer.join().unwrap();
    assert_eq!(healthz(s.addr).0, 200);
}

#[test]
fn an_idle_kept_alive_connection_is_closed_after_the_keep_alive_timeout() {
    let s = serve(10, short_timeouts());
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut buf = [0u8; 4096];
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let n = c.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let took = closed_within(&mut c, Duration::from_secs(5)).expect("the kept-alive connection stays open");
    assert!(took >= Duration::from_millis(800), "closed after {took:?}");
}

#[test]
fn a_stalled_body_is_400_after_the_body_timeout() {
    let s = serve(10, short_timeouts());
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.write_all(
        b"POST /v1/sql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"sql\":",
    )
    .unwrap();
    let t = Instant::now();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

#[test]
fn an_idle_flood_does_not_block_healthz() {
    let s = serve(10, Options::default());
    let flood: Vec<TcpStream> = (0..300).map(|_| TcpStream::connect(s.addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let (status, took) = healthz(s.addr);
    assert_eq!(status, 200);
    assert!(took < Duration::from_secs(2), "{took:?}");
    // An authenticated write from a new client too.
    let t = Instant::now();
    let line = attempts(11).lines().last().unwrap().to_string();
    let a = request(s.addr, "POST", "/v1/attempts", &line).unwrap();
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["totals"]["accepted"], 1);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    drop(flood);
}

#[test]
fn past_the_connection_cap_new_connections_are_closed_and_healthz_answers_once_idle_ones_time_out() {
    let s = serve(
        10,
        Options {
            max_connections: 20,
            ..short_timeouts()
        },
    );
    let flood: Vec<TcpStream> = (0..40).map(|_| TcpStream::connect(s.addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    // The header timeout frees the slots the silent connections hold.
    let t = Instant::now();
    let mut status = 0;
    while t.elapsed() < Duration::from_secs(5) {
        status = healthz(s.addr).0;
        if status == 200 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(status, 200);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    drop(flood);
    // The refusals are counted (in this process: other tests' servers add theirs).
    let metrics = request(s.addr, "GET", "/metrics", "").unwrap();
    let refused: u64 = metrics
        .body
        .lines()
        .find_map(|l| l.strip_prefix("laneledger_connections_refused_total "))
        .expect("the counter")
        .parse()
        .unwrap();
    assert!(refused >= 20, "{refused}");
}

#[test]
fn a_million_tiny_records_are_413_naming_the_limit() {
    let s = serve(10, Options::default());
    let body = format!("[{}]", vec!["{}"; 1_000_000].join(","));
    let t = Instant::now();
    let a = request(s.addr, "POST", "/v1/attempts", &body).unwrap();
    assert_eq!(a.status, 413, "{}", a.body);
    assert_eq!(
        a.json()["error"],
        "the body holds 1000000 records, more than the 100000 a request may hold (--max-records); split it"
    );
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(healthz(s.addr).0, 200);
}

#[test]
fn past_the_first_hundred_rejects_are_counted_by_reason_and_accepted_results_are_unchanged() {
    let s = serve(0, Options::default());
    let good = attempts(2);
    let mut body = good.clone();
    for _ in 0..150 {
        body.push_str("{}\n");
    }
    let a = request(s.addr, "POST", "/v1/attempts", &body).unwrap();
    assert_eq!(a.status, 207, "{}", a.body);
    let v = a.json();
    assert_eq!(v["totals"]["accepted"], 2);
    assert_eq!(v["totals"]["rejected"], 150);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 102);
    assert_eq!(
        results[0],
        serde_json::json!({ "line": 1, "job_id": "job-000000", "attempt_no": 1, "result": "accepted" })
    );
    assert_eq!(results[2]["line"], 3);
    assert_eq!(results[2]["result"], "rejected");
    assert_eq!(results[101]["line"], 102);
    let more = v["more_rejected"].as_object().unwrap();
    assert_eq!(more.values().map(|n| n.as_u64().unwrap()).sum::<u64>(), 50, "{more:?}");
    let reason = format!(
        "{}: {}",
        results[2]["field"].as_str().unwrap(),
        results[2]["reason"].as_str().unwrap()
    );
    assert_eq!(more[&reason], 50, "{more:?}");
}

#[test]
fn hostile_statements_at_once_each_get_408_healthz_answers_and_the_cpu_stops() {
    let s = serve(
        2_000,
        Options {
            sql_timeout: Duration::from_secs(2),
            query_concurrency: 8,
            ..Options::default()
        },
    );
    let statements: [&'static str; 6] = [
        // A recursive CTE without end.
        "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT count(*) FROM t",
        // A huge generate_series.
        "SELECT count(*) FROM generate_series(1, 1000000000000) g",
        // A regex over a cross join.
        "SELECT count(*) FROM job_attempt a, job_attempt b WHERE regexp_like(a.job_id || b.job_id, '(a+)+b')",
        // string_agg and DISTINCT over a cross join.
        "SELECT length(string_agg(a.job_id, ',')) FROM job_attempt a, job_attempt b, job_attempt c",
        "SELECT count(DISTINCT a.job_id || b.job_id || c.job_id) FROM job_attempt a, job_attempt b, job_attempt c",
        // A nested-loop join whose filter keeps nothing.
        "SELECT count(*) FROM job_attempt a, job_attempt b, job_attempt c WHERE a.tokens_in + b.tokens_in < c.tokens_in - 5000",
    ];
    let addr = s.addr;
    let t = Instant::now();
    let running: Vec<_> = statements
        .into_iter()
        .map(|q| std::thread::spawn(move || (sql(addr, q), t.elapsed())))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut slowest = Duration::ZERO;
    while running.iter().any(|r| !r.is_finished()) {
        let (status, took) = healthz(addr);
        assert_eq!(status, 200);
        slowest = slowest.max(took);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(slowest < Duration::from_secs(2), "/healthz took {slowest:?}");
    for (q, r) in statements.iter().zip(running) {
        let (answer, took) = r.join().unwrap();
        assert_eq!(answer.status, 408, "{q}: {}", answer.body);
        assert!(took < Duration::from_secs(5), "{q}: 408 after {took:?}");
    }
    let used = sql_ticks_over_a_second(&s.session, Duration::from_secs(1));
    assert!(
        used <= 20,
        "the SQL threads used {used} ticks in the second after the answers"
    );
}

/// A field of `/proc/self/status` in bytes (`VmRSS`, `VmHWM`: the resident set, its peak).
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Runs test `name` of this binary alone in a child process (with `HOSTILE_CHILD` set), so what it
/// measures of the process is its own, and returns the child's standard output.
fn alone(name: &str) -> String {
    // One measuring child at a time, so they do not add up in the cores the other tests share.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env("HOSTILE_CHILD", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn a_body_of_bad_records_takes_at_most_64_times_its_size_plus_128_mib() {
    if std::env::var_os("HOSTILE_CHILD").is_none() {
        let out = alone("a_body_of_bad_records_takes_at_most_64_times_its_size_plus_128_mib");
        assert!(out.contains("peak growth "), "{out}");
        return;
    }
    let s = serve(0, Options::default());
    assert_eq!(healthz(s.addr).0, 200);
    // 100,000 records of `{}` (the most a request may hold), every one rejected: 300 KB.
    let body = "{}\n".repeat(100_000);
    let before = status_bytes("VmRSS");
    let t = Instant::now();
    let a = request(s.addr, "POST", "/v1/attempts", &body).unwrap();
    let took = t.elapsed();
    let grown = status_bytes("VmHWM").saturating_sub(before);
    assert_eq!(a.status, 207, "{}", a.body);
    let v = a.json();
    assert_eq!(v["totals"]["rejected"], 100_000);
    assert_eq!(v["results"].as_array().unwrap().len(), 100);
    // The records themselves (about 300 bytes each as the writer takes them), their rejects kept
    // in `ingest_reject` and chained, and the results: about 1 KiB a record, at most
    // `--max-records` of them.
    let bound = 64 * body.len() as u64 + (128 << 20);
    println!(
        "peak growth {} KiB for a body of {} bytes ({} bytes a record), bound {} KiB, in {took:?}",
        grown / 1024,
        body.len(),
        grown / 100_000,
        bound / 1024
    );
    assert!(grown <= bound, "the request took {grown} bytes, past {bound}");
}

#[test]
fn large_value_statements_at_once_stay_under_the_pool_plus_256_mib() {
    if std::env::var_os("HOSTILE_CHILD").is_none() {
        let out = alone("large_value_statements_at_once_stay_under_the_pool_plus_256_mib");
        assert!(out.contains("peak growth "), "{out}");
        return;
    }
    const POOL: usize = 64 << 20;
    let s = serve_with_memory(
        2_000,
        Options {
            sql_timeout: Duration::from_secs(3),
            query_concurrency: 5,
            ..Options::default()
        },
        POOL,
    );
    assert_eq!(healthz(s.addr).0, 200);
    let statements: [&'static str; 5] = [
        "SELECT length(string_agg(a.job_id || b.job_id, ',')) FROM job_attempt a, job_attempt b",
        // Text behind string views, which DataFusion's own array_agg left out of the pool.
        "SELECT array_agg(CAST(repeat(a.job_id, 20) AS VARCHAR)) IS NULL FROM job_attempt a, job_attempt b",
        "SELECT max(length(concat(repeat(job_id, 2000), repeat(job_id, 2000)))) FROM job_attempt",
        "SELECT max(length(concat(repeat(a.job_id, 5000), b.job_id))) FROM job_attempt a, job_attempt b",
        "SELECT count(DISTINCT a.job_id || b.job_id) FROM job_attempt a, job_attempt b",
    ];
    let before = status_bytes("VmRSS");
    let addr = s.addr;
    let t = Instant::now();
    let running: Vec<_> = statements
        .into_iter()
        .map(|q| std::thread::spawn(move || (sql(addr, q), t.elapsed())))
        .collect();
    for (q, r) in statements.iter().zip(running) {
        let (answer, took) = r.join().unwrap();
        assert!(
            answer.status == 422 || answer.status == 408,
            "{q}: {} {}",
            answer.status,
            answer.body
        );
        assert!(answer.json()["error"].is_string(), "{q}: {}", answer.body);
        if q.contains("array_agg") {
            // Refused by the pool, not merely stopped by the clock.
            assert_eq!(answer.status, 422, "{q}: {}", answer.body);
            assert!(answer.body.contains("Resources exhausted"), "{q}: {}", answer.body);
        }
        assert!(took < Duration::from_secs(8), "{q}: answered after {took:?}");
        println!("{q}: {} after {took:?}", answer.status);
    }
    let grown = status_bytes("VmHWM").saturating_sub(before);
    let bound = POOL as u64 + (256 << 20);
    println!(
        "peak growth {} KiB for five statements at once under a {} KiB pool, bound {} KiB",
        grown / 1024,
        POOL / 1024,
        bound / 1024
    );
    assert!(grown <= bound, "the statements took {grown} bytes, past {bound}");
    assert_eq!(healthz(s.addr).0, 200);
}
