//! Rules: what the scripted server answers, and to which requests.
//!
//! A [`Rule`] is a [`Match`] (conditions, all of which must hold), an action (reply text,
//! an error status, a raw body, or hang) and modifiers (`delay`, `times`, `retry_after`,
//! `usage`, a label). Rules are built with chained methods and handed to
//! [`crate::ScriptedLlm::on`]:
//!
//! ```
//! use std::time::Duration;
//! use testkit::{Match, Rule};
//!
//! // Conditions: shortcuts on Rule, or a full Match.
//! let _ = Rule::system_contains("Extract facts").reply("[]");
//! let _ = Rule::when(Match::any().model("gpt-x").user_matches(r"(?i)postgres")).reply("ok");
//! let _ = Rule::user_contains("hi").and(Match::any().json_mode(true)).reply("{}");
//! // Failures.
//! let _ = Rule::any().status(429).retry_after(2).times(1);
//! let _ = Rule::any().status(400).message("bad model");
//! let _ = Rule::any().malformed();
//! let _ = Rule::any().delay(Duration::from_secs(5)).reply("late");
//! let _ = Rule::any().hang();
//! ```
//!
//! A [`Match`] is also how recordings are queried
//! ([`crate::ScriptedLlm::calls_matching`]).
//!
//! A rule without an action answers an empty completion (`""`), which is what a
//! delay-only rule (`Rule::any().delay(..)`) is for: a slow but valid answer.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use regex::Regex;

use crate::request::{Protocol, RecordedRequest};

type Predicate = Arc<dyn Fn(&RecordedRequest) -> bool + Send + Sync>;
type Responder = Arc<dyn Fn(&RecordedRequest) -> String + Send + Sync>;

/// How one text field is tested.
#[derive(Clone)]
enum Text {
    Contains(String),
    Exact(String),
    Regex(Regex),
}

impl Text {
    fn test(&self, s: &str) -> bool {
        match self {
            Text::Contains(needle) => s.contains(needle.as_str()),
            Text::Exact(want) => s == want,
            Text::Regex(re) => re.is_match(s),
        }
    }

    fn regex(pattern: &str) -> Self {
        match Regex::new(pattern) {
            Ok(re) => Text::Regex(re),
            Err(e) => panic!("testkit: invalid regex {pattern:?}: {e}"),
        }
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Text::Contains(s) => write!(f, "contains {s:?}"),
            Text::Exact(s) => write!(f, "= {s:?}"),
            Text::Regex(re) => write!(f, "matches /{}/", re.as_str()),
        }
    }
}

/// One condition of a [`Match`].
#[derive(Clone)]
enum Cond {
    Protocol(Protocol),
    Model(Text),
    System(Text),
    User(Text),
    Anywhere(Text),
    JsonMode(bool),
    Header(String, Text),
    Custom(Predicate),
}

impl Cond {
    fn test(&self, r: &RecordedRequest) -> bool {
        match self {
            Cond::Protocol(p) => r.protocol == *p,
            Cond::Model(t) => t.test(&r.model),
            Cond::System(t) => t.test(&r.system),
            Cond::User(t) => t.test(&r.user),
            Cond::Anywhere(t) => t.test(&r.full_text()),
            Cond::JsonMode(want) => r.json_mode == *want,
            Cond::Header(name, t) => r.header(name).is_some_and(|v| t.test(v)),
            Cond::Custom(f) => f(r),
        }
    }
}

impl fmt::Debug for Cond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cond::Protocol(p) => write!(f, "protocol = {p:?}"),
            Cond::Model(t) => write!(f, "model {t:?}"),
            Cond::System(t) => write!(f, "system {t:?}"),
            Cond::User(t) => write!(f, "user {t:?}"),
            Cond::Anywhere(t) => write!(f, "prompt {t:?}"),
            Cond::JsonMode(b) => write!(f, "json_mode = {b}"),
            Cond::Header(n, t) => write!(f, "header {n} {t:?}"),
            Cond::Custom(_) => f.write_str("custom predicate"),
        }
    }
}

/// Conditions on a request, all of which must hold. `Match::any()` has none and matches
/// every request. Each method adds one condition.
///
/// "user" is the content of every user message joined by `\n`; "system" is the system
/// prompt (see [`RecordedRequest`]); "prompt" is both plus the assistant messages.
#[derive(Clone, Default)]
pub struct Match {
    conds: Vec<Cond>,
}

impl Match {
    /// No condition: matches everything.
    pub fn any() -> Self {
        Self::default()
    }

    /// The user content contains `needle`.
    pub fn user_contains(self, needle: impl Into<String>) -> Self {
        self.with(Cond::User(Text::Contains(needle.into())))
    }

    /// The user content matches a regex (panics on an invalid pattern).
    pub fn user_matches(self, pattern: &str) -> Self {
        self.with(Cond::User(Text::regex(pattern)))
    }

    /// The system prompt contains `needle`.
    pub fn system_contains(self, needle: impl Into<String>) -> Self {
        self.with(Cond::System(Text::Contains(needle.into())))
    }

    /// The system prompt matches a regex (panics on an invalid pattern).
    pub fn system_matches(self, pattern: &str) -> Self {
        self.with(Cond::System(Text::regex(pattern)))
    }

    /// The system prompt or any message contains `needle`.
    pub fn text_contains(self, needle: impl Into<String>) -> Self {
        self.with(Cond::Anywhere(Text::Contains(needle.into())))
    }

    /// The system prompt or any message matches a regex (panics on an invalid pattern).
    pub fn text_matches(self, pattern: &str) -> Self {
        self.with(Cond::Anywhere(Text::regex(pattern)))
    }

    /// The `model` field is exactly `name`.
    pub fn model(self, name: impl Into<String>) -> Self {
        self.with(Cond::Model(Text::Exact(name.into())))
    }

    /// The `model` field matches a regex (panics on an invalid pattern).
    pub fn model_matches(self, pattern: &str) -> Self {
        self.with(Cond::Model(Text::regex(pattern)))
    }

    /// Sent to this protocol's endpoint.
    pub fn protocol(self, protocol: Protocol) -> Self {
        self.with(Cond::Protocol(protocol))
    }

    /// The request did (or did not) ask for JSON output.
    pub fn json_mode(self, on: bool) -> Self {
        self.with(Cond::JsonMode(on))
    }

    /// A header is present with exactly this value (name case-insensitive).
    pub fn header(self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.with(Cond::Header(name.into(), Text::Exact(value.into())))
    }

    /// Any test of your own.
    pub fn when(self, f: impl Fn(&RecordedRequest) -> bool + Send + Sync + 'static) -> Self {
        self.with(Cond::Custom(Arc::new(f)))
    }

    /// All conditions of `self` and of `other`.
    pub fn and(mut self, other: Match) -> Self {
        self.conds.extend(other.conds);
        self
    }

    /// Whether `r` meets every condition.
    pub fn matches(&self, r: &RecordedRequest) -> bool {
        self.conds.iter().all(|c| c.test(r))
    }

    fn with(mut self, c: Cond) -> Self {
        self.conds.push(c);
        self
    }
}

impl fmt::Debug for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.conds.is_empty() {
            return f.write_str("any request");
        }
        for (i, c) in self.conds.iter().enumerate() {
            if i > 0 {
                f.write_str(" and ")?;
            }
            write!(f, "{c:?}")?;
        }
        Ok(())
    }
}

/// What a rule answers.
#[derive(Clone)]
pub(crate) enum Action {
    /// 200 with a completion whose text the responder computes.
    Reply(Responder),
    /// An error status in the protocol's error shape (`message`), or with a raw `body`.
    Error { status: u16, message: Option<String>, body: Option<String> },
    /// This status and body as they are (`application/json` content type).
    Raw { status: u16, body: String },
    /// Never answer (until the server shuts down).
    Hang,
}

impl fmt::Debug for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Reply(_) => f.write_str("reply"),
            Action::Error { status, .. } => write!(f, "status {status}"),
            Action::Raw { status, body } => {
                write!(f, "raw {status} {:?}", crate::request::preview(body, 40))
            }
            Action::Hang => f.write_str("hang"),
        }
    }
}

/// A scripted answer: conditions, an action and modifiers. See the module doc.
#[derive(Clone, Debug)]
pub struct Rule {
    pub(crate) label: Option<String>,
    pub(crate) when: Match,
    pub(crate) action: Action,
    pub(crate) delay: Option<Duration>,
    pub(crate) times: Option<usize>,
    pub(crate) retry_after: Option<String>,
    pub(crate) usage: Option<(u64, u64)>,
    /// Streams: the pause between two events.
    pub(crate) chunk_delay: Option<Duration>,
}

impl Rule {
    /// A rule for requests meeting `when`.
    pub fn when(when: Match) -> Self {
        Self {
            label: None,
            when,
            action: Action::Reply(Arc::new(|_| String::new())),
            delay: None,
            times: None,
            retry_after: None,
            usage: None,
            chunk_delay: None,
        }
    }

    /// A rule for every request.
    pub fn any() -> Self {
        Self::when(Match::any())
    }

    /// Requests whose user content contains `needle`.
    pub fn user_contains(needle: impl Into<String>) -> Self {
        Self::when(Match::any().user_contains(needle))
    }

    /// Requests whose user content matches a regex.
    pub fn user_matches(pattern: &str) -> Self {
        Self::when(Match::any().user_matches(pattern))
    }

    /// Requests whose system prompt contains `needle`.
    pub fn system_contains(needle: impl Into<String>) -> Self {
        Self::when(Match::any().system_contains(needle))
    }

    /// Requests whose system prompt matches a regex.
    pub fn system_matches(pattern: &str) -> Self {
        Self::when(Match::any().system_matches(pattern))
    }

    /// Requests for this model.
    pub fn model(name: impl Into<String>) -> Self {
        Self::when(Match::any().model(name))
    }

    /// Requests to this protocol's endpoint.
    pub fn protocol(protocol: Protocol) -> Self {
        Self::when(Match::any().protocol(protocol))
    }

    /// Add the conditions of `more`.
    pub fn and(mut self, more: Match) -> Self {
        self.when = self.when.and(more);
        self
    }

    /// Answer a completion with this text.
    pub fn reply(mut self, text: impl Into<String>) -> Self {
        let text: String = text.into();
        self.action = Action::Reply(Arc::new(move |_| text.clone()));
        self
    }

    /// Answer a completion whose text is this JSON (serialised compactly).
    pub fn reply_json(self, value: &serde_json::Value) -> Self {
        self.reply(value.to_string())
    }

    /// Answer a completion whose text is computed from the request.
    pub fn reply_with(
        mut self,
        f: impl Fn(&RecordedRequest) -> String + Send + Sync + 'static,
    ) -> Self {
        self.action = Action::Reply(Arc::new(f));
        self
    }

    /// Answer this HTTP status with an error body in the protocol's shape
    /// (OpenAI `{"error":{message,type,code}}`, Anthropic `{"type":"error","error":{type,message}}`).
    pub fn status(mut self, status: u16) -> Self {
        self.action = Action::Error { status, message: None, body: None };
        self
    }

    /// The message inside the error body (with [`Rule::status`]).
    pub fn message(mut self, text: impl Into<String>) -> Self {
        if let Action::Error { message, .. } = &mut self.action {
            *message = Some(text.into());
        }
        self
    }

    /// Send this raw error body instead of the protocol-shaped one (with [`Rule::status`]).
    pub fn body(mut self, raw: impl Into<String>) -> Self {
        if let Action::Error { body, .. } = &mut self.action {
            *body = Some(raw.into());
        }
        self
    }

    /// Add a `Retry-After: <seconds>` header to the answer.
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds.to_string());
        self
    }

    /// Answer 200 with a body that is not valid JSON (a truncated completion).
    pub fn malformed(self) -> Self {
        self.raw(200, r#"{"id":"broken","choices":[{"index":0,"message":{"role":"#)
    }

    /// Answer exactly this status and body (content type `application/json`), e.g. a
    /// well-formed answer with the content missing.
    pub fn raw(mut self, status: u16, body: impl Into<String>) -> Self {
        self.action = Action::Raw { status, body: body.into() };
        self
    }

    /// Never answer: the client has to time out. (Released when the server shuts down.)
    pub fn hang(mut self) -> Self {
        self.action = Action::Hang;
        self
    }

    /// Wait this long before answering.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// For a streamed reply (`"stream": true`), wait this long between two events.
    pub fn chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = Some(delay);
        self
    }

    /// Fire at most `n` times; after that the rule is skipped and the next one answers.
    pub fn times(mut self, n: usize) -> Self {
        self.times = Some(n);
        self
    }

    /// `times(1)`.
    pub fn once(self) -> Self {
        self.times(1)
    }

    /// Report these token counts instead of the estimate (chars / 4).
    pub fn usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Self {
        self.usage = Some((prompt_tokens, completion_tokens));
        self
    }

    /// A name shown in [`RecordedRequest::rule`] and in diagnostics.
    pub fn named(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// The label, or a description of the rule.
    pub(crate) fn describe(&self) -> String {
        let mut s = match &self.label {
            Some(l) => l.clone(),
            None => format!("{:?} → {:?}", self.when, self.action),
        };
        if let Some(n) = self.times {
            s.push_str(&format!(" (times {n})"));
        }
        s
    }
}

/// A rule added to a server: counts how often it fired, and can remove it
/// ([`crate::ScriptedLlm::remove`]).
#[derive(Clone, Debug)]
pub struct RuleHandle {
    pub(crate) id: u64,
    pub(crate) hits: Arc<AtomicUsize>,
}

impl RuleHandle {
    /// How many requests this rule has answered so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}
