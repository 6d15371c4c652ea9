//! `/openapi.json`: the document utoipa derives from the handlers, completed with what the
//! handlers enforce but the derive cannot see, so that a request valid per the document is
//! one the server accepts and every status the server sends is documented (issue 10 #8;
//! checked by schemathesis, `scripts/schemathesis.sh`).
//!
//! Completed here, in one place, as JSON:
//! - path parameters (UUIDs for memory and message ids, client-chosen identifiers
//!   otherwise) and query parameters in the query;
//! - field limits of request bodies ([`field_rule`]): identifiers, contents (no NUL, not
//!   blank; the byte limit on trimmed text is in the description), enums, numeric ranges, timestamps
//!   within the years the stores keep; no unknown fields; responses' free JSON fields;
//! - the error responses of every operation (400, 401, 403, 404, 405, 409, 413, 422, 429,
//!   500, 503, all `ErrorBody`), and the bearer requirement on every `/v1` operation;
//! - `/metrics`, `/mcp` and the memory proxy's routes, with the `x-api-key` scheme.

use serde_json::{Map, Value, json};
use utoipa::OpenApi;

/// A client-chosen identifier (`engram_core::model` `string_id!`): 1–256 characters, no
/// control characters, no surrounding whitespace.
const IDENT_PATTERN: &str =
    r"^[^\s\x00-\x1f\x7f-\x9f](?:[^\x00-\x1f\x7f-\x9f]{0,254}[^\s\x00-\x1f\x7f-\x9f])?$";
/// Text the stores can keep (PostgreSQL refuses U+0000).
const TEXT_PATTERN: &str = r"^[^\x00]*$";
/// Text that is not blank either.
const CONTENT_PATTERN: &str = r"^[^\x00]*[^\x00\s][^\x00]*$";
/// RFC 3339 timestamps within the years both stores keep (1678–2261, rounded inwards).
const TIMESTAMP_PATTERN: &str = r"^(1[7-9]\d\d|2[01]\d\d|22[0-5]\d)-";

/// A calendar date, month or year (a search bound: any four-digit year, moved into the years
/// both stores keep).
const DATE_PATTERN: &str = r"^\d{4}(-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?)?$";

/// The rating filter's values (`api::dto::rating_filter`).
const RATINGS: &[&str] = &["up", "down", "none"];

/// The request schemas (their properties get [`field_rule`], and no unknown fields).
const REQUEST_SCHEMAS: &[&str] = &[
    "CreateMemory",
    "BatchCreate",
    "PatchMemory",
    "Rating",
    "SearchRequest",
    "ContextRequest",
    "NewMessage",
    "AppendRequest",
    "MessageRating",
    "AgentRequest",
    "PutStateRequest",
];

fn ident() -> Value {
    json!({ "type": "string", "minLength": 1, "maxLength": 256, "pattern": IDENT_PATTERN })
}

fn timestamp() -> Value {
    json!({ "type": "string", "format": "date-time", "pattern": TIMESTAMP_PATTERN })
}

/// A window's bound (`api::dto::opt_bound`): a timestamp, or a calendar date, month or
/// year meaning the whole period, any year (the server moves it into `api::dto::YEARS`).
fn bound() -> Value {
    json!({
        "description": "An RFC 3339 timestamp, or a date, month or year (2023-05-08, 2023-05, \
            2023) meaning the whole period. A bound outside the years 1678-2261 admits the same \
            rows as one at their edge.",
        "anyOf": [
            { "type": "string", "format": "date-time", "pattern": r"^\d{4}-" },
            { "type": "string", "pattern": DATE_PATTERN },
        ],
    })
}

fn names(values: &[&str]) -> Value {
    json!({ "type": "string", "enum": values })
}

/// The schema of property `prop` of request schema `schema` (None: keep the derived one,
/// with NUL-free strings).
fn field_rule(schema: &str, prop: &str, max_content_bytes: usize) -> Option<Value> {
    const CATEGORIES: &[&str] =
        &["preference", "fact", "event", "relationship", "decision", "general"];
    const KINDS: &[&str] = &["knowledge", "profile", "shared"];
    Some(match (schema, prop) {
        (_, "user_id" | "agent_id" | "source_conversation_id") => ident(),
        // 1–256 bytes, as an identifier (more than 256 characters never fit).
        (_, "cluster_id") => ident(),
        (_, "turn_id") => json!({ "type": "string", "pattern": TEXT_PATTERN }),
        // 1–256 bytes: more than 256 characters never fit.
        (_, "session_id") => {
            json!({ "type": "string", "minLength": 1, "maxLength": 256, "pattern": TEXT_PATTERN })
        }
        (_, "key") => json!({ "type": "string", "pattern": CONTENT_PATTERN }),
        // The byte limit applies to the trimmed text, which a schema cannot state: it is
        // in the description, and over it the answer is 413.
        ("CreateMemory" | "PatchMemory" | "SearchRequest", "content" | "query") => json!({
            "type": "string", "minLength": 1, "pattern": CONTENT_PATTERN,
            "description": format!("At most {max_content_bytes} bytes once trimmed (413 otherwise).") }),
        // Blank: no query (every fact by observation time).
        ("ContextRequest", "query") => json!({ "type": "string", "pattern": TEXT_PATTERN,
            "description": format!("At most {max_content_bytes} bytes once trimmed; blank: no query.") }),
        ("NewMessage", "content") => json!({ "type": "string", "pattern": TEXT_PATTERN,
            "description": format!("At most {max_content_bytes} bytes (413 otherwise).") }),
        ("NewMessage", "role") => names(&["user", "assistant", "system", "tool"]),
        (_, "category") => names(CATEGORIES),
        (_, "categories") => json!({ "type": "array", "items": names(CATEGORIES) }),
        (_, "kind") => names(KINDS),
        (_, "kinds") => json!({ "type": "array", "items": names(KINDS) }),
        (_, "sources") => json!({ "type": "array", "minItems": 1,
            "items": names(&["memories", "messages", "summaries"]) }),
        (_, "mode") => names(&["hybrid", "fts", "vector", "text", "substring", "regex"]),
        (_, "rating") => names(RATINGS),
        (_, "importance") => json!({ "type": "integer", "minimum": 1, "maximum": 10 }),
        // Working memory keeps any JSON value (top-level strings NUL-free, as every text).
        ("PutStateRequest", "value") => json!({
            "anyOf": [{ "type": "string", "pattern": TEXT_PATTERN },
                      { "type": ["number", "boolean", "null", "array", "object"] }],
            "description": "Any JSON value, at most 65536 bytes of JSON text (413 otherwise)." }),
        ("PutStateRequest", "ttl_seconds") => {
            json!({ "type": "integer", "minimum": 1, "maximum": 2_592_000 })
        }
        (_, "value") => json!({ "type": "integer", "enum": [-1, 1] }),
        (_, "dedup_threshold") => json!({ "type": "number", "minimum": 0.5, "maximum": 1.0 }),
        (_, "token_budget") => json!({ "type": "integer", "minimum": 1, "maximum": 1_000_000 }),
        ("SearchRequest", "limit") => json!({ "type": "integer", "minimum": 1, "maximum": 200 }),
        (_, "since" | "until") => bound(),
        (_, "observed_at" | "created_at") => timestamp(),
        // A time in the future; null clears it on PATCH.
        (_, "expires_at") => json!({ "type": ["string", "null"], "format": "date-time",
            "pattern": r"^2(0[3-9]\d|[12]\d\d|2[0-5]\d)-" }),
        ("BatchCreate", "memories") => json!({ "type": "array", "minItems": 1,
            "maxItems": 10_000, "items": { "$ref": "#/components/schemas/CreateMemory" } }),
        ("AppendRequest", "messages") => json!({ "type": "array", "minItems": 1,
            "items": { "$ref": "#/components/schemas/NewMessage" } }),
        (_, "metadata") => nul_free_object(),
        (_, "settings") => agent_settings(),
        (_, "tool_args") => json!({}),
        _ => return None,
    })
}

/// An agent's `settings` (`MemoryPolicy::check_names` and `from_settings`): the sections
/// engram reads, nothing else.
fn agent_settings() -> Value {
    // Every setting may be absent or null (its default).
    let or_null = |v: Value| json!({ "anyOf": [v, { "type": "null" }] });
    let section = |props: Value| {
        or_null(json!({ "type": "object", "additionalProperties": false, "properties": props }))
    };
    let int =
        |lo: i64, hi: i64| or_null(json!({ "type": "integer", "minimum": lo, "maximum": hi }));
    let model = or_null(json!({ "type": "string", "pattern": CONTENT_PATTERN }));
    // Other top-level names are the client's own, kept as given.
    let mut free = nul_free_object();
    free["properties"] = json!({
            "extraction": section(json!({
                "mode": or_null(names(&["post-turn", "batched", "off"])),
                "min_turns": int(1, 1000),
                "max_tokens_per_extraction": int(64, 32_000),
                "prompt": or_null(json!({ "type": "string", "pattern": CONTENT_PATTERN })),
            })),
            "pii_policy": or_null(names(&["allow", "redact", "reject"])),
            "llm": section(json!({ "model": model.clone(), "fast_model": model })),
            "compaction": section(json!({ "threshold": or_null(json!({ "anyOf": [
                { "type": "integer", "enum": [0] },
                { "type": "integer", "minimum": 10, "maximum": 1_000_000 }
            ] })) })),
    });
    free
}

/// A JSON object whose keys and top-level strings hold no NUL (nothing deeper may hold one
/// either, which the document does not try to state: it stays free of recursive
/// references, which schema-driven generators cannot expand).
fn nul_free_object() -> Value {
    let text = json!({ "type": "string", "pattern": TEXT_PATTERN });
    let value =
        json!({ "anyOf": [text, { "type": ["number", "boolean", "null", "array", "object"] }] });
    json!({ "type": "object", "propertyNames": text, "additionalProperties": value })
}

/// The path parameter `name` of `path`.
fn path_param(path: &str, name: &str) -> Value {
    let uuid =
        (path.starts_with("/v1/memories/") || path.starts_with("/v1/messages/")) && name == "id";
    let schema = if uuid { json!({ "type": "string", "format": "uuid" }) } else { ident() };
    json!({ "name": name, "in": "path", "required": true, "schema": schema })
}

fn error_response(description: &str) -> Value {
    json!({ "description": description, "content": { "application/json": {
        "schema": { "$ref": "#/components/schemas/ErrorBody" } } } })
}

/// Every error status the server can send, with what it means.
const ERRORS: &[(&str, &str)] = &[
    ("400", "invalid input: malformed JSON, a wrong field, an id that is not one"),
    ("401", "missing, unknown or revoked API key"),
    ("403", "the key's role may not do this, or a local-mode request from another host"),
    ("404", "no such row, or one the caller may not see"),
    ("405", "method not allowed on this path"),
    ("408", "the request body stopped arriving (nothing for --body-timeout-secs)"),
    ("409", "conflict: superseded, or owned by another user or agent"),
    ("413", "body or content over the configured limit"),
    ("422", "understood but refused: PII policy reject, another embedding space"),
    ("429", "over this key's request limit; see Retry-After"),
    ("500", "internal error; see the server log"),
    ("503", "store, embedder or server capacity unavailable; retry (Retry-After)"),
];

/// The finished document.
pub fn document(max_content_bytes: usize) -> Value {
    let mut doc = serde_json::to_value(super::ApiDoc::openapi()).unwrap_or_else(|_| json!({}));
    if let Some(schemas) = doc.pointer_mut("/components/schemas").and_then(Value::as_object_mut) {
        for name in REQUEST_SCHEMAS {
            let Some(s) = schemas.get_mut(*name).and_then(Value::as_object_mut) else { continue };
            s.insert("additionalProperties".into(), json!(false));
            if *name == "PatchMemory" {
                s.insert("minProperties".into(), json!(1));
            }
            let Some(props) = s.get_mut("properties").and_then(Value::as_object_mut) else {
                continue;
            };
            for (prop, schema) in props.iter_mut() {
                let required_null = schema
                    .get("type")
                    .and_then(Value::as_array)
                    .is_some_and(|t| t.iter().any(|x| x == "null"));
                match field_rule(name, prop, max_content_bytes) {
                    Some(mut rule) => {
                        let description =
                            schema.get("description").or_else(|| rule.get("description")).cloned();
                        if required_null && prop != "expires_at" {
                            rule = json!({ "anyOf": [rule, { "type": "null" }] });
                        }
                        if let Some(d) = description {
                            rule["description"] = d;
                        }
                        *schema = rule;
                    }
                    None => nul_free_strings(schema),
                }
            }
        }
        // Tool arguments are any JSON value, as given.
        if let Some(p) =
            schemas.get_mut("MessageDto").and_then(|m| m.pointer_mut("/properties/tool_args"))
        {
            *p = json!({ "description": "The tool call's arguments, as given (any JSON)." });
        }
        // A working-memory value is any JSON value, as put.
        if let Some(p) =
            schemas.get_mut("StateEntryDto").and_then(|m| m.pointer_mut("/properties/value"))
        {
            *p = json!({ "description": "The value as it was put (any JSON)." });
        }
        // A message needs content unless it is a tool call.
        if let Some(m) = schemas.get_mut("NewMessage").and_then(Value::as_object_mut) {
            m.insert(
                "anyOf".into(),
                json!([
                    { "required": ["tool_name"], "properties": { "tool_name": { "type": "string" } } },
                    { "required": ["content"], "properties": { "content": {
                        "type": "string", "pattern": CONTENT_PATTERN } } },
                ]),
            );
        }
    }
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for (path, item) in paths.iter_mut() {
            let Some(item) = item.as_object_mut() else { continue };
            for (_, op) in item.iter_mut() {
                complete_operation(path, op);
            }
        }
        paths.insert("/metrics".into(), metrics_path());
        paths.insert("/mcp".into(), mcp_path());
        for (path, item) in proxy_paths() {
            paths.insert(path.into(), item);
        }
    }
    if let Some(schemes) =
        doc.pointer_mut("/components/securitySchemes").and_then(Value::as_object_mut)
    {
        schemes.insert(
            "api_key".into(),
            json!({ "type": "apiKey", "in": "header", "name": "x-api-key",
                "description": "The engram key as the Anthropic SDKs send theirs (any route)." }),
        );
    }
    doc
}

fn nul_free_strings(schema: &mut Value) {
    let is_string = match schema.get("type") {
        Some(Value::String(t)) => t == "string",
        Some(Value::Array(t)) => t.iter().any(|x| x == "string"),
        _ => false,
    };
    if is_string && schema.get("pattern").is_none() && schema.get("format").is_none() {
        schema["pattern"] = json!(TEXT_PATTERN);
    }
}

fn complete_operation(path: &str, op: &mut Value) {
    let Some(op) = op.as_object_mut() else { return };
    // Path parameters, in the order of the path.
    let mut params: Vec<Value> = op
        .get("parameters")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p["in"] != "path")
        .collect();
    for segment in path.split('/') {
        if let Some(name) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            params.push(path_param(path, name));
        }
    }
    for p in &mut params {
        if p["in"] == "query" {
            let name = p["name"].as_str().unwrap_or("").to_string();
            let rule = match name.as_str() {
                "user_id" | "agent_id" | "source_conversation_id" => Some(ident()),
                "rating" => Some(names(RATINGS)),
                "cursor" => Some(json!({ "type": "string", "format": "uuid" })),
                "limit" if path == "/v1/memories" => {
                    Some(json!({ "type": "integer", "minimum": 1, "maximum": 200 }))
                }
                "limit" => Some(json!({ "type": "integer", "minimum": 1, "maximum": 1000 })),
                "after" => Some(json!({ "type": "integer", "format": "int64" })),
                // Comma-separated names; blanks around them and empty items are ignored.
                "category" => Some(json!({ "type": "string", "pattern":
                    r"^\s*(preference|fact|event|relationship|decision|general)?\s*(,\s*(preference|fact|event|relationship|decision|general)?\s*)*$" })),
                "kind" => Some(json!({ "type": "string", "pattern":
                    r"^\s*(knowledge|profile|shared)?\s*(,\s*(knowledge|profile|shared)?\s*)*$" })),
                "include_superseded" | "purge" => Some(json!({ "type": "boolean" })),
                _ => None,
            };
            if let Some(r) = rule {
                p["schema"] = r;
            }
        }
    }
    if !params.is_empty() {
        op.insert("parameters".into(), Value::Array(params));
    }
    let responses = op.entry("responses").or_insert_with(|| json!({}));
    if let Some(responses) = responses.as_object_mut() {
        for (status, r) in responses.iter_mut() {
            if r.get("description").is_none() {
                r["description"] = json!(if status.starts_with('2') { "success" } else { "error" });
            }
        }
        if path != "/healthz" {
            for (status, what) in ERRORS {
                responses.entry(*status).or_insert_with(|| error_response(what));
            }
        }
    }
    if path.starts_with("/v1/") && !op.contains_key("security") {
        op.insert("security".into(), json!([{ "bearer": [] }]));
    }
}

/// The memory proxy's routes (`http/proxy.rs`): the vendors' own request and answer
/// bodies, passed through, so described as free JSON.
fn proxy_paths() -> Vec<(&'static str, Value)> {
    let scope = |name: &str, what: &str| {
        json!({ "name": name, "in": "header", "required": false, "description": what,
            "schema": { "type": "string", "minLength": 1, "maxLength": 256, "pattern": IDENT_PATTERN } })
    };
    let headers = json!([
        scope(
            "x-engram-user-id",
            "The user whose memory is used (else OpenAI's `user`, Anthropic's `metadata.user_id`)."
        ),
        scope("x-engram-agent-id", "The agent (else the key's agent)."),
        scope(
            "x-engram-conversation-id",
            "The conversation the turn is appended to (else `proxy:<user>:<agent or ->`)."
        ),
    ]);
    let memory_header = json!({ "engram-memory": {
        "description": "`unavailable` when engram's store failed and the call went through without memory.",
        "schema": { "type": "string", "enum": ["unavailable"] } } });
    let upstream_errors = [
        ("502", "upstream_unavailable: the upstream could not be reached"),
        ("504", "upstream_timeout: no answer (or no next chunk) within --proxy-timeout-secs"),
    ];
    let chat = |vendor: &str, setting: &str, op_id: &str, body_doc: &str| {
        let mut op = json!({
            "tags": ["proxy"],
            "summary": format!("The memory proxy ({vendor}): the context block goes into the system prompt, the call goes to {setting}, the answer comes back as sent (JSON, or an SSE stream with \"stream\": true), and the turn is appended to the conversation."),
            "operationId": op_id,
            "security": [{ "bearer": [] }, { "api_key": [] }],
            "parameters": headers,
            "requestBody": { "required": true, "content": { "application/json": { "schema": {
                "type": "object", "description": body_doc } } } },
            "responses": {
                "200": { "description": "the upstream's answer, unchanged", "headers": memory_header,
                    "content": {
                        "application/json": { "schema": { "type": "object" } },
                        "text/event-stream": { "schema": { "type": "string" } } } },
                "404": error_response(&format!("no such row, or the {vendor} proxy has no upstream ({setting})")),
                "default": { "description": "the upstream's own error status and body, passed through" },
            },
        });
        for (status, what) in upstream_errors {
            op["responses"][status] = error_response(what);
        }
        op
    };
    let mut completions = chat(
        "OpenAI",
        "--proxy-openai-url",
        "proxy_chat_completions",
        "An OpenAI chat completions request (`model`, `messages`, `stream`, tools…), forwarded as sent apart from the system prompt.",
    );
    let mut messages = chat(
        "Anthropic",
        "--proxy-anthropic-url",
        "proxy_messages",
        "An Anthropic Messages request (`model`, `max_tokens`, `system`, `messages`, `stream`, `metadata`…), forwarded as sent apart from `system`.",
    );
    let mut models = json!({
        "tags": ["proxy"],
        "summary": "The OpenAI upstream's model list, passed through.",
        "operationId": "proxy_models",
        "security": [{ "bearer": [] }, { "api_key": [] }],
        "responses": {
            "200": { "description": "the upstream's answer, unchanged", "content": {
                "application/json": { "schema": { "type": "object" } } } },
            "404": error_response("the OpenAI proxy has no upstream (--proxy-openai-url)"),
            "default": { "description": "the upstream's own error status and body, passed through" },
        },
    });
    for (status, what) in upstream_errors {
        models["responses"][status] = error_response(what);
    }
    let mut model = models.clone();
    model["summary"] = json!("One model of the OpenAI upstream, passed through.");
    model["operationId"] = json!("proxy_model");
    model["parameters"] = json!([{ "name": "id", "in": "path", "required": true,
        "schema": { "type": "string", "minLength": 1 } }]);
    complete_operation("/v1/chat/completions", &mut completions);
    complete_operation("/v1/messages", &mut messages);
    complete_operation("/v1/models", &mut models);
    complete_operation("/v1/models/{id}", &mut model);
    vec![
        ("/v1/chat/completions", json!({ "post": completions })),
        ("/v1/messages", json!({ "post": messages })),
        ("/v1/models", json!({ "get": models })),
        ("/v1/models/{id}", json!({ "get": model })),
    ]
}

fn metrics_path() -> Value {
    let mut get = json!({
        "tags": ["operations"],
        "summary": "Counters and histograms in the Prometheus text format (admin key; open in local mode).",
        "operationId": "metrics",
        "security": [{ "bearer": [] }],
        "responses": { "200": { "description": "Prometheus text format", "content": {
            "text/plain": { "schema": { "type": "string" } } } } },
    });
    complete_operation("/metrics", &mut get);
    json!({ "get": get })
}

fn mcp_path() -> Value {
    let mut ops = Map::new();
    for (method, summary) in [
        (
            "post",
            "MCP over streamable HTTP: one JSON-RPC message (initialize, tools/list, tools/call, …); the answer is JSON-RPC in an SSE stream.",
        ),
        ("get", "MCP: the server-to-client event stream of a session."),
        ("delete", "MCP: close a session."),
    ] {
        let mut op = json!({
            "tags": ["mcp"],
            "summary": summary,
            "operationId": format!("mcp_{method}"),
            "security": [{ "bearer": [] }],
            "parameters": [{ "name": "mcp-session-id", "in": "header", "required": method != "post",
                "schema": { "type": "string" }, "description": "The session, from the initialize answer's header." }],
            "responses": {
                "200": { "description": "JSON-RPC answer (SSE-framed)", "content": {
                    "text/event-stream": { "schema": { "type": "string" } } } },
                "202": { "description": "notification accepted" },
            },
        });
        if method == "post" {
            op["requestBody"] = json!({ "required": true, "content": { "application/json": {
                "schema": { "type": "object", "description": "A JSON-RPC 2.0 message." } } } });
        }
        complete_operation("/mcp", &mut op);
        ops.insert(method.into(), op);
    }
    Value::Object(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_documents_errors_and_parameters() {
        let doc = document(8192);
        let paths = doc["paths"].as_object().unwrap();
        for p in ["/metrics", "/mcp", "/v1/chat/completions", "/v1/messages", "/v1/models"] {
            assert!(paths.contains_key(p), "{p}");
        }
        for (path, item) in paths {
            for (method, op) in item.as_object().unwrap() {
                let names: Vec<&str> = op["parameters"]
                    .as_array()
                    .map(|ps| {
                        ps.iter()
                            .filter(|p| p["in"] == "path")
                            .filter_map(|p| p["name"].as_str())
                            .collect()
                    })
                    .unwrap_or_default();
                let wanted = path.matches('{').count();
                assert_eq!(names.len(), wanted, "{method} {path}: {names:?}");
                for (status, r) in op["responses"].as_object().unwrap() {
                    assert!(r.get("description").is_some(), "{method} {path} {status}");
                }
                if path.starts_with("/v1/") {
                    let security = op["security"].as_array().unwrap();
                    assert!(security.contains(&json!({ "bearer": [] })), "{method} {path}");
                    for s in ["400", "401", "403", "429", "503"] {
                        assert!(op["responses"].get(s).is_some(), "{method} {path} {s}");
                    }
                }
            }
        }
        let create = &doc["components"]["schemas"]["CreateMemory"];
        assert_eq!(create["additionalProperties"], false);
        assert_eq!(create["properties"]["content"]["minLength"], 1);
        assert!(create["properties"]["content"]["description"].as_str().unwrap().contains("8192"));
        let agent = &doc["components"]["schemas"]["AgentRequest"]["properties"];
        assert_eq!(agent["dedup_threshold"]["anyOf"][0]["minimum"], 0.5);
    }
}
