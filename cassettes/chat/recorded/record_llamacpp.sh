#!/usr/bin/env bash
# Rebuild llama.cpp's llama-server from the llama-cpp-python sdist, make a tiny random-weights
# Qwen2 GGUF and re-record the cassettes in this folder through `respgate record`.
#
# Manual tool: never run by the tests or CI. Needs PyPI access, cmake, a C++ compiler and
# ~15 minutes on 2 cores. Everything is built in $WORK (default /tmp/llamacpp), never in the repo.
#
#   bash cassettes/chat/recorded/record_llamacpp.sh            # build (if needed) + record all
#   SCENARIOS="text tool-call" bash .../record_llamacpp.sh     # only some scenarios
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
WORK=${WORK:-/tmp/llamacpp}
SDIST_VERSION=${SDIST_VERSION:-0.3.36}          # vendors ggml-org/llama.cpp@0c1e57098
LLAMA_COMMIT=${LLAMA_COMMIT:-0c1e57098}
SERVER_PORT=${SERVER_PORT:-8091}
PROXY_PORT=${PROXY_PORT:-8092}
SCENARIOS=${SCENARIOS:-"models-health text text-stream text-stream-no-usage length length-stream tool-call tool-call-stream parallel-tool-calls parallel-tool-calls-stream tool-result errors"}
# seed for the tool scenarios: with it the random model makes one call in tool-call and two in
# parallel-tool-calls (see README)
export TOOL_SEED=${TOOL_SEED:-2}

mkdir -p "$WORK"
cd "$WORK"
SRC="$WORK/llama_cpp_python-$SDIST_VERSION/vendor/llama.cpp"

# Python helpers (kept inside this script so the repo holds no extra Python modules)
mkdir -p "$WORK/scripts"
cat > "$WORK/scripts/make_tiny_qwen2.py" <<'PYEOF'
"""Write a tiny random-weights Qwen2 GGUF with the real Qwen2 tokenizer.

The tokenizer (vocab, merges, token types) is copied from llama.cpp's vocab-only test file
models/ggml-vocab-qwen2.gguf; the Qwen2.5 added tokens (<tool_call>, ...) are filled into the
[PADnnn] slots they occupy in Qwen2.5, and the chat template is llama.cpp's copy of the
Qwen2.5-7B-Instruct template (tool support, Hermes-style <tool_call> JSON).
Usage: python make_tiny_qwen2.py LLAMA_CPP_DIR OUT.gguf
"""
import sys
from pathlib import Path

import numpy as np

src = Path(sys.argv[1])
out = sys.argv[2]
sys.path.insert(0, str(src / "gguf-py"))
import gguf  # noqa: E402

r = gguf.GGUFReader(src / "models/ggml-vocab-qwen2.gguf")
tokens = list(r.fields["tokenizer.ggml.tokens"].contents())
ttypes = list(r.fields["tokenizer.ggml.token_type"].contents())
merges = list(r.fields["tokenizer.ggml.merges"].contents())
added = {
    151646: ("<|object_ref_start|>", 3), 151647: ("<|object_ref_end|>", 3),
    151648: ("<|box_start|>", 3), 151649: ("<|box_end|>", 3),
    151650: ("<|quad_start|>", 3), 151651: ("<|quad_end|>", 3),
    151652: ("<|vision_start|>", 3), 151653: ("<|vision_end|>", 3),
    151654: ("<|vision_pad|>", 3), 151655: ("<|image_pad|>", 3), 151656: ("<|video_pad|>", 3),
    151657: ("<tool_call>", 4), 151658: ("</tool_call>", 4),
    151659: ("<|fim_prefix|>", 4), 151660: ("<|fim_middle|>", 4), 151661: ("<|fim_suffix|>", 4),
    151662: ("<|fim_pad|>", 4), 151663: ("<|repo_name|>", 4), 151664: ("<|file_sep|>", 4),
}
for i, (t, ty) in added.items():
    assert tokens[i].startswith("[PAD"), tokens[i]
    tokens[i], ttypes[i] = t, ty
n_vocab = len(tokens)
template = (src / "models/templates/Qwen-Qwen2.5-7B-Instruct.jinja").read_text()

n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx = 64, 2, 4, 2, 128, 4096
head_dim = n_embd // n_head
w = gguf.GGUFWriter(out, "qwen2")
w.add_name("tiny-random-qwen2")
w.add_description("random weights, Qwen2 tokenizer, for wire-format recordings only")
w.add_context_length(n_ctx)
w.add_embedding_length(n_embd)
w.add_block_count(n_layer)
w.add_feed_forward_length(n_ff)
w.add_head_count(n_head)
w.add_head_count_kv(n_head_kv)
w.add_rope_freq_base(1000000.0)
w.add_layer_norm_rms_eps(1e-6)
w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
w.add_tokenizer_model("gpt2")
w.add_tokenizer_pre("qwen2")
w.add_token_list(tokens)
w.add_token_types(ttypes)
w.add_token_merges(merges)
w.add_bos_token_id(151643)
w.add_eos_token_id(151645)   # <|im_end|>, as in Qwen2.5-Instruct
w.add_pad_token_id(151643)
w.add_add_bos_token(False)
w.add_chat_template(template)

rng = np.random.default_rng(0)
def rnd(*shape, std=0.02, dtype=np.float32):
    return (rng.standard_normal(shape) * std).astype(dtype)
# numpy shapes are (rows, cols) = reversed ggml ne
# The layers are near-identity (weights ~0.02), so the last hidden state is about the current
# token's embedding. The output head is untied and low-gain (near-flat logits: sampling wanders
# over the whole vocab) plus two hand-made features so that grammar-constrained tool calls look
# like a real model's: (1) whitespace(+JSON punctuation)-only tokens get an output bias of -20, so JSON comes out
# compact instead of padded with the whitespace the grammar allows; (2) a "bigram" row makes
# "\n" (198) follow "<tool_call>" (151657) with logit ~ +80 (+60 net), completing Hermes' "<tool_call>\n"
# trigger.
embd = rnd(n_vocab, n_embd, std=1.0)
out_w = rnd(n_vocab, n_embd, std=0.3)
e_tc = embd[151657]
out_w[198] += 10.0 * e_tc / np.linalg.norm(e_tc)
ws = set("\u0120\u010a\u0109\u010d")  # byte-level BPE spellings of space, \n, \t, \r
punct = set('{}[]:,"')
out_b = np.zeros(n_vocab, dtype=np.float32)
for i, t in enumerate(tokens):
    # whitespace-only tokens and whitespace+JSON-punctuation tokens such as '":\n\n' or ' }'
    if t and any(ch in ws for ch in t) and all(ch in ws or ch in punct for ch in t):
        out_b[i] = -20.0
w.add_tensor("output.weight", out_w.astype(np.float16))
w.add_tensor("output.bias", out_b)
w.add_tensor("token_embd.weight", embd.astype(np.float16))
w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
for i in range(n_layer):
    p = f"blk.{i}."
    w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor(p + "attn_q.weight", rnd(n_embd, n_embd))
    w.add_tensor(p + "attn_k.weight", rnd(n_head_kv * head_dim, n_embd))
    w.add_tensor(p + "attn_v.weight", rnd(n_head_kv * head_dim, n_embd))
    w.add_tensor(p + "attn_q.bias", rnd(n_embd))
    w.add_tensor(p + "attn_k.bias", rnd(n_head_kv * head_dim))
    w.add_tensor(p + "attn_v.bias", rnd(n_head_kv * head_dim))
    w.add_tensor(p + "attn_output.weight", rnd(n_embd, n_embd))
    w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor(p + "ffn_gate.weight", rnd(n_ff, n_embd))
    w.add_tensor(p + "ffn_up.weight", rnd(n_ff, n_embd))
    w.add_tensor(p + "ffn_down.weight", rnd(n_embd, n_ff))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print("wrote", out)
PYEOF
cat > "$WORK/scripts/scenarios.py" <<'PYEOF'
"""Client side of the llama.cpp chat-completions recordings.

Usage: python scenarios.py SCENARIO BASE_URL   (BASE_URL = the recording proxy, no /v1)
Each scenario sends its requests through the respgate recorder, which writes the cassette.
"""
import json
import sys

import httpx
from openai import OpenAI

MODEL = "tiny-random-qwen2"
SEED = 42
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather forecast for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the local time in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
# <|im_end|> (151645) is the model's end-of-turn token. A random-weights model practically
# never samples it, so the "stop" scenarios bias it up to get a natural finish_reason "stop".
STOP_BIAS = {"151645": 5}
# Tool scenarios: +30 on <tool_call> (151657) so the model opens the call at once instead of
# writing the free text the grammar allows before it (the model's output head itself makes
# "\n" follow "<tool_call>", see make_tiny_qwen2.py); +32 on <|im_end|> for the end.
TOOL_BIAS = {"151657": 30, "151645": 32}
TOOL_SEED = int(__import__("os").environ.get("TOOL_SEED", "42"))
USER = [{"role": "user", "content": "Say hello in a few words."}]


def show(obj):
    print(json.dumps(obj, ensure_ascii=False)[:1500])


def main():
    scenario, base = sys.argv[1], sys.argv[2].rstrip("/")
    client = OpenAI(base_url=base + "/v1", api_key="sk-local", max_retries=0)
    raw = httpx.Client(base_url=base, timeout=120, headers={"authorization": "Bearer sk-local"})
    c = client.chat.completions

    def stream(**kw):
        for chunk in c.create(stream=True, **kw):
            show(chunk.model_dump(exclude_unset=True))

    if scenario == "models-health":
        show(raw.get("/health").json())
        show(raw.get("/v1/models").json())
    elif scenario == "text":
        show(c.create(model=MODEL, messages=USER, seed=SEED, max_tokens=64, logit_bias=STOP_BIAS).model_dump())
    elif scenario == "text-stream":
        stream(model=MODEL, messages=USER, seed=SEED, max_tokens=64, logit_bias=STOP_BIAS,
               stream_options={"include_usage": True})
    elif scenario == "text-stream-no-usage":
        stream(model=MODEL, messages=USER, seed=SEED, max_tokens=64, logit_bias=STOP_BIAS)
    elif scenario == "length":
        show(c.create(model=MODEL, messages=USER, seed=SEED, max_tokens=5).model_dump())
    elif scenario == "length-stream":
        stream(model=MODEL, messages=USER, seed=SEED, max_tokens=5,
               stream_options={"include_usage": True})
    elif scenario == "tool-call":
        msgs = [{"role": "user", "content": "What is the weather in Paris for 3 days?"}]
        show(c.create(model=MODEL, messages=msgs, seed=TOOL_SEED, tools=[WEATHER_TOOL],
                      tool_choice="required", parallel_tool_calls=False, logit_bias=TOOL_BIAS,
                      max_tokens=128).model_dump())
    elif scenario == "tool-call-stream":
        msgs = [{"role": "user", "content": "What is the weather in Paris for 3 days?"}]
        stream(model=MODEL, messages=msgs, seed=TOOL_SEED, tools=[WEATHER_TOOL],
               tool_choice="required", parallel_tool_calls=False, logit_bias=TOOL_BIAS,
               max_tokens=128, stream_options={"include_usage": True})
    elif scenario in ("parallel-tool-calls", "parallel-tool-calls-stream"):
        msgs = [{"role": "user", "content": "Weather in Tokyo for 2 days, and the time in Lima?"}]
        kw = dict(model=MODEL, messages=msgs, seed=TOOL_SEED, logit_bias=TOOL_BIAS,
                  tools=[WEATHER_TOOL, TIME_TOOL], tool_choice="required",
                  parallel_tool_calls=True, max_tokens=256)
        if scenario.endswith("stream"):
            stream(stream_options={"include_usage": True}, **kw)
        else:
            show(c.create(**kw).model_dump())
    elif scenario == "tool-result":
        # second leg of a tool loop: the assistant's tool call and the tool's result go back
        msgs = [
            {"role": "user", "content": "What is the weather in Paris for 3 days?"},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_abc123", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris","days":3}'}}]},
            {"role": "tool", "tool_call_id": "call_abc123", "content": '{"forecast":"sunny, 21C"}'},
        ]
        stream(model=MODEL, messages=msgs, seed=TOOL_SEED, tools=[WEATHER_TOOL], max_tokens=32,
               logit_bias=STOP_BIAS, stream_options={"include_usage": True})
    elif scenario == "errors":
        # invalid requests: each is answered before any generation starts
        cases = [
            {"model": MODEL, "messages": "not-a-list"},
            {"model": MODEL, "messages": "not-a-list", "stream": True},
            {"model": MODEL, "messages": USER, "tool_choice": "required",
             "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}]},
            {"model": MODEL, "messages": [{"role": "user", "content": "word " * 3000}], "max_tokens": 4},
            {"model": MODEL, "messages": [{"role": "user", "content": "word " * 3000}], "max_tokens": 4,
             "stream": True},
        ]
        for body in cases:
            r = raw.post("/v1/chat/completions", json=body)
            print(r.status_code, r.headers.get("content-type"), r.text[:600])
        r = raw.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
        print(r.status_code, r.headers.get("content-type"), r.text[:600])
    else:
        raise SystemExit(f"unknown scenario {scenario}")


if __name__ == "__main__":
    main()
PYEOF
cat > "$WORK/scripts/annotate.py" <<'PYEOF'
"""Add the top-level `recording:` block to a freshly recorded cassette (keeps the format)."""
import sys

from app.recording.cassette import dump_cassette, load_cassette

NOTES = {
    "models-health": "GET /health and GET /v1/models.",
    "text": "Non-streaming plain text; logit_bias +5 on <|im_end|> (151645) so the random model "
            "ends its turn by itself (finish_reason stop).",
    "text-stream": "Streaming plain text with stream_options.include_usage; same logit_bias as text.",
    "text-stream-no-usage": "Streaming plain text without stream_options; same logit_bias as text.",
    "length": "Non-streaming, max_tokens 5: cut off with finish_reason length.",
    "length-stream": "Streaming, max_tokens 5, include_usage: cut off with finish_reason length.",
    "tool-call": "Non-streaming forced tool call (tool_choice required, parallel_tool_calls "
                 "false, one function tool get_weather with an enum and an integer parameter); "
                 "logit_bias +30 on <tool_call> (151657) and +32 on <|im_end|> so the random "
                 "model opens the call at once (the grammar allows free text before it).",
    "tool-call-stream": "Streaming version of tool-call, include_usage.",
    "parallel-tool-calls": "Non-streaming, two tools, tool_choice required, parallel_tool_calls "
                           "true, same logit_bias as tool-call; seed 2 was picked because it gives two calls.",
    "parallel-tool-calls-stream": "Streaming version of parallel-tool-calls, include_usage.",
    "tool-result": "Second leg of a tool loop: assistant tool_calls + tool result sent back, "
                   "streamed text answer (logit_bias as in text).",
    "errors": "Invalid requests answered before generation: messages not a list (non-streaming "
              "and stream true), an invalid tool schema, a prompt longer than the context "
              "(-c 2048, non-streaming and stream true), and a body that is not JSON.",
}


def main() -> None:
    path, scenario = sys.argv[1], sys.argv[2]
    version = sys.argv[3] if len(sys.argv) > 3 else ""
    version = version.removeprefix("version: ") or "0.5.0-dev (build 0, commit 0c1e57098)"
    cassette = load_cassette(path)
    cassette.extra["recording"] = {
        "kind": "recorded",
        "server": f"llama.cpp llama-server, ggml-org/llama.cpp@0c1e57098 (vendored in the "
                  f"llama-cpp-python 0.3.36 sdist), CPU build; llama-server --version: {version}",
        "model": "tiny-random-qwen2: a 46 MB Qwen2-architecture GGUF with random weights "
                 "(2 layers, n_embd 64, 4 heads, 2 KV heads, n_ff 128, F16 embeddings and "
                 "untied output head with a hand-set output bias, see README), the real "
                 "Qwen2 tokenizer (151936 tokens) and the Qwen2.5-7B-Instruct chat template; "
                 "its text is gibberish, tool calls are grammar-constrained JSON",
        "server_args": "--jinja --alias tiny-random-qwen2 -c 2048 -np 1 -t 1 --no-webui",
        "scenario": scenario,
        "notes": NOTES[scenario] + " Recorded with `respgate record` in front of llama-server "
                 "by cassettes/chat/recorded/record_llamacpp.sh; requests sent with the openai "
                 "Python SDK (errors and models-health with httpx).",
    }
    dump_cassette(cassette, path)


if __name__ == "__main__":
    main()
PYEOF

# 1. llama.cpp source from the PyPI sdist of llama-cpp-python
if [ ! -d "$SRC" ]; then
  pip download --no-deps --no-binary :all: "llama-cpp-python==$SDIST_VERSION" -d "$WORK"
  tar xzf "llama_cpp_python-$SDIST_VERSION.tar.gz"
fi

# 2. build only llama-server (CPU)
if [ ! -x "$WORK/build/bin/llama-server" ]; then
  nice -n 10 cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_NUMBER=0 -DLLAMA_BUILD_COMMIT="$LLAMA_COMMIT"
  nice -n 10 cmake --build "$WORK/build" --config Release --target llama-server -j2
fi

# 3. a Python env with respgate (installed from a copy of the repo) and the openai SDK
if [ ! -x "$WORK/venv/bin/respgate" ]; then
  rm -rf "$WORK/respgate"
  git -C "$REPO" archive --format=tar --prefix=respgate/ HEAD | tar x -C "$WORK"
  python3 -m venv "$WORK/venv"
  "$WORK/venv/bin/pip" install -q "$WORK/respgate" openai numpy
fi
PY="$WORK/venv/bin/python"

# 4. the tiny random model
if [ ! -f "$WORK/tiny-qwen2.gguf" ]; then
  "$PY" "$WORK/scripts/make_tiny_qwen2.py" "$SRC" "$WORK/tiny-qwen2.gguf"
fi

# 5. server
"$WORK/build/bin/llama-server" -m "$WORK/tiny-qwen2.gguf" --alias tiny-random-qwen2 --jinja \
  --host 127.0.0.1 --port "$SERVER_PORT" -c 2048 -np 1 -t 1 --no-webui \
  > "$WORK/server.log" 2>&1 &
SERVER_PID=$!
PROXY_PID=""
cleanup() {
  [ -n "$PROXY_PID" ] && kill "$PROXY_PID" 2>/dev/null || true
  kill "$SERVER_PID" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$SERVER_PORT/health" >/dev/null && break
  sleep 0.5
done

# 6. one cassette per scenario, each through a fresh recording proxy
VERSION=$("$WORK/build/bin/llama-server" --version 2>&1 | grep '^version' || true)
wait_port() {  # a bare TCP connect, so the recorder records nothing
  for _ in $(seq 60); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.5
  done
  return 1
}
for s in $SCENARIOS; do
  out="$HERE/$s.yaml"
  rm -f "$out"
  "$WORK/venv/bin/respgate" record --upstream-url "http://127.0.0.1:$SERVER_PORT" \
    --out "$out" --port "$PROXY_PORT" > "$WORK/proxy-$s.log" 2>&1 &
  PROXY_PID=$!
  wait_port "$PROXY_PORT"
  "$PY" "$WORK/scripts/scenarios.py" "$s" "http://127.0.0.1:$PROXY_PORT" > "$WORK/client-$s.log"
  kill "$PROXY_PID"; wait "$PROXY_PID" 2>/dev/null || true
  PROXY_PID=""
  "$PY" "$WORK/scripts/annotate.py" "$out" "$s" "$VERSION"
  echo "recorded $out"
done
