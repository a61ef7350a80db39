//! A real PostgreSQL 16 + pgvector server that the tests start themselves (docs/postgres.md).
//!
//! [`PgServer::start`] runs `initdb` into a temporary directory and starts `postgres` on
//! 127.0.0.1 with a free port, fsync on; [`PgServer::fresh_database`] gives each test a database
//! of its own; Drop stops the server (immediate shutdown, then kill) and removes the directory. The
//! binaries come from `MNEMON_PG_BIN` or from `cargo xtask postgres install`
//! (`target/postgres/*/bin`). PostgreSQL refuses to run as root, so under root the server runs
//! as the unprivileged user `nobody`. [`PgServer::start_with_settings`] starts one with extra
//! server settings (`cargo xtask bench stores` sizes its buffers to the data).
//!
//! One server per test binary is enough: [`PgServer::shared`], or [`require`] /
//! [`require_postgres!`](crate::require_postgres) which skip a test loudly (or fail it in CI,
//! `MNEMON_REQUIRE_POSTGRES=1`) when the binaries are missing.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// Environment variable naming a directory holding `initdb` and `postgres` to use instead of
/// the ones `cargo xtask postgres install` puts under `target/postgres/`.
pub const PG_BIN_ENV: &str = "MNEMON_PG_BIN";
/// Environment variable that, set to `1` (CI sets it), turns a missing server into a failure
/// instead of a skipped suite.
pub const REQUIRE_ENV: &str = "MNEMON_REQUIRE_POSTGRES";
/// The superuser `initdb` creates; the server trusts local connections (loopback only).
pub const SUPERUSER: &str = "postgres";

/// How long the server may take to accept connections after it is started.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `initdb` may take.
const INITDB_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a shutdown may take before the server is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// The name prefix of the servers' temporary directories.
const DIR_PREFIX: &str = "mnemon-pg-";
/// How old a temporary directory without a running server must be to count as left behind.
const STALE_AGE: Duration = Duration::from_secs(600);
/// The tail of the server log quoted in errors.
const LOG_TAIL: u64 = 4096;

/// Why the test server could not be found, started, stopped or used.
#[derive(Debug, thiserror::Error)]
pub enum PgServerError {
    /// `MNEMON_PG_BIN` names a directory without the binaries.
    #[error(
        "{PG_BIN_ENV}={dir} has no {missing}: point it at the bin/ directory of a PostgreSQL 16 \
         installation with pgvector, or unset it and run `cargo xtask postgres install`"
    )]
    BadBinDir {
        /// The directory named.
        dir: PathBuf,
        /// The binary it lacks.
        missing: &'static str,
    },
    /// Neither `MNEMON_PG_BIN` nor `target/postgres/` has the binaries.
    #[error("{}", missing_binaries_message())]
    NotInstalled,
    /// Running as root, and no unprivileged user to run the server as.
    #[error(
        "PostgreSQL refuses to run as root and there is no user `nobody` in /etc/passwd to run \
         it as: run the tests as an ordinary user, or create one (useradd --system nobody)"
    )]
    NoUnprivilegedUser,
    /// Running as root, and `nobody` cannot reach the binaries.
    #[error(
        "the PostgreSQL binaries in {bin} are not reachable by the user `nobody` the server runs \
         as under root ({blocker} lacks search permission for others): copy the installation \
         somewhere world-readable (cp -r {bin}/.. /opt/mnemon-pg) and set {PG_BIN_ENV} to its \
         bin/, or run the tests as an ordinary user"
    )]
    Unreachable {
        /// The binaries' directory.
        bin: PathBuf,
        /// The first directory on the way that `nobody` cannot enter.
        blocker: PathBuf,
    },
    /// Running as root, and `nobody` cannot reach the temporary directory.
    #[error(
        "the server's temporary directory is not reachable by the user `nobody` the server runs \
         as under root ({blocker} lacks search permission for others): set TMPDIR to a \
         world-searchable directory such as /tmp, or run the tests as an ordinary user"
    )]
    TempUnreachable {
        /// The first directory on the way that `nobody` cannot enter.
        blocker: PathBuf,
    },
    /// A file-system or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: io::Error,
    },
    /// `initdb` failed.
    #[error("initdb failed ({status}); its output:\n{output}")]
    InitDb {
        /// Its exit status.
        status: String,
        /// Its stdout and stderr.
        output: String,
    },
    /// The server exited while starting.
    #[error("postgres exited while starting ({status}); the end of its log:\n{log}")]
    Exited {
        /// Its exit status.
        status: ExitStatus,
        /// The end of the server log.
        log: String,
    },
    /// The server did not accept connections in time.
    #[error(
        "postgres did not accept connections within {}s; the end of its log:\n{log}",
        READY_TIMEOUT.as_secs()
    )]
    NotReady {
        /// The end of the server log.
        log: String,
    },
    /// A setting given to [`PgServer::start_with_settings`] cannot be passed to `postgres`.
    #[error(
        "the server setting {name:?} = {value:?} is malformed: a name is ASCII letters, digits, \
         `_` and `.`, and neither may be empty or hold a NUL"
    )]
    BadSetting {
        /// The setting's name.
        name: String,
        /// Its value.
        value: String,
    },
    /// A statement on the server failed.
    #[error("{what}: {source}")]
    Sql {
        /// What was being done.
        what: String,
        /// The cause.
        source: postgres::Error,
    },
}

fn io_error(what: impl Into<String>) -> impl FnOnce(io::Error) -> PgServerError {
    let what = what.into();
    move |source| PgServerError::Io { what, source }
}

/// Where the server binaries are.
#[derive(Debug, Clone)]
struct Binaries {
    bin: PathBuf,
    /// `LD_LIBRARY_PATH` for them: the wheel's `initdb` finds its own libpq there
    /// (xtask/src/postgres.rs).
    lib: PathBuf,
}

impl Binaries {
    /// `MNEMON_PG_BIN`, else the most recently installed `target/postgres/*/bin` with both
    /// binaries (an older pin's installation may still be there); `Ok(None)` when neither is.
    fn find() -> Result<Option<Binaries>, PgServerError> {
        if let Some(dir) = std::env::var_os(PG_BIN_ENV).filter(|dir| !dir.is_empty()) {
            let bin = PathBuf::from(dir);
            for missing in ["initdb", "postgres"] {
                if !bin.join(missing).is_file() {
                    return Err(PgServerError::BadBinDir { dir: bin, missing });
                }
            }
            // Absolute: the binaries run with the server's directory as their working directory.
            let bin = fs::canonicalize(&bin).map_err(io_error(format!(
                "resolving {PG_BIN_ENV}={}",
                bin.display()
            )))?;
            return Ok(Some(Binaries::at(bin)));
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .map(|root| root.join("target/postgres"));
        let Some(Ok(entries)) = root.map(fs::read_dir) else {
            return Ok(None);
        };
        let newest = entries
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.path().join("bin"))
            .filter(|bin| bin.join("initdb").is_file() && bin.join("postgres").is_file())
            .max_by_key(|bin| {
                fs::metadata(bin)
                    .and_then(|meta| meta.modified())
                    .unwrap_or(std::time::SystemTime::UNIX_EPOCH)
            });
        Ok(newest.map(Binaries::at))
    }

    fn at(bin: PathBuf) -> Binaries {
        let lib = bin
            .parent()
            .map(|prefix| prefix.join("lib"))
            .unwrap_or_default();
        Binaries { bin, lib }
    }

    fn command(&self, name: &str, user: Option<User>, cwd: &Path) -> Command {
        let mut command = Command::new(self.bin.join(name));
        let mut library_path = OsString::from(self.lib.as_os_str());
        if let Some(existing) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
            library_path.push(":");
            library_path.push(existing);
        }
        command
            .env("LD_LIBRARY_PATH", library_path)
            // The server's messages in English whatever the machine's locale (LC_ALL overrides
            // every other locale variable): errors quote them, and a start looks for one.
            .env("LC_ALL", "C")
            .current_dir(cwd)
            .stdin(Stdio::null());
        if let Some(user) = user {
            command.uid(user.uid).gid(user.gid);
        }
        command
    }
}

/// The unprivileged user the server runs as when the tests run as root.
#[derive(Debug, Clone, Copy)]
struct User {
    uid: u32,
    gid: u32,
}

impl User {
    /// `None` when not root (the server runs as the current user), `nobody` under root.
    fn for_server() -> Result<Option<User>, PgServerError> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(None);
        }
        let passwd = fs::read_to_string("/etc/passwd").map_err(io_error("reading /etc/passwd"))?;
        User::from_passwd(&passwd, "nobody")
            .map(Some)
            .ok_or(PgServerError::NoUnprivilegedUser)
    }

    /// The uid and gid of `name` in the text of an `/etc/passwd` (`name:password:uid:gid:…`).
    fn from_passwd(passwd: &str, name: &str) -> Option<User> {
        passwd.lines().find_map(|line| {
            let mut fields = line.split(':');
            if fields.next() != Some(name) {
                return None;
            }
            let _password = fields.next();
            let uid = fields.next()?.parse().ok()?;
            let gid = fields.next()?.parse().ok()?;
            Some(User { uid, gid })
        })
    }

    /// Whether this user may enter `dir` (checks the permission bits only: enough for the
    /// checkouts and temporary directories the tests use).
    fn can_search(&self, dir: &Path) -> bool {
        match fs::metadata(dir) {
            Ok(meta) => {
                let mode = meta.mode();
                (meta.uid() == self.uid && mode & 0o100 != 0)
                    || (meta.gid() == self.gid && mode & 0o010 != 0)
                    || mode & 0o001 != 0
            }
            Err(_) => false,
        }
    }
}

/// A running PostgreSQL server in a temporary directory, stopped and removed on Drop.
#[derive(Debug)]
pub struct PgServer {
    binaries: Binaries,
    user: Option<User>,
    /// The temporary directory: `data/` and `postgres.log`.
    dir: PathBuf,
    /// Chosen before the first start, kept across restarts.
    port: AtomicU16,
    /// The postmaster; `None` once stopped.
    child: Mutex<Option<Child>>,
    /// Suffix making every [`PgServer::fresh_database`] name unique.
    next_database: AtomicU64,
    /// Extra `-c name=value` settings of [`PgServer::start_with_settings`], after the harness's
    /// own (so they win), kept across restarts.
    settings: Vec<(String, String)>,
}

impl PgServer {
    /// Starts a server of its own (most tests want [`PgServer::shared`] instead): `initdb` into
    /// a new temporary directory, then `postgres` on 127.0.0.1 and a free port, fsync on,
    /// returning once it accepts connections. Fails when the binaries are missing (with what to
    /// run) or the server does not come up (with its log).
    pub fn start() -> Result<PgServer, PgServerError> {
        PgServer::start_with_settings(Vec::<(String, String)>::new())
    }

    /// [`PgServer::start`] with extra server settings, each passed as `postgres -c name=value`
    /// after the harness's own (so one may override them, `max_connections` for instance) and
    /// kept across [`PgServer::restart`]: a benchmark sizes `shared_buffers`,
    /// `maintenance_work_mem` or `max_wal_size` to its data as a real server would be. A
    /// malformed name or value is [`PgServerError::BadSetting`]; a name or value the server
    /// rejects fails the start with the server log, which names it.
    pub fn start_with_settings<N, V>(
        settings: impl IntoIterator<Item = (N, V)>,
    ) -> Result<PgServer, PgServerError>
    where
        N: Into<String>,
        V: Into<String>,
    {
        let settings = checked_settings(settings)?;
        match Binaries::find()? {
            Some(binaries) => PgServer::start_with(binaries, None, settings),
            None => Err(PgServerError::NotInstalled),
        }
    }

    /// [`PgServer::start`] with these binaries and settings, trying `port` first when given (a
    /// free one otherwise).
    fn start_with(
        binaries: Binaries,
        port: Option<u16>,
        settings: Vec<(String, String)>,
    ) -> Result<PgServer, PgServerError> {
        let user = User::for_server()?;
        if let Some(user) = user {
            let bin = fs::canonicalize(&binaries.bin)
                .map_err(io_error(format!("resolving {}", binaries.bin.display())))?;
            if let Some(blocker) = bin.ancestors().find(|dir| !user.can_search(dir)) {
                return Err(PgServerError::Unreachable {
                    blocker: blocker.to_path_buf(),
                    bin,
                });
            }
        }
        remove_stale_directories(&std::env::temp_dir());
        let temp = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir()
            .map_err(io_error("creating the server's temporary directory"))?;
        // From here on the directory is removed by PgServer's Drop or by this guard.
        let dir = temp.keep();
        let guard = RemoveOnError(Some(dir.clone()));
        if let Some(user) = user {
            std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid))
                .map_err(io_error(format!("giving {} to `nobody`", dir.display())))?;
            if let Some(blocker) = dir.ancestors().find(|dir| !user.can_search(dir)) {
                return Err(PgServerError::TempUnreachable {
                    blocker: blocker.to_path_buf(),
                });
            }
        }
        initdb(&binaries, user, &dir)?;
        let server = PgServer {
            binaries,
            user,
            dir,
            port: AtomicU16::new(match port {
                Some(port) => port,
                None => free_port()?,
            }),
            child: Mutex::new(None),
            next_database: AtomicU64::new(0),
            settings,
        };
        std::mem::forget(guard);
        // On failure, Drop stops whatever started and removes the directory.
        let mut attempts = 1;
        loop {
            match server.launch() {
                Ok(()) => return Ok(server),
                // The free port was taken between finding it and the server binding it (another
                // test binary starting its server at the same moment): take another.
                Err(PgServerError::Exited { log, .. })
                    if attempts < 3 && log.contains("could not bind") =>
                {
                    attempts += 1;
                    server.port.store(free_port()?, Ordering::Relaxed);
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// The server for this test binary, started on first use; `None` when the binaries are
    /// missing (see [`require`] for the skip-or-fail policy).
    ///
    /// # Panics
    ///
    /// When the binaries are there but the server does not start: that is a broken setup to
    /// fix, not a reason to skip.
    pub fn shared() -> Option<&'static PgServer> {
        static SHARED: OnceLock<Option<PgServer>> = OnceLock::new();
        let server = SHARED
            .get_or_init(|| {
                let binaries = match Binaries::find() {
                    Ok(found) => found?,
                    Err(error) => panic!("the PostgreSQL test server cannot start: {error}"),
                };
                match PgServer::start_with(binaries, None, Vec::new()) {
                    Ok(server) => Some(server),
                    Err(error) => panic!("the PostgreSQL test server did not start: {error}"),
                }
            })
            .as_ref();
        if let Some(server) = server
            && SHARED_AT_EXIT.set(server).is_ok()
        {
            register_shared_cleanup();
        }
        server
    }

    /// Creates an empty database for one test and returns its URL
    /// (`postgres://postgres@127.0.0.1:<port>/<name>_<n>`): `name` says which test it is for
    /// (letters, digits and `_` are kept), and the numeric suffix keeps every call's database
    /// apart.
    pub fn fresh_database(&self, name: &str) -> Result<String, PgServerError> {
        let database = database_name(name, self.next_database.fetch_add(1, Ordering::Relaxed));
        let mut admin = self.connect("postgres")?;
        admin
            .batch_execute(&format!("CREATE DATABASE \"{database}\""))
            .map_err(|source| PgServerError::Sql {
                what: format!("creating database {database}"),
                source,
            })?;
        Ok(self.url(&database))
    }

    /// The URL of database `database` on this server.
    pub fn url(&self, database: &str) -> String {
        format!(
            "postgres://{SUPERUSER}@127.0.0.1:{}/{database}",
            self.port()
        )
    }

    /// A new connection to database `database`.
    pub fn connect(&self, database: &str) -> Result<postgres::Client, PgServerError> {
        postgres::Config::new()
            .host("127.0.0.1")
            .port(self.port())
            .user(SUPERUSER)
            .dbname(database)
            .connect_timeout(Duration::from_secs(5))
            .connect(postgres::NoTls)
            .map_err(|source| PgServerError::Sql {
                what: format!("connecting to {}", self.url(database)),
                source,
            })
    }

    /// How many connections Mnemon's pools (`application_name` `mnemon`) hold to the database
    /// of `url`, a URL of this server's: what the tests of shared and bounded pools count.
    pub fn mnemon_connections(&self, url: &str) -> Result<i64, PgServerError> {
        let database = url.rsplit('/').next().unwrap_or_default();
        let what = || format!("counting the connections to {database}");
        let mut admin = self.connect("postgres")?;
        admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = $1 AND application_name = 'mnemon'",
                &[&database],
            )
            .map(|row| row.get(0))
            .map_err(|source| PgServerError::Sql {
                what: what(),
                source,
            })
    }

    /// The loopback port the server listens on (the same across [`PgServer::restart`]).
    pub fn port(&self) -> u16 {
        self.port.load(Ordering::Relaxed)
    }

    /// The temporary directory holding the data directory (`data/`) and the server log
    /// (`postgres.log`); removed on Drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The postmaster's process id, `None` when stopped.
    pub fn pid(&self) -> Option<u32> {
        self.lock_child().as_ref().map(Child::id)
    }

    /// Stops the server (fast shutdown: sessions are disconnected, committed data is on disk)
    /// and starts it again on the same data directory and port, returning once it accepts
    /// connections. Clients connected before get an error on their next statement.
    pub fn restart(&self) -> Result<(), PgServerError> {
        self.stop(libc::SIGINT);
        self.launch()
    }

    /// Starts `postgres` and waits until it accepts connections.
    fn launch(&self) -> Result<(), PgServerError> {
        let mut slot = self.lock_child();
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(io_error("opening the server log"))?;
        let log_err = log
            .try_clone()
            .map_err(io_error("opening the server log"))?;
        let data = self.dir.join("data");
        let mut command = self.binaries.command("postgres", self.user, &self.dir);
        command
            .arg("-D")
            .arg(&data)
            .args(["-p", &self.port().to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            // No Unix socket: its default directory may not exist or be writable here.
            .args(["-c", "unix_socket_directories="])
            // Durable commits, so that a restart test proves something.
            .args(["-c", "fsync=on", "-c", "synchronous_commit=on"])
            // Crash and concurrency tests open many connections at once.
            .args(["-c", "max_connections=200"]);
        for (name, value) in &self.settings {
            command.arg("-c").arg(format!("{name}={value}"));
        }
        command.stdout(log).stderr(log_err);
        let child = spawn_outliving_test_threads(command).map_err(io_error(format!(
            "starting {}",
            self.binaries.bin.join("postgres").display()
        )))?;
        *slot = Some(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let exited = match slot.as_mut() {
                Some(child) => child.try_wait().ok().flatten(),
                None => None,
            };
            if let Some(status) = exited {
                *slot = None;
                return Err(PgServerError::Exited {
                    status,
                    log: self.log_tail(),
                });
            }
            if self.answers_from(&data) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                drop(slot);
                self.stop(libc::SIGQUIT);
                return Err(PgServerError::NotReady {
                    log: self.log_tail(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the server on our port accepts a connection and is ours: another test binary's
    /// server may have taken the port before ours bound it (ours then exits, and
    /// [`PgServer::start`] tries another port), and must not be mistaken for it.
    fn answers_from(&self, data: &Path) -> bool {
        let client = postgres::Config::new()
            .host("127.0.0.1")
            .port(self.port())
            .user(SUPERUSER)
            .dbname("postgres")
            .connect_timeout(Duration::from_secs(1))
            .connect(postgres::NoTls);
        let Ok(mut client) = client else {
            return false;
        };
        client
            .query_one("SELECT current_setting('data_directory')", &[])
            .is_ok_and(|row| {
                row.try_get::<_, String>(0)
                    .is_ok_and(|dir| Path::new(&dir) == data)
            })
    }

    /// Stops the postmaster with `signal` (SIGINT: fast shutdown, which checkpoints; SIGQUIT:
    /// immediate shutdown, which does not), then SIGKILL if it takes longer than
    /// [`STOP_TIMEOUT`]. Either way the postmaster stops its children before it exits.
    fn stop(&self, signal: libc::c_int) {
        let Some(mut child) = self.lock_child().take() else {
            return;
        };
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: kill has no memory preconditions; the pid is our own child's, not yet
            // reaped, so it cannot have been reused.
            unsafe { libc::kill(pid, signal) };
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => break,
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Stops the server and removes its directory. Immediate shutdown: the checkpoint of a fast
    /// one would flush every database the tests created (seconds on a busy disk) into a
    /// directory deleted right after.
    fn shut_down(&self) {
        self.stop(libc::SIGQUIT);
        let _ = fs::remove_dir_all(&self.dir);
    }

    fn lock_child(&self) -> MutexGuard<'_, Option<Child>> {
        // A panic while holding the lock leaves the Option consistent.
        self.child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    fn log_tail(&self) -> String {
        read_tail(&self.log_path())
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// Removes a directory unless forgotten: the server's directory while it is being set up.
struct RemoveOnError(Option<PathBuf>);

impl Drop for RemoveOnError {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

/// The shared server, for the exit hook (which must not start one).
static SHARED_AT_EXIT: OnceLock<&'static PgServer> = OnceLock::new();

/// The shared server is a static, and statics are never dropped: stop it and remove its
/// directory when the test binary exits.
fn register_shared_cleanup() {
    extern "C" fn shut_down_shared() {
        if let Some(server) = SHARED_AT_EXIT.get() {
            server.shut_down();
        }
    }
    // SAFETY: atexit only records the function pointer; the function is extern "C", never
    // unwinds (shut_down does not panic) and touches only the shared server.
    unsafe { libc::atexit(shut_down_shared) };
}

/// The shared server for a test that needs PostgreSQL. When the binaries are missing: with
/// `MNEMON_REQUIRE_POSTGRES=1` (CI) it panics, saying to run `cargo xtask postgres install`;
/// otherwise it prints one loud `SKIPPED:` line to stderr (once per test binary, past the test
/// harness's output capture) and returns `None`, and the test should return.
///
/// # Panics
///
/// As above, and when the binaries are there but the server does not start.
pub fn require() -> Option<&'static PgServer> {
    if require_binaries() {
        PgServer::shared()
    } else {
        None
    }
}

/// The policy of [`require`] without starting the shared server, for a test that starts its
/// own [`PgServer`]: `true` when the binaries are there; otherwise panics under
/// `MNEMON_REQUIRE_POSTGRES=1` or prints the skip line and returns `false`.
///
/// # Panics
///
/// Under `MNEMON_REQUIRE_POSTGRES=1` when the binaries are missing, and when `MNEMON_PG_BIN`
/// names a directory without them.
pub fn require_binaries() -> bool {
    match Binaries::find() {
        Ok(Some(_)) => return true,
        Ok(None) => {}
        Err(error) => panic!("the PostgreSQL test server cannot start: {error}"),
    }
    if std::env::var(REQUIRE_ENV).is_ok_and(|value| value == "1") {
        panic!("{REQUIRE_ENV}=1 and {}", missing_binaries_message());
    }
    static SKIP_LINE: Once = Once::new();
    SKIP_LINE.call_once(|| {
        // io::stderr() directly: the test harness captures eprintln!, and a skip must be seen.
        let _ = writeln!(
            io::stderr(),
            "SKIPPED: PostgreSQL suites: {}",
            missing_binaries_message()
        );
    });
    false
}

/// The shared PostgreSQL server, or an early `return` from the calling test when the binaries
/// are missing (see [`postgres::require`](crate::postgres::require) for when it panics
/// instead).
#[macro_export]
macro_rules! require_postgres {
    () => {
        match $crate::postgres::require() {
            Some(server) => server,
            None => return,
        }
    };
}

fn missing_binaries_message() -> String {
    format!(
        "no PostgreSQL binaries: run `cargo xtask postgres install` (PostgreSQL 16 + pgvector \
         into target/postgres/) or set {PG_BIN_ENV} to a bin/ directory holding initdb and \
         postgres (docs/postgres.md)"
    )
}

/// The settings of [`PgServer::start_with_settings`], checked so that each is one `-c name=value`
/// argument meaning what it says: a name of ASCII letters, digits, `_` and `.` (PostgreSQL's
/// parameter names, custom `extension.name` ones included), a value without NUL.
fn checked_settings<N, V>(
    settings: impl IntoIterator<Item = (N, V)>,
) -> Result<Vec<(String, String)>, PgServerError>
where
    N: Into<String>,
    V: Into<String>,
{
    settings
        .into_iter()
        .map(|(name, value)| {
            let (name, value) = (name.into(), value.into());
            let good_name = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
            if good_name && !value.is_empty() && !value.contains('\0') {
                Ok((name, value))
            } else {
                Err(PgServerError::BadSetting { name, value })
            }
        })
        .collect()
}

/// The database name for [`PgServer::fresh_database`]`(name)`'s `n`th call: lower-case ASCII
/// letters, digits and `_` only (so it needs no quoting rules beyond the double quotes), at
/// most 32 characters of `name`, never starting with a digit, and `_n` at the end so that no two
/// calls collide.
fn database_name(name: &str, n: u64) -> String {
    let mut database: String = name
        .chars()
        .take(32)
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if database.is_empty() || database.starts_with(|c: char| c.is_ascii_digit()) {
        database.insert_str(0, "db_");
    }
    database.push_str(&format!("_{n}"));
    database
}

/// Runs `initdb` into `dir/data` (UTF-8, C locale, trusted local superuser `postgres`).
fn initdb(binaries: &Binaries, user: Option<User>, dir: &Path) -> Result<(), PgServerError> {
    let output_path = dir.join("initdb.log");
    let output = fs::File::create(&output_path).map_err(io_error("creating initdb.log"))?;
    let output_err = output
        .try_clone()
        .map_err(io_error("creating initdb.log"))?;
    let mut command = binaries.command("initdb", user, dir);
    command
        .arg("-D")
        .arg(dir.join("data"))
        .args(["--auth=trust", "--username", SUPERUSER])
        .args(["--encoding=UTF8", "--locale=C"])
        // Skips only initdb's final flush of the new cluster (2.8-6.6 s here under load, against
        // 0.7-1.3 s): that flush guards against an operating-system crash, which no test
        // causes. The server itself runs with fsync on.
        .arg("--no-sync")
        .stdout(output)
        .stderr(output_err);
    let mut child = command.spawn().map_err(io_error(format!(
        "starting {}",
        binaries.bin.join("initdb").display()
    )))?;
    let deadline = Instant::now() + INITDB_TIMEOUT;
    let status = loop {
        match child.try_wait().map_err(io_error("waiting for initdb"))? {
            Some(status) if status.success() => return Ok(()),
            Some(status) => break status.to_string(),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break format!("killed after {}s", INITDB_TIMEOUT.as_secs());
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    Err(PgServerError::InitDb {
        status,
        output: read_tail(&output_path),
    })
}

/// Removes the directories of servers whose test binary was killed before it could (their server
/// stopped on its parent-death signal and removed `postmaster.pid`, but the directory stays).
/// Only directories older than [`STALE_AGE`] count, so that one still being set up by another
/// test binary (no `postmaster.pid` yet) is left alone. Best effort: errors are ignored.
fn remove_stale_directories(temp: &Path) {
    let Ok(entries) = fs::read_dir(temp) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        let is_ours = entry
            .file_name()
            .to_str()
            .is_some_and(|name| name.starts_with(DIR_PREFIX));
        // The server log is written at every start and stop, so a restart in progress (no
        // `postmaster.pid` for a moment) is young too.
        let young = |path: &Path| {
            fs::metadata(path)
                .and_then(|meta| meta.modified())
                .ok()
                .and_then(|modified| modified.elapsed().ok())
                .is_none_or(|age| age <= STALE_AGE)
        };
        let old = !young(&path)
            && (!path.join("postgres.log").exists() || !young(&path.join("postgres.log")));
        if is_ours && old && path.is_dir() && !server_running(&path.join("data")) {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

/// Whether the `postmaster.pid` in `data` names a live process (a server killed outright leaves
/// its `postmaster.pid` behind).
fn server_running(data: &Path) -> bool {
    let Ok(text) = fs::read_to_string(data.join("postmaster.pid")) else {
        return false;
    };
    match text.lines().next().map(|line| line.trim().parse::<u32>()) {
        Some(Ok(pid)) => Path::new(&format!("/proc/{pid}")).exists(),
        // Being written: count it as running.
        _ => true,
    }
}

/// A loopback port nothing listens on right now.
fn free_port() -> Result<u16, PgServerError> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(io_error("finding a free loopback port"))?;
    let port = listener
        .local_addr()
        .map_err(io_error("finding a free loopback port"))?
        .port();
    Ok(port)
}

/// The last [`LOG_TAIL`] bytes of a log file (or why it cannot be read).
fn read_tail(path: &Path) -> String {
    let read = || -> io::Result<String> {
        let mut file = fs::File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    read().unwrap_or_else(|error| format!("(cannot read {}: {error})", path.display()))
}

/// Spawns `command` from one long-lived thread, with the child asked to get SIGQUIT (immediate
/// shutdown) if that thread dies: a test binary killed outright then does not leave a server
/// behind. Linux sends the parent-death signal when the spawning *thread* exits, which is why
/// the spawning cannot happen on the test's own thread.
fn spawn_outliving_test_threads(mut command: Command) -> io::Result<Child> {
    type Request = (Command, mpsc::Sender<io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    // SAFETY: the closure runs in the forked child before exec and only calls prctl, which is
    // async-signal-safe. It runs after the uid change, which would otherwise clear the setting.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let spawner = SPAWNER.get_or_init(|| {
        let (requests, incoming) = mpsc::channel::<Request>();
        let _detached = std::thread::Builder::new()
            .name("mnemon-pg-spawner".to_owned())
            .spawn(move || {
                for (mut command, reply) in incoming {
                    let _ = reply.send(command.spawn());
                }
            });
        Mutex::new(requests)
    });
    let (reply, response) = mpsc::channel();
    let sent = spawner
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .send((command, reply));
    if sent.is_err() {
        return Err(io::Error::other("the server spawner thread is gone"));
    }
    response
        .recv()
        .unwrap_or_else(|_| Err(io::Error::other("the server spawner thread is gone")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_port_taken_by_another_server_is_not_mistaken_for_ours() {
        if !require_binaries() {
            return;
        }
        let binaries = match Binaries::find() {
            Ok(Some(binaries)) => binaries,
            other => panic!("require_binaries found them, find gives {other:?}"),
        };
        let first = PgServer::start_with(binaries.clone(), None, Vec::new())
            .unwrap_or_else(|error| panic!("{error}"));
        // The second server is told to take the first one's port: its postgres cannot bind it,
        // and answering connections there must not count as its own start.
        let second = PgServer::start_with(binaries, Some(first.port()), Vec::new())
            .unwrap_or_else(|error| panic!("{error}"));
        assert_ne!(second.port(), first.port());
        for server in [&first, &second] {
            let dir: String = server
                .connect("postgres")
                .and_then(|mut client| {
                    client
                        .query_one("SELECT current_setting('data_directory')", &[])
                        .map_err(|source| PgServerError::Sql {
                            what: "reading data_directory".to_owned(),
                            source,
                        })
                })
                .unwrap_or_else(|error| panic!("{error}"))
                .get(0);
            assert_eq!(Path::new(&dir), server.dir().join("data"));
        }
        assert!(
            second.log_tail().contains("could not bind"),
            "{}",
            second.log_tail()
        );
    }

    /// `SHOW name` on `server`.
    fn show(server: &PgServer, name: &str) -> String {
        server
            .connect("postgres")
            .and_then(|mut client| {
                client
                    .query_one(&format!("SHOW {name}"), &[])
                    .map_err(|source| PgServerError::Sql {
                        what: format!("SHOW {name}"),
                        source,
                    })
            })
            .unwrap_or_else(|error| panic!("{error}"))
            .get(0)
    }

    #[test]
    fn extra_settings_reach_the_server_and_survive_a_restart() {
        if !require_binaries() {
            return;
        }
        let server = PgServer::start_with_settings([
            ("shared_buffers", "48MB"),
            ("maintenance_work_mem", "96MB"),
            // One of the harness's own settings: the extra one comes after it and wins.
            ("max_connections", "57"),
        ])
        .unwrap_or_else(|error| panic!("{error}"));
        for _ in 0..2 {
            assert_eq!(show(&server, "shared_buffers"), "48MB");
            assert_eq!(show(&server, "maintenance_work_mem"), "96MB");
            assert_eq!(show(&server, "max_connections"), "57");
            // The harness's settings that were not overridden stay.
            assert_eq!(show(&server, "synchronous_commit"), "on");
            server.restart().unwrap_or_else(|error| panic!("{error}"));
        }
    }

    #[test]
    fn a_setting_the_server_rejects_fails_the_start_naming_it() {
        if !require_binaries() {
            return;
        }
        match PgServer::start_with_settings([("mnemon_no_such_setting", "1")]) {
            Err(PgServerError::Exited { log, .. }) => {
                assert!(log.contains("mnemon_no_such_setting"), "{log}");
            }
            other => panic!("expected the server to exit naming the setting, got {other:?}"),
        }
    }

    #[test]
    fn malformed_settings_are_refused_before_any_start() {
        for (name, value) in [
            ("", "1"),
            ("shared buffers", "1MB"),
            ("a=b", "1"),
            ("work_mem", ""),
            ("work_mem", "4\0MB"),
        ] {
            match checked_settings([(name, value)]) {
                Err(PgServerError::BadSetting { name: n, value: v }) => {
                    assert_eq!((n.as_str(), v.as_str()), (name, value));
                }
                other => panic!("{name:?} = {value:?} was accepted: {other:?}"),
            }
        }
        let good = checked_settings([("pg_stat_statements.max", "100"), ("work_mem", "8MB")])
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(good.len(), 2);
    }

    #[test]
    fn from_passwd_finds_the_named_user_only() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      nobodyelse:x:1:1::/:/bin/false\n\
                      nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
        let user = User::from_passwd(passwd, "nobody");
        assert_eq!(user.map(|u| (u.uid, u.gid)), Some((65534, 65534)));
        assert!(User::from_passwd(passwd, "postgres").is_none());
        assert!(User::from_passwd("nobody:x:notanumber:1::/:\n", "nobody").is_none());
        assert!(User::from_passwd("nobody\n", "nobody").is_none());
    }

    #[test]
    fn can_search_follows_the_permission_bits() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
        let meta = fs::metadata(dir.path()).unwrap_or_else(|error| panic!("{error}"));
        // A user that neither owns the directory nor is in its group.
        let stranger = User {
            uid: meta.uid().wrapping_add(12_345),
            gid: meta.gid().wrapping_add(12_345),
        };
        let owner = User {
            uid: meta.uid(),
            gid: meta.gid().wrapping_add(12_345),
        };
        let set = |mode| {
            fs::set_permissions(dir.path(), fs::Permissions::from_mode(mode))
                .unwrap_or_else(|error| panic!("{error}"));
        };
        set(0o700);
        assert!(!stranger.can_search(dir.path()));
        assert!(owner.can_search(dir.path()));
        set(0o711);
        assert!(stranger.can_search(dir.path()));
        set(0o600);
        assert!(!owner.can_search(dir.path()));
        assert!(!stranger.can_search(&dir.path().join("missing")));
    }

    #[test]
    fn database_names_are_plain_and_distinct() {
        assert_eq!(
            database_name("accepts connections", 0),
            "accepts_connections_0"
        );
        assert_eq!(database_name("Memory-Recall", 7), "memory_recall_7");
        assert_eq!(database_name("", 1), "db__1");
        assert_eq!(database_name("9lives", 2), "db_9lives_2");
        assert_eq!(database_name("é\"; DROP", 3), "____drop_3");
        // The longest name: a prefix, the whole cut and the widest suffix, within PostgreSQL's
        // 63-byte identifier limit.
        assert!(database_name(&"9".repeat(100), u64::MAX).len() <= 63);
    }

    #[test]
    fn stale_directories_are_removed_and_live_or_young_ones_kept() {
        let temp = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
        let make = |name: &str, running: bool, age: Duration| -> PathBuf {
            let dir = temp.path().join(name);
            fs::create_dir_all(dir.join("data")).unwrap_or_else(|error| panic!("{error}"));
            if running {
                fs::write(
                    dir.join("data/postmaster.pid"),
                    format!("{}\n", std::process::id()),
                )
                .unwrap_or_else(|error| panic!("{error}"));
            }
            let when = std::time::SystemTime::now() - age;
            fs::File::open(&dir)
                .and_then(|file| file.set_modified(when))
                .unwrap_or_else(|error| panic!("{error}"));
            dir
        };
        let old = STALE_AGE * 2;
        let stale = make("mnemon-pg-stale", false, old);
        // A server killed outright leaves a postmaster.pid naming a process that is gone.
        let killed = make("mnemon-pg-killed", false, old);
        fs::write(
            killed.join("data/postmaster.pid"),
            format!("{}\n", u32::MAX),
        )
        .unwrap_or_else(|error| panic!("{error}"));
        let running = make("mnemon-pg-running", true, old);
        let young = make("mnemon-pg-young", false, Duration::ZERO);
        let other = make("someone-else", false, old);
        remove_stale_directories(temp.path());
        assert!(!stale.exists() && !killed.exists());
        assert!(running.exists() && young.exists() && other.exists());
    }

    proptest! {
        #[test]
        fn database_names_need_no_escaping(name in any::<String>(), n in any::<u64>()) {
            let database = database_name(&name, n);
            prop_assert!(database.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'));
            prop_assert!(!database.starts_with(|c: char| c.is_ascii_digit()));
            // Within PostgreSQL's 63-byte identifier limit, so it is never truncated into
            // another test's name.
            prop_assert!(database.len() <= 63);
            let suffix = format!("_{n}");
            prop_assert!(database.ends_with(&suffix));
        }

        #[test]
        fn an_accepted_setting_is_one_unambiguous_argument(name in ".{0,12}", value in ".{0,12}") {
            if let Ok(settings) = checked_settings([(name.clone(), value.clone())]) {
                // `postgres -c` splits its argument at the first `=`.
                let argument = format!("{}={}", settings[0].0, settings[0].1);
                prop_assert_eq!(argument.split_once('='), Some((name.as_str(), value.as_str())));
                prop_assert!(!argument.contains('\0'));
            }
        }

        #[test]
        fn from_passwd_never_panics(text in ".*", name in "[a-z]{1,8}") {
            let _ = User::from_passwd(&text, &name);
        }
    }
}
