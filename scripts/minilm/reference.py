#!/usr/bin/env python3
"""all-MiniLM-L6-v2 in numpy (no PyTorch): the reference that repo_sync's in-process model
(`--embedder minilm`, candle) is compared with, vector by vector and for speed.

    .cache/minilm/venv/bin/python scripts/minilm/reference.py [--model-dir DIR] [--threads N] < texts.json

Reads a JSON array of strings on stdin; embeds a few of them once to warm up, then all of them,
timed; prints one JSON object:
    {"vectors": [[384 floats], ...], "seconds": S, "tokens": T, "threads": N,
     "peak_rss_mib": M}
`seconds` is the timed embedding alone (not the model's loading), `tokens` the tokens read
(after the cut at 256 per text), `peak_rss_mib` the process's peak resident memory (VmHWM).

`scripts/minilm/setup` fetches what this needs (a venv with numpy, tokenizers and safetensors,
and the model's files). The model is BERT as all-MiniLM-L6-v2's config.json describes it (6
layers, hidden size 384, 12 heads, intermediate 1536, exact GELU, LayerNorm eps 1e-12), then what
sentence-transformers does after it: mean pooling over the attention mask and L2 normalisation.
Inputs are tokenized with the model's tokenizer.json and truncated to 256 tokens (its
max_seq_length). Texts are embedded in length-sorted batches padded to the longest in the batch,
spread over worker threads; padding is masked out of attention and pooling, so a text's vector
does not depend on its batch. (It was the model of an HTTP server, serve.py, which the tests
used until repo_sync embedded in its own process: ADR 0021.)
"""
import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# One BLAS thread per worker: the model runs its own worker threads over length-sorted batches
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



def peak_rss_mib():
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR)
    parser.add_argument("--threads", type=int, default=min(os.cpu_count() or 1, 4),
                        help="worker threads over the batches (default: the cores, at most 4)")
    args = parser.parse_args()
    texts = json.load(sys.stdin)
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        sys.exit("reference.py: stdin must be a JSON array of strings")
    model = MiniLM(args.model_dir, threads=args.threads)
    model.embed(texts[:8] or ["warm-up"])
    start = time.perf_counter()
    vectors, tokens = model.embed(texts)
    seconds = time.perf_counter() - start
    json.dump(
        {
            "vectors": vectors.tolist(),
            "seconds": seconds,
            "tokens": tokens,
            "threads": args.threads,
            "peak_rss_mib": peak_rss_mib(),
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
