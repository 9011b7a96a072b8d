//! The command line beside a running server.
//!
//! redb lets one process open a ledger file. While `laneledger serve` holds one, it leaves a
//! discovery file beside it, `LEDGER.serve.json` (mode 0600: the address it bound, its pid, where
//! its token comes from, its body limits), and removes it when it stops. A command that finds
//! the file held asks that server instead: `sql`, `review`, `verify`, `export` and `ingest`
//! print what they print on the file itself. A discovery file whose server is gone is ignored:
//! it is only read when the ledger is held, and its server must answer.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use laneledger_query::archive::export::{ExportSummary, ExportedFile, ExportedTable, LEDGER_DIR, LEDGER_TABLES};
use laneledger_store::{Counters, InputFormat};
use serde_json::Value;

use super::usage::usage;
use crate::cli::{FormatArg, KindArg, ReviewFormat, SqlFormat};

/// The environment variable the server's token is read from (as `serve` reads it).
const TOKEN_ENV: &str = "LANELEDGER_TOKEN";
/// Problems printed per input, as local ingest prints them.
const PRINT_PROBLEMS: usize = 50;

/// `LEDGER.serve.json`: where `serve` says how to reach it.
pub fn discovery_path(db: &Path) -> PathBuf {
    let mut name = db.file_name().unwrap_or_default().to_os_string();
    name.push(".serve.json");
    db.with_file_name(name)
}

/// The discovery file of a running `serve`, removed when dropped (the server stopped).
pub struct Discovery {
    path: PathBuf,
}

/// What `serve` writes into its discovery file.
pub struct Announce<'a> {
    /// The address the listener bound.
    pub addr: std::net::SocketAddr,
    /// `--token-file`, when the token came from one.
    pub token_file: Option<&'a Path>,
    /// Whether a token is configured at all.
    pub has_token: bool,
    /// Whether reads need the token.
    pub reads_need_token: bool,
    /// `--body-limit`.
    pub body_limit: usize,
    /// `--max-records`.
    pub max_records: usize,
    /// `--config`, the lane.yaml whose settings the server's answers use.
    pub config: Option<&'a Path>,
}

impl Discovery {
    /// Writes the discovery file of the server now serving `db`: under a temporary name with mode
    /// 0600, then renamed over any stale one. It names where the token comes from (the token
    /// file, or the environment variable), never the token itself.
    pub fn write(db: &Path, a: &Announce) -> anyhow::Result<Discovery> {
        let path = discovery_path(db);
        // A wildcard address is reached on loopback from this machine.
        let mut addr = a.addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr.ip() {
                std::net::IpAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                std::net::IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let token = match (a.token_file, a.has_token) {
            (Some(f), _) => serde_json::json!({ "file": absolute(f) }),
            (None, true) => serde_json::json!({ "env": TOKEN_ENV }),
            (None, false) => Value::Null,
        };
        let doc = serde_json::json!({
            "url": format!("http://{addr}"),
            "pid": std::process::id(),
            "ledger": absolute(db),
            "token": token,
            "reads_need_token": a.reads_need_token,
            "body_limit": a.body_limit,
            "max_records": a.max_records,
            "config": a.config.map(absolute),
        });
        let tmp = path.with_extension(format!("json.{}", std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut f = options
            .open(&tmp)
            .with_context(|| format!("writing the discovery file {}", tmp.display()))?;
        f.write_all(format!("{doc:#}\n").as_bytes())?;
        drop(f);
        std::fs::rename(&tmp, &path).with_context(|| format!("writing the discovery file {}", path.display()))?;
        Ok(Discovery { path })
    }
}

impl Drop for Discovery {
    fn drop(&mut self) {
        // Only this server's file: a later server of the same ledger writes its own.
        let ours = std::fs::read_to_string(&self.path)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|v| v["pid"].as_u64() == Some(u64::from(std::process::id())));
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A server that holds the ledger, as its discovery file describes it.
pub struct Remote {
    db: PathBuf,
    url: String,
    pid: u64,
    token: Option<String>,
    token_hint: String,
    body_limit: usize,
    max_records: usize,
    config: Option<PathBuf>,
    agent: ureq::Agent,
}

/// Whether `e` says the ledger is held by another process.
fn held_elsewhere(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<laneledger_store::Error>(),
            Some(laneledger_store::Error::AlreadyOpen(_))
        )
    })
}

/// The server holding `db`, when opening it failed with `error` because another process holds
/// it and that process is a `laneledger serve` that answers; else `error`, saying what to do.
pub fn through_server(db: &Path, error: anyhow::Error) -> anyhow::Result<Remote> {
    if !held_elsewhere(&error) {
        return Err(error);
    }
    match find(db) {
        Found::Server(remote) => Ok(*remote),
        Found::None => bail!(
            "{error:#}: another command is using it (no `laneledger serve` announces itself beside it); \
             try again when it is done"
        ),
        Found::Silent { url, pid, why } => bail!(
            "{error:#}; the server that announced itself beside it (pid {pid}, {url}) does not answer ({why}): \
             another command holds the file, try again when it is done"
        ),
    }
}

/// What the discovery file of a held ledger led to.
enum Found {
    /// No discovery file (or one that cannot be read).
    None,
    /// A server that answered.
    Server(Box<Remote>),
    /// The file named a server that did not answer.
    Silent { url: String, pid: u64, why: String },
}

fn find(db: &Path) -> Found {
    let Some(doc) = std::fs::read_to_string(discovery_path(db))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
    else {
        return Found::None;
    };
    let Some(url) = doc["url"].as_str().map(|u| u.trim_end_matches('/').to_string()) else {
        return Found::None;
    };
    let pid = doc["pid"].as_u64().unwrap_or(0);
    let (token, token_hint) = match (std::env::var(TOKEN_ENV).ok(), &doc["token"]) {
        (Some(t), _) => (Some(t.trim().to_string()), format!("sent the token in {TOKEN_ENV}")),
        (None, Value::Object(m)) if m.contains_key("file") => {
            let file = m["file"].as_str().unwrap_or_default();
            match std::fs::read_to_string(file) {
                Ok(t) => (Some(t.trim().to_string()), format!("sent the token of {file}")),
                Err(e) => (
                    None,
                    format!("sent no token: the server's token file {file} cannot be read ({e}); set {TOKEN_ENV}"),
                ),
            }
        }
        (None, Value::Object(_)) => (None, format!("sent no token: set {TOKEN_ENV} to the server's token")),
        _ => (None, "sent no token: the server has none".to_string()),
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(5)))
        .build()
        .into();
    // The server must answer: a file left by a server that was killed names nobody.
    let probe: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    match probe.get(format!("{url}/healthz")).call() {
        Ok(r) if r.status().as_u16() == 200 => {}
        Ok(r) => {
            return Found::Silent {
                url,
                pid,
                why: format!("/healthz answered {}", r.status()),
            };
        }
        Err(e) => {
            return Found::Silent {
                url,
                pid,
                why: e.to_string(),
            };
        }
    }
    Found::Server(Box::new(Remote {
        db: db.to_path_buf(),
        url,
        pid,
        token,
        token_hint,
        body_limit: doc["body_limit"].as_u64().unwrap_or(16 << 20) as usize,
        max_records: doc["max_records"].as_u64().unwrap_or(100_000) as usize,
        config: doc["config"].as_str().map(PathBuf::from),
        agent,
    }))
}

/// The error of a second `serve` on a held ledger: which server holds it, when one answers.
pub fn refuse_second_server(db: &Path, error: anyhow::Error) -> anyhow::Error {
    if !held_elsewhere(&error) {
        return error;
    }
    match find(db) {
        Found::Server(r) => anyhow::anyhow!(
            "ledger {} is already open by another process: `laneledger serve` (pid {}) serves it at {}/, \
             and one server per ledger file is the limit. \
             Use that one (`sql`, `review`, `export`, `verify` and `ingest` on this file go through it), \
             or stop it first",
            db.display(),
            r.pid,
            r.url
        ),
        _ => anyhow::anyhow!("{error:#}: another command is using it; try again when it is done"),
    }
}

/// A server's answer: its status and body.
struct Answer {
    status: u16,
    body: ureq::Body,
    headers: ureq::http::HeaderMap,
}

impl Answer {
    fn text(&mut self) -> anyhow::Result<String> {
        self.body
            .with_config()
            .limit(u64::MAX)
            .read_to_string()
            .context("reading the server's answer")
    }
}

impl Remote {
    fn send(
        &self,
        method: &str,
        path_and_query: &str,
        content_type: Option<&str>,
        body: Option<&[u8]>,
    ) -> anyhow::Result<Answer> {
        self.send_with(method, path_and_query, content_type, None, body)
    }

    fn send_with(
        &self,
        method: &str,
        path_and_query: &str,
        content_type: Option<&str>,
        request_id: Option<&str>,
        body: Option<&[u8]>,
    ) -> anyhow::Result<Answer> {
        let url = format!("{}{path_and_query}", self.url);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let result = if method == "GET" {
            let mut r = self.agent.get(&url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.call()
        } else {
            let mut r = self.agent.post(&url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            if let Some(c) = content_type {
                r = r.header("Content-Type", c);
            }
            if let Some(id) = request_id {
                r = r.header("X-Request-Id", id);
            }
            r.send(body.unwrap_or_default())
        };
        let response = result.with_context(|| {
            format!(
                "{} is held by `laneledger serve` (pid {}) at {}/, which did not answer",
                self.db.display(),
                self.pid,
                self.url
            )
        })?;
        let status = response.status().as_u16();
        let (parts, body) = response.into_parts();
        Ok(Answer {
            status,
            body,
            headers: parts.headers,
        })
    }

    /// The error of an answer other than success: 400 and 404 are the user's (exit 2), the rest
    /// the server's or the access rules' (exit 1).
    fn failed(&self, mut a: Answer) -> anyhow::Error {
        let text = a.text().unwrap_or_default();
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or_else(|| text.trim().to_string());
        match a.status {
            400 | 404 => usage(message),
            401 | 403 => anyhow::anyhow!(
                "the server holding {} ({}/) refused the request ({}): {message} ({})",
                self.db.display(),
                self.url,
                a.status,
                self.token_hint
            ),
            s => anyhow::anyhow!(
                "the server holding {} ({}/) answered {s}: {message}",
                self.db.display(),
                self.url
            ),
        }
    }

    /// Refuses a `--config` other than the server's: its answers use the lane.yaml it was
    /// started with.
    pub fn same_config(&self, config: Option<&Path>) -> anyhow::Result<()> {
        let Some(given) = config else { return Ok(()) };
        let canonical = |p: &Path| std::fs::canonicalize(p).ok();
        if self.config.as_deref().and_then(canonical).is_some()
            && canonical(given) == self.config.as_deref().and_then(canonical)
        {
            return Ok(());
        }
        Err(usage(format!(
            "--config {}: {} is held by `laneledger serve` at {}/, whose answers use {}; \
             leave --config out, or give the server's",
            given.display(),
            self.db.display(),
            self.url,
            match &self.config {
                Some(c) => format!("its own lane.yaml ({})", c.display()),
                None => "the documented defaults (it was started without --config)".to_string(),
            }
        )))
    }

    /// `laneledger sql` through `POST /v1/sql?format=…`: the same text. The server's
    /// `--sql-timeout` and `--sql-memory` apply; past the timeout the command exits 5.
    pub fn sql(&self, format: SqlFormat, sql: &str) -> anyhow::Result<ExitCode> {
        let f = match format {
            SqlFormat::Table => "table",
            SqlFormat::Csv => "csv",
            SqlFormat::Json => "json",
        };
        let body = serde_json::json!({ "sql": sql }).to_string();
        let mut a = self.send(
            "POST",
            &format!("/v1/sql?format={f}"),
            Some("application/json"),
            Some(body.as_bytes()),
        )?;
        match a.status {
            200 => {
                super::print(&a.text()?)?;
                // An answer cut at the server's result limits says so, as `sql` does on the file.
                if let Some(cut) = a.headers.get("laneledger-cut").and_then(|v| v.to_str().ok()) {
                    eprintln!("laneledger: {cut}");
                }
                Ok(ExitCode::SUCCESS)
            }
            408 => {
                let e = self.failed(a);
                eprintln!("laneledger: {e} (the server's --sql-timeout)");
                Ok(ExitCode::from(super::sql::TIMED_OUT))
            }
            _ => Err(self.failed(a)),
        }
    }

    /// `laneledger review` through `GET /v1/review`: text as the server renders it, or its JSON
    /// document printed as the command prints it.
    pub fn review(&self, week: Option<&str>, format: ReviewFormat) -> anyhow::Result<ExitCode> {
        let mut query = Vec::new();
        if let Some(w) = week {
            query.push(format!("week={}", encode(w)));
        }
        if matches!(format, ReviewFormat::Text) {
            query.push("format=text".to_string());
        }
        let path = if query.is_empty() {
            "/v1/review".to_string()
        } else {
            format!("/v1/review?{}", query.join("&"))
        };
        let mut a = self.send("GET", &path, None, None)?;
        if a.status != 200 {
            return Err(self.failed(a));
        }
        let text = a.text()?;
        match format {
            ReviewFormat::Text => super::print(&text)?,
            ReviewFormat::Json => {
                let v: Value = serde_json::from_str(&text).context("reading the server's review")?;
                super::print(&format!("{}\n", serde_json::to_string_pretty(&v)?))?;
            }
        }
        Ok(ExitCode::SUCCESS)
    }

    /// `laneledger verify` through `POST /v1/verify`: the chain and every record, checked and
    /// logged by the server. redb's page checksums need the file to itself, and stderr says so.
    pub fn verify(&self) -> anyhow::Result<ExitCode> {
        let mut a = self.send("POST", "/v1/verify", None, None)?;
        if a.status != 200 {
            return Err(self.failed(a));
        }
        let v: Value = serde_json::from_str(&a.text()?).context("reading the server's verify report")?;
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        use laneledger_query::words::counted;
        eprintln!(
            "laneledger: {} is held by `laneledger serve` at {}/: it checked the chain and every record; \
             the page checksums need the file to itself (verify a copy, or verify once the server stops)",
            self.db.display(),
            self.url
        );
        if v["logged"] == Value::Bool(false) {
            eprintln!(
                "laneledger: {} cannot be written: this run is not logged in verify_run",
                self.db.display()
            );
        }
        if v["clean"] == Value::Bool(true) {
            super::print(&format!(
                "clean: {}, {}, {} crossed; tip {}\n",
                counted(n("entries"), "chain entry", "chain entries"),
                counted(n("records"), "record", "records"),
                counted(n("checkpoints"), "checkpoint", "checkpoints"),
                v["tip"].as_str().unwrap_or_default()
            ))?;
            return Ok(ExitCode::SUCCESS);
        }
        let problems = n("problems");
        eprintln!(
            "laneledger: {} does not verify ({} problem{}); first bad record: {}",
            self.db.display(),
            problems,
            if problems == 1 { "" } else { "s" },
            v["first_bad"].as_str().unwrap_or_default()
        );
        Ok(ExitCode::from(super::verify::BROKEN))
    }

    /// `laneledger export` through `GET /v1/export`: the server's tar archive unpacked into `out`
    /// (each file under a hidden name, then renamed, as a local export writes), and the same
    /// summary.
    pub fn export(
        &self,
        format: &str,
        out: &Path,
        since: Option<&str>,
        until: Option<&str>,
    ) -> anyhow::Result<ExitCode> {
        let mut query = vec![format!("format={format}")];
        if let Some(s) = since {
            query.push(format!("since={}", encode(s)));
        }
        if let Some(u) = until {
            query.push(format!("until={}", encode(u)));
        }
        let a = self.send("GET", &format!("/v1/export?{}", query.join("&")), None, None)?;
        if a.status != 200 {
            return Err(self.failed(a));
        }
        let header = |name: &str| a.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let rows: u64 = header(laneledger_web::api::cli_api::EXPORT_ROWS_HEADER)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let table_rows: Vec<(String, u64)> = header(laneledger_web::api::cli_api::EXPORT_TABLES_HEADER)
            .unwrap_or_default()
            .split(',')
            .filter_map(|p| p.split_once('='))
            .map(|(t, n)| (t.to_string(), n.parse().unwrap_or(0)))
            .collect();
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let entries = unpack(a.body.into_reader(), out)?;
        let mut summary = ExportSummary {
            out: out.to_path_buf(),
            rows,
            days: 0,
            bytes: 0,
            files: Vec::new(),
            tables: Vec::new(),
        };
        for (rel, len) in entries.iter().filter_map(|(r, l)| l.map(|l| (r, l))) {
            let mut parts = rel.split('/');
            if let (Some(day), Some(_), None) = (parts.next(), parts.next(), parts.next())
                && let Some(day) = day
                    .strip_prefix("day=")
                    .and_then(|d| chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").ok())
            {
                summary.days += 1;
                summary.bytes += len;
                summary.files.push(ExportedFile {
                    day,
                    path: out.join(rel),
                    rows: 0,
                    bytes: len,
                });
            }
        }
        for table in LEDGER_TABLES {
            let Some((_, rows)) = table_rows.iter().find(|(t, _)| t == table) else {
                continue;
            };
            let under = format!("{LEDGER_DIR}/{table}/");
            let files: Vec<(&String, u64)> = entries
                .iter()
                .filter_map(|(r, l)| l.filter(|_| r.starts_with(&under)).map(|l| (r, l)))
                .collect();
            summary.tables.push(ExportedTable {
                table,
                dir: out.join(LEDGER_DIR).join(table),
                rows: *rows,
                bytes: files.iter().map(|(_, l)| l).sum(),
                files: files.iter().map(|(r, _)| out.join(r)).collect(),
            });
        }
        super::print(&format!("{summary}\n"))?;
        Ok(ExitCode::SUCCESS)
    }

    /// `laneledger ingest` (NDJSON or CSV attempts or gate decisions) through `POST /v1/attempts`
    /// or `/v1/decisions`: each input in requests of whole records under the server's body and
    /// record limits (a CSV's header row heads each), every problem named by its file and line
    /// as local ingest names it, and the same summary line.
    pub fn ingest(
        &self,
        kind: KindArg,
        format: Option<FormatArg>,
        files: &[String],
        batch: usize,
    ) -> anyhow::Result<ExitCode> {
        let route = match kind {
            KindArg::Attempts => "/v1/attempts",
            KindArg::Decisions => "/v1/decisions",
        };
        let mut total = Counters::default();
        for name in files {
            let csv = match format {
                Some(FormatArg::Csv) => true,
                Some(_) => false,
                None => InputFormat::from_path(name) == InputFormat::Csv,
            };
            let reader: Box<dyn BufRead> = if name == "-" {
                Box::new(BufReader::new(std::io::stdin().lock()))
            } else {
                let f = std::fs::File::open(name).with_context(|| format!("opening {name}"))?;
                Box::new(BufReader::with_capacity(1 << 16, f))
            };
            let mut file = FileSend {
                name,
                csv,
                route,
                kind,
                counters: Counters::default(),
                problems: Vec::new(),
            };
            self.send_file(&mut file, reader, batch)?;
            for p in file.problems.iter().take(PRINT_PROBLEMS) {
                eprintln!("{p}");
            }
            let problems = file.counters.rejected + file.counters.conflicts;
            if problems > PRINT_PROBLEMS as u64 {
                eprintln!(
                    "{name}: … and {} more (all kept: SELECT * FROM ingest_reject / attempt_conflict)",
                    problems - PRINT_PROBLEMS as u64
                );
            }
            total.merge(&file.counters);
        }
        println!("{total}");
        Ok(if total.rejected > 0 || total.conflicts > 0 {
            ExitCode::from(3)
        } else {
            ExitCode::SUCCESS
        })
    }

    fn send_file(&self, file: &mut FileSend, mut reader: Box<dyn BufRead>, batch: usize) -> anyhow::Result<()> {
        let per_request = batch.clamp(1, self.max_records.max(1));
        let mut records = RecordSplitter {
            reader: &mut reader,
            csv: file.csv,
            line: 0,
        };
        let name = file.name;
        let read_err = |e: std::io::Error| anyhow::Error::new(e).context(format!("reading {name}"));
        // A CSV's header row heads every request, so the server reads each as a whole file.
        let header = if file.csv {
            records.next_record().map_err(read_err)?.map(|(_, raw)| raw)
        } else {
            None
        };
        let header_lines = header.as_ref().map_or(0, |h| lines_in(h));
        let mut next = records.next_record().map_err(read_err)?;
        while let Some((first_line, first)) = next.take() {
            let mut body = header.clone().unwrap_or_default();
            body.extend_from_slice(&first);
            let mut count = 1;
            loop {
                match records.next_record().map_err(read_err)? {
                    Some((_, raw)) if count < per_request && body.len() + raw.len() <= self.body_limit => {
                        body.extend_from_slice(&raw);
                        count += 1;
                    }
                    other => {
                        next = other;
                        break;
                    }
                }
            }
            // A body's line L is the file's line first_line + L - (its first record's line).
            let offset = first_line as i64 - (header_lines as i64 + 1);
            self.post_chunk(file, &body, first_line, offset)?;
        }
        Ok(())
    }

    fn post_chunk(&self, file: &mut FileSend, body: &[u8], first_line: u64, offset: i64) -> anyhow::Result<()> {
        let content_type = if file.csv { "text/csv" } else { "application/x-ndjson" };
        let id = request_id(file.name, first_line);
        let mut waited = 0;
        let text = loop {
            let mut a = self.send_with("POST", file.route, Some(content_type), Some(&id), Some(body))?;
            match a.status {
                200 | 207 => break a.text()?,
                // The writer's queue is full: the same request again shortly (it wrote nothing).
                503 if waited < 120 => {
                    waited += 1;
                    std::thread::sleep(Duration::from_secs(1));
                }
                _ => {
                    return Err(self.failed(a).context(format!(
                        "{}: the request from line {first_line} on (the records before it are in)",
                        file.name
                    )));
                }
            }
        };
        let v: Value = serde_json::from_str(&text).context("reading the server's answer")?;
        let t = &v["totals"];
        let n = |k: &str| t[k].as_u64().unwrap_or(0);
        file.counters.merge(&Counters {
            accepted: n("accepted"),
            completed: n("completed"),
            duplicates: n("duplicates"),
            conflicts: n("conflicts"),
            rejected: n("rejected"),
        });
        for r in v["results"].as_array().into_iter().flatten() {
            let line = (r["line"].as_i64().unwrap_or(0) + offset).max(0);
            let name = file.name;
            match r["result"].as_str() {
                Some("rejected") => {
                    let reason = r["reason"].as_str().unwrap_or_default();
                    file.problems.push(match r["field"].as_str() {
                        Some(f) => format!("{name}:{line}: {f}: {reason}"),
                        None => format!("{name}:{line}: {reason}"),
                    });
                }
                Some("conflict") => {
                    let job = r["job_id"].as_str().unwrap_or_default();
                    let who = match file.kind {
                        KindArg::Attempts => format!("job {job} attempt {}", r["attempt_no"]),
                        KindArg::Decisions => {
                            format!("job {job} decision at {}", r["decided_at"].as_str().unwrap_or_default())
                        }
                    };
                    let fields: Vec<&str> = r["fields"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    file.problems.push(format!(
                        "{name}:{line}: conflict: {who} differs in {}; the first row stays",
                        fields.join(", ")
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

impl Remote {
    /// The answer to `ingest --mapping` while a server holds the ledger: a mapping file is read
    /// here, and the server takes a router's own records only through its built-in mappings.
    pub fn mapped_refused(&self, mapping: &laneledger_store::ingest::mapping::Mapping) -> anyhow::Error {
        anyhow::anyhow!(
            "{} is held by `laneledger serve` at {}/: send the router's log to it as \
             `POST {}/v1/attempts?mapping={}` (built-in mappings), or stop the server to ingest it here",
            self.db.display(),
            self.url,
            self.url,
            mapping.name()
        )
    }
}

/// One input being sent.
struct FileSend<'a> {
    name: &'a str,
    csv: bool,
    route: &'a str,
    kind: KindArg,
    counters: Counters,
    problems: Vec<String>,
}

/// The request's id, which the server keeps as the source of its rejects and conflicts
/// (`POST /v1/attempts attempts.ndjson:10001`): the input's file name and the request's first
/// line, in printable ASCII, at most 64 bytes.
fn request_id(name: &str, first_line: u64) -> String {
    let base = Path::new(name).file_name().map_or(name.into(), |n| n.to_string_lossy());
    let clean: String = base
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '_' })
        .collect();
    let suffix = format!(":{first_line}");
    let keep = clean.len().min(64 - suffix.len());
    format!("{}{suffix}", &clean[..keep])
}

/// Lines a record's raw bytes span.
fn lines_in(raw: &[u8]) -> u64 {
    let n = raw.iter().filter(|&&b| b == b'\n').count() as u64;
    if raw.last() == Some(&b'\n') { n } else { n + 1 }
}

/// Whole records of an input, with the line each starts on: a line for NDJSON, a CSV record
/// for CSV (its quoted fields may hold line ends).
struct RecordSplitter<'a> {
    reader: &'a mut Box<dyn BufRead>,
    csv: bool,
    line: u64,
}

impl RecordSplitter<'_> {
    fn next_record(&mut self) -> std::io::Result<Option<(u64, Vec<u8>)>> {
        let mut raw = Vec::new();
        let first = self.line + 1;
        let mut quoted = false;
        loop {
            let start = raw.len();
            if self.reader.read_until(b'\n', &mut raw)? == 0 {
                break;
            }
            self.line += 1;
            if self.csv {
                quoted ^= raw[start..].iter().filter(|&&b| b == b'"').count() % 2 == 1;
            }
            if !quoted {
                break;
            }
        }
        Ok((!raw.is_empty()).then_some((first, raw)))
    }
}

/// Percent-encodes a query value.
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~:".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Unpacks a tar archive into `out`, each file under a hidden name first and then renamed (a
/// rerun overwrites, a cut-off transfer leaves no half file under a real name). Returns each
/// member's path, with its size for files (`None` for folders).
fn unpack(mut tar: impl Read, out: &Path) -> anyhow::Result<Vec<(String, Option<u64>)>> {
    let mut entries = Vec::new();
    let mut header = [0u8; 512];
    loop {
        tar.read_exact(&mut header)
            .context("reading the export from the server")?;
        if header.iter().all(|&b| b == 0) {
            break;
        }
        let field = |at: usize, len: usize| {
            let f = &header[at..at + len];
            String::from_utf8_lossy(&f[..f.iter().position(|&b| b == 0).unwrap_or(len)]).into_owned()
        };
        let (name, prefix) = (field(0, 100), field(345, 155));
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let rel = rel.trim_end_matches('/').to_string();
        let size = u64::from_str_radix(field(124, 12).trim(), 8).context("a bad tar header from the server")?;
        // Only plain relative paths: nothing the server sends may land outside `out`.
        let path = Path::new(&rel);
        if rel.is_empty() || !path.components().all(|c| matches!(c, Component::Normal(_))) {
            bail!("the server's export holds an unsafe path {rel:?}");
        }
        let target = out.join(path);
        if header[156] == b'5' {
            std::fs::create_dir_all(&target).with_context(|| format!("creating {}", target.display()))?;
            entries.push((rel, None));
            continue;
        }
        let parent = target.parent().unwrap_or(out);
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        let tmp = parent.join(format!(
            ".{}.part-{}",
            target.file_name().unwrap_or_default().to_string_lossy(),
            std::process::id()
        ));
        let mut f = std::fs::File::create(&tmp).with_context(|| format!("writing {}", tmp.display()))?;
        let copied = std::io::copy(&mut (&mut tar).take(size), &mut f).context("reading the export from the server")?;
        if copied != size {
            let _ = std::fs::remove_file(&tmp);
            bail!("the server's export stopped in the middle of {rel}");
        }
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, &target).with_context(|| format!("writing {}", target.display()))?;
        let pad = (512 - size % 512) % 512;
        std::io::copy(&mut (&mut tar).take(pad), &mut std::io::sink())?;
        entries.push((rel, Some(size)));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_records_keep_their_quoted_line_ends_and_first_lines() {
        let text = "a,b\n1,\"x\ny\"\n2,z\n";
        let mut reader: Box<dyn BufRead> = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
        let mut s = RecordSplitter {
            reader: &mut reader,
            csv: true,
            line: 0,
        };
        let mut got = Vec::new();
        while let Some((line, raw)) = s.next_record().unwrap() {
            got.push((line, String::from_utf8(raw).unwrap()));
        }
        assert_eq!(
            got,
            [
                (1, "a,b\n".to_string()),
                (2, "1,\"x\ny\"\n".to_string()),
                (4, "2,z\n".to_string())
            ]
        );
        assert_eq!(request_id("dir/at tempts.ndjson", 10_001), "at_tempts.ndjson:10001");
        assert_eq!(encode("2026-W47 x&y"), "2026-W47%20x%26y");
    }
}
