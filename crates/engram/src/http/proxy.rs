//! The memory proxy (issue 15): `POST /v1/chat/completions` (OpenAI) and `POST
//! /v1/messages` (Anthropic) forward a chat call to the configured upstream after putting
//! the caller's context block into its system prompt, stream the answer back as the
//! upstream sends it, and then append the user turn and the answer to the conversation, so
//! extraction runs as for any append. `GET /v1/models` and `GET /v1/models/{id}` are passed through.
//!
//! Who the call is for: the caller's key decides the scope, as for every REST call (a user
//! key cannot name another user); the user comes from `x-engram-user-id`, else the
//! request's `user` (OpenAI) or `metadata.user_id` (Anthropic); the agent from
//! `x-engram-agent-id` (or the key's agent); the conversation from
//! `x-engram-conversation-id`, else one per user and agent. The Anthropic SDKs send their
//! key as `x-api-key`, which engram accepts as its own key.
//!
//! Faults: the upstream's status and body reach the client as the upstream sent them (and
//! nothing is appended); no answer within the timeout is a 504, an unreachable upstream a
//! 502, both in engram's error format. engram's own failure (its store or embedder down)
//! never blocks the chat: the call goes through without memory and the answer carries
//! `engram-memory: unavailable`.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use engram_core::ErrorCode;
use engram_core::engine::{ContextInput, MessageInput};
use engram_core::model::{AgentId, ConversationId, MessageRole, Principal, UserId};
use engram_providers::upstream::{Upstream, UpstreamError};
use futures_util::StreamExt;
use serde_json::Value;

use super::error::{ApiBytes, ApiError};
use super::{AppState, Auth};
use crate::api::proxy::{self as wire, StreamReader, Vendor};

/// The configured upstreams (either may be absent: its routes then answer 404).
#[derive(Clone, Default)]
pub struct Upstreams {
    pub openai: Option<Upstream>,
    pub anthropic: Option<Upstream>,
    /// The turns being appended after their answers: a stopping server waits for them.
    pub saves: tokio_util::task::TaskTracker,
}

impl Upstreams {
    fn of(&self, vendor: Vendor) -> Result<&Upstream, ApiError> {
        let (up, setting) = match vendor {
            Vendor::OpenAi => (&self.openai, "ENGRAM_PROXY_OPENAI_URL (--proxy-openai-url)"),
            Vendor::Anthropic => {
                (&self.anthropic, "ENGRAM_PROXY_ANTHROPIC_URL (--proxy-anthropic-url)")
            }
        };
        up.as_ref().ok_or_else(|| {
            ApiError::new(
                ErrorCode::NotFound,
                format!("the {} proxy has no upstream: set {setting}", vendor.name()),
            )
        })
    }
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    headers: HeaderMap,
    ApiBytes(body): ApiBytes,
) -> Response {
    forward(st, p, Vendor::OpenAi, headers, body).await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /v1/messages`.
pub async fn messages(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    headers: HeaderMap,
    ApiBytes(body): ApiBytes,
) -> Response {
    forward(st, p, Vendor::Anthropic, headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// `GET /v1/models`, passed through to the OpenAI upstream.
pub async fn models(
    State(st): State<Arc<AppState>>,
    Auth(_): Auth,
    headers: HeaderMap,
) -> Response {
    let run = async {
        let up = st.proxy.of(Vendor::OpenAi)?;
        let resp = up.send("GET", "/v1/models", &header_pairs(&headers), None).await;
        Ok::<_, ApiError>(respond(resp.map_err(upstream_error)?, true, |b| b))
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

/// What a path segment escapes: all but RFC 3986's unreserved characters.
const SEGMENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// `GET /v1/models/{id}`, passed through to the OpenAI upstream.
pub async fn model(
    State(st): State<Arc<AppState>>,
    Auth(_): Auth,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    let run = async {
        let up = st.proxy.of(Vendor::OpenAi)?;
        // The id travels as one path segment, whatever it holds.
        let id = percent_encoding::utf8_percent_encode(&id, SEGMENT);
        let path = format!("/v1/models/{id}");
        let resp = up.send("GET", &path, &header_pairs(&headers), None).await;
        Ok::<_, ApiError>(respond(resp.map_err(upstream_error)?, true, |b| b))
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect()
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn upstream_error(e: UpstreamError) -> ApiError {
    match e {
        UpstreamError::Timeout => ApiError::new(
            ErrorCode::UpstreamTimeout,
            "the upstream LLM did not answer in time (engram's proxy timeout)",
        ),
        UpstreamError::Unreachable(why) => {
            tracing::warn!(error = %why, "proxy upstream unreachable");
            ApiError::new(
                ErrorCode::UpstreamUnavailable,
                format!("the upstream LLM is unreachable: {why}"),
            )
        }
    }
}

/// How long a proxied call waits for its memory (the context block, the conversation
/// check) before it goes on without: a locked or slow store must not hold the chat for its
/// own busy timeout.
pub const MEMORY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

/// The minimum relevance of a fact the proxy adds: lower than search's default
/// ([`engram_core::retrieval::DEFAULT_MIN_SCORE`]), since a missing fact costs a chat more
/// than an extra line does; still above nothing, so unrelated facts stay out (questions on
/// other topics score 0, measured with the built-in embedder). One shared informative word
/// scores about 0.026 in a four-word question ("Recommend restaurants in Bengaluru" and
/// "The user lives in Bengaluru."), 0.013 in a seven-word one.
pub const MIN_SCORE: f64 = 0.01;

/// The proxy's token budget for the block: a user whose facts fit gets them all (a few
/// dozen facts, like a core memory); past it, only those relevant to the question. Smaller
/// than `/v1/context`'s default, since it is added to every call.
pub const TOKEN_BUDGET: usize = 1_000;

/// What a proxied call appends once its answer is complete.
struct Turn {
    saves: tokio_util::task::TaskTracker,
    engine: engram_core::engine::Engine,
    principal: Principal,
    conversation: ConversationId,
    user: UserId,
    agent: Option<AgentId>,
    asked: wire::Asked,
    /// The conversation existed before this call.
    known: bool,
}

impl Turn {
    /// Append the user turn (or a tool loop's calls with their results) and the answer (in
    /// the background: the client has its answer). A message over `max_content_bytes` (a
    /// pasted document, a long answer) is kept whole as consecutive messages of the same role
    /// within the limit, each marked with `metadata.part` and `metadata.parts`; a tool result
    /// is cut to the limit; an answer cut by the output limit is marked `metadata.truncated`.
    fn append(self, answer: wire::Answer) {
        // A request without a user message or tool results (only a system prompt, or no
        // messages) asked nothing: its answer alone is not a turn of the conversation.
        if self.asked.question.is_none() && self.asked.tools.is_empty() {
            return;
        }
        let max = self.engine.config().max_content_bytes;
        let mut msgs = Vec::new();
        let mut say = |role: MessageRole, text: Option<String>, extra: Option<(&str, Value)>| {
            let parts = pieces(text.as_deref().unwrap_or_default(), max);
            let n = parts.len();
            for (i, content) in parts.into_iter().enumerate() {
                let mut meta = serde_json::Map::new();
                if n > 1 {
                    meta.insert("part".into(), (i + 1).into());
                    meta.insert("parts".into(), n.into());
                }
                if let Some((k, v)) = &extra {
                    meta.insert((*k).into(), v.clone());
                }
                let metadata = (!meta.is_empty()).then_some(Value::Object(meta));
                msgs.push(MessageInput { role, content, metadata, ..Default::default() });
            }
        };
        say(MessageRole::User, self.asked.question, None);
        let tools: Vec<MessageInput> = self
            .asked
            .tools
            .into_iter()
            .map(|t| MessageInput {
                role: MessageRole::Tool,
                tool_name: Some(t.name),
                tool_args: (!t.args.is_null()).then_some(t.args),
                tool_result: Some(head(&t.result.replace('\0', ""), max)),
                ..Default::default()
            })
            .collect();
        let truncated = answer.truncated.then_some(("truncated", Value::Bool(true)));
        say(MessageRole::Assistant, answer.text, truncated);
        let mut msgs: Vec<MessageInput> = tools.into_iter().chain(msgs).collect();
        if msgs.is_empty() {
            return;
        }
        // A loop whose first call engram never saw (the conversation is new to it): its
        // question comes first, or the saved loop would answer nothing.
        if let Some(q) = self.asked.loop_question.filter(|_| !self.known) {
            let q = MessageInput {
                role: MessageRole::User,
                content: head(&q, max),
                ..Default::default()
            };
            msgs.insert(0, q);
        }
        let saves = self.saves.clone();
        saves.spawn(async move {
            let r = self
                .engine
                .append_messages(
                    &self.principal,
                    self.conversation,
                    Some(self.user),
                    self.agent,
                    msgs,
                )
                .await;
            if let Err(e) = r {
                tracing::warn!(error = %e, "proxy: the turn was not appended");
            }
        });
    }
}

async fn forward(
    st: Arc<AppState>,
    p: Principal,
    vendor: Vendor,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let up = st.proxy.of(vendor)?;
    let mut request: Value = serde_json::from_slice(&body).map_err(|e| {
        // A compressed body is not read: say so rather than "not JSON".
        super::error::compressed_body(&headers).unwrap_or_else(|| {
            ApiError::new(ErrorCode::InvalidJson, format!("the request body is not JSON: {e}"))
        })
    })?;
    if !request.is_object() {
        return Err(ApiError::new(
            ErrorCode::InvalidJson,
            "the request body must be a JSON object",
        ));
    }
    let user = wire::user_of(vendor, header(&headers, wire::USER_HEADER), &request);
    let user = match (user, &p.role) {
        (Some(u), _) => UserId::parse(u)?,
        (None, engram_core::model::KeyRole::User(bound)) => bound.clone(),
        (None, _) => {
            return Err(ApiError::new(
                ErrorCode::InvalidInput,
                format!(
                    "the proxy needs to know the user: send the {} header or the request's {} field",
                    wire::USER_HEADER,
                    match vendor {
                        Vendor::OpenAi => "user",
                        Vendor::Anthropic => "metadata.user_id",
                    }
                ),
            ));
        }
    };
    let agent = header(&headers, wire::AGENT_HEADER).map(AgentId::parse).transpose()?;
    let agent = agent.or(match &p.role {
        engram_core::model::KeyRole::Agent(a) => Some(a.clone()),
        engram_core::model::KeyRole::Admin | engram_core::model::KeyRole::User(_) => None,
    });
    let conversation = match header(&headers, wire::CONVERSATION_HEADER) {
        Some(c) => ConversationId::parse(c)?,
        None => ConversationId::parse(wire::default_conversation(
            user.as_str(),
            agent.as_ref().map(AgentId::as_str),
        ))?,
    };
    let question = wire::last_user_text(&request);
    let asked = wire::asked(vendor, &request);
    // Memory: the context block into the system prompt. A caller that may not act for this
    // user or agent is refused; engram's own failure, or no answer within the deadline, lets
    // the call through without memory.
    // A pasted document makes a user message longer than a search query may be, and
    // dilutes what it asks: the query is its last line (where the question usually is).
    let query = question.as_deref().map(last_lines);
    let input = ContextInput {
        user_id: Some(user.clone()),
        agent_id: agent.clone(),
        // Only the facts relevant to the question (and the profile). Without a question (a
        // turn of images alone), what the conversation has, or nothing.
        min_score: Some(MIN_SCORE),
        token_budget: Some(TOKEN_BUDGET),
        query,
        conversation_id: Some(conversation.clone()),
        // The block is kept per conversation (the context's session cache) and changes only
        // when a question brings a relevant fact it lacks: the system prompt stays the same
        // while the conversation stays on its topics, which keeps the upstream's prompt cache
        // warm, and a fact learned later reaches the conversation when it becomes relevant.
        session_id: Some(conversation.to_string()),
        follow_query: true,
        // The client sends the conversation's messages itself: only its summaries are added.
        summaries_only: true,
        ..Default::default()
    };
    // Side by side: the context, and the check that this caller may add to the conversation
    // (another user's or agent's is refused before the upstream is paid for a turn that
    // could not be saved).
    let (checked, block) = tokio::join!(
        tokio::time::timeout(
            MEMORY_DEADLINE,
            st.engine.check_append(&p, &conversation, Some(&user), agent.as_ref())
        ),
        tokio::time::timeout(MEMORY_DEADLINE, st.engine.context(&p, input)),
    );
    // Whether engram knows the conversation (unknown when the check failed: then a tool
    // loop's question is not added, which the loop's first call would have saved).
    let known = match checked {
        Ok(Err(e)) if !own_failure(&e) => return Err(e.into()),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "proxy: cannot check the conversation");
            true
        }
        Err(_) => {
            tracing::warn!("proxy: the conversation check passed its deadline");
            true
        }
        Ok(Ok(exists)) => exists,
    };
    let mut memory = true;
    match block {
        Ok(Ok(block)) if !block.memory_ids.is_empty() || !block.summary_ids.is_empty() => {
            wire::inject(vendor, &mut request, &block.text)
        }
        Ok(Ok(_)) => {}
        Ok(Err(e)) if own_failure(&e) => {
            tracing::warn!(error = %e, "proxy: forwarding without memory");
            memory = false;
        }
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => {
            tracing::warn!("proxy: memory passed its deadline; forwarding without it");
            memory = false;
        }
    }
    let sent = serde_json::to_vec(&request).map_err(|e| {
        ApiError::new(ErrorCode::Internal, format!("cannot encode the request: {e}"))
    })?;
    let resp = up
        .send("POST", vendor.path(), &header_pairs(&headers), Some(Bytes::from(sent)))
        .await
        .map_err(upstream_error)?;
    let turn = Turn {
        saves: st.proxy.saves.clone(),
        engine: st.engine.clone(),
        principal: p,
        conversation,
        user,
        agent,
        asked,
        known,
    };
    if !(200..300).contains(&resp.status) {
        // The upstream refused: its answer as it is, and nothing to remember.
        return Ok(respond(resp, memory, |b| b));
    }
    if wire::streams(&request) {
        let mut reader = StreamReader::new(vendor);
        let mut turn = Some(turn);
        return Ok(respond(resp, memory, move |body| {
            body.map(move |chunk| {
                match &chunk {
                    Ok(bytes) => reader.feed(bytes),
                    Err(_) => turn = None,
                }
                if let Some(answer) = reader.answer()
                    && let Some(t) = turn.take()
                {
                    t.append(answer);
                }
                chunk
            })
            .boxed()
        }));
    }
    // Whole answers are read once, passed on as they came, and remembered.
    let mut bytes = Vec::new();
    let mut body = resp.body;
    while let Some(chunk) = body.next().await {
        bytes.extend_from_slice(&chunk.map_err(upstream_error)?);
    }
    let answer = serde_json::from_slice::<Value>(&bytes)
        .map(|v| wire::answer_of(vendor, &v))
        .unwrap_or_default();
    turn.append(answer);
    let whole = engram_providers::upstream::UpstreamResponse {
        status: resp.status,
        headers: resp.headers,
        body: futures_util::stream::once(async move { Ok(Bytes::from(bytes)) }).boxed(),
    };
    Ok(respond(whole, memory, |b| b))
}

/// Errors that are engram's, not the caller's: the call goes on without memory.
fn own_failure(e: &engram_core::Error) -> bool {
    matches!(
        e.code(),
        ErrorCode::StoreUnavailable
            | ErrorCode::EmbedderUnavailable
            | ErrorCode::Internal
            | ErrorCode::Overloaded
    )
}

type Chunks = futures_util::stream::BoxStream<'static, Result<Bytes, UpstreamError>>;

/// The upstream's answer as the client's response: its status, its headers, its body
/// through `body` (which may read it on the way), and `engram-memory: unavailable` when
/// memory could not be added (`memory` false).
fn respond(
    resp: engram_providers::upstream::UpstreamResponse,
    memory: bool,
    body: impl FnOnce(Chunks) -> Chunks,
) -> Response {
    let stream = body(resp.body).map(|c| c.map_err(|e| std::io::Error::other(e.to_string())));
    let mut out = Response::new(Body::from_stream(stream));
    *out.status_mut() = StatusCode::from_u16(resp.status).unwrap_or(StatusCode::BAD_GATEWAY);
    for (name, value) in &resp.headers {
        if let (Ok(n), Ok(v)) = (HeaderName::try_from(name.as_str()), HeaderValue::from_str(value))
        {
            out.headers_mut().append(n, v);
        }
    }
    if !memory {
        out.headers_mut().insert(wire::MEMORY_HEADER, HeaderValue::from_static("unavailable"));
    }
    out
}

/// The last `max` bytes of `s` at most, cut at a character boundary.
fn tail(s: &str, max: usize) -> String {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s[start..].to_string()
}

/// Bytes of a user message the proxy's memory query takes at most.
const QUERY_BYTES: usize = 1_000;

/// What a user message asks, as a memory query: its last line, with the lines before it
/// while that is shorter than a short question, and at most [`QUERY_BYTES`] of it.
fn last_lines(text: &str) -> String {
    let text = text.trim_end();
    let mut start = text.len();
    while start > 0 && text[start..].trim().chars().count() < 20 {
        start = text[..start].trim_end().rfind('\n').unwrap_or(0);
    }
    tail(text[start..].trim(), QUERY_BYTES)
}

/// The first `max` bytes of `s` at most, cut at a character boundary.
fn head(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// `s` as consecutive pieces of at most `max` bytes each, every byte kept in order: a piece
/// ends after its last whitespace when that is in its second half, else at a character
/// boundary. NUL characters (which the archive refuses) are dropped and blank pieces left
/// out.
fn pieces(s: &str, max: usize) -> Vec<String> {
    let s = s.replace('\0', "");
    let mut out = Vec::new();
    let mut rest = s.as_str();
    while rest.len() > max {
        let mut end = max;
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        if let Some(ws) = rest[..end].rfind(char::is_whitespace)
            && ws >= end / 2
        {
            end = ws + rest[ws..].chars().next().map_or(1, char::len_utf8);
        }
        if end == 0 {
            end = rest.chars().next().map_or(rest.len(), char::len_utf8);
        }
        out.push(&rest[..end]);
        rest = &rest[end..];
    }
    out.push(rest);
    out.into_iter().filter(|p| !p.trim().is_empty()).map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::{last_lines, pieces};

    #[test]
    fn the_query_is_the_last_line_of_a_pasted_document() {
        let doc = format!("{}\nWhat should I drink with it?\n", "Quarterly figures. ".repeat(600));
        assert_eq!(last_lines(&doc), "What should I drink with it?");
        assert_eq!(last_lines("Rome or Milan?\nok\n"), "Rome or Milan?\nok");
        assert_eq!(last_lines("short"), "short");
        let one_line = "word ".repeat(1000);
        assert!(last_lines(&one_line).len() <= 1000);
    }

    #[test]
    fn a_long_message_is_cut_into_pieces_within_the_limit_keeping_every_byte() {
        let text = "Zürich ist schön. ".repeat(500) + &"ü".repeat(3000);
        let parts = pieces(&text, 1000);
        assert!(parts.iter().all(|p| p.len() <= 1000 && !p.is_empty()));
        assert_eq!(parts.concat(), text);
        // Words are not cut where a space is near the end of a piece.
        assert!(parts[0].ends_with(' '), "{:?}", &parts[0][parts[0].len() - 10..]);
        assert_eq!(pieces("short", 1000), ["short"]);
        assert!(pieces("   ", 1000).is_empty());
        assert_eq!(pieces("a\0b", 1000), ["ab"]);
    }
}
