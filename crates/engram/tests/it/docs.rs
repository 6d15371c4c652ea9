//! The integration docs (issue 15 #6), run as written: every fenced block of
//! `docs/integrations.md` carries a `test:<name>` tag and is run here — the shell commands
//! with bash, the Python snippets with the official `openai` and `anthropic` packages (the
//! venv of `scripts/sdk-venv.sh`, `ENGRAM_SDK_PYTHON`), the JavaScript one with the official
//! `openai` npm package (`scripts/sdk-node.sh`, `ENGRAM_SDK_NODE_DIR`), the MCP client
//! configurations by starting what they name and speaking MCP to it. Only the documented
//! placeholders are replaced: `http://127.0.0.1:8420`, `<engram key>`, the data directory,
//! the upstream URLs and keys. The README's proxy and MCP snippets must be copies of these.

use std::path::{Path, PathBuf};
use std::process::Command;

use reqwest::StatusCode;
use serde_json::{Value, json};
use testkit::{Match, Rule, ScriptedLlm};

use crate::helpers::Bounded as _;
use crate::helpers::{Server, bin};
use crate::mcp::{Mcp, StdioClient, assert_tool_error};

const DOCS: &str = include_str!("../../../../docs/integrations.md");
const README: &str = include_str!("../../../../README.md");
const UPSTREAM_KEY: &str = "sk-upstream-secret";

/// Every tag the tests below run.
const RUN: &[&str] = &[
    "keys",
    "serve",
    "openai-python",
    "openai-js",
    "anthropic-python",
    "claude-desktop",
    "cursor-stdio",
    "cursor-http",
    "mcp-http",
    "rest",
];

/// A fenced block: its info string and its text.
fn blocks(md: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = md.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```") else { continue };
        let mut code = String::new();
        for l in lines.by_ref() {
            if l.starts_with("```") {
                break;
            }
            code.push_str(l);
            code.push('\n');
        }
        out.push((info.trim().to_string(), code));
    }
    out
}

/// The block tagged `test:<tag>` in the integration docs.
fn snippet(tag: &str) -> String {
    let found: Vec<String> = blocks(DOCS)
        .into_iter()
        .filter(|(info, _)| info.split_whitespace().any(|w| w == format!("test:{tag}")))
        .map(|(_, code)| code)
        .collect();
    assert_eq!(found.len(), 1, "one block tagged test:{tag} in docs/integrations.md");
    found.into_iter().next().unwrap()
}

/// The test's own values for the documented placeholders.
struct Here<'a> {
    base: &'a str,
    key: &'a str,
    data_dir: &'a Path,
}

impl Here<'_> {
    fn apply(&self, code: &str) -> String {
        code.replace("http://127.0.0.1:8420", self.base)
            .replace("<engram key>", self.key)
            .replace("/home/me/engram-data", &self.data_dir.display().to_string())
    }
}

/// The shell words of a command line (continuations joined, no quoting in these snippets).
fn words(code: &str) -> Vec<String> {
    code.replace("\\\n", " ").split_whitespace().map(str::to_string).collect()
}

/// Run `code` with `program` from a file named `file` in a fresh directory (with
/// `node_modules` linked in for JavaScript); returns stdout, after checking it succeeded.
fn run(program: &str, file: &str, code: &str, node_modules: Option<&Path>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file);
    std::fs::write(&path, code).unwrap();
    if let Some(m) = node_modules {
        std::os::unix::fs::symlink(m, dir.path().join("node_modules")).unwrap();
    }
    let out = Command::new(program).arg(&path).current_dir(dir.path()).output_bounded().unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{file} failed:\n{code}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    stdout.into_owned()
}

fn fixture(var: &str, script: &str) -> String {
    #[allow(clippy::disallowed_methods)] // tests read their fixture location from the environment
    let v = std::env::var(var);
    v.unwrap_or_else(|_| {
        panic!("{var} is not set: run `bash scripts/{script}` and export its last line")
    })
}

/// An `engram` command with the store flags of a snippet (`--data-dir …`), quiet.
fn engram_cmd(args: &[String]) -> Command {
    let mut c = Command::new(bin());
    c.args(args).env("ENGRAM_LOG", "warn");
    c
}

#[test]
fn every_block_of_the_integration_docs_is_run_and_the_readme_copies_them() {
    let _w = crate::helpers::watchdog(concat!(
        module_path!(),
        "::every_block_of_the_integration_docs_is_run_and_the_readme_copies_them"
    ));
    let docs = blocks(DOCS);
    assert!(docs.len() >= RUN.len());
    for (info, code) in &docs {
        let tag = info.split_whitespace().find_map(|w| w.strip_prefix("test:"));
        let tag = tag.unwrap_or_else(|| panic!("a block without a test: tag:\n{code}"));
        assert!(RUN.contains(&tag), "test:{tag} is run by no test");
    }
    // The README's proxy and MCP snippets are copies of tested ones.
    let tested: Vec<&String> = docs.iter().map(|(_, c)| c).collect();
    let section = |title: &str| {
        let start = README.find(title).unwrap_or_else(|| panic!("README section {title}"));
        let rest = &README[start + title.len()..];
        rest[..rest.find("\n## ").unwrap_or(rest.len())].to_string()
    };
    for title in ["## Memory proxy", "## MCP"] {
        let readme = blocks(&section(title));
        assert!(!readme.is_empty(), "{title}");
        for (_, code) in readme {
            assert!(
                tested.contains(&&code),
                "README {title}: not a copy of a tested snippet:\n{code}"
            );
        }
    }
}

/// The SDK snippets through the proxy, with a key made by the `keys` snippet and the
/// server started by the `serve` snippet's variables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_snippets_work_through_the_memory_proxy() {
    let _w = crate::helpers::watchdog(concat!(
        module_path!(),
        "::the_sdk_snippets_work_through_the_memory_proxy"
    ));
    let python = fixture("ENGRAM_SDK_PYTHON", "sdk-venv.sh");
    let node_dir = PathBuf::from(fixture("ENGRAM_SDK_NODE_DIR", "sdk-node.sh"));
    let llm = ScriptedLlm::start().await;
    llm.require_api_key(UPSTREAM_KEY);
    llm.on(Rule::any().reply("unused"));
    llm.on(Rule::user_contains("cook tonight").reply("Peanut-free noodles."));
    llm.on(Rule::user_contains("dessert").reply("Oat cookies."));
    llm.on(Rule::user_contains("fly from").reply("From Bengaluru."));
    llm.on(Rule::user_contains("where to").reply("To Lisbon."));
    let data = tempfile::tempdir().unwrap();
    let store = vec!["--data-dir".to_string(), data.path().display().to_string()];

    // `engram keys create …`, on this store.
    let keys = words(&snippet("keys"));
    assert_eq!(keys[0], "engram");
    let out = engram_cmd(&store).args(&keys[1..]).output_bounded().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let key = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(key.starts_with("engram_"), "{key}");

    // `VAR=… engram serve`, with the scripted upstream for both vendors.
    let serve = words(&snippet("serve"));
    let mut cmd = engram_cmd(&store);
    let mut env = 0;
    for w in &serve {
        match w.split_once('=') {
            Some((var, value)) => {
                let value = if value.starts_with("https://") {
                    llm.base_url()
                } else {
                    UPSTREAM_KEY.to_string()
                };
                cmd.env(var, value);
                env += 1;
            }
            None => break,
        }
    }
    assert_eq!(env, 4, "{serve:?}");
    assert_eq!(serve[env..], ["engram", "serve"]);
    let s = Server::spawn(cmd, &[]);
    let (st, b) = s
        .with_key(&key)
        .post(
            "/v1/memories",
            json!({ "content": "The user is allergic to peanuts.", "user_id": "alice" }),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{b}");
    let here = Here { base: &s.base, key: &key, data_dir: data.path() };

    let out = run(&python, "openai_snippet.py", &here.apply(&snippet("openai-python")), None);
    assert_eq!(out, "Peanut-free noodles.\nOat cookies.\n");
    let out = run(
        "node",
        "openai_snippet.mjs",
        &here.apply(&snippet("openai-js")),
        Some(&node_dir.join("node_modules")),
    );
    assert_eq!(out, "Peanut-free noodles.\nOat cookies.\n");
    let out = run(&python, "anthropic_snippet.py", &here.apply(&snippet("anthropic-python")), None);
    assert_eq!(out, "From Bengaluru.\nTo Lisbon.\n");

    // Every chat call reached the upstream with alice's fact, and with the upstream's key.
    for q in ["cook tonight", "dessert", "fly from", "where to"] {
        let calls = llm.calls_matching(&Match::any().user_contains(q));
        let want = if q.contains("cook") || q.contains("dessert") { 2 } else { 1 };
        assert_eq!(calls.len(), want, "{q}: one call per snippet run");
        assert!(calls.iter().all(|c| c.system.contains("allergic to peanuts")), "{q}: {calls:?}");
        assert!(calls.iter().all(|c| c.api_key() == Some(UPSTREAM_KEY)));
    }
    // The turns are in alice's conversations (one per vendor's default).
    let (st, b) = s.with_key(&key).get("/v1/conversations/proxy:alice:-/messages").await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let said: Vec<&str> =
        b["messages"].as_array().unwrap().iter().filter_map(|m| m["content"].as_str()).collect();
    for line in [
        "What should I cook tonight?",
        "Peanut-free noodles.",
        "Where should I fly from?",
        "To Lisbon.",
    ] {
        assert!(said.contains(&line), "{line} not appended: {said:?}");
    }
}

/// The MCP configurations (stdio: Claude Desktop, Cursor with a key; HTTP: Cursor), the
/// hand-written MCP exchange, and the plain REST calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_and_rest_snippets_work() {
    let _w = crate::helpers::watchdog(concat!(module_path!(), "::the_mcp_and_rest_snippets_work"));
    let data = tempfile::tempdir().unwrap();
    let here_without_key = Here { base: "", key: "", data_dir: data.path() };
    let server = |config: &str, here: &Here| -> Value {
        let v: Value = serde_json::from_str(&here.apply(config)).expect("the config is JSON");
        v["mcpServers"]["engram"].clone()
    };
    let stdio = |entry: &Value| {
        assert_eq!(entry["command"], "engram");
        let args: Vec<String> = entry["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        StdioClient::start(engram_cmd(&args))
    };

    // Claude Desktop: admin of tenant `default` on the data directory.
    let mut c = stdio(&server(&snippet("claude-desktop"), &here_without_key));
    c.connect();
    let r = c.call(
        "remember",
        json!({ "user_id": "alice", "content": "The user is allergic to peanuts." }),
    );
    assert_eq!(r["isError"], false, "{r}");
    let r =
        c.call("recall", json!({ "user_id": "alice", "query": "what is the user allergic to?" }));
    assert!(r["content"][0]["text"].as_str().unwrap().contains("allergic to peanuts"), "{r}");
    c.close();

    // Cursor over stdio, confined to alice by a user key.
    let out = engram_cmd(&["--data-dir".into(), data.path().display().to_string()])
        .args(["keys", "create", "--tenant", "default", "--role", "user", "--user", "alice"])
        .output_bounded()
        .unwrap();
    let key = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let here = Here { base: "", key: &key, data_dir: data.path() };
    let mut c = stdio(&server(&snippet("cursor-stdio"), &here));
    c.connect();
    let r =
        c.call("recall", json!({ "user_id": "alice", "query": "what is the user allergic to?" }));
    assert!(r["content"][0]["text"].as_str().unwrap().contains("allergic to peanuts"), "{r}");
    assert_tool_error(
        &c.call("recall", json!({ "user_id": "bob", "query": "anything" })),
        "forbidden",
    );
    c.close();

    // A running engram: Cursor over HTTP, MCP by hand, REST.
    let s =
        Server::spawn(engram_cmd(&["--data-dir".into(), data.path().display().to_string()]), &[]);
    let here = Here { base: &s.base, key: &key, data_dir: data.path() };
    let entry = server(&snippet("cursor-http"), &here);
    assert_eq!(entry["url"], format!("{}/mcp", s.base));
    assert_eq!(entry["headers"]["Authorization"], format!("Bearer {key}"));
    let mut m = Mcp::new(&s.base, Some(&key));
    m.connect().await;
    let r = m
        .call("recall", json!({ "user_id": "alice", "query": "what is the user allergic to?" }))
        .await;
    assert!(r["content"][0]["text"].as_str().unwrap().contains("allergic to peanuts"), "{r}");

    let out = run("bash", "mcp.sh", &here.apply(&snippet("mcp-http")), None);
    let answer =
        out.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or_else(|| panic!("{out}"));
    let answer: Value = serde_json::from_str(answer).unwrap();
    assert_eq!(answer["id"], 2, "{answer}");
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert!(
        answer["result"]["content"][0]["text"].as_str().unwrap().contains("allergic to peanuts")
    );

    let out = run("bash", "rest.sh", &here.apply(&snippet("rest")), None);
    let answers: Vec<Value> = serde_json::Deserializer::from_str(&out)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(answers.len(), 4, "{out}");
    assert!(answers.iter().all(|a| a.get("error").is_none()), "{out}");
    assert!(answers[1]["text"].as_str().unwrap().contains("allergic to peanuts"), "{}", answers[1]);
    assert!(answers[3].to_string().contains("allergic to peanuts"), "{}", answers[3]);
    let (st, b) = s.with_key(&key).get("/v1/conversations/c1/messages").await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(b["messages"].as_array().unwrap().len(), 2, "{b}");
}
