"""Users' checkpoints: attnlab's API end to end, its loading and its memory against transformers, side by side in
one run.

Random checkpoints made with transformers (save_pretrained, safetensors) and a byte-level BPE tokenizer.json trained
with the tokenizers library, built once into a cache folder outside the repository (--cache, default
~/.cache/attnlab/bench-checkpoints) and read from it by every later run:

    qwen3  Qwen3-0.6B's shape: 28 layers, width 1024, 16 heads over 8 K/V groups of head_dim 128, q/k norms,
           SwiGLU 3,072, vocabulary 151,936, tied unembedding; bfloat16 on disk, as Qwen3-0.6B ships
    gemma2 Gemma-2-2B's layer pattern at width 1024: 26 layers alternating a 4,096 window and global, 8 heads over 4
           K/V groups of head_dim 256, attention softcap 50 and final softcap 30, post-attention and post-feedforward
           norms, GeGLU 4,096, vocabulary 32,000; float32 on disk, as Gemma-2-2B ships
    gpt2   GPT-2 small's shape (12 x 12, width 768, learned positions, fused c_attn, tied, vocabulary 50,257)
    llama  LLaMA-shaped (12 x 12, width 768, rotary, RMSNorm, SwiGLU 2,048, 4 K/V groups, vocabulary 32,000)

Per checkpoint, a real `attnlab serve` with that checkpoint alone (ATTNLAB_MODELS=NAME=DIR, CPU,
ATTNLAB_CACHE_BYTES=0 so every request runs its forward, ATTNLAB_REFERENCE=off so start-up does not load a second
model to compare with) listens on a free loopback port. Timed:

    api      POST /api/attention with the tokens as attnlab answered them, include weights (every layer's every
             head), the arrays form at float16, decoded by wire.arrays.read_arrays; from sending the request to
             holding the decoded answer (the server computes in float32)
    api streamed  the same in the streamed arrays form (the page's transport: a layer a frame, sent as the forward
             computes the next), read frame by frame with wire.arrays.read_frames and put together with assemble
    forward  transformers' eager forward with output_attentions=True on the same ids, in float32 as attnlab
             computes, in this process
    load     engine.models.checkpoint.load_checkpoint(reference=False) in this process
    from_pretrained  transformers' AutoModelForCausalLM.from_pretrained(DIR, attn_implementation="eager") in its
             default dtype (the checkpoint's own: bfloat16 for qwen3)

and the server's resident memory (VmRSS of /proc/PID/status) once it has loaded, after the requests (every page of
the weights read by then), and its peak (VmHWM), against the bytes of the checkpoint's weights files.

Every call's first answer is checked against transformers' attentions (float16 transport: within 2e-3) before
anything is timed. Calls interleave and their order rotates every round, so load on the machine falls on all
alike; each figure is the median over rounds and `spread` the 25th to 75th percentile of the per-round ratio.

Goals (issues 22 and 38): api at most 1.3x forward at 512 tokens; load at most 1x from_pretrained; the server's
resident memory at most 1.3x the checkpoint's bytes. Prints PASS or MISS.

    .venv/bin/python -m bench.checkpoints [--tokens 512] [--rounds 3] [--threads 2] [--families qwen3,gemma2]
        [--cache DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from http.client import HTTPConnection, RemoteDisconnected
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import torch

from bench.serving import ROOT, attnlab_server
from wire.arrays import MEDIA_TYPE as ARRAYS_MEDIA_TYPE
from wire.arrays import STREAM_MEDIA_TYPE, assemble, read_arrays, read_frames

FAMILIES = ("qwen3", "gemma2", "gpt2", "llama")
API_GOAL, LOAD_GOAL, MEMORY_GOAL = 1.3, 1.0, 1.3
CACHE = Path.home() / ".cache" / "attnlab" / "bench-checkpoints"
TEXT = (
    "def attention(q, k, v, mask=None):\n    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
    "    if mask is not None:\n        scores = scores.masked_fill(~mask, float('-inf'))\n"
    "    return scores.softmax(-1) @ v\n\nThe animal didn't cross the street because it was too tired. "
)


def tokenizer_json(directory: Path) -> None:
    """A byte-level BPE of 1,000 pieces trained on TEXT, saved as tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([TEXT] * 50, trainer)
    tok.save(str(directory / "tokenizer.json"))


def config_for(family: str, positions: int) -> Any:
    """The transformers config of `family`'s shape (the module docstring), and the dtype it is saved in."""
    from transformers import Gemma2Config, GPT2Config, LlamaConfig, Qwen3Config

    if family == "qwen3":  # Qwen3-0.6B's config.json, its sizes as shipped
        return Qwen3Config(
            hidden_size=1024,
            intermediate_size=3072,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            vocab_size=151936,
            tie_word_embeddings=True,
            max_position_embeddings=40960,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        ), torch.bfloat16
    if family == "gemma2":  # Gemma-2-2B's layer pattern, softcaps and norms at width 1024
        return Gemma2Config(
            hidden_size=1024,
            intermediate_size=4096,
            num_hidden_layers=26,
            num_attention_heads=8,
            num_key_value_heads=4,
            head_dim=256,
            query_pre_attn_scalar=256,
            vocab_size=32000,
            sliding_window=4096,
            layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(26)],
            attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0,
            max_position_embeddings=8192,
            hidden_activation="gelu_pytorch_tanh",
        ), torch.float32
    if family == "gpt2":
        return GPT2Config(n_layer=12, n_head=12, n_embd=768, n_positions=max(1024, positions)), torch.float32
    return LlamaConfig(
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        vocab_size=32000,
        max_position_embeddings=max(2048, positions),
    ), torch.float32


def checkpoint(family: str, cache: Path, positions: int) -> Path:
    """`family`'s random checkpoint in `cache`, built there the first time (the `built` file marks it whole)."""
    from transformers import AutoModelForCausalLM

    directory = cache / (family if family in ("qwen3", "gemma2") else f"{family}-{positions}")  # theirs are fixed
    if (directory / "built").is_file():
        return directory
    print(f"building {family} in {directory} (once)", flush=True)
    config, dtype = config_for(family, positions)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    with torch.no_grad():  # norms off their initial ones and zeros, as a trained model's are
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    del model
    tokenizer_json(directory)
    (directory / "built").write_text(time.strftime("%Y-%m-%d %H:%M UTC\n", time.gmtime()))
    return directory


def weight_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.safetensors"))


def memory(pid: int) -> dict[str, int]:
    """The process's VmRSS and VmHWM, in bytes."""
    status = Path(f"/proc/{pid}/status").read_text()
    return {k: int(re.search(rf"{k}:\s+(\d+)", status).group(1)) * 1024 for k in ("VmRSS", "VmHWM")}  # type: ignore[union-attr]


def median_ratio(times: dict[str, list[float]], name: str, base: str) -> tuple[float, float, float]:
    per_round = [a / b for a, b in zip(times[name], times[base], strict=True)]
    q = statistics.quantiles(per_round, n=4) if len(per_round) > 1 else [per_round[0]] * 3
    return statistics.median(times[name]) / statistics.median(times[base]), q[0], q[2]


def interleaved(calls: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[float]]:
    names = list(calls)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            out = calls[name]()
            times[name].append((time.perf_counter() - start) * 1000)
            del out
    return times


def post(conn: HTTPConnection, body: bytes, streamed: bool = False) -> Any:
    """The answer in the arrays form, or (`streamed`) in the streamed arrays form, each frame read as it comes."""
    headers = {"Content-Type": "application/json", "Accept": STREAM_MEDIA_TYPE if streamed else ARRAYS_MEDIA_TYPE}
    try:
        conn.request("POST", "/api/attention", body=body, headers=headers)
        resp = conn.getresponse()
    except (BrokenPipeError, ConnectionResetError, RemoteDisconnected):
        # the server closed the kept-alive connection while the other calls ran (uvicorn's keep-alive timeout):
        # connect again, as a browser does
        conn.close()
        conn.request("POST", "/api/attention", body=body, headers=headers)
        resp = conn.getresponse()
    if resp.status != 200:
        raise SystemExit(f"status {resp.status}: {resp.read()[:300]!r}")
    if streamed:  # every frame read, to the stream's end, so the connection serves the next request
        return assemble(list(read_frames(iter(lambda: resp.read1(1 << 20), b""))))
    return read_arrays(resp.read())


def bench_family(family: str, directory: Path, conn: HTTPConnection, s: int, rounds: int) -> list[str]:
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    from engine.models.checkpoint import load_checkpoint
    from engine.tokens import TokenPieces

    hf = AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager", dtype=torch.float32).eval()
    pieces = TokenPieces(Tokenizer.from_file(str(directory / "tokenizer.json")))
    ids = pieces.encode(TEXT * (s // 40 + 2)).ids[:s]
    tokens = pieces.labels(ids)
    input_ids = torch.tensor([ids])

    def forward() -> Any:
        with torch.inference_mode():
            return hf(input_ids=input_ids, output_attentions=True)

    body = orjson.dumps({"model": family, "tokens": tokens, "include": ["weights"], "precision": "float16"})
    reference = [a[0].float().numpy() for a in forward().attentions]  # per layer (H, S, S)
    last, heads = len(reference) - 1, reference[0].shape[0]
    for streamed in (False, True):
        answer = post(conn, body, streamed)
        if list(answer["tokens"]) != tokens:
            raise SystemExit(f"{family}: the server read other tokens than were sent")
        for layer in (0, 1, last):
            for head in (0, heads - 1):
                got = np.asarray(answer["layers"][layer]["heads"][head]["weights"], dtype=np.float32)
                diff = float(np.abs(got - reference[layer][head]).max())
                if diff > 2e-3:
                    raise SystemExit(f"{family}: layer {layer} head {head} differs from transformers by {diff:.2g}")
        del answer
    del reference
    calls: dict[str, Callable[[], Any]] = {
        "forward": forward,
        "api": lambda: post(conn, body),
        "api_streamed": lambda: post(conn, body, streamed=True),
        "from_pretrained": lambda: AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager"),
        "load": lambda: load_checkpoint(family, directory, reference=False),
    }
    calls["forward"]()  # warm
    times = interleaved(calls, rounds)
    med = {n: statistics.median(t) for n, t in times.items()}
    api, a_lo, a_hi = median_ratio(times, "api", "forward")
    streamed, s_lo, s_hi = median_ratio(times, "api_streamed", "forward")
    load, l_lo, l_hi = median_ratio(times, "load", "from_pretrained")
    return [
        f"| {family} | api (arrays f16, every weight) | {med['api']:.0f} | {api:.2f} x forward "
        f"| {a_lo:.2f}-{a_hi:.2f} |",
        f"| {family} | api streamed (the same, a layer a frame) | {med['api_streamed']:.0f} | {streamed:.2f} x forward "
        f"| {s_lo:.2f}-{s_hi:.2f} |",
        f"| {family} | transformers eager forward (float32), output_attentions | {med['forward']:.0f} | 1.00 | |",
        f"| {family} | load_checkpoint | {med['load']:.0f} | {load:.2f} x from_pretrained | {l_lo:.2f}-{l_hi:.2f} |",
        f"| {family} | transformers from_pretrained | {med['from_pretrained']:.0f} | 1.00 | |",
        f"  {'PASS' if api <= API_GOAL else 'MISS'} {family} api / forward at {s} tokens: {api:.2f} "
        f"(goal <= {API_GOAL})",
        f"  {'PASS' if streamed <= API_GOAL else 'MISS'} {family} api streamed / forward at {s} tokens: "
        f"{streamed:.2f} (goal <= {API_GOAL})",
        f"  {'PASS' if load <= LOAD_GOAL else 'MISS'} {family} load / from_pretrained: {load:.2f} "
        f"(goal <= {LOAD_GOAL})",
    ]


def memory_lines(family: str, size: int, loaded: dict[str, int], after: dict[str, int]) -> list[str]:
    """The server's memory against the checkpoint's bytes: a table row, and the verdict on its resident memory
    after the requests (every page of the weights read by then), the larger of the two."""
    ratio = max(loaded["VmRSS"], after["VmRSS"]) / size
    mib = 1 << 20
    return [
        f"| {family} | server memory, MiB: resident once loaded / after the requests / peak; weights on disk "
        f"| {loaded['VmRSS'] / mib:.0f} / {after['VmRSS'] / mib:.0f} / {after['VmHWM'] / mib:.0f} "
        f"| {ratio:.2f} x {size / mib:.0f} MiB | peak {after['VmHWM'] / size:.2f} x |",
        f"  {'PASS' if ratio <= MEMORY_GOAL else 'MISS'} {family} server resident memory / checkpoint bytes: "
        f"{ratio:.2f} (goal <= {MEMORY_GOAL})",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="torch threads, here and in the server")
    parser.add_argument("--families", default="qwen3,gemma2")
    parser.add_argument("--cache", type=Path, default=CACHE, help="where the checkpoints are built, once")
    args = parser.parse_args()
    families = [f for f in args.families.split(",") if f]
    if unknown := sorted(set(families) - set(FAMILIES)):
        parser.error(f"--families: got {unknown}, choose from {', '.join(FAMILIES)}")
    if args.cache.resolve().is_relative_to(ROOT):
        parser.error(f"--cache: {args.cache} lies in the repository; give a folder outside it")
    torch.set_num_threads(args.threads)
    os.environ["HF_HUB_OFFLINE"] = "1"
    dirs = {f: checkpoint(f, args.cache, args.tokens) for f in families}
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: torch {torch.__version__}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, CPU, {args.threads} torch thread(s) "
        f"here and in the server; {args.tokens} tokens; median of {args.rounds} interleaved rounds; load average "
        f"{os.getloadavg()[0]:.1f} at the start",
        flush=True,
    )
    print("| model | call | median ms (memory: MiB) | ratio | spread |\n| --- | --- | ---: | ---: | ---: |", flush=True)
    verdicts: list[str] = []
    env = {
        "ATTNLAB_REFERENCE": "off",
        "ATTNLAB_MAX_TOKENS": str(max(args.tokens, 512)),
        "ATTNLAB_MAX_RESULT_BYTES": str(1 << 30),  # every layer's weights at 512 tokens: 117 million for qwen3
        "ATTNLAB_MAX_RESULT_VALUES": str(200_000_000),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for f, d in dirs.items():
            pids: list[int] = []
            with attnlab_server(args.threads, Path(tmp, f"{f}.log"), models=f"{f}={d}", env=env, pids=pids) as port:
                loaded = memory(pids[0])
                conn = HTTPConnection("127.0.0.1", port, timeout=1200)
                lines = bench_family(f, d, conn, args.tokens, args.rounds)
                conn.close()
                lines += memory_lines(f, weight_bytes(d), loaded, memory(pids[0]))
            print("\n".join(line for line in lines if line.startswith("|")), flush=True)
            verdicts += [line for line in lines if not line.startswith("|")]
    print(f"\nGoals (issues 22 and 38); load average {os.getloadavg()[0]:.1f} at the end:")
    print("\n".join(verdicts))


if __name__ == "__main__":
    main()
