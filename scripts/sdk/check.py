"""The memory proxy driven by the official OpenAI and Anthropic Python SDKs, as the README
shows them. Run by crates/engram/tests/it/proxy.rs (with the venv of scripts/sdk-venv.sh)
against a real `engram serve` whose upstream is the scripted LLM; prints one JSON object with
what each call returned, which the test checks.

Environment: ENGRAM_URL (http://127.0.0.1:<port>), ENGRAM_KEY (an engram key).
"""

import json
import os
import sys

import anthropic
import openai
from anthropic import Anthropic
from openai import OpenAI

url = os.environ["ENGRAM_URL"]
key = os.environ["ENGRAM_KEY"]
out = {}

# --- OpenAI, as in the README: base_url ends with /v1, the engram key as api_key.
client = OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
question = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What should I drink this morning?"}]
r = client.chat.completions.create(model="gpt-test", user="alice", messages=question)
out["openai"] = r.choices[0].message.content

stream = client.chat.completions.create(model="gpt-test", user="alice", messages=question,
                                        stream=True)
pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
out["openai_stream"] = "".join(pieces)
out["openai_stream_chunks"] = len(pieces)

out["models"] = [m.id for m in client.models.list()]

try:
    client.chat.completions.create(model="gpt-test", user="alice",
                                   messages=[{"role": "user", "content": "limit me"}])
    out["openai_429"] = None
except openai.RateLimitError as e:
    out["openai_429"] = {"status": e.status_code,
                         "retry_after": e.response.headers.get("retry-after")}

# --- Anthropic: the key is sent as x-api-key, the user in metadata.
claude = Anthropic(base_url=url, api_key=key, max_retries=0)
m = claude.messages.create(model="claude-test", max_tokens=200, system="You help with travel.",
                           metadata={"user_id": "alice"},
                           messages=[{"role": "user", "content": "Where do I live now?"}])
out["anthropic"] = "".join(b.text for b in m.content if b.type == "text")

with claude.messages.stream(model="claude-test", max_tokens=200, system="You help with travel.",
                            metadata={"user_id": "alice"},
                            messages=[{"role": "user", "content": "Where do I live now?"}]) as s:
    out["anthropic_stream"] = "".join(s.text_stream)

try:
    claude.messages.create(model="claude-test", max_tokens=10, metadata={"user_id": "alice"},
                           messages=[{"role": "user", "content": "break"}])
    out["anthropic_500"] = None
except anthropic.InternalServerError as e:
    out["anthropic_500"] = {"status": e.status_code, "message": e.body["error"]["message"]}

json.dump(out, sys.stdout)
