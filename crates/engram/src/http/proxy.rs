//! The memory proxy (issue 15): `POST /v1/chat/completions` (OpenAI) and `POST
//! /v1/messages` (Anthropic) forward a chat call to the configured upstream after putting
//! the caller's context block into its system prompt, stream the answer back as the
//! upstream sends it, and then append the user turn and the answer to the conversation, so
//! extraction runs as for any append. `GET /v1/models` is passed through.
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

/// What a proxied call appends once its answer is complete.
struct Turn {
    engine: engram_core::engine::Engine,
    principal: Principal,
    conversation: ConversationId,
    user: UserId,
    agent: Option<AgentId>,
    question: Option<String>,
}

impl Turn {
    /// Append the user turn and the answer (in the background: the client has its answer).
    /// A message over `max_content_bytes` (a pasted document, a long answer) is kept whole
    /// as consecutive messages of the same role within the limit, each marked with
    /// `metadata.part` and `metadata.parts`.
    fn append(self, answer: Option<String>) {
        let max = self.engine.config().max_content_bytes;
        let mut msgs = Vec::new();
        for (role, text) in [(MessageRole::User, self.question), (MessageRole::Assistant, answer)] {
            let parts = pieces(text.as_deref().unwrap_or_default(), max);
            let n = parts.len();
            for (i, content) in parts.into_iter().enumerate() {
                let metadata = (n > 1).then(|| serde_json::json!({ "part": i + 1, "parts": n }));
                msgs.push(MessageInput { role, content, metadata, ..Default::default() });
            }
        }
        if msgs.is_empty() {
            return;
        }
        tokio::spawn(async move {
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
        ApiError::new(ErrorCode::InvalidJson, format!("the request body is not JSON: {e}"))
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
    // A conversation id this caller may not add to (another user's or agent's) is refused
    // before the upstream is paid for a turn that could not be saved.
    match st.engine.check_append(&p, &conversation, Some(&user), agent.as_ref()).await {
        Err(e) if !own_failure(&e) => return Err(e.into()),
        Err(e) => tracing::warn!(error = %e, "proxy: cannot check the conversation"),
        Ok(()) => {}
    }

    // Memory: the context block into the system prompt. A caller that may not act for this
    // user or agent is refused; engram's own failure lets the call through without memory.
    let input = ContextInput {
        user_id: Some(user.clone()),
        agent_id: agent.clone(),
        // A pasted document makes a user message longer than a search query may be: the
        // query is its last `max_content_bytes` (where the question usually is), never a 413
        // for a call the upstream would take.
        query: question.as_deref().map(|q| tail(q, st.engine.config().max_content_bytes)),
        conversation_id: Some(conversation.clone()),
        // The facts are chosen once per conversation and kept (the context block's session
        // cache): the system prompt stays the same call after call, which keeps the
        // upstream's prompt cache warm, and a call costs no search.
        session_id: Some(conversation.to_string()),
        ..Default::default()
    };
    let mut memory = true;
    match st.engine.context(&p, input).await {
        Ok(block) if !block.text.trim().is_empty() => {
            wire::inject(vendor, &mut request, &block.text)
        }
        Ok(_) => {}
        Err(e) if own_failure(&e) => {
            tracing::warn!(error = %e, "proxy: forwarding without memory");
            memory = false;
        }
        Err(e) => return Err(e.into()),
    }
    let sent = serde_json::to_vec(&request).map_err(|e| {
        ApiError::new(ErrorCode::Internal, format!("cannot encode the request: {e}"))
    })?;
    let resp = up
        .send("POST", vendor.path(), &header_pairs(&headers), Some(Bytes::from(sent)))
        .await
        .map_err(upstream_error)?;
    let turn =
        Turn { engine: st.engine.clone(), principal: p, conversation, user, agent, question };
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
                    t.append(Some(answer.to_string()));
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
    let answer =
        serde_json::from_slice::<Value>(&bytes).ok().and_then(|v| wire::answer_of(vendor, &v));
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
    use super::pieces;

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
