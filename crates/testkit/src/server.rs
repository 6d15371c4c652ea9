//! [`ScriptedLlm`]: the scripted LLM server and the handle tests hold.
//!
//! The server is an axum app on a `127.0.0.1:0` listener, run by a current-thread tokio
//! runtime on a thread of its own (see the crate doc for why). State shared between the
//! handle and the handlers lives in `Shared`: the rules, the default rule and the
//! recordings sit behind one `std::sync::Mutex` (`Script`) that is held only to pick a rule
//! and record a request, never across an `.await`; a `watch` channel tells hanging and
//! delayed handlers that the server is shutting down (the handle is dropped), so that no
//! request outlives the test.
//!
//! Request handling: parse → validate like the real API (400/401 in the protocol's shape)
//! → pick the newest live rule that matches, else the default rule, else answer 500 "no rule
//! matched" → record (with the rule's label and the status it will get) → delay → answer.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use axum::routing::any;
use tokio::sync::{oneshot, watch};

use crate::protocol::{completion, error_body, validate};
use crate::request::{Protocol, RecordedRequest};
use crate::rule::{Action, Match, Rule, RuleHandle};

/// A rule as installed: its id, and its hit counter (shared with its [`RuleHandle`]).
struct Entry {
    id: u64,
    rule: Rule,
    hits: Arc<AtomicUsize>,
}

impl Entry {
    fn live(&self) -> bool {
        self.rule.times.is_none_or(|n| self.hits.load(Ordering::SeqCst) < n)
    }
}

/// Everything a test can change or read, behind one lock.
#[derive(Default)]
struct Script {
    /// In insertion order; tried from the end (newest first).
    rules: Vec<Entry>,
    /// Tried after every rule.
    default: Option<Entry>,
    next_id: u64,
    /// When set, every request must carry this key (Bearer or `x-api-key`).
    required_key: Option<String>,
    /// Every request received, in arrival order.
    requests: Vec<RecordedRequest>,
}

impl Script {
    fn add(&mut self, rule: Rule) -> (Entry, RuleHandle) {
        self.next_id += 1;
        let hits = Arc::new(AtomicUsize::new(0));
        let handle = RuleHandle { id: self.next_id, hits: Arc::clone(&hits) };
        (Entry { id: self.next_id, rule, hits }, handle)
    }

    /// The rule that answers `r` (its hit counted), newest first, then the default.
    fn select(&self, r: &RecordedRequest) -> Option<Rule> {
        let entry = self
            .rules
            .iter()
            .rev()
            .chain(self.default.as_ref())
            .find(|e| e.live() && e.rule.when.matches(r))?;
        entry.hits.fetch_add(1, Ordering::SeqCst);
        Some(entry.rule.clone())
    }

    /// The body of the "no rule matched" answer: the request and every rule.
    fn no_match_message(&self, r: &RecordedRequest) -> String {
        let mut msg = format!("scripted LLM: no rule matched request {}. Rules", r.summary());
        if self.rules.is_empty() && self.default.is_none() {
            msg.push_str(": none (add one with ScriptedLlm::on)");
        }
        for e in self.rules.iter().rev() {
            let state = if e.live() { "" } else { ", used up" };
            msg.push_str(&format!("; [#{}{state}] {}", e.id, e.rule.describe()));
        }
        if let Some(d) = &self.default {
            let state = if d.live() { "" } else { ", used up" };
            msg.push_str(&format!("; [default{state}] {}", d.rule.describe()));
        }
        msg
    }
}

/// State shared by the handle and the handlers.
struct Shared {
    script: Mutex<Script>,
    /// Origin of [`RecordedRequest::since_start`].
    started: Instant,
    /// Becomes `true` (or closes) when the handle is dropped.
    shutdown: watch::Receiver<bool>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn shut_down(&self) {
        let mut rx = self.shutdown.clone();
        // An error means the sender is gone: shutting down as well.
        let _ = rx.wait_for(|stop| *stop).await;
    }
}

/// A scripted OpenAI + Anthropic server for tests. Dropping it stops the server.
///
/// See the crate doc for an example and [`Rule`] for what can be scripted.
pub struct ScriptedLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for ScriptedLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedLlm").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

impl ScriptedLlm {
    /// Start a server on `127.0.0.1:<free port>`, ready when this returns. Panics if it
    /// cannot (a test helper has nobody to return an error to).
    pub async fn start() -> Self {
        let (server, ready) = Self::spawn();
        match ready.await {
            Ok(Ok(())) => server,
            Ok(Err(e)) => panic!("testkit: scripted LLM server failed to start: {e}"),
            Err(_) => panic!("testkit: scripted LLM server thread died at start"),
        }
    }

    /// [`Self::start`] for synchronous code. Panics when called from inside an async
    /// context (use `start().await` there).
    pub fn start_blocking() -> Self {
        let (server, ready) = Self::spawn();
        match ready.blocking_recv() {
            Ok(Ok(())) => server,
            Ok(Err(e)) => panic!("testkit: scripted LLM server failed to start: {e}"),
            Err(_) => panic!("testkit: scripted LLM server thread died at start"),
        }
    }

    fn spawn() -> (Self, oneshot::Receiver<Result<(), String>>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap_or_else(|e| panic!("testkit: cannot bind 127.0.0.1:0: {e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("testkit: local_addr: {e}"));
        let (stop, shutdown) = watch::channel(false);
        let shared = Arc::new(Shared {
            script: Mutex::new(Script::default()),
            started: Instant::now(),
            shutdown,
        });
        let (ready_tx, ready_rx) = oneshot::channel();
        let for_thread = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name(format!("scripted-llm-{}", addr.port()))
            .spawn(move || serve(listener, for_thread, ready_tx));
        if let Err(e) = spawned {
            panic!("testkit: cannot spawn the scripted LLM thread: {e}");
        }
        (Self { addr, shared, stop }, ready_rx)
    }

    /// `http://127.0.0.1:<port>`, without `/v1`: the base URL to give a provider.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `base_url()` followed by `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Add a rule. It is tried before every rule added earlier (newest first).
    pub fn on(&self, rule: Rule) -> RuleHandle {
        let mut s = self.shared.lock();
        let (entry, handle) = s.add(rule);
        s.rules.push(entry);
        handle
    }

    /// Set the rule tried when no other rule matches (replacing any previous default).
    pub fn set_default(&self, rule: Rule) -> RuleHandle {
        let mut s = self.shared.lock();
        let (entry, handle) = s.add(rule);
        s.default = Some(entry);
        handle
    }

    /// Remove one rule (or the default rule).
    pub fn remove(&self, handle: &RuleHandle) {
        let mut s = self.shared.lock();
        s.rules.retain(|e| e.id != handle.id);
        if s.default.as_ref().is_some_and(|d| d.id == handle.id) {
            s.default = None;
        }
    }

    /// Remove every rule and the default rule.
    pub fn clear_rules(&self) {
        let mut s = self.shared.lock();
        s.rules.clear();
        s.default = None;
    }

    /// From now on, answer 401 (in the protocol's shape) unless the request carries this key
    /// as `Authorization: Bearer <key>` or `x-api-key: <key>`.
    pub fn require_api_key(&self, key: impl Into<String>) {
        self.shared.lock().required_key = Some(key.into());
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// The number of requests received so far.
    pub fn request_count(&self) -> usize {
        self.shared.lock().requests.len()
    }

    /// The requests meeting `m`, in arrival order.
    pub fn calls_matching(&self, m: &Match) -> Vec<RecordedRequest> {
        self.shared.lock().requests.iter().filter(|r| m.matches(r)).cloned().collect()
    }

    /// The requests no rule answered (refused by validation, or no rule matched).
    pub fn unmatched(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.iter().filter(|r| r.rule.is_none()).cloned().collect()
    }

    /// Forget the recordings (rules stay).
    pub fn clear_requests(&self) {
        self.shared.lock().requests.clear();
    }

    /// Wait until at least `n` requests meeting `m` have arrived and return them; panics
    /// after `timeout` with what did arrive. For background work (jobs) whose calls the test
    /// does not await directly.
    pub async fn wait_for(&self, m: &Match, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        let deadline = Instant::now() + timeout;
        loop {
            let found = self.calls_matching(m);
            if found.len() >= n {
                return found;
            }
            if Instant::now() >= deadline {
                let all: Vec<String> = self.requests().iter().map(|r| r.summary()).collect();
                panic!(
                    "testkit: waited {timeout:?} for {n} request(s) matching {m:?}, got {}; \
                     all requests: {all:#?}",
                    found.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The server thread: a current-thread runtime serving until shutdown.
fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    ready: oneshot::Sender<Result<(), String>>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(format!("runtime: {e}")));
            return;
        }
    };
    rt.block_on(async move {
        let listener = match listener
            .set_nonblocking(true)
            .and_then(|()| tokio::net::TcpListener::from_std(listener))
        {
            Ok(l) => l,
            Err(e) => {
                let _ = ready.send(Err(format!("listener: {e}")));
                return;
            }
        };
        let app = Router::new()
            .route("/v1/chat/completions", any(openai))
            .route("/chat/completions", any(openai))
            .route("/v1/messages", any(anthropic))
            .route("/v1/models", axum::routing::get(models))
            .route("/v1/models/{id}", axum::routing::get(models))
            .fallback(unknown)
            .with_state(Arc::clone(&shared));
        let _ = ready.send(Ok(()));
        let stopped = {
            let shared = Arc::clone(&shared);
            async move { shared.shut_down().await }
        };
        // Streamed events go out at once, as a real API's do (no Nagle delay).
        use axum::serve::ListenerExt as _;
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let server = axum::serve(listener, app).with_graceful_shutdown(stopped);
        // Graceful shutdown waits for open connections; give them a moment, no more.
        let deadline = async {
            shared.shut_down().await;
            tokio::time::sleep(Duration::from_secs(2)).await;
        };
        tokio::select! {
            _ = server => {}
            () = deadline => {}
        }
    });
}

async fn openai(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&shared, Protocol::OpenAi, method, uri, headers, body).await
}

async fn anthropic(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&shared, Protocol::Anthropic, method, uri, headers, body).await
}

/// A request's headers as recorded: (name, value) pairs, values decoded lossily.
fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect()
}

/// `GET /v1/models` and `GET /v1/models/{id}` (OpenAI): the one model the scripted server
/// is, after the same key check as a completion. Recorded like every request.
async fn models(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let headers = header_pairs(&headers);
    let mut rec = RecordedRequest::parse(
        0,
        Protocol::OpenAi,
        method.to_string(),
        uri.path().to_owned(),
        headers,
        String::new(),
        shared.started.elapsed(),
    );
    let refused = {
        let mut s = shared.lock();
        rec.seq = s.requests.len();
        let refused = match (s.required_key.as_deref(), rec.api_key()) {
            (Some(want), got) if got != Some(want) => Some("invalid or missing API key"),
            _ => None,
        };
        rec.status = Some(if refused.is_some() { 401 } else { 200 });
        s.requests.push(rec);
        refused
    };
    if let Some(msg) = refused {
        return json_response(401, error_body(Protocol::OpenAi, 401, msg).to_string(), None);
    }
    let model = serde_json::json!({ "id": "scripted", "object": "model", "created": 0,
        "owned_by": "testkit" });
    // `GET /v1/models/{id}`: that model, or OpenAI's 404.
    match uri.path().strip_prefix("/v1/models/") {
        Some("scripted") => json_response(200, model.to_string(), None),
        Some(other) => json_response(
            404,
            error_body(Protocol::OpenAi, 404, &format!("The model '{other}' does not exist"))
                .to_string(),
            None,
        ),
        None => {
            let list = serde_json::json!({ "object": "list", "data": [model] });
            json_response(200, list.to_string(), None)
        }
    }
}

async fn unknown(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&shared, Protocol::Unknown, method, uri, headers, body).await
}

/// What to do with a request, decided under the lock.
enum Decision {
    /// Answer this error (status, message) in the protocol's shape.
    Refuse(u16, String),
    Answer(Rule),
}

async fn handle(
    shared: &Shared,
    protocol: Protocol,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let headers = header_pairs(&headers);
    let mut rec = RecordedRequest::parse(
        0,
        protocol,
        method.to_string(),
        uri.path().to_owned(),
        headers,
        String::from_utf8_lossy(&body).into_owned(),
        shared.started.elapsed(),
    );
    let decision = {
        let mut s = shared.lock();
        rec.seq = s.requests.len();
        let decision = if protocol == Protocol::Unknown {
            Decision::Refuse(
                404,
                format!(
                    "scripted LLM: no endpoint {} {}; it serves POST /v1/chat/completions, \
                     /chat/completions and /v1/messages",
                    rec.method, rec.path
                ),
            )
        } else if method != Method::POST {
            Decision::Refuse(405, format!("scripted LLM: {} {} needs POST", rec.method, rec.path))
        } else if let Some((status, msg)) = validate(&rec, s.required_key.as_deref()) {
            Decision::Refuse(status, msg)
        } else if let Some(rule) = s.select(&rec) {
            Decision::Answer(rule)
        } else {
            let msg = s.no_match_message(&rec);
            eprintln!("{msg}");
            Decision::Refuse(500, msg)
        };
        match &decision {
            Decision::Refuse(status, _) => rec.status = Some(*status),
            Decision::Answer(rule) => {
                rec.rule = Some(rule.describe());
                rec.status = match &rule.action {
                    Action::Reply(_) => Some(200),
                    Action::Error { status, .. } | Action::Raw { status, .. } => Some(*status),
                    Action::Hang => None,
                };
            }
        }
        s.requests.push(rec.clone());
        decision
    };
    let rule = match decision {
        Decision::Refuse(status, msg) => {
            return json_response(status, error_body(protocol, status, &msg).to_string(), None);
        }
        Decision::Answer(rule) => rule,
    };
    let shutting_down = || {
        json_response(
            503,
            error_body(protocol, 503, "scripted LLM: server shut down").to_string(),
            None,
        )
    };
    if let Action::Hang = rule.action {
        shared.shut_down().await;
        return shutting_down();
    }
    if let Some(delay) = rule.delay {
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shared.shut_down() => return shutting_down(),
        }
    }
    let retry_after = rule.retry_after.as_deref();
    match &rule.action {
        Action::Reply(text) if crate::protocol::wants_stream(&rec) => {
            let events = crate::protocol::stream(&rec, &text(&rec), rule.usage);
            sse_response(events, rule.chunk_delay)
        }
        Action::Reply(text) => {
            let body = completion(&rec, &text(&rec), rule.usage);
            json_response(200, body.to_string(), retry_after)
        }
        Action::Error { status, message, body } => {
            let body = body.clone().unwrap_or_else(|| {
                let msg = message.clone().unwrap_or_else(|| format!("scripted error {status}"));
                error_body(protocol, *status, &msg).to_string()
            });
            json_response(*status, body, retry_after)
        }
        Action::Raw { status, body } => json_response(*status, body.clone(), retry_after),
        Action::Hang => shutting_down(),
    }
}

/// A `text/event-stream` response sending `events` one by one, `delay` apart.
fn sse_response(events: Vec<String>, delay: Option<Duration>) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::convert::Infallible>>(4);
    tokio::spawn(async move {
        for (i, e) in events.into_iter().enumerate() {
            if let Some(d) = delay.filter(|_| i > 0) {
                tokio::time::sleep(d).await;
            }
            if tx.send(Ok(Bytes::from(e))).await.is_err() {
                return;
            }
        }
    });
    let mut rx = rx;
    let body = Body::from_stream(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    let mut resp = Response::new(body);
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// A response with a JSON content type (whatever the body really is).
fn json_response(status: u16, body: String, retry_after: Option<&str>) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(v) = retry_after.and_then(|v| HeaderValue::from_str(v).ok()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}
