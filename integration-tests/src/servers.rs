//! The servers the chaos harness breaks on purpose, so that the machine's shared servers are never
//! restarted under the other suites that use them.
//!
//! * [`PrivatePostgres`] — a throw-away PostgreSQL cluster in its own temporary directory and port,
//!   stopped like a crash ([`PrivatePostgres::stop_immediately`]) and started again.
//! * [`PrivateMariadb`] — the same for MariaDB: `mariadb-install-db`, then `mariadbd` killed with
//!   SIGKILL and started again.
//! * [`PrivateKafka`] — a throw-away Kafka-protocol broker (`tansu`, in memory) frozen with SIGSTOP
//!   and thawed with SIGCONT, which looks to clients like a broker that stopped answering.
//! * [`RabbitApp`] — the one exception: there is no private RabbitMQ here, so the shared node's
//!   application is stopped and started the way an operator would (the node, its durable queues and
//!   persistent messages stay). Its guard starts the application again when dropped, so a failing or
//!   panicking harness never leaves the shared broker down.
//!
//! Everything is driven through the servers' own command-line tools (`initdb`, `pg_ctl`,
//! `mariadb-install-db`, `kill`, `rabbitmqctl`), so the crate needs no `libc` or `nix` dependency and no `unsafe`.

use std::fs::File;
use std::io::ErrorKind as IoErrorKind;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use oncebox::Result;

use crate::plumbing;

/// Upper bound for one database tool run (`initdb`, `pg_ctl`, `mariadb-install-db`); `pg_ctl` itself
/// waits at most 60 s, so this only stops a tool that hangs for a reason of its own (a full disk, a
/// stuck `runuser`).
const DATABASE_COMMAND_LIMIT: Duration = Duration::from_secs(120);

/// Upper bound for one `rabbitmqctl` call: a node that does not answer within a minute is not going
/// to, and the harness must not hang on it.
const RABBITMQCTL_LIMIT: Duration = Duration::from_secs(60);

/// How long a freshly spawned server (a broker, MariaDB) may take to accept connections.
const SERVER_READY_LIMIT: Duration = Duration::from_secs(60);

/// How many lines of a server's log an error carries: enough for the reason a start failed, short
/// enough to read in a test report.
const LOG_TAIL_LINES: usize = 30;

/// The install hint given when no `tansu` binary can be found.
const TANSU_INSTALL: &str = "cargo install tansu --locked --version 0.6.0 --features dynostore";

/// A TCP port on 127.0.0.1 that nothing listens on right now.
///
/// The port is found by letting the kernel pick one for a listener that is then dropped. Another
/// process could take it before the caller binds it, but the kernel hands out ephemeral ports in
/// rotation, so this is far less likely than with a guessed port.
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|error| plumbing("finding a free port on 127.0.0.1", error))?;
    let address =
        listener.local_addr().map_err(|error| plumbing("reading the port the kernel picked", error))?;
    Ok(address.port())
}

/// A PostgreSQL cluster of the harness's own, in a fresh temporary directory on a free port of
/// 127.0.0.1, with trust authentication for the `postgres` user.
///
/// The harness stops it like a crash and starts it again to prove that the relay and the consumers
/// survive a database restart; doing that to the machine's shared server would break everyone else.
/// Dropping it stops the server and removes the directory.
#[derive(Debug)]
pub struct PrivatePostgres {
    /// Where `initdb` and `pg_ctl` live.
    bindir: PathBuf,
    /// Holds the data directory, the server log and the Unix socket; removed last, on drop.
    directory: TempDirectory,
    /// The TCP port on 127.0.0.1, fixed for the cluster's life so that its URL stays valid across
    /// restarts.
    port: u16,
    /// Whether the tools run through `runuser -u postgres`, because PostgreSQL refuses to run as root.
    as_postgres_user: bool,
    /// Whether the harness started the server and has not stopped it since.
    running: bool,
}

impl PrivatePostgres {
    /// Creates a cluster with `initdb` and starts it.
    ///
    /// The binaries come from `ONCEBOX_PG_BINDIR` when set, else `pg_config --bindir`, else the
    /// newest `/usr/lib/postgresql/*/bin` (Debian keeps the server tools off `PATH`).
    pub async fn create() -> Result<Self> {
        let bindir = postgres_bindir().await?;
        let port = free_port()?;
        let directory = TempDirectory::fresh("pg")?;
        let as_postgres_user = running_as_root();
        // From here on, dropping `cluster` cleans up whatever step fails.
        let mut cluster = Self { bindir, directory, port, as_postgres_user, running: false };
        let context = format!("creating a private PostgreSQL cluster in {}", cluster.directory().display());
        if as_postgres_user {
            // The server runs as `postgres` and must own its data directory, log and socket.
            let mut chown = tokio::process::Command::new("chown");
            chown.arg("-R").arg("postgres").arg(cluster.directory());
            run(chown, DATABASE_COMMAND_LIMIT).await.map_err(|failure| plumbing(&context, failure))?;
        }
        let mut initdb = cluster.tool("initdb");
        // `--no-sync`: a throw-away cluster need not wait for the disk, and initdb is its slowest step.
        initdb.arg("-D").arg(cluster.data()).args(["-A", "trust", "-U", "postgres", "--no-sync"]);
        run(initdb.into(), DATABASE_COMMAND_LIMIT).await.map_err(|failure| plumbing(&context, failure))?;
        cluster.start().await?;
        Ok(cluster)
    }

    /// Starts the server and waits until it accepts connections (at most 60 s). Starting a server
    /// the harness already started does nothing, so a schedule may repeat the action safely.
    pub async fn start(&mut self) -> Result<()> {
        if self.running {
            return Ok(());
        }
        // pg_ctl hands these to a shell, so the socket directory is quoted.
        let server_options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=200",
            self.port,
            shell_quote(&self.directory().to_string_lossy())
        );
        let mut pg_ctl = self.tool("pg_ctl");
        pg_ctl.arg("-D").arg(self.data()).arg("-o").arg(server_options).arg("-l").arg(self.log_path());
        pg_ctl.args(["-w", "-t", "60", "start"]);
        self.pg_ctl(pg_ctl, "starting").await?;
        self.running = true;
        Ok(())
    }

    /// Runs a `pg_ctl` command; its failure names what it was `doing` and ends with the server log.
    async fn pg_ctl(&self, command: std::process::Command, doing: &str) -> Result<()> {
        run(command.into(), DATABASE_COMMAND_LIMIT).await.map(|_| ()).map_err(|failure| {
            plumbing(
                &format!("{doing} the private PostgreSQL cluster on 127.0.0.1:{}", self.port),
                format!("{failure}\nthe server log ends with:\n{}", self.log_tail(LOG_TAIL_LINES)),
            )
        })
    }

    /// Stops the server without a checkpoint (`pg_ctl -m immediate`): every backend is killed and the
    /// next start replays the WAL, as after a crash — which is the point of the exercise. Stopping a
    /// server the harness already stopped does nothing.
    pub async fn stop_immediately(&mut self) -> Result<()> {
        if !self.running {
            return Ok(());
        }
        let mut pg_ctl = self.tool("pg_ctl");
        pg_ctl.arg("-D").arg(self.data()).args(["-m", "immediate", "-w", "-t", "60", "stop"]);
        self.pg_ctl(pg_ctl, "stopping").await?;
        self.running = false;
        Ok(())
    }

    /// The URL the harness hands to its processes in place of the shared server's.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The temporary directory holding the data directory (`data`), the server log (`server.log`)
    /// and the Unix socket; it is removed on drop.
    pub fn directory(&self) -> &Path {
        &self.directory.path
    }

    /// The last `lines` lines of the server log, for a report that has to say why the server did
    /// what it did.
    pub fn log_tail(&self, lines: usize) -> String {
        tail_of_file(&self.directory.server_log(), lines)
    }

    fn data(&self) -> PathBuf {
        self.directory.data()
    }

    fn log_path(&self) -> PathBuf {
        self.directory.server_log()
    }

    /// A command running the PostgreSQL tool `name`, as the `postgres` user when we are root.
    ///
    /// A std command, so that `Drop` can run it synchronously; async callers convert it.
    fn tool(&self, name: &str) -> std::process::Command {
        let program = self.bindir.join(name);
        let mut command = if self.as_postgres_user {
            let mut runuser = std::process::Command::new("runuser");
            runuser.args(["-u", "postgres", "--"]).arg(program);
            runuser
        } else {
            std::process::Command::new(program)
        };
        // The tools complain when the `postgres` user cannot enter the working directory (root's).
        command.current_dir(self.directory());
        command
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        // The pid file, not `running`, says whether a postmaster may be alive: a start that timed
        // out can leave one behind.
        if self.data().join("postmaster.pid").exists() {
            let mut pg_ctl = self.tool("pg_ctl");
            pg_ctl.arg("-D").arg(self.data()).args(["-m", "immediate", "-w", "-t", "60", "stop"]);
            pg_ctl.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
            let stopped = pg_ctl.status().map(|status| status.success()).unwrap_or(false);
            if !stopped {
                // Removing the directory anyway is safe: a postmaster whose pid file disappears shuts
                // itself down within a minute.
                eprintln!(
                    "oncebox servers: could not stop the private PostgreSQL cluster in {}; removing it anyway",
                    self.directory().display()
                );
            }
        }
        // `directory` is removed when the fields drop, after the server has stopped.
    }
}

/// A Kafka-protocol broker of the harness's own: the `tansu` binary with in-memory storage,
/// listening on a free port of 127.0.0.1, as a child process logging to a temporary directory.
///
/// The harness freezes it with SIGSTOP ([`PrivateKafka::pause`]): connections stay open but nothing
/// answers, the nastiest kind of broker outage for a producer. Dropping it thaws, kills and reaps the
/// process and removes the directory.
#[derive(Debug)]
pub struct PrivateKafka {
    /// The broker process; a std child so that `Drop` can kill and reap it synchronously.
    child: Child,
    /// Holds the broker log; removed after the process is gone.
    directory: TempDirectory,
    /// The TCP port on 127.0.0.1 the broker listens on and advertises.
    port: u16,
    /// Whether the process is stopped by SIGSTOP, so that `Drop` and `resume` know to send SIGCONT.
    paused: bool,
}

impl PrivateKafka {
    /// Spawns the broker and waits until it accepts TCP connections (at most 60 s).
    ///
    /// The binary is `ONCEBOX_TANSU` when set, else `tansu` on `PATH` or in Cargo's bin directory.
    pub async fn start() -> Result<Self> {
        let program = tansu_binary()?;
        let port = free_port()?;
        let directory = TempDirectory::fresh("kafka")?;
        let log_path = directory.path.join("broker.log");
        let context = format!("starting the private Kafka broker {} on 127.0.0.1:{port}", program.display());
        let log = File::create(&log_path)
            .map_err(|error| plumbing(&context, format!("creating {}: {error}", log_path.display())))?;
        let log_for_stderr =
            log.try_clone().map_err(|error| plumbing(&context, format!("sharing the log file: {error}")))?;
        let listener = format!("tcp://127.0.0.1:{port}");
        let child = std::process::Command::new(&program)
            .arg("broker")
            .args(["--listener-url", &listener, "--advertised-listener-url", &listener])
            .args(["--storage-engine", "memory://tansu/"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_for_stderr)
            .spawn()
            .map_err(|error| {
                let hint = if error.kind() == IoErrorKind::NotFound {
                    format!("; install it with `{TANSU_INSTALL}` or name it in ONCEBOX_TANSU")
                } else {
                    String::new()
                };
                plumbing(&context, format!("cannot run it: {error}{hint}"))
            })?;
        // From here on, dropping `broker` kills the process whatever fails.
        let mut broker = Self { child, directory, port, paused: false };
        let log = broker.log_path();
        wait_until_listening(&mut broker.child, &log, broker.port, &context).await?;
        Ok(broker)
    }

    /// The bootstrap address the harness hands to its processes in place of the shared broker's.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The broker's process id, for a report or a check of its state in `/proc`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the broker is frozen by [`PrivateKafka::pause`].
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// The last `lines` lines of the broker's output.
    pub fn log_tail(&self, lines: usize) -> String {
        tail_of_file(&self.log_path(), lines)
    }

    /// Freezes the broker with SIGSTOP. Pausing a paused broker does nothing.
    pub fn pause(&mut self) -> Result<()> {
        if self.paused {
            return Ok(());
        }
        self.ensure_alive("pausing the private Kafka broker")?;
        self.signal("STOP").map_err(|failure| plumbing("pausing the private Kafka broker", failure))?;
        self.paused = true;
        Ok(())
    }

    /// Thaws the broker with SIGCONT. Resuming a broker that is not paused only checks that it is
    /// still alive.
    pub fn resume(&mut self) -> Result<()> {
        if self.paused {
            self.signal("CONT").map_err(|failure| plumbing("resuming the private Kafka broker", failure))?;
            self.paused = false;
        }
        // A broker that died while frozen would otherwise surface only as client timeouts.
        self.ensure_alive("resuming the private Kafka broker")
    }

    fn log_path(&self) -> PathBuf {
        self.directory.path.join("broker.log")
    }

    /// Fails, with the log tail, when the process has exited; signalling it then could reach
    /// whatever process reused its id once reaped.
    fn ensure_alive(&mut self, context: &str) -> Result<()> {
        let log = self.log_path();
        ensure_alive(&mut self.child, &log, context)
    }

    /// Sends `SIG<name>` with the `kill` command, which spares the crate a `libc` dependency.
    fn signal(&self, name: &str) -> std::result::Result<(), String> {
        let pid = self.child.id().to_string();
        let description = format!("`kill -{name} {pid}`");
        let output = std::process::Command::new("kill")
            .arg(format!("-{name}"))
            .arg(&pid)
            .stdin(Stdio::null())
            .output()
            .map_err(|error| format!("{description} could not run: {error}"))?;
        if output.status.success() { Ok(()) } else { Err(format!("{description} {}", failure_of(&output))) }
    }
}

impl Drop for PrivateKafka {
    fn drop(&mut self) {
        // Results are ignored: nothing can be done about a failure here, and SIGKILL reaches a
        // stopped process anyway; the SIGCONT only lets it die the ordinary way.
        if self.paused {
            let _ = self.signal("CONT");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // `directory` is removed when the fields drop, after the process is gone.
    }
}

/// A MariaDB (or MySQL) server of the harness's own: `mariadb-install-db` into a fresh temporary
/// directory, then `mariadbd` on a free port of 127.0.0.1 as a child process.
///
/// The harness kills it with SIGKILL ([`PrivateMariadb::stop_immediately`]), a crash that InnoDB
/// recovers from on the next start, and starts it again. Dropping it kills the server and removes
/// the directory.
#[derive(Debug)]
pub struct PrivateMariadb {
    /// The server process while it runs.
    child: Option<Child>,
    /// Holds the data directory, the server log and the socket; removed last, on drop.
    directory: TempDirectory,
    /// The TCP port on 127.0.0.1, fixed for the server's life so that its URL stays valid across
    /// restarts.
    port: u16,
    /// Whether the server runs as the `mysql` user, because mariadbd refuses to run as root.
    as_mysql_user: bool,
}

impl PrivateMariadb {
    /// Creates the data directory with `mariadb-install-db` (root without a password, database
    /// `test`) and starts the server.
    pub async fn create() -> Result<Self> {
        let port = free_port()?;
        let directory = TempDirectory::fresh("mariadb")?;
        let as_mysql_user = running_as_root();
        // From here on, dropping `server` cleans up whatever step fails.
        let mut server = Self { child: None, directory, port, as_mysql_user };
        let context = format!("creating a private MariaDB server in {}", server.directory().display());
        if as_mysql_user {
            // The server runs as `mysql` and must own its data directory, log and socket.
            let mut chown = tokio::process::Command::new("chown");
            chown.arg("-R").arg("mysql").arg(server.directory());
            run(chown, DATABASE_COMMAND_LIMIT).await.map_err(|failure| plumbing(&context, failure))?;
        }
        let mut install = tokio::process::Command::new("mariadb-install-db");
        install.arg("--no-defaults").arg(format!("--datadir={}", server.directory.data().display()));
        install.arg("--auth-root-authentication-method=normal");
        if as_mysql_user {
            install.arg("--user=mysql");
        }
        run(install, DATABASE_COMMAND_LIMIT).await.map_err(|failure| {
            let hint = if failure.contains("could not run") {
                "; install the MariaDB server (Debian's mariadb-server) to restart a private one"
            } else {
                ""
            };
            plumbing(&context, format!("{failure}{hint}"))
        })?;
        server.start().await?;
        Ok(server)
    }

    /// Starts the server and waits until it accepts connections (at most 60 s). Starting a running
    /// server does nothing, so a schedule may repeat the action safely.
    pub async fn start(&mut self) -> Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        let context = format!("starting the private MariaDB server on 127.0.0.1:{}", self.port);
        let directory = self.directory().to_owned();
        let mut command = std::process::Command::new("mariadbd");
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.directory.data().display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", directory.join("mariadbd.sock").display()))
            .arg(format!("--pid-file={}", directory.join("mariadbd.pid").display()))
            .arg(format!("--log-error={}", self.directory.server_log().display()))
            .args(["--skip-log-bin", "--max-connections=300", "--innodb-buffer-pool-size=128M"]);
        if self.as_mysql_user {
            command.arg("--user=mysql");
        }
        // What mariadbd prints before `--log-error` takes over (a bad option, a refused user) goes
        // to a file of its own (the server log belongs to the `mysql` user), reported on failure.
        let early_path = directory.join("mariadbd.stderr");
        let early = File::create(&early_path)
            .map_err(|error| plumbing(&context, format!("creating {}: {error}", early_path.display())))?;
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(early);
        let mut child =
            command.spawn().map_err(|error| plumbing(&context, format!("cannot run mariadbd: {error}")))?;
        match wait_until_listening(&mut child, &self.directory.server_log(), self.port, &context).await {
            Ok(()) => {
                self.child = Some(child);
                Ok(())
            }
            Err(error) => {
                // Not kept: a later `start` must try again rather than take the failed one for running.
                let _ = child.kill();
                let _ = child.wait();
                let early = tail_of_file(&early_path, LOG_TAIL_LINES);
                Err(plumbing(&context, format!("{error}\nmariadbd's own output ends with:\n{early}")))
            }
        }
    }

    /// Kills the server with SIGKILL, as a crash would, and reaps it. Stopping a stopped server does
    /// nothing.
    pub async fn stop_immediately(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            let reaped = tokio::task::spawn_blocking(move || {
                let _ = child.kill();
                child.wait()
            })
            .await;
            match reaped {
                Ok(Ok(_status)) => {}
                Ok(Err(error)) => return Err(plumbing("stopping the private MariaDB server", error)),
                Err(error) => return Err(plumbing("stopping the private MariaDB server", error)),
            }
        }
        Ok(())
    }

    /// The URL the harness hands to its processes in place of the shared server's.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/test", self.port)
    }

    /// The temporary directory holding the data directory (`data`), the server log (`server.log`)
    /// and the socket; it is removed on drop.
    pub fn directory(&self) -> &Path {
        &self.directory.path
    }

    /// The last `lines` lines of the server log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail_of_file(&self.directory.server_log(), lines)
    }
}

impl Drop for PrivateMariadb {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Ignored: SIGKILL reaches the server whatever state it is in.
            let _ = child.kill();
            let _ = child.wait();
        }
        // `directory` is removed when the fields drop, after the server is gone.
    }
}

/// Polls until a TCP connection to `port` succeeds (at most 60 s), failing early, with the end of
/// the `log`, when the `child` serving it exits.
async fn wait_until_listening(child: &mut Child, log: &Path, port: u16, context: &str) -> Result<()> {
    let deadline = Instant::now() + SERVER_READY_LIMIT;
    loop {
        ensure_alive(child, log, context)?;
        let attempt = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port));
        if let Ok(Ok(_connection)) = tokio::time::timeout(Duration::from_secs(1), attempt).await {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(plumbing(
                context,
                format!(
                    "it did not accept connections within {} s; its log ends with:\n{}",
                    SERVER_READY_LIMIT.as_secs(),
                    tail_of_file(log, LOG_TAIL_LINES)
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Fails, with the end of its `log`, when `child` has exited.
fn ensure_alive(child: &mut Child, log: &Path, context: &str) -> Result<()> {
    match child.try_wait() {
        Ok(None) => Ok(()),
        Ok(Some(status)) => Err(plumbing(
            context,
            format!(
                "the server exited ({status}); its log ends with:\n{}",
                tail_of_file(log, LOG_TAIL_LINES)
            ),
        )),
        Err(error) => Err(plumbing(context, format!("checking whether the server still runs: {error}"))),
    }
}

/// The shared RabbitMQ node's application, stopped and started with `rabbitmqctl` the way an operator
/// would: connections drop and the port refuses new ones, while the node keeps its durable queues and
/// persistent messages.
///
/// The node is shared with other suites and cannot be replaced by a private one here, so this is a
/// guard: once [`RabbitApp::stop_app`] has been called, dropping it without a successful
/// [`RabbitApp::start_app`] runs `rabbitmqctl start_app` synchronously, even when the harness fails or
/// panics.
#[derive(Debug, Default)]
pub struct RabbitApp {
    /// Whether the application may be stopped by us: set before `stop_app` runs (a timed-out stop may
    /// still take effect) and cleared only when a start has been confirmed.
    stopped: bool,
}

impl RabbitApp {
    /// A guard that has stopped nothing yet; runs no command.
    pub fn new() -> Self {
        Self { stopped: false }
    }

    /// Whether `rabbitmqctl status` succeeds here, i.e. whether this process may stop and start the
    /// node's application at all (it needs the node's Erlang cookie, normally root's or rabbitmq's).
    /// `status` also fails while the application is stopped, so call this before [`Self::stop_app`]:
    /// a node someone left stopped counts as unavailable rather than being started behind their back.
    pub async fn available() -> bool {
        rabbitmqctl("status").await.is_ok()
    }

    /// Stops the RabbitMQ application (`rabbitmqctl stop_app`), at most 60 s.
    pub async fn stop_app(&mut self) -> Result<()> {
        self.stopped = true;
        rabbitmqctl("stop_app")
            .await
            .map_err(|failure| plumbing("stopping the shared RabbitMQ application", failure))?;
        Ok(())
    }

    /// Starts the RabbitMQ application (`rabbitmqctl start_app`) and waits until it is fully up
    /// (`rabbitmqctl await_startup`), each at most 60 s. Harmless when it is already running.
    pub async fn start_app(&mut self) -> Result<()> {
        let context = "starting the shared RabbitMQ application again (run `rabbitmqctl start_app` by hand \
                       if this persists)";
        rabbitmqctl("start_app").await.map_err(|failure| plumbing(context, failure))?;
        rabbitmqctl("await_startup").await.map_err(|failure| plumbing(context, failure))?;
        self.stopped = false;
        Ok(())
    }

    /// Whether the application may be stopped by this guard (stopped and not yet started again).
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }
}

impl Drop for RabbitApp {
    fn drop(&mut self) {
        if !self.stopped {
            return;
        }
        let mut start_app = std::process::Command::new("rabbitmqctl");
        start_app.arg("start_app");
        if let Err(failure) = run_blocking(start_app, RABBITMQCTL_LIMIT) {
            // Drop cannot return an error; say loudly what the operator must do.
            eprintln!(
                "oncebox servers: the shared RabbitMQ application is still stopped ({failure}); \
                 run `rabbitmqctl start_app`"
            );
        }
    }
}

/// The messages of the RabbitMQ queue `queue` on the default virtual host, ready and
/// unacknowledged alike (`rabbitmqctl list_queues name messages`; an AMQP passive declare counts
/// only the ready ones).
pub async fn rabbit_queue_messages(queue: &str) -> Result<u64> {
    let mut command = tokio::process::Command::new("rabbitmqctl");
    command.args(["list_queues", "--quiet", "--no-table-headers", "name", "messages"]);
    let listed = run(command, RABBITMQCTL_LIMIT)
        .await
        .map_err(|failure| plumbing("counting a queue's messages with rabbitmqctl", failure))?;
    let count = listed.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        (fields.next() == Some(queue)).then(|| fields.next().map(str::parse::<u64>))
    });
    match count {
        Some(Some(Ok(count))) => Ok(count),
        Some(_) => {
            Err(plumbing("counting a queue's messages", format!("unreadable line for {queue} in {listed:?}")))
        }
        None => Err(plumbing("counting a queue's messages", format!("rabbitmqctl lists no queue {queue}"))),
    }
}

/// Runs `rabbitmqctl <subcommand>`, at most [`RABBITMQCTL_LIMIT`].
async fn rabbitmqctl(subcommand: &str) -> std::result::Result<String, String> {
    let mut command = tokio::process::Command::new("rabbitmqctl");
    command.arg(subcommand);
    run(command, RABBITMQCTL_LIMIT).await
}

/// A directory of our own under the system temporary directory, removed with everything in it on drop.
#[derive(Debug)]
struct TempDirectory {
    path: PathBuf,
}

impl TempDirectory {
    /// Creates a directory whose name no other run uses (process id plus a random number).
    fn fresh(kind: &str) -> Result<Self> {
        let base = std::env::temp_dir();
        // `create_dir`, not `create_dir_all`: it fails on an existing directory, which proves the name
        // is ours alone.
        for _ in 0..16 {
            let path = base.join(format!("oncebox-{kind}-{}-{:016x}", std::process::id(), fastrand::u64(..)));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(Self { path }),
                Err(error) if error.kind() == IoErrorKind::AlreadyExists => continue,
                Err(error) => return Err(plumbing(&format!("creating {}", path.display()), error)),
            }
        }
        Err(plumbing(
            &format!("creating a temporary directory under {}", base.display()),
            "16 random names were all taken",
        ))
    }
}

impl TempDirectory {
    /// Where a database server keeps its data, inside the directory.
    fn data(&self) -> PathBuf {
        self.path.join("data")
    }

    /// Where a server writes its log, inside the directory.
    fn server_log(&self) -> PathBuf {
        self.path.join("server.log")
    }
}

impl Drop for TempDirectory {
    fn drop(&mut self) {
        // Ignored: a leftover directory in the temporary directory is untidy, not wrong.
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Where the PostgreSQL server tools are; see [`PrivatePostgres::create`].
async fn postgres_bindir() -> Result<PathBuf> {
    let context = "finding the PostgreSQL server binaries";
    if let Some(named) = std::env::var_os("ONCEBOX_PG_BINDIR").filter(|value| !value.is_empty()) {
        let bindir = PathBuf::from(named);
        if bindir.join("initdb").is_file() {
            return Ok(bindir);
        }
        return Err(plumbing(
            context,
            format!("ONCEBOX_PG_BINDIR is {}, which has no initdb", bindir.display()),
        ));
    }
    let mut pg_config = tokio::process::Command::new("pg_config");
    pg_config.arg("--bindir");
    if let Ok(printed) = run(pg_config, Duration::from_secs(30)).await {
        let bindir = PathBuf::from(printed.trim());
        // Debian's libpq-dev has a pg_config naming /usr/bin, where the client tools are but no initdb.
        if bindir.join("initdb").is_file() {
            return Ok(bindir);
        }
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version: Vec<u32> = entry
                .file_name()
                .to_str()?
                .split('.')
                .map(str::parse)
                .collect::<std::result::Result<_, _>>()
                .ok()?;
            let bindir = entry.path().join("bin");
            bindir.join("initdb").is_file().then_some((version, bindir))
        })
        .max_by(|left, right| left.0.cmp(&right.0));
    match newest {
        Some((_, bindir)) => Ok(bindir),
        None => Err(plumbing(
            context,
            "no initdb in ONCEBOX_PG_BINDIR, `pg_config --bindir` or /usr/lib/postgresql/*/bin; \
             install the PostgreSQL server or set ONCEBOX_PG_BINDIR",
        )),
    }
}

/// The `tansu` binary; see [`PrivateKafka::start`].
fn tansu_binary() -> Result<PathBuf> {
    if let Some(named) = std::env::var_os("ONCEBOX_TANSU").filter(|value| !value.is_empty()) {
        // Used as given: spawning reports a name that cannot be run, with the install hint.
        return Ok(PathBuf::from(named));
    }
    // Cargo's bin directory too, because `cargo install` puts it there and it is not always on PATH.
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .map(|cargo_home| cargo_home.join("bin"));
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(cargo_bin)
        .map(|directory| directory.join("tansu"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            plumbing(
                "starting a private Kafka broker",
                format!(
                    "the `tansu` binary is neither on PATH nor in Cargo's bin directory, and ONCEBOX_TANSU \
                     is not set; install it with `{TANSU_INSTALL}`"
                ),
            )
        })
}

/// Whether this process runs as root, read from `/proc` to spare a `libc` dependency; PostgreSQL
/// refuses to run as root, so its tools then go through `runuser -u postgres`.
fn running_as_root() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        // The fields are real, effective, saved and filesystem uid; PostgreSQL checks the effective.
        .and_then(|uids| uids.split_whitespace().nth(1))
        .is_some_and(|effective| effective == "0")
}

/// Runs `command` to completion within `limit`, returning its standard output, or a description of
/// the failure naming the command and ending with what it printed. The command is killed on timeout.
async fn run(mut command: tokio::process::Command, limit: Duration) -> std::result::Result<String, String> {
    let description = describe(command.as_std());
    command.stdin(Stdio::null()).kill_on_drop(true);
    let output = match tokio::time::timeout(limit, command.output()).await {
        Err(_elapsed) => {
            return Err(format!("{description} did not finish within {} s and was killed", limit.as_secs()));
        }
        Ok(Err(error)) => return Err(format!("{description} could not run: {error}")),
        Ok(Ok(output)) => output,
    };
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!("{description} {}", failure_of(&output)))
    }
}

/// Runs `command` to completion within `limit` without a runtime, for `Drop`: output is discarded, and
/// the command is killed on timeout.
fn run_blocking(mut command: std::process::Command, limit: Duration) -> std::result::Result<(), String> {
    let description = describe(&command);
    command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = command.spawn().map_err(|error| format!("{description} could not run: {error}"))?;
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => return Err(format!("{description} exited with {status}")),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{description} did not finish within {} s and was killed",
                    limit.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(error) => return Err(format!("{description} could not be waited for: {error}")),
        }
    }
}

/// The command line of `command`, in backquotes, for error messages.
fn describe(command: &std::process::Command) -> String {
    let mut words = vec![command.get_program().to_string_lossy().into_owned()];
    // Quoted when needed, so that the line can be pasted into a shell to reproduce the failure.
    words.extend(command.get_args().map(|argument| {
        let argument = argument.to_string_lossy();
        if argument.chars().any(|character| character.is_whitespace() || "'\"$`\\".contains(character)) {
            shell_quote(&argument)
        } else {
            argument.into_owned()
        }
    }));
    format!("`{}`", words.join(" "))
}

/// How a finished command failed: its exit status and the end of its standard error (or standard
/// output, for tools that report errors there).
fn failure_of(output: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let printed = if stderr.trim().is_empty() { stdout.trim() } else { stderr.trim() };
    if printed.is_empty() {
        format!("exited with {} and printed nothing", output.status)
    } else {
        format!("exited with {}:\n{}", output.status, last_lines(printed, 20))
    }
}

/// The last `lines` lines of the file at `path`, or a note saying why there are none.
fn tail_of_file(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => format!("({} is empty)", path.display()),
        Ok(bytes) => last_lines(&String::from_utf8_lossy(&bytes), lines),
        Err(error) => format!("(no log at {}: {error})", path.display()),
    }
}

/// The last `lines` lines of `text`.
fn last_lines(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `text` quoted for a POSIX shell.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}
