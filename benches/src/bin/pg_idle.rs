//! PostgreSQL idle cost: how many statements an oncebox instance sends to the database when there
//! is nothing to deliver, at default settings.
//!
//! The instance (facade `Oncebox` with a `PgDialect`, every background job on: stuck-event
//! recovery, clean-up, DLQ transfer both ways, DLQ and inbox clean-up, LISTEN/NOTIFY wake-ups)
//! reaches PostgreSQL only through a small TCP proxy in this process that reads the frontend
//! protocol and counts every statement execution (`Bind` of a prepared statement, or a simple
//! `Query`) by its SQL text. So the count covers everything the library sends, its pool and its
//! listener connection included, without a server extension. Nothing is published during the run.
//!
//! ```sh
//! ONCEBOX_PG_URL=postgres://postgres@127.0.0.1:5432/test \
//!   /work/target-bench/release/pg_idle --minutes 60
//! ```

use std::collections::{BTreeMap, HashMap};
use std::error::Error;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use oncebox::Oncebox;
use oncebox_benches::{BenchResult, fresh_name, run_against};
use oncebox_core::{Config, TableNames};
use oncebox_postgres::{DEFAULT_MAX_CONNECTIONS, PgDialect, connect_options};
use oncebox_testkit::MemoryBroker;
use sqlx::postgres::{PgPoolOptions, PgSslMode};
use sqlx::{AssertSqlSafe, PgPool};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const URL_VARIABLE: &str = "ONCEBOX_PG_URL";
const URL_EXAMPLE: &str = "postgres://postgres@127.0.0.1:5432/test";
/// The protocol codes a client may send instead of a startup message.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
const CANCEL_REQUEST: u32 = 80_877_102;

#[derive(Parser, Debug)]
#[command(about = "Statements an idle oncebox instance sends to PostgreSQL, at default settings")]
struct Args {
    /// How long the idle instance runs, in minutes (fractions allowed).
    #[arg(long, default_value_t = 60.0)]
    minutes: f64,
    /// How many event types the outbox polls.
    #[arg(long, default_value_t = 3)]
    event_types: usize,
}

fn main() -> Result<(), Box<dyn Error>> {
    run_against(URL_VARIABLE, URL_EXAMPLE, Args::parse(), run)
}

/// Statement executions seen by the proxy, keyed by the statement's normalised SQL.
#[derive(Default)]
struct Tally {
    by_statement: BTreeMap<String, u64>,
    /// Executions of the claim statement per event type (its first parameter).
    claims_by_type: BTreeMap<String, u64>,
    connections: u64,
}

type SharedTally = Arc<Mutex<Tally>>;

fn record(tally: &SharedTally, update: impl FnOnce(&mut Tally)) {
    if let Ok(mut tally) = tally.lock() {
        update(&mut tally);
    }
}

async fn run(args: Args, url: String) -> BenchResult<()> {
    if args.event_types == 0 || !args.minutes.is_finite() || args.minutes <= 0.0 {
        return Err("--event-types must be at least 1 and --minutes a positive number".into());
    }
    let upstream = connect_options(&url)?;
    let upstream_address = format!("{}:{}", upstream.get_host(), upstream.get_port());
    let prefix = format!("{}_", fresh_name("idle_"));
    let tally = SharedTally::default();
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let proxy_port = listener.local_addr()?.port();
    tokio::spawn(accept_loop(listener, upstream_address.clone(), prefix.clone(), tally.clone()));

    // Plain text through the proxy, so its frontend messages can be read.
    let proxied = upstream.clone().host("127.0.0.1").port(proxy_port).ssl_mode(PgSslMode::Disable);
    let pool = PgPoolOptions::new().max_connections(DEFAULT_MAX_CONNECTIONS).connect_with(proxied).await?;
    let direct = PgPoolOptions::new().max_connections(1).connect_with(upstream).await?;

    let event_types: Vec<String> = (0..args.event_types).map(|i| format!("idle-{}", i + 1)).collect();
    let config = Config::from_yaml_str(&idle_config(&prefix, &event_types))?;
    let tables = TableNames::with_prefix(&prefix)?;
    println!("server: {upstream_address}, proxy 127.0.0.1:{proxy_port}, table prefix {prefix}");
    println!("event types: {}", event_types.join(", "));

    let outcome = idle_run(&args, config, PgDialect::new(pool.clone()), &tally).await;
    pool.close().await;
    let dropped = drop_tables(&direct, &tables).await;
    direct.close().await;
    let elapsed = outcome?;
    dropped?;
    report(&tally, elapsed, event_types.len());
    println!("\ntables under {prefix} dropped");
    Ok(())
}

/// Default settings everywhere; only the sections that switch jobs on and the event types are set.
fn idle_config(prefix: &str, event_types: &[String]) -> String {
    let events: String = event_types
        .iter()
        .map(|event_type| format!("      {event_type}: {{ topic: idle-topic }}\n"))
        .collect();
    format!(
        "oncebox:\n  tables: {{ prefix: {prefix} }}\n  outbox:\n    dlq: {{ enabled: true }}\n    events:\n{events}  inbox: {{}}\n"
    )
}

async fn idle_run(
    args: &Args,
    config: Config,
    dialect: PgDialect,
    tally: &SharedTally,
) -> BenchResult<Duration> {
    let outbox = Oncebox::builder(config).dialect(dialect).sender(MemoryBroker::new()).start().await?;
    let started = Instant::now();
    // Statements of the start-up (schema creation, LISTEN) are part of the count.
    let run_for = Duration::from_secs_f64(args.minutes * 60.0);
    let mut next_progress = Duration::from_secs(600);
    while started.elapsed() < run_for {
        tokio::time::sleep(Duration::from_secs(1).min(run_for.saturating_sub(started.elapsed()))).await;
        if started.elapsed() >= next_progress {
            let total: u64 = tally.lock().map(|t| t.by_statement.values().sum()).unwrap_or_default();
            println!("{:>4.0} min: {total} statements so far", started.elapsed().as_secs_f64() / 60.0);
            next_progress += Duration::from_secs(600);
        }
    }
    let elapsed = started.elapsed();
    outbox.shutdown(Duration::from_secs(30)).await?;
    let stats = outbox.stats();
    if stats.delivered != 0 || stats.task_errors != 0 {
        return Err(format!(
            "an idle run delivered {} events with {} task errors",
            stats.delivered, stats.task_errors
        )
        .into());
    }
    Ok(elapsed)
}

async fn drop_tables(pool: &PgPool, tables: &TableNames) -> BenchResult<()> {
    let names = [tables.events(), tables.dlq(), tables.consumed(), tables.jobs()].join(", ");
    sqlx::raw_sql(AssertSqlSafe(format!("DROP TABLE IF EXISTS {names}"))).execute(pool).await?;
    Ok(())
}

fn report(tally: &SharedTally, elapsed: Duration, event_types: usize) {
    let Ok(tally) = tally.lock() else {
        println!("the tally is unavailable");
        return;
    };
    let hours = elapsed.as_secs_f64() / 3600.0;
    let total: u64 = tally.by_statement.values().sum();
    println!("\nidle for {:.1} min over {} connections\n", elapsed.as_secs_f64() / 60.0, tally.connections);
    println!("| statement (SQL, prefix removed, cut at 90 chars) | executions | per hour |");
    println!("|---|---:|---:|");
    let mut rows: Vec<(&String, &u64)> = tally.by_statement.iter().collect();
    rows.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (statement, count) in rows {
        let cell = statement.replace('|', "\\|");
        println!("| `{cell}` | {count} | {:.0} |", *count as f64 / hours);
    }
    println!("| **all statements** | **{total}** | **{:.0}** |", total as f64 / hours);
    println!("\n| event type | claims | claims per hour |");
    println!("|---|---:|---:|");
    for (event_type, count) in &tally.claims_by_type {
        println!("| {event_type} | {count} | {:.0} |", *count as f64 / hours);
    }
    println!(
        "\nall statements per event type per hour: {:.0} ({event_types} event types; the jobs are shared)",
        total as f64 / hours / event_types as f64
    );
}

async fn accept_loop(listener: TcpListener, upstream: String, prefix: String, tally: SharedTally) {
    while let Ok((client, _)) = listener.accept().await {
        let (upstream, prefix, tally) = (upstream.clone(), prefix.clone(), tally.clone());
        tokio::spawn(async move {
            if let Err(error) = proxy(client, &upstream, &prefix, tally).await {
                eprintln!("proxy connection ended: {error}");
            }
        });
    }
}

async fn proxy(client: TcpStream, upstream: &str, prefix: &str, tally: SharedTally) -> BenchResult<()> {
    let server = TcpStream::connect(upstream).await?;
    record(&tally, |t| t.connections += 1);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let replies = tokio::spawn(async move { tokio::io::copy(&mut server_read, &mut client_write).await });
    let mut reader = FrontendReader { prefix, tally, statements: HashMap::new(), started: false };
    let mut buffer: Vec<u8> = Vec::with_capacity(8192);
    let mut chunk = [0u8; 8192];
    loop {
        let read = client_read.read(&mut chunk).await?;
        if read == 0 {
            break;
        }
        buffer.extend_from_slice(&chunk[..read]);
        let consumed = reader.consume(&buffer);
        server_write.write_all(&buffer[..consumed]).await?;
        buffer.drain(..consumed);
    }
    server_write.shutdown().await?;
    replies.abort();
    Ok(())
}

/// Reads the client side of one connection message by message.
struct FrontendReader<'p> {
    prefix: &'p str,
    tally: SharedTally,
    /// Prepared statement name → (normalised SQL, whether it is the claim); "" is the unnamed one.
    statements: HashMap<String, (String, bool)>,
    started: bool,
}

impl FrontendReader<'_> {
    /// Counts every complete message at the start of `bytes`; returns how many bytes they span.
    fn consume(&mut self, bytes: &[u8]) -> usize {
        let mut at = 0;
        loop {
            let rest = &bytes[at..];
            if !self.started {
                // Startup-phase messages have no type byte: length, then a protocol or request code.
                let Some(length) = read_u32(rest, 0).map(|n| n as usize) else { return at };
                if rest.len() < length || length < 8 {
                    return at;
                }
                let code = read_u32(rest, 4).unwrap_or_default();
                if !matches!(code, SSL_REQUEST | GSSENC_REQUEST | CANCEL_REQUEST) {
                    self.started = true;
                }
                at += length;
                continue;
            }
            let Some(length) = read_u32(rest, 1).map(|n| n as usize) else { return at };
            if rest.len() < 1 + length || length < 4 {
                return at;
            }
            self.message(rest[0], &rest[5..1 + length]);
            at += 1 + length;
        }
    }

    fn message(&mut self, kind: u8, body: &[u8]) {
        match kind {
            b'P' => {
                let mut fields = body.split(|byte| *byte == 0);
                let name = fields.next().map(lossy).unwrap_or_default();
                let sql = fields.next().map(lossy).unwrap_or_default();
                self.statements.insert(name, (normalise(&sql, self.prefix), is_claim(&sql)));
            }
            b'B' => {
                let mut fields = body.splitn(3, |byte| *byte == 0);
                let _portal = fields.next();
                let name = fields.next().map(lossy).unwrap_or_default();
                let (statement, claim) =
                    self.statements.get(&name).cloned().unwrap_or_else(|| ("(unknown)".into(), false));
                let claimed_type = claim.then(|| first_parameter(fields.next())).flatten();
                record(&self.tally, |t| {
                    *t.by_statement.entry(statement).or_default() += 1;
                    if let Some(event_type) = claimed_type {
                        *t.claims_by_type.entry(event_type).or_default() += 1;
                    }
                });
            }
            b'Q' => {
                let sql =
                    normalise(&lossy(body.split(|byte| *byte == 0).next().unwrap_or_default()), self.prefix);
                record(&self.tally, |t| *t.by_statement.entry(sql).or_default() += 1);
            }
            _ => {}
        }
    }
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let field: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
    Some(u32::from_be_bytes(field))
}

fn read_u16(bytes: &[u8], at: usize) -> Option<usize> {
    let field: [u8; 2] = bytes.get(at..at + 2)?.try_into().ok()?;
    Some(usize::from(u16::from_be_bytes(field)))
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn is_claim(statement: &str) -> bool {
    statement.contains("FOR UPDATE SKIP LOCKED") && statement.contains("SET status = 'IN_PROCESS'")
}

/// The first parameter of a `Bind` message (after portal and statement names): the claim's event
/// type, sent as text whatever the format code says, since text and binary forms of `text` agree.
fn first_parameter(after_names: Option<&[u8]>) -> Option<String> {
    let bytes = after_names?;
    let formats = read_u16(bytes, 0)?;
    let at = 2 + 2 * formats;
    if read_u16(bytes, at)? == 0 {
        return None;
    }
    let length = read_u32(bytes, at + 2)? as usize;
    bytes.get(at + 6..at + 6 + length).map(lossy)
}

/// SQL without comment lines, whitespace collapsed, the table prefix removed, cut to 90 chars.
fn normalise(sql: &str, prefix: &str) -> String {
    let text: Vec<&str> = sql
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .flat_map(str::split_whitespace)
        .collect();
    let text = text.join(" ").replace(prefix, "");
    if text.is_empty() {
        return "(empty query)".into();
    }
    match text.char_indices().nth(90) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}
