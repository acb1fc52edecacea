#!/usr/bin/env python3
"""A local OpenAI-compatible embeddings server for all-MiniLM-L6-v2, in numpy (no PyTorch).

    .cache/minilm/venv/bin/python scripts/minilm/serve.py [--port 0] [--model-dir DIR]

`scripts/minilm/setup` fetches what this needs (a venv with numpy, tokenizers and safetensors,
and the model's files). The server binds 127.0.0.1 (port 0 = any free port) and, once the model
is loaded, prints one line

    minilm: serving all-MiniLM-L6-v2 at http://127.0.0.1:PORT

and flushes it, so a caller can wait for that line and read the port. Then:

- POST /v1/embeddings with {"model": "all-MiniLM-L6-v2", "input": ["text", ...]} (or one
  string) answers {"object": "list", "data": [{"object": "embedding", "embedding": [384
  floats], "index": i}, ...], "model": ..., "usage": {...}}, as OpenAI's API does;
  "encoding_format": "base64" (little-endian float32) is accepted too.
- A bad request (not JSON, no input, a non-string input, an unknown model, too many inputs, an
  unsupported option) is answered 400 with {"error": {"message": ..., "type":
  "invalid_request_error", "param": ...}} naming the problem; an unknown path 404; a body over
  the limit 413.
- GET /health answers {"status": "ok"}; GET /v1/models lists the model.

The model is BERT as all-MiniLM-L6-v2's config.json describes it (6 layers, hidden size 384,
12 heads, intermediate 1536, exact GELU, LayerNorm eps 1e-12), then what sentence-transformers
does after it: mean pooling over the attention mask and L2 normalisation. Inputs are tokenized
with the model's tokenizer.json and truncated to 256 tokens (its max_seq_length). Texts are
embedded in length-sorted batches padded to the longest in the batch; padding is masked out of
attention and pooling, so a text's vector does not depend on its batch.
"""

import argparse
import base64
import json
import math
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# One BLAS thread per worker: the server runs its own worker threads over length-sorted batches
# (--threads). OpenBLAS's own threads spin while they wait, and on a machine whose cores are
# busy with other work that made a batched matmul 50 times slower here.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

try:
    import numpy as np
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer
except ImportError as e:  # say by name what is missing
    sys.exit(
        f"minilm: MISSING: the Python package {e.name!r} ({e}); run scripts/minilm/setup and start "
        "this with .cache/minilm/venv/bin/python"
    )

MODEL_NAME = "all-MiniLM-L6-v2"
# Names a client may use for this model.
ALIASES = {MODEL_NAME, "sentence-transformers/" + MODEL_NAME, MODEL_NAME.lower()}
MAX_TOKENS = 256
DEFAULT_MODEL_DIR = Path(__file__).resolve().parents[2] / ".cache" / "minilm" / "model"


class MiniLM:
    """all-MiniLM-L6-v2's forward pass in numpy, float32."""

    def __init__(self, model_dir: Path, max_tokens: int = MAX_TOKENS, batch_tokens: int = 4096,
                 threads: int = 1):
        config = json.loads((model_dir / "config.json").read_text())
        self.layers = config["num_hidden_layers"]
        self.hidden = config["hidden_size"]
        self.heads = config["num_attention_heads"]
        self.head_dim = self.hidden // self.heads
        self.eps = config["layer_norm_eps"]
        if config.get("hidden_act") != "gelu":
            raise ValueError(f"unsupported activation {config.get('hidden_act')!r}")
        self.max_tokens = max_tokens
        self.batch_tokens = batch_tokens
        self.pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="minilm")
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=max_tokens)
        w = load_file(str(model_dir / "model.safetensors"))
        f32 = lambda name: np.ascontiguousarray(w[name], dtype=np.float32)
        self.word = f32("embeddings.word_embeddings.weight")
        self.position = f32("embeddings.position_embeddings.weight")
        self.token_type = f32("embeddings.token_type_embeddings.weight")
        self.emb_ln = (f32("embeddings.LayerNorm.weight"), f32("embeddings.LayerNorm.bias"))
        self.blocks = []
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            # Linear weights are stored [out, in]: transpose once so x @ W works. Q, K and V are
            # one [in, 3 * hidden] matrix (one matmul instead of three).
            qkv_w = np.concatenate(
                [f32(p + f"attention.self.{n}.weight") for n in ("query", "key", "value")]
            ).T.copy()
            qkv_b = np.concatenate(
                [f32(p + f"attention.self.{n}.bias") for n in ("query", "key", "value")]
            )
            self.blocks.append(
                {
                    "qkv": (qkv_w, qkv_b),
                    "attn_out": (f32(p + "attention.output.dense.weight").T.copy(),
                                 f32(p + "attention.output.dense.bias")),
                    "attn_ln": (f32(p + "attention.output.LayerNorm.weight"),
                                f32(p + "attention.output.LayerNorm.bias")),
                    "inter": (f32(p + "intermediate.dense.weight").T.copy(),
                              f32(p + "intermediate.dense.bias")),
                    "out": (f32(p + "output.dense.weight").T.copy(), f32(p + "output.dense.bias")),
                    "out_ln": (f32(p + "output.LayerNorm.weight"), f32(p + "output.LayerNorm.bias")),
                }
            )
        self.dimension = self.hidden

    def tokenize(self, texts):
        return [e.ids for e in self.tokenizer.encode_batch(texts)]

    def embed(self, texts):
        """One L2-normalised vector per text (float32, [len(texts), 384]) and the token count."""
        ids = self.tokenize(texts)
        out = np.zeros((len(texts), self.hidden), dtype=np.float32)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        batches = []
        start = 0
        while start < len(order):
            # A batch of similar lengths, at most batch_tokens tokens once padded.
            end = start + 1
            while end < len(order) and (end - start + 1) * len(ids[order[end]]) <= self.batch_tokens:
                end += 1
            batches.append(order[start:end])
            start = end

        def run(batch):
            width = max(len(ids[i]) for i in batch)
            tokens = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.float32)
            for row, i in enumerate(batch):
                tokens[row, : len(ids[i])] = ids[i]
                mask[row, : len(ids[i])] = 1.0
            out[batch] = self.forward(tokens, mask)

        # numpy releases the GIL in matmuls and ufuncs: the workers run in parallel.
        for done in self.pool.map(run, batches):
            pass
        return out, sum(len(i) for i in ids)

    def forward(self, tokens, mask):
        b, n = tokens.shape
        heads, head_dim = self.heads, self.head_dim
        x = self.word[tokens] + self.position[:n][None, :, :] + self.token_type[0][None, None, :]
        x = layer_norm(x.reshape(b * n, self.hidden), *self.emb_ln, self.eps)  # [b*n, hidden]
        # Padded keys get a large negative score (as transformers does with the dtype's minimum).
        bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]
        scale = np.float32(1.0 / math.sqrt(head_dim))
        for blk in self.blocks:
            w, bb = blk["qkv"]
            qkv = (x @ w + bb).reshape(b, n, 3, heads, head_dim)
            # Contiguous [b, heads, n, head_dim] stacks: numpy hands each matrix to BLAS.
            q = np.ascontiguousarray(qkv[:, :, 0].transpose(0, 2, 1, 3))
            k = np.ascontiguousarray(qkv[:, :, 1].transpose(0, 2, 3, 1))
            v = np.ascontiguousarray(qkv[:, :, 2].transpose(0, 2, 1, 3))
            scores = q @ k
            scores *= scale
            scores += bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(b * n, self.hidden)
            w, bb = blk["attn_out"]
            x = layer_norm(context @ w + bb + x, *blk["attn_ln"], self.eps)
            w, bb = blk["inter"]
            h = gelu(x @ w + bb)
            w, bb = blk["out"]
            x = layer_norm(h @ w + bb + x, *blk["out_ln"], self.eps)
        # sentence-transformers: mean over the attention mask, then L2 normalisation.
        x = x.reshape(b, n, self.hidden)
        summed = (x * mask[:, :, None]).sum(axis=1)
        pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return pooled / norms


def layer_norm(x, weight, bias, eps):
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(axis=-1, keepdims=True)
    return centered / np.sqrt(var + np.float32(eps)) * weight + bias


# Abramowitz and Stegun 7.1.26: erf(a) = 1 - poly(t) * exp(-a * a) with t = 1 / (1 + P * a), for
# a >= 0, absolute error below 1.5e-7 (float32 rounding is about as large).
ERF_P = np.float32(0.3275911)
ERF_POLY = [np.float32(c) for c in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)]


def gelu(x):
    """The exact (erf) GELU that BERT's "gelu" is: x * (1 + erf(x / sqrt 2)) / 2.

    With r = poly(t) * exp(-a * a) for a = |x| / sqrt 2 (so erf(a) = 1 - r), that is x * (2 - r) / 2
    for x >= 0 and x * r / 2 for x < 0; computed in place, it is a sixth of the forward pass.
    """
    a = np.abs(x)
    a *= np.float32(1.0 / math.sqrt(2.0))
    t = a * ERF_P
    t += 1.0
    np.reciprocal(t, out=t)
    r = t * ERF_POLY[0]
    for c in ERF_POLY[1:]:
        r += c
        r *= t
    np.square(a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    r *= a
    out = np.where(x >= 0, 2.0 - r, r)
    out *= x
    out *= np.float32(0.5)
    return out


class BadRequest(Exception):
    def __init__(self, message, param=None, status=400):
        super().__init__(message)
        self.message, self.param, self.status = message, param, status


def parse_request(body: bytes, max_inputs: int):
    """The texts and the options of an embeddings request, or BadRequest naming the problem."""
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"the request body is not JSON: {e}")
    if not isinstance(request, dict):
        raise BadRequest("the request body must be a JSON object with 'model' and 'input'")
    model = request.get("model")
    if model is None:
        raise BadRequest("'model' is missing: use \"all-MiniLM-L6-v2\"", "model")
    if not isinstance(model, str) or model not in ALIASES:
        raise BadRequest(
            f"model {model!r} is not served here; this server serves {MODEL_NAME!r}", "model"
        )
    if "input" not in request:
        raise BadRequest("'input' is missing: give a string or an array of strings", "input")
    texts = request["input"]
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list):
        raise BadRequest(
            f"'input' must be a string or an array of strings, not {type(texts).__name__}", "input"
        )
    if not texts:
        raise BadRequest("'input' is an empty array: give at least one string", "input")
    if len(texts) > max_inputs:
        raise BadRequest(
            f"'input' has {len(texts)} items, more than this server's limit of {max_inputs}; "
            "send smaller batches",
            "input",
        )
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise BadRequest(
                f"'input[{i}]' is {type(t).__name__}, not a string (token arrays are not "
                "supported)",
                "input",
            )
    encoding = request.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise BadRequest(
            f"'encoding_format' {encoding!r} is not supported: use \"float\" or \"base64\"",
            "encoding_format",
        )
    dims = request.get("dimensions")
    if dims is not None and dims != 384:
        raise BadRequest(
            f"'dimensions' {dims!r} is not supported: {MODEL_NAME} gives 384", "dimensions"
        )
    return model, texts, encoding


def make_handler(model: MiniLM, lock: threading.Lock, max_inputs: int, max_body: int, verbose: bool):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "minilm-numpy/1"

        def log_message(self, fmt, *args):
            if verbose:
                sys.stderr.write("minilm: %s %s\n" % (self.address_string(), fmt % args))

        def send_json(self, status, payload):
            data = json.dumps(payload, separators=(",", ":")).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                # The client gave up (its timeout, or it was stopped): nobody to answer.
                self.close_connection = True
                if verbose:
                    sys.stderr.write("minilm: the client closed the connection before the answer\n")

        def send_error_json(self, status, message, param=None, kind="invalid_request_error"):
            self.send_json(
                status, {"error": {"message": message, "type": kind, "param": param, "code": None}}
            )

        def do_GET(self):
            if self.path == "/health":
                self.send_json(200, {"status": "ok", "model": MODEL_NAME})
            elif self.path in ("/v1/models", "/models"):
                self.send_json(
                    200,
                    {"object": "list",
                     "data": [{"id": MODEL_NAME, "object": "model", "owned_by": "local"}]},
                )
            else:
                self.send_error_json(404, f"no such path {self.path!r}: POST /v1/embeddings")

        def do_POST(self):
            if self.path not in ("/v1/embeddings", "/embeddings"):
                self.send_error_json(404, f"no such path {self.path!r}: POST /v1/embeddings")
                return
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                self.close_connection = True
                self.send_error_json(411, "a Content-Length header is required")
                return
            length = int(length)
            if length > max_body:
                self.close_connection = True
                self.send_error_json(
                    413, f"the body has {length} bytes, more than this server's limit of {max_body}"
                )
                return
            body = self.rfile.read(length)
            try:
                name, texts, encoding = parse_request(body, max_inputs)
            except BadRequest as e:
                self.send_error_json(e.status, e.message, e.param)
                return
            started = time.monotonic()
            try:
                with lock:
                    vectors, tokens = model.embed(texts)
            except Exception as e:  # a bug or resource problem: say so, keep serving
                self.send_error_json(500, f"embedding failed: {e!r}", kind="server_error")
                return
            if verbose:
                sys.stderr.write(
                    f"minilm: {len(texts)} texts, {tokens} tokens in "
                    f"{time.monotonic() - started:.3f} s\n"
                )
            if encoding == "base64":
                items = [base64.b64encode(v.astype("<f4").tobytes()).decode() for v in vectors]
            else:
                items = [[float(x) for x in v] for v in vectors]
            self.send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {"object": "embedding", "embedding": e, "index": i}
                        for i, e in enumerate(items)
                    ],
                    "model": name,
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                },
            )

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = any free port (default)")
    parser.add_argument("--model-dir", type=Path,
                        default=Path(os.environ.get("MINILM_MODEL_DIR", DEFAULT_MODEL_DIR)))
    parser.add_argument("--threads", type=int, default=min(os.cpu_count() or 1, 4),
                        help="worker threads for one request's batches (default: the cores, at most 4)")
    parser.add_argument("--max-inputs", type=int, default=2048, help="texts per request")
    parser.add_argument("--max-body", type=int, default=64 << 20, help="bytes per request")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args()

    missing = [f for f in ("config.json", "tokenizer.json", "model.safetensors")
               if not (args.model_dir / f).is_file()]
    if missing:
        sys.exit(f"minilm: MISSING: {', '.join(missing)} in {args.model_dir}; run "
                 "scripts/minilm/setup (or pass --model-dir)")
    model = MiniLM(args.model_dir, threads=args.threads)
    server = ThreadingHTTPServer(
        (args.host, args.port),
        make_handler(model, threading.Lock(), args.max_inputs, args.max_body, args.verbose),
    )
    server.daemon_threads = True
    host, port = server.server_address[:2]
    print(f"minilm: serving {MODEL_NAME} at http://{host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
