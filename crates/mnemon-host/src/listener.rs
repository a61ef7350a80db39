//! The accept loop and the life of each connection (`docs/limits.md`): a header-read timeout,
//! an idle timeout between keep-alive requests, a send timeout for responses the client stops
//! taking, and a connection limit that closes the
//! connection idle the longest to make room, so idle or trickling sockets cannot lock out
//! other clients (or `/healthz`) when file descriptors run short.
//!
//! `axum::serve` has none of these, so connections are served with hyper directly. Hyper's own
//! header-read timeout also runs while a keep-alive connection waits for its next request, so
//! both timeouts are kept here instead, from what the connection reads and which requests it
//! has in flight.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::connect_info::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::time::Instant;
use tower::Service;

use crate::options::HostOptions;

/// File descriptors kept free below the process limit for library files, reloads and logs.
const RESERVED_FDS: u64 = 64;

/// Hyper's read buffer per connection: large enough for any sane request head, small enough
/// that a thousand connections stay cheap (hyper's default is about 400 KB each).
const MAX_READ_BUFFER: usize = 64 * 1024;

/// What a connection refused for lack of room is told before it is closed.
fn busy_response() -> Vec<u8> {
    let body = r#"{"error":"the host is busy: every connection has a request in flight (--max-connections); retry later"}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: {}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        crate::limits::RETRY_AFTER_SECS,
        body.len()
    )
    .into_bytes()
}

/// Where one connection is in its life, for its timeouts and for eviction.
struct Phase {
    /// Requests being answered: from the head's arrival until hyper has taken the response's
    /// whole body (hyper takes a body that is one buffer at once, before writing it).
    busy: usize,
    /// When the head of the next request began: the connection's start for the first request,
    /// else the first byte after the previous response. `None` while idle between requests.
    head_started: Option<Instant>,
    /// When the connection last finished sending (its last flush), or began.
    idle_since: Instant,
    /// When a write last found the socket full with no progress since; `None` while writes
    /// go through.
    send_stalled_since: Option<Instant>,
    /// Bytes were written (or are waiting to be) since hyper last flushed: a response's tail
    /// may be going out though no request is counted busy any more. Such a connection is not
    /// idle: it is never evicted, has no header clock, and is held to the send timeout while
    /// stalled and, as a backstop, to the idle timeout after its last progress.
    unflushed: bool,
}

/// One connection's state, shared by its task, its IO and its requests.
pub(crate) struct Conn {
    phase: Mutex<Phase>,
    /// Wakes the connection's task when a deadline may have moved earlier.
    changed: Notify,
    /// Asks the connection's task to close the connection if it is still idle.
    evict: Notify,
}

impl Conn {
    fn new(now: Instant) -> Conn {
        Conn {
            phase: Mutex::new(Phase {
                busy: 0,
                head_started: Some(now),
                idle_since: now,
                send_stalled_since: None,
                unflushed: false,
            }),
            changed: Notify::new(),
            evict: Notify::new(),
        }
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes arrived: outside a request they start the next request's head.
    fn on_read(&self) {
        let mut phase = self.phase();
        if phase.busy == 0 && phase.head_started.is_none() {
            phase.head_started = Some(Instant::now());
            drop(phase);
            self.changed.notify_one();
        }
    }

    /// A write found the socket full: the send clock starts unless it runs already.
    fn on_write_blocked(&self) {
        let mut phase = self.phase();
        phase.unflushed = true;
        if phase.send_stalled_since.is_none() {
            phase.send_stalled_since = Some(Instant::now());
            drop(phase);
            self.changed.notify_one();
        }
    }

    /// A write went through: the client is taking the response. Between requests (a tail
    /// going out) that is activity: the idle clock starts again.
    fn on_write_progress(&self) {
        let mut phase = self.phase();
        phase.send_stalled_since = None;
        phase.unflushed = true;
        if phase.busy == 0 {
            phase.idle_since = Instant::now();
        }
    }

    /// hyper flushed: everything it had to send is written. Between requests the idle clock
    /// starts now, and so does the header clock of a next request whose bytes arrived while
    /// the previous response was still going out (hyper reads ahead, and parses that head only
    /// now).
    fn on_flushed(&self) {
        let mut phase = self.phase();
        if !phase.unflushed {
            return;
        }
        phase.unflushed = false;
        if phase.busy == 0 {
            let now = Instant::now();
            phase.idle_since = now;
            if phase.head_started.is_some() {
                phase.head_started = Some(now);
            }
        }
        drop(phase);
        self.changed.notify_one();
    }

    /// A request's head is complete and the request is being answered.
    fn begin_request(self: &Arc<Self>) -> RequestGuard {
        let mut phase = self.phase();
        phase.busy += 1;
        phase.head_started = None;
        RequestGuard(Arc::clone(self))
    }

    /// When this connection should be closed if nothing changes: a response whose writes are
    /// stalled, at the send timeout, whether or not its request is still counted as busy (the
    /// guard is gone once hyper holds the whole body, which it then writes); otherwise, while
    /// it is busy, never (a request still being worked on has no deadline here); while a
    /// response's tail is going out, the idle timeout after its last progress (a backstop:
    /// the tail's flush ends that phase).
    fn deadline(&self, options: &HostOptions) -> Option<Instant> {
        let phase = self.phase();
        if let Some(stalled) = phase.send_stalled_since {
            return Some(stalled + options.send_timeout);
        }
        if phase.busy > 0 {
            return None;
        }
        if phase.unflushed {
            return Some(phase.idle_since + options.idle_timeout);
        }
        Some(match phase.head_started {
            Some(started) => started + options.header_read_timeout,
            None => phase.idle_since + options.idle_timeout,
        })
    }

    /// How long ago this connection last did anything, if it has no request in flight and
    /// no response going out.
    fn idle_for(&self, now: Instant) -> Option<Duration> {
        let phase = self.phase();
        (phase.busy == 0 && !phase.unflushed)
            .then(|| now - phase.head_started.unwrap_or(phase.idle_since))
    }
}

/// Marks a request as answered when dropped: once hyper has taken its response's whole body
/// (the bytes may still be going out; [`Phase::unflushed`] covers them).
pub(crate) struct RequestGuard(Arc<Conn>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let mut phase = self.0.phase();
        phase.busy = phase.busy.saturating_sub(1);
        phase.idle_since = Instant::now();
        drop(phase);
        self.0.changed.notify_one();
    }
}

/// A response body that holds its request's guard until it is fully sent.
struct GuardedBody {
    inner: axum::body::Body,
    _guard: RequestGuard,
}

impl http_body::Body for GuardedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A TCP stream that tells its connection when bytes arrive.
struct TrackedStream {
    stream: TcpStream,
    conn: Arc<Conn>,
}

impl AsyncRead for TrackedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.on_read();
        }
        polled
    }
}

impl TrackedStream {
    /// Tells the connection whether a write went through or found the socket full.
    fn track(&self, polled: &Poll<std::io::Result<usize>>) {
        match polled {
            Poll::Ready(Ok(n)) if *n > 0 => self.conn.on_write_progress(),
            Poll::Pending => self.conn.on_write_blocked(),
            _ => {}
        }
    }
}

impl AsyncWrite for TrackedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, data);
        self.track(&polled);
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.stream).poll_flush(cx);
        // hyper flushes the socket once its own buffer is written out.
        if matches!(polled, Poll::Ready(Ok(()))) {
            self.conn.on_flushed();
        }
        polled
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.track(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// The open connections, for eviction.
#[derive(Default)]
struct Registry {
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
}

impl Registry {
    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn insert(&self, conn: Arc<Conn>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.open().insert(id, conn);
        id
    }

    fn remove(&self, id: u64) {
        self.open().remove(&id);
    }

    /// Asks the connection idle the longest to close; `false` if every one is busy.
    fn evict_one(&self) -> bool {
        let now = Instant::now();
        let open = self.open();
        let oldest = open
            .values()
            .filter_map(|conn| conn.idle_for(now).map(|idle| (idle, conn)))
            .max_by_key(|(idle, _)| *idle);
        match oldest {
            Some((_, conn)) => {
                conn.evict.notify_one();
                true
            }
            None => false,
        }
    }
}

/// The connection limit actually applied: the configured one, kept [`RESERVED_FDS`] below the
/// process's file-descriptor limit.
pub(crate) fn effective_connection_limit(configured: usize) -> usize {
    let limit = match fd_limit() {
        Some(fds) => {
            let room = fds.saturating_sub(RESERVED_FDS).max(1);
            configured.min(usize::try_from(room).unwrap_or(usize::MAX))
        }
        None => configured,
    };
    limit.clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize))
}

/// The soft limit on open file descriptors, if there is one.
#[cfg(unix)]
// `rlim_t` is not `u64` on every Unix.
#[allow(clippy::unnecessary_cast)]
fn fd_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a valid, exclusive pointer.
    let status = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    (status == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur as u64)
}

#[cfg(not(unix))]
fn fd_limit() -> Option<u64> {
    None
}

/// Raises the process's soft limit on open file descriptors to its hard limit (on macOS, to
/// at most its per-process maximum of 10,240), as a server that holds many connections should:
/// Linux distributions commonly start processes with a soft limit of 1,024 under a hard limit
/// of hundreds of thousands, and the soft one caps the connections served
/// (`HostOptions::max_connections` is kept 64 below it; docs/limits.md). Returns the soft limit
/// before and after when it was raised, `Ok(None)` when it already was the hard limit (or
/// unlimited). It changes the whole process's limit, so it belongs to a program's start, as in
/// `mnemon serve`; a library embedding the host decides for itself.
#[cfg(unix)]
// `rlim_t` is not `u64` on every Unix.
#[allow(clippy::unnecessary_cast)]
pub fn raise_fd_limit() -> std::io::Result<Option<(u64, u64)>> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a valid, exclusive pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if limit.rlim_cur == limit.rlim_max || limit.rlim_cur == libc::RLIM_INFINITY {
        return Ok(None);
    }
    let before = limit.rlim_cur as u64;
    // macOS reports an unlimited hard limit but refuses a soft one above its per-process
    // maximum (`OPEN_MAX`, 10,240): that is tried next.
    let mut error = None;
    for soft in [limit.rlim_max, MACOS_OPEN_MAX.min(limit.rlim_max)] {
        if soft <= limit.rlim_cur {
            break;
        }
        let raised = libc::rlimit {
            rlim_cur: soft,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads one `rlimit` through a valid pointer; raising the soft
        // limit up to the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Ok(Some((before, soft as u64)));
        }
        error = Some(std::io::Error::last_os_error());
    }
    error.map_or(Ok(None), Err)
}

/// The most files a macOS process may open (`OPEN_MAX` in its `<sys/syslimits.h>`).
#[cfg(unix)]
const MACOS_OPEN_MAX: libc::rlim_t = 10_240;

/// Without Unix resource limits there is nothing to raise.
#[cfg(not(unix))]
pub fn raise_fd_limit() -> std::io::Result<Option<(u64, u64)>> {
    Ok(None)
}

/// Accepts connections until `stopping` turns true, then closes the listener, lets every
/// connection finish its requests, and returns once all are closed or `drain` has passed
/// (`false` then).
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    options: HostOptions,
    mut stopping: watch::Receiver<bool>,
) -> bool {
    let limit = effective_connection_limit(options.max_connections);
    if limit < options.max_connections {
        tracing::warn!(
            max_connections = options.max_connections,
            applied = limit,
            "the file-descriptor limit is low: serving fewer connections at once (raise it \
             with `ulimit -n`)"
        );
    }
    let slots = Arc::new(Semaphore::new(limit));
    let registry = Arc::new(Registry::default());
    let options = Arc::new(options);
    let mut last_accept_error: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopping.wait_for(|stop| *stop) => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors, or a connection reset before it was accepted: wait a
                // little rather than spin, and log once a second at most.
                if last_accept_error.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
                    tracing::warn!(%error, "accepting a connection failed");
                    last_accept_error = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let permit = match Arc::clone(&slots).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                // At the limit: make room by closing the connection idle the longest.
                let room = if registry.evict_one() {
                    let wait = Arc::clone(&slots).acquire_owned();
                    tokio::time::timeout(Duration::from_millis(500), wait)
                        .await
                        .ok()
                        .and_then(Result::ok)
                } else {
                    None
                };
                match room {
                    Some(permit) => permit,
                    None => {
                        // Best effort: the socket buffer takes this small answer at once.
                        let _ = stream.try_write(&busy_response());
                        tracing::debug!(%peer, "connection refused: every connection is busy");
                        continue;
                    }
                }
            }
        };
        let conn = Arc::new(Conn::new(Instant::now()));
        let id = registry.insert(Arc::clone(&conn));
        let app = app.clone();
        let options = Arc::clone(&options);
        let registry = Arc::clone(&registry);
        let stopping = stopping.clone();
        tokio::spawn(async move {
            serve_connection(stream, peer, app, &conn, &options, stopping).await;
            registry.remove(id);
            drop(permit);
        });
    }
    drop(listener);
    let all = u32::try_from(limit).unwrap_or(u32::MAX);
    tokio::time::timeout(options.drain_timeout, slots.acquire_many(all))
        .await
        .is_ok()
}

/// Serves one connection until the client closes it, a timeout or eviction closes it, or the
/// host stops (graceful: the request in flight is answered first).
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    conn: &Arc<Conn>,
    options: &HostOptions,
    mut stopping: watch::Receiver<bool>,
) {
    // Small responses go out at once rather than waiting for a delayed ACK.
    let _ = stream.set_nodelay(true);
    let io = TokioIo::new(TrackedStream {
        stream,
        conn: Arc::clone(conn),
    });
    let service_conn = Arc::clone(conn);
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        let guard = service_conn.begin_request();
        req.extensions_mut().insert(ConnectInfo(peer));
        let mut app = app.clone();
        async move {
            let response = app.call(req.map(axum::body::Body::new)).await?;
            Ok::<_, std::convert::Infallible>(response.map(|inner| GuardedBody {
                inner,
                _guard: guard,
            }))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // Both timeouts are enforced below, from what the connection does.
        .header_read_timeout(None)
        .max_buf_size(MAX_READ_BUFFER);
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    let mut draining = *stopping.borrow();
    if draining {
        connection.as_mut().graceful_shutdown();
    }
    loop {
        let deadline = conn.deadline(options);
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%peer, %error, "connection ended with an error");
                }
                return;
            }
            () = conn.changed.notified() => {}
            () = conn.evict.notified() => {
                if conn.idle_for(Instant::now()).is_some() {
                    tracing::debug!(%peer, "closing the connection idle the longest to make room");
                    return;
                }
            }
            () = sleep_until(deadline) => {
                if conn.deadline(options).is_some_and(|at| at <= Instant::now()) {
                    tracing::debug!(
                        %peer,
                        "closing a connection: header-read, idle or send timeout"
                    );
                    return;
                }
            }
            changed = stopping.changed(), if !draining => {
                if changed.is_err() || *stopping.borrow() {
                    draining = true;
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn deadlines_follow_the_connection_phase() {
        let options = HostOptions {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            ..HostOptions::default()
        };
        let start = Instant::now();
        let conn = Arc::new(Conn::new(start));
        // A new connection must send its first head within the header timeout.
        assert_eq!(
            conn.deadline(&options),
            Some(start + Duration::from_secs(10))
        );
        let guard = conn.begin_request();
        assert_eq!(conn.deadline(&options), None);
        assert_eq!(conn.idle_for(Instant::now()), None);
        tokio::time::advance(Duration::from_secs(5)).await;
        drop(guard);
        let idle = Instant::now();
        assert_eq!(
            conn.deadline(&options),
            Some(idle + Duration::from_secs(60))
        );
        tokio::time::advance(Duration::from_secs(7)).await;
        // The next request's first byte starts its header clock.
        conn.on_read();
        assert_eq!(
            conn.deadline(&options),
            Some(Instant::now() + Duration::from_secs(10))
        );
        assert_eq!(conn.idle_for(Instant::now()), Some(Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_response_has_a_deadline_and_progress_clears_it() {
        let options = HostOptions {
            send_timeout: Duration::from_secs(30),
            ..HostOptions::default()
        };
        let conn = Arc::new(Conn::new(Instant::now()));
        let guard = conn.begin_request();
        assert_eq!(conn.deadline(&options), None);
        conn.on_write_blocked();
        let blocked = Instant::now();
        assert_eq!(
            conn.deadline(&options),
            Some(blocked + Duration::from_secs(30))
        );
        // Blocking again does not move the clock; progress stops it.
        tokio::time::advance(Duration::from_secs(5)).await;
        conn.on_write_blocked();
        assert_eq!(
            conn.deadline(&options),
            Some(blocked + Duration::from_secs(30))
        );
        conn.on_write_progress();
        assert_eq!(conn.deadline(&options), None);
        // Still busy: the connection is not idle, so it is never evicted.
        assert_eq!(conn.idle_for(Instant::now()), None);
        drop(guard);
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_tail_written_after_its_request_is_done_keeps_the_send_deadline() {
        // hyper takes a whole body and drops it (and the request's guard) before writing it:
        // the bytes still going out are held to the send timeout, and while they progress the
        // connection is not idle.
        let options = HostOptions {
            send_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            ..HostOptions::default()
        };
        let conn = Arc::new(Conn::new(Instant::now()));
        drop(conn.begin_request());
        conn.on_write_blocked();
        let blocked = Instant::now();
        assert_eq!(
            conn.deadline(&options),
            Some(blocked + Duration::from_secs(30))
        );
        // Not idle while it goes out: never evicted; progress moves the idle clock.
        assert_eq!(conn.idle_for(Instant::now()), None);
        tokio::time::advance(Duration::from_secs(50)).await;
        conn.on_write_progress();
        let progressed = Instant::now();
        assert_eq!(
            conn.deadline(&options),
            Some(progressed + Duration::from_secs(60))
        );
        assert_eq!(conn.idle_for(Instant::now()), None);
        // A next request's first bytes, read ahead while the tail goes out, start no header
        // clock until the tail is written.
        tokio::time::advance(Duration::from_secs(30)).await;
        conn.on_read();
        assert_eq!(
            conn.deadline(&options),
            Some(progressed + Duration::from_secs(60))
        );
        tokio::time::advance(Duration::from_secs(20)).await;
        conn.on_write_progress();
        conn.on_flushed();
        assert_eq!(
            conn.deadline(&options),
            Some(Instant::now() + options.header_read_timeout)
        );
        assert_eq!(conn.idle_for(Instant::now()), Some(Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn a_flushed_connection_is_idle_from_its_flush() {
        let options = HostOptions {
            idle_timeout: Duration::from_secs(60),
            ..HostOptions::default()
        };
        let conn = Arc::new(Conn::new(Instant::now()));
        let guard = conn.begin_request();
        conn.on_write_progress();
        drop(guard);
        tokio::time::advance(Duration::from_secs(45)).await;
        assert_eq!(conn.idle_for(Instant::now()), None, "the tail is going out");
        conn.on_flushed();
        assert_eq!(
            conn.deadline(&options),
            Some(Instant::now() + Duration::from_secs(60))
        );
        // A flush with nothing written moves nothing.
        tokio::time::advance(Duration::from_secs(5)).await;
        conn.on_flushed();
        assert_eq!(conn.idle_for(Instant::now()), Some(Duration::from_secs(5)));
    }

    #[tokio::test(start_paused = true)]
    async fn eviction_picks_the_longest_idle_connection() {
        let registry = Registry::default();
        let old = Arc::new(Conn::new(Instant::now()));
        registry.insert(Arc::clone(&old));
        tokio::time::advance(Duration::from_secs(3)).await;
        let busy = Arc::new(Conn::new(Instant::now()));
        let _guard = busy.begin_request();
        registry.insert(Arc::clone(&busy));
        let young = Arc::new(Conn::new(Instant::now()));
        registry.insert(Arc::clone(&young));
        assert!(registry.evict_one());
        // The notification is stored for the oldest one only.
        tokio::time::timeout(Duration::from_millis(1), old.evict.notified())
            .await
            .unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(1), young.evict.notified())
                .await
                .is_err()
        );
        let only_busy = Registry::default();
        only_busy.insert(busy);
        assert!(!only_busy.evict_one());
    }

    #[test]
    fn the_connection_limit_stays_below_the_fd_limit() {
        assert!(effective_connection_limit(usize::MAX) < usize::MAX);
        assert_eq!(effective_connection_limit(3), 3);
        assert_eq!(effective_connection_limit(0), 1);
    }
}
