//! A client for OpenAI-compatible embeddings APIs (`POST {base}/embeddings`).

use std::sync::Once;
use std::thread;
use std::time::{Duration, Instant};

use mnemon_types::{EmbedError, Embedder};
use reqwest::StatusCode;
use reqwest::blocking::{Client, Response};
use serde::{Deserialize, Serialize};

/// Models whose native vector length is known, so no dimension needs configuring. This is
/// the only table of OpenAI model dimensions in the workspace; the library format's own rule
/// (which model names a library file must match in dimension) is `mnemon-library`'s.
const KNOWN_MODELS: &[(&str, usize)] = &[
    ("text-embedding-ada-002", 1536),
    ("text-embedding-3-small", 1536),
    ("text-embedding-3-large", 3072),
];

/// The least time left before a batch's deadline for which a retry is made (or the attempt
/// timeout, when that is shorter).
const MIN_ATTEMPT: Duration = Duration::from_millis(100);

/// Configures an [`OpenAiEmbedder`]; start from [`OpenAiEmbedder::builder`] or
/// [`OpenAiEmbedder::from_env`].
#[derive(Clone)]
pub struct OpenAiEmbedderBuilder {
    base_url: String,
    api_key: Option<String>,
    model: String,
    model_name: Option<String>,
    dimension: Option<usize>,
    batch_size: usize,
    timeout: Duration,
    connect_timeout: Duration,
    max_retries: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
    deadline: Duration,
}

impl std::fmt::Debug for OpenAiEmbedderBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiEmbedderBuilder")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("dimension", &self.dimension)
            .field("batch_size", &self.batch_size)
            .finish_non_exhaustive()
    }
}

impl Default for OpenAiEmbedderBuilder {
    fn default() -> Self {
        OpenAiEmbedderBuilder {
            base_url: OpenAiEmbedder::DEFAULT_BASE_URL.to_owned(),
            api_key: None,
            model: OpenAiEmbedder::DEFAULT_MODEL.to_owned(),
            model_name: None,
            dimension: None,
            batch_size: OpenAiEmbedder::DEFAULT_BATCH_SIZE,
            timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            max_retries: 5,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(20),
            deadline: OpenAiEmbedder::DEFAULT_DEADLINE,
        }
    }
}

impl OpenAiEmbedderBuilder {
    /// The API root, such as `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`;
    /// requests go to `<base_url>/embeddings`.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// The bearer token. Required for `api.openai.com`; optional for other servers (no
    /// `Authorization` header is sent without one).
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// The model as the API names it (`text-embedding-3-small`). A leading `openai.com:` is
    /// accepted and removed, so a library's `embedding_model` can be passed as is.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        let model = model.into();
        self.model = model
            .strip_prefix(OpenAiEmbedder::MODEL_PREFIX)
            .map_or(model.clone(), str::to_owned);
        self
    }

    /// The name recorded in libraries, instead of `openai.com:<model>`. Use it for servers whose
    /// models are not OpenAI's, so that their vectors are never mixed with OpenAI's.
    pub fn model_name(mut self, name: impl Into<String>) -> Self {
        self.model_name = Some(name.into());
        self
    }

    /// The vector length. Needed for models not in the known table (ada-002, 3-small, 3-large).
    /// For a known model, a length different from its native one is sent as the API's
    /// `dimensions` parameter, which the `text-embedding-3` models use to shorten their vectors.
    pub fn dimension(mut self, dimension: usize) -> Self {
        self.dimension = Some(dimension);
        self
    }

    /// Texts per request (default 128; OpenAI accepts up to 2048).
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// The most one attempt may take, from connecting to the response's last byte (default
    /// 60 s; the body is bounded in size too). A retry gets its own, within the
    /// [`deadline`](Self::deadline).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The most one batch of texts may take, every attempt and the waits between them included
    /// (default [`OpenAiEmbedder::DEFAULT_DEADLINE`], 2 minutes): once it has passed, the batch
    /// fails with its last error rather than being retried, so a caller waiting on an embedding
    /// (a search by text, an add without vectors) waits at most about this per batch, however
    /// many retries `max_retries` allows.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The limit for establishing a connection (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How often a request is retried after 429, a 5xx status, a timeout or a connection error
    /// (default 5; 0 disables retries).
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// The first wait before a retry (default 500 ms) and the cap the doubling waits grow to
    /// (default 20 s). A `Retry-After` header in seconds replaces the wait, within the cap.
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max.max(initial);
        self
    }

    /// Checks the configuration and builds the client.
    pub fn build(self) -> Result<OpenAiEmbedder, EmbedError> {
        let model_name = self
            .model_name
            .clone()
            .unwrap_or_else(|| format!("{}{}", OpenAiEmbedder::MODEL_PREFIX, self.model));
        let fail = |message: String| EmbedError::new(model_name.clone(), message);
        if self.model.is_empty() {
            return Err(fail("the model name is empty".into()));
        }
        let base = self.base_url.trim_end_matches('/').to_owned();
        let scheme_end = base.find("://").unwrap_or(0);
        match &base[..scheme_end] {
            "http" | "https" => {}
            _ => {
                return Err(fail(format!(
                    "the base URL {:?} must start with http:// or https://",
                    self.base_url
                )));
            }
        }
        let host = base[scheme_end + 3..]
            .split(['/', ':'])
            .next()
            .unwrap_or_default();
        if host.is_empty() {
            return Err(fail(format!(
                "the base URL {:?} has no host",
                self.base_url
            )));
        }
        let api_key = self.api_key.filter(|k| !k.is_empty());
        if api_key.is_none() && host.eq_ignore_ascii_case("api.openai.com") {
            return Err(fail(
                "no API key: set OPENAI_API_KEY (or pass one to the builder); servers other than \
                 api.openai.com may be used without a key via OPENAI_BASE_URL"
                    .into(),
            ));
        }
        let native = OpenAiEmbedder::native_dimension(&self.model);
        let (dimension, send_dimensions) = match (self.dimension, native) {
            (Some(0), _) => return Err(fail("the dimension must be at least 1".into())),
            (Some(d), Some(n)) => (d, d != n),
            (Some(d), None) => (d, false),
            (None, Some(n)) => (n, false),
            (None, None) => {
                return Err(fail(format!(
                    "the vector length of model {:?} is unknown; configure it (--dimension N, or \
                     the builder's dimension)",
                    self.model
                )));
            }
        };
        if self.batch_size == 0 {
            return Err(fail("the batch size must be at least 1".into()));
        }
        if self.deadline.is_zero() || self.timeout.is_zero() {
            return Err(fail(
                "the timeout and the deadline must be longer than zero".into(),
            ));
        }
        install_crypto_provider();
        let client = Client::builder()
            .timeout(self.timeout)
            .connect_timeout(self.connect_timeout)
            .user_agent(concat!("mnemon-embed/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| EmbedError {
                model: model_name.clone(),
                message: format!("cannot build the HTTP client: {e}"),
                source: Some(Box::new(e)),
            })?;
        let request_url = format!("{base}/embeddings");
        Ok(OpenAiEmbedder {
            client,
            endpoint: without_credentials(&request_url),
            request_url,
            api_key,
            api_model: self.model,
            model_name,
            dimension,
            send_dimensions,
            batch_size: self.batch_size,
            max_retries: self.max_retries,
            initial_backoff: self.initial_backoff,
            max_backoff: self.max_backoff,
            timeout: self.timeout,
            deadline: self.deadline,
        })
    }
}

/// reqwest is built without a bundled crypto provider (aws-lc-rs needs a large C build), so
/// rustls's ring provider is installed as the process default, unless one already is.
fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Losing a race with another installer is fine: any provider will do.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    });
}

/// An [`Embedder`] that calls an OpenAI-compatible embeddings endpoint (OpenAI itself, Azure's
/// or a local server's OpenAI-style API, vLLM, Ollama, llama.cpp, LiteLLM …).
///
/// Requests are blocking: call it from a thread, or from `tokio::task::spawn_blocking` inside
/// an async runtime. Each batch of up to `batch_size` texts is one request with
/// `encoding_format: "float"`; responses are put back in input order by their `index` and
/// checked for count and length. 429, 5xx, timeouts and connection failures are retried with
/// doubling waits (bounded by `max_retries` and the backoff cap); other statuses fail at once
/// with the status and the server's error message.
///
/// ```no_run
/// use mnemon_embed::{Embedder, OpenAiEmbedder};
///
/// // Reads OPENAI_API_KEY and OPENAI_BASE_URL.
/// let embedder = OpenAiEmbedder::from_env()?.build()?;
/// assert_eq!(embedder.model(), "openai.com:text-embedding-3-small");
/// let vectors = embedder.embed(&["What do bees dance about?"])?;
/// assert_eq!(vectors[0].len(), 1536);
/// # Ok::<(), mnemon_embed::EmbedError>(())
/// ```
pub struct OpenAiEmbedder {
    client: Client,
    /// Where requests go, with the user name and password the base URL may carry.
    request_url: String,
    /// `request_url` without a user name or password, for messages, logs and `Debug`.
    endpoint: String,
    api_key: Option<String>,
    /// The model as the API names it.
    api_model: String,
    model_name: String,
    dimension: usize,
    send_dimensions: bool,
    batch_size: usize,
    max_retries: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
    /// The most one attempt may take.
    timeout: Duration,
    /// The most one batch may take, its attempts and waits included.
    deadline: Duration,
}

impl std::fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("endpoint", &self.endpoint)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model_name)
            .field("dimension", &self.dimension)
            .field("batch_size", &self.batch_size)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    input: &'a [&'a str],
    encoding_format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<usize>,
}

#[derive(Deserialize)]
struct Reply {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    index: usize,
    embedding: Vec<f32>,
}

/// What one attempt produced.
enum Attempt {
    Done(Vec<Vec<f32>>),
    /// Worth retrying; the server may have said how long to wait.
    Retry(EmbedError, Option<Duration>),
    Fail(EmbedError),
}

impl OpenAiEmbedder {
    /// The default number of texts per request.
    pub const DEFAULT_BATCH_SIZE: usize = 128;

    /// Where requests go unless configured otherwise (`OPENAI_BASE_URL`).
    pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

    /// The API model used unless configured otherwise (`OPENAI_EMBEDDING_MODEL`).
    ///
    /// `text-embedding-3-small` is OpenAI's current general-purpose model: it has the same 1536
    /// dimensions as `text-embedding-ada-002` (the library format's historical default) at a
    /// fraction of its price and with better retrieval quality. Libraries record it as
    /// `openai.com:text-embedding-3-small`; a library built with ada-002 must keep being queried
    /// with ada-002, so pass that model explicitly for such libraries.
    pub const DEFAULT_MODEL: &str = "text-embedding-3-small";

    /// The prefix of the model names recorded in libraries (`openai.com:<model>`).
    pub const MODEL_PREFIX: &str = "openai.com:";

    /// The default [`OpenAiEmbedderBuilder::deadline`]: 2 minutes per batch, retries included.
    pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(120);

    /// The native vector length of a known OpenAI embedding model, named as the API names it
    /// (`text-embedding-3-small`, without the `openai.com:` prefix).
    ///
    /// ```
    /// use mnemon_embed::OpenAiEmbedder;
    ///
    /// assert_eq!(OpenAiEmbedder::native_dimension("text-embedding-3-large"), Some(3072));
    /// assert_eq!(OpenAiEmbedder::native_dimension("my-local-model"), None);
    /// ```
    pub fn native_dimension(model: &str) -> Option<usize> {
        KNOWN_MODELS
            .iter()
            .find(|(name, _)| *name == model)
            .map(|&(_, d)| d)
    }

    /// A builder with the defaults: OpenAI's API, [`DEFAULT_MODEL`](Self::DEFAULT_MODEL), no key.
    pub fn builder() -> OpenAiEmbedderBuilder {
        OpenAiEmbedderBuilder::default()
    }

    /// A builder configured from the environment: `OPENAI_API_KEY` (the key),
    /// `OPENAI_BASE_URL` (the API root, default [`DEFAULT_BASE_URL`](Self::DEFAULT_BASE_URL)) and
    /// `OPENAI_EMBEDDING_MODEL` (the API model, default [`DEFAULT_MODEL`](Self::DEFAULT_MODEL)). Settings made on the
    /// builder afterwards win over the environment.
    pub fn from_env() -> Result<OpenAiEmbedderBuilder, EmbedError> {
        let mut builder = Self::builder();
        let var = |name: &str| -> Result<Option<String>, EmbedError> {
            match std::env::var(name) {
                Ok(v) if v.trim().is_empty() => Ok(None),
                Ok(v) => Ok(Some(v.trim().to_owned())),
                Err(std::env::VarError::NotPresent) => Ok(None),
                Err(std::env::VarError::NotUnicode(_)) => Err(EmbedError::new(
                    format!("{}{}", Self::MODEL_PREFIX, Self::DEFAULT_MODEL),
                    format!("the environment variable {name} is not valid UTF-8"),
                )),
            }
        };
        if let Some(key) = var("OPENAI_API_KEY")? {
            builder = builder.api_key(key);
        }
        if let Some(url) = var("OPENAI_BASE_URL")? {
            builder = builder.base_url(url);
        }
        if let Some(model) = var("OPENAI_EMBEDDING_MODEL")? {
            builder = builder.model(model);
        }
        Ok(builder)
    }

    /// The URL requests are sent to (`<base_url>/embeddings`), without the user name and
    /// password a base URL may carry.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn error(&self, message: impl Into<String>) -> EmbedError {
        EmbedError::new(self.model_name.clone(), message)
    }

    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let body = Request {
            model: &self.api_model,
            input: texts,
            encoding_format: "float",
            dimensions: self.send_dimensions.then_some(self.dimension),
        };
        let mut wait = self.initial_backoff;
        let mut attempt = 0;
        let until = Instant::now() + self.deadline;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.attempt(&body, texts.len(), left.min(self.timeout)) {
                Attempt::Done(vectors) => return Ok(vectors),
                Attempt::Fail(e) => return Err(e),
                Attempt::Retry(mut e, retry_after) => {
                    if attempt >= self.max_retries {
                        e.message =
                            format!("{} (gave up after {} attempts)", e.message, attempt + 1);
                        return Err(e);
                    }
                    let pause = retry_after.unwrap_or(wait).min(self.max_backoff);
                    // A retry is made only with time for it after its pause: one that could
                    // not start before the deadline, or would have only moments to run, would
                    // only add load to a server already failing.
                    let room = MIN_ATTEMPT.min(self.timeout);
                    if Instant::now() + pause + room > until {
                        e.message = format!(
                            "{} (gave up after {} attempts: the batch's deadline of {:?} \
                             leaves no time for another)",
                            e.message,
                            attempt + 1,
                            self.deadline
                        );
                        return Err(e);
                    }
                    attempt += 1;
                    thread::sleep(pause);
                    wait = (wait * 2).min(self.max_backoff);
                }
            }
        }
    }

    /// One request, which may take `limit` from connecting to the response's last byte.
    fn attempt(&self, body: &Request<'_>, expected: usize, limit: Duration) -> Attempt {
        let mut request = self
            .client
            .post(&self.request_url)
            .timeout(limit)
            .json(body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = match request.send() {
            Ok(r) => r,
            Err(e) => {
                let retry = e.is_timeout() || e.is_connect() || e.is_request();
                // Without its URL: ours is shown without credentials.
                let e = e.without_url();
                let error = EmbedError {
                    model: self.model_name.clone(),
                    message: format!("request to {} failed: {e}", self.endpoint),
                    source: Some(Box::new(e)),
                };
                return if retry {
                    Attempt::Retry(error, None)
                } else {
                    Attempt::Fail(error)
                };
            }
        };
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(&response);
            let detail = server_message(response);
            let mut message = format!("{} returned HTTP {status}: {detail}", self.endpoint);
            if status == StatusCode::UNAUTHORIZED {
                message.push_str(" (check OPENAI_API_KEY)");
            }
            let error = self.error(message);
            return if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
                Attempt::Retry(error, retry_after)
            } else {
                Attempt::Fail(error)
            };
        }
        // Bounded: a server answering gigabytes must not take the process's memory. A float
        // takes at most about 25 bytes of JSON; the rest is a little per item.
        let limit = expected
            .saturating_mul(self.dimension.saturating_mul(32).saturating_add(1024))
            .saturating_add(64 * 1024);
        let bytes = match read_at_most(response, limit) {
            Ok(Some(b)) => b,
            Ok(None) => {
                return Attempt::Fail(self.error(format!(
                    "the response is larger than {limit} bytes, far more than {expected} \
                     embeddings of {} floats take; is the base URL an embeddings API?",
                    self.dimension
                )));
            }
            Err(e) => {
                return Attempt::Retry(
                    self.error(format!("reading the response failed: {e}")),
                    None,
                );
            }
        };
        match self.parse(&bytes, expected) {
            Ok(v) => Attempt::Done(v),
            Err(e) => Attempt::Fail(e),
        }
    }

    /// Checks a success body and puts its vectors in input order.
    fn parse(&self, bytes: &[u8], expected: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
        let reply: Reply = serde_json::from_slice(bytes).map_err(|e| {
            self.error(format!(
                "the response is not an embeddings list ({e}): {}",
                excerpt(&String::from_utf8_lossy(bytes))
            ))
        })?;
        if reply.data.len() != expected {
            return Err(self.error(format!(
                "the response holds {} embeddings for {expected} texts",
                reply.data.len()
            )));
        }
        let mut slots: Vec<Option<Vec<f32>>> = vec![None; expected];
        for item in reply.data {
            let slot = slots.get_mut(item.index).ok_or_else(|| {
                self.error(format!(
                    "the response has index {} for a batch of {expected}",
                    item.index
                ))
            })?;
            if slot.is_some() {
                return Err(self.error(format!("the response repeats index {}", item.index)));
            }
            if item.embedding.len() != self.dimension {
                return Err(self.error(format!(
                    "the server returned vectors of {} floats, expected {}; configure the \
                     dimension the model produces",
                    item.embedding.len(),
                    self.dimension
                )));
            }
            if item.embedding.iter().any(|x| !x.is_finite()) {
                return Err(self.error("the response holds a non-finite number"));
            }
            *slot = Some(item.embedding);
        }
        // Every slot is filled: `expected` distinct in-range indices were seen.
        Ok(slots.into_iter().flatten().collect())
    }
}

/// A `Retry-After` header given in seconds (a value too large for a `Duration` is the longest
/// one: the caller caps it at its backoff; converting it as it is panicked).
fn retry_after(response: &Response) -> Option<Duration> {
    let value = response.headers().get(reqwest::header::RETRY_AFTER)?;
    let seconds: f64 = value.to_str().ok()?.trim().parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0)
        .then(|| Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX))
}

/// The body of `response`, or `None` when it is longer than `limit` bytes (then only
/// `limit + 1` bytes were read).
fn read_at_most(response: Response, limit: usize) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    response.take(cap).read_to_end(&mut bytes)?;
    Ok((bytes.len() <= limit).then_some(bytes))
}

/// `url` without the user name and password it may carry (`https://user:secret@host/…`, which
/// reqwest sends as basic authentication), so that no message shows them.
fn without_credentials(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if !parsed.username().is_empty() || parsed.password().is_some() => {
            // Both only fail for URLs that cannot carry credentials, which this one did.
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

/// The server's error message: OpenAI's `{"error": {"message": …}}` (or `{"error": "…"}`),
/// else the start of the body.
fn server_message(response: Response) -> String {
    // An error body is read up to 64 KiB: only its start is shown.
    let text = match read_at_most(response, 64 * 1024) {
        Ok(Some(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        _ => String::new(),
    };
    let parsed: Option<serde_json::Value> = serde_json::from_str(&text).ok();
    let message = parsed.as_ref().and_then(|v| {
        let error = v.get("error")?;
        error
            .get("message")
            .and_then(|m| m.as_str())
            .or_else(|| error.as_str())
            .map(str::to_owned)
    });
    match message {
        Some(m) => m,
        None if text.trim().is_empty() => "(empty body)".to_owned(),
        None => excerpt(&text),
    }
}

fn excerpt(text: &str) -> String {
    const LIMIT: usize = 300;
    let text = text.trim();
    match text.char_indices().nth(LIMIT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

impl Embedder for OpenAiEmbedder {
    fn model(&self) -> &str {
        &self.model_name
    }

    fn dimension(&self) -> usize {
        self.dimension
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // OpenAI refuses an empty string as an input (HTTP 400, failing the whole batch, so a
        // memory add with one empty message failed). An empty text has no words: it gets the
        // zero vector without a request, as the hashing embedder gives every text without words
        // (a zero vector scores 0 in every recall, docs/memory.md).
        let sent: Vec<&str> = texts.iter().copied().filter(|t| !t.is_empty()).collect();
        let mut vectors = Vec::with_capacity(sent.len());
        for batch in sent.chunks(self.batch_size) {
            vectors.extend(self.embed_batch(batch)?);
        }
        let mut vectors = vectors.into_iter();
        let mut out = Vec::with_capacity(texts.len());
        for text in texts {
            if text.is_empty() {
                out.push(vec![0.0; self.dimension]);
                continue;
            }
            // `embed_batch` answers one vector per text; were one missing, the caller's
            // contract check (`check_embeddings`) would name it: an empty list stands for it.
            out.push(vectors.next().unwrap_or_default());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_needs_a_key_other_servers_do_not() {
        let e = OpenAiEmbedder::builder().build().unwrap_err();
        assert!(e.to_string().contains("OPENAI_API_KEY"), "{e}");
        let local = OpenAiEmbedder::builder()
            .base_url("http://127.0.0.1:9/v1/")
            .build()
            .unwrap();
        assert_eq!(local.endpoint(), "http://127.0.0.1:9/v1/embeddings");
        assert_eq!(local.model(), "openai.com:text-embedding-3-small");
        assert_eq!(local.dimension(), 1536);
    }

    #[test]
    fn configuration_errors_say_what_to_fix() {
        let unknown = OpenAiEmbedder::builder()
            .base_url("http://localhost:1/v1")
            .model("nomic-embed-text")
            .build()
            .unwrap_err();
        assert!(unknown.to_string().contains("dimension"), "{unknown}");
        let scheme = OpenAiEmbedder::builder()
            .base_url("ftp://x/v1")
            .build()
            .unwrap_err();
        assert!(scheme.to_string().contains("http://"), "{scheme}");
        let zero = OpenAiEmbedder::builder()
            .base_url("http://x/v1")
            .batch_size(0)
            .build()
            .unwrap_err();
        assert!(zero.to_string().contains("batch size"), "{zero}");
    }

    #[test]
    fn model_prefix_dimension_and_name_override() {
        let e = OpenAiEmbedder::builder()
            .base_url("http://x/v1")
            .model("openai.com:text-embedding-3-large")
            .dimension(256)
            .build()
            .unwrap();
        assert_eq!(e.api_model, "text-embedding-3-large");
        assert!(e.send_dimensions);
        assert_eq!(e.dimension(), 256);
        let named = OpenAiEmbedder::builder()
            .base_url("http://x/v1")
            .model("bge-m3")
            .dimension(1024)
            .model_name("ollama:bge-m3")
            .build()
            .unwrap();
        assert_eq!(named.model(), "ollama:bge-m3");
        assert!(!named.send_dimensions);
    }

    #[test]
    fn debug_output_hides_the_key() {
        let e = OpenAiEmbedder::builder()
            .api_key("sk-secret")
            .build()
            .unwrap();
        assert!(!format!("{e:?}").contains("sk-secret"));
    }
}
