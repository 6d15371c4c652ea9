//! OpenTelemetry trace export (issue 15 #5): with `--otlp-endpoint`, `engram serve` posts
//! its spans (HTTP requests, job runs, pipeline stages) to an OTLP/HTTP collector — here a
//! real HTTP receiver in the test that decodes the protobuf the way a collector does;
//! without it nothing is sent, even when the standard `OTEL_*` variables name a collector.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message as _;
use serde_json::json;
use testkit::{Rule, ScriptedLlm};

use crate::helpers::{Backend, Db, Server, engram};

/// A span as the collector received it.
#[derive(Debug, Clone)]
struct Received {
    service: String,
    name: String,
    trace_id: Vec<u8>,
    span_id: Vec<u8>,
    parent: Vec<u8>,
    attributes: Vec<(String, String)>,
}

impl Received {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

fn text(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn pairs(kvs: &[KeyValue]) -> Vec<(String, String)> {
    kvs.iter().map(|kv| (kv.key.clone(), text(&kv.value))).collect()
}

/// An OTLP/HTTP collector on a free port: `POST /v1/traces` with a protobuf body.
async fn collector() -> (String, Arc<Mutex<Vec<Received>>>) {
    let spans: Arc<Mutex<Vec<Received>>> = Arc::default();
    let sink = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: Bytes| {
            let sink = sink.clone();
            async move {
                assert_eq!(headers["content-type"], "application/x-protobuf");
                let req = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf body");
                let mut got = sink.lock().unwrap();
                for rs in req.resource_spans {
                    let resource = pairs(&rs.resource.map(|r| r.attributes).unwrap_or_default());
                    let service = resource
                        .iter()
                        .find(|(k, _)| k == "service.name")
                        .map(|(_, v)| v.clone())
                        .unwrap_or_default();
                    for ss in rs.scope_spans {
                        for s in ss.spans {
                            got.push(Received {
                                service: service.clone(),
                                name: s.name,
                                trace_id: s.trace_id,
                                span_id: s.span_id,
                                parent: s.parent_span_id,
                                attributes: pairs(&s.attributes),
                            });
                        }
                    }
                }
                ([("content-type", "application/x-protobuf")], Vec::<u8>::new())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, spans)
}

/// Waits until `want` holds for the received spans.
async fn until(spans: &Arc<Mutex<Vec<Received>>>, what: &str, want: impl Fn(&[Received]) -> bool) {
    for _ in 0..300 {
        if want(&spans.lock().unwrap()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let names: Vec<String> =
        spans.lock().unwrap().iter().map(|s| format!("{} {:?}", s.name, s.attributes)).collect();
    panic!("the collector never received {what}; it has {names:?}");
}

async fn spans_of_requests_and_jobs_reach_the_collector(backend: Backend) {
    let (otlp, spans) = collector().await;
    let llm = ScriptedLlm::start().await;
    llm.set_default(
        Rule::any()
            .reply(r#"[{"content": "The user keeps bees.", "category": "fact", "importance": 6}]"#),
    );
    let db = Db::new(backend).await;
    let mut cmd = engram(db.dir());
    cmd.args(db.store_args()).env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let mut flags = crate::extraction::llm_flags(&llm);
    flags.extend(["--otlp-endpoint".to_string(), otlp.clone()]);
    let s = Server::spawn(cmd, &flags.iter().map(String::as_str).collect::<Vec<_>>());
    let (st, _) = s.post("/v1/search", json!({ "query": "bees", "user_id": "alice" })).await;
    assert_eq!(st, 200);
    let (st, _) = s.get("/v1/memories/0190a0a0-0000-7000-8000-000000000000").await;
    assert_eq!(st, 404);
    let (st, b) = s
        .post(
            "/v1/conversations/c1/messages",
            json!({ "user_id": "alice", "messages": [{ "role": "user", "content": "I keep bees." }] }),
        )
        .await;
    assert_eq!(st, 202, "{b}");

    // A request is a root span named by its route, never by the ids in its path.
    until(&spans, "the search request's span", |got| {
        got.iter().any(|s| {
            s.name == "POST /v1/search" && s.attr("http.response.status_code") == Some("200")
        })
    })
    .await;
    until(&spans, "the 404's span", |got| {
        got.iter().any(|s| {
            s.name == "GET /v1/memories/{id}" && s.attr("http.response.status_code") == Some("404")
        })
    })
    .await;
    // The extraction job and its pipeline stages, one trace.
    until(&spans, "the extraction job's stages", |got| {
        got.iter().any(|s| s.name == "extract") && got.iter().any(|s| s.name == "persist")
    })
    .await;
    // The job run's span ends after its stages, so it may come in a later export batch.
    until(&spans, "the extraction job run's span", |got| {
        got.iter().any(|s| s.name == "execute" && s.attr("kind") == Some("extract"))
    })
    .await;
    let got = spans.lock().unwrap().clone();
    assert!(got.iter().all(|s| s.service == "engram"), "service.name of every span");
    let search = got.iter().find(|s| s.name == "POST /v1/search").unwrap();
    assert_eq!(search.attr("http.route"), Some("/v1/search"));
    assert_eq!(search.attr("http.request.method"), Some("POST"));
    assert!(search.parent.is_empty(), "a request span is a trace's root");
    // The stage's ancestors lead to the job run that executed it.
    let extract = got.iter().find(|s| s.name == "extract").unwrap();
    let mut at = extract.clone();
    let job = loop {
        let parent = got
            .iter()
            .find(|s| s.span_id == at.parent)
            .unwrap_or_else(|| panic!("the parent of {at:?} was not exported"));
        assert_eq!(parent.trace_id, extract.trace_id, "one trace");
        if parent.name == "execute" {
            break parent.clone();
        }
        at = parent.clone();
    };
    assert_eq!(job.attr("kind"), Some("extract"), "{job:?}");
    drop(s);
}
on_both_backends!(spans_of_requests_and_jobs_reach_the_collector);

// Two threads: the collector answers while the test waits for engram to stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_exported_unless_asked() {
    let _w =
        crate::helpers::watchdog(concat!(module_path!(), "::nothing_is_exported_unless_asked"));
    let (otlp, spans) = collector().await;
    let db = Db::new(Backend::Sqlite).await;
    let mut cmd = engram(db.dir());
    // The standard variables alone do not turn export on.
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp)
        .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", format!("{otlp}/v1/traces"))
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let mut s = Server::spawn(cmd, &[]);
    for _ in 0..5 {
        let (st, _) = s.post("/v1/search", json!({ "query": "bees", "user_id": "alice" })).await;
        assert_eq!(st, 200);
    }
    // A graceful stop would flush a batch if there were one.
    assert!(s.terminate(), "engram serve exits cleanly on SIGTERM");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(spans.lock().unwrap().is_empty(), "{:?}", spans.lock().unwrap());
}

// Two threads: the collector answers while the test waits for engram to stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_sends_the_last_spans() {
    let _w =
        crate::helpers::watchdog(concat!(module_path!(), "::a_graceful_stop_sends_the_last_spans"));
    let (otlp, spans) = collector().await;
    let db = Db::new(Backend::Sqlite).await;
    let mut cmd = engram(db.dir());
    // A delay longer than the test: only the flush at shutdown can send the span.
    cmd.env("OTEL_BSP_SCHEDULE_DELAY", "600000");
    let mut s = Server::spawn(cmd, &["--otlp-endpoint", &format!("{otlp}/")]);
    let (st, _) = s.get("/v1/stats").await;
    assert_eq!(st, 200);
    assert!(spans.lock().unwrap().is_empty());
    assert!(s.terminate(), "engram serve exits cleanly on SIGTERM");
    let got = spans.lock().unwrap().clone();
    assert!(got.iter().any(|s| s.name == "GET /v1/stats"), "{got:?}");
}

#[tokio::test]
async fn a_bad_endpoint_is_refused_at_start() {
    let _w =
        crate::helpers::watchdog(concat!(module_path!(), "::a_bad_endpoint_is_refused_at_start"));
    let db = Db::new(Backend::Sqlite).await;
    let (ok, _, err) =
        db.cli(&["serve", "--addr", "127.0.0.1:0", "--otlp-endpoint", "localhost:4317"]);
    assert!(!ok);
    assert!(err.contains("--otlp-endpoint") && err.contains("http://"), "{err}");
}
