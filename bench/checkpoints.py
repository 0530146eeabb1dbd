"""Users' checkpoints: attnlab's API end to end and its loading against transformers, side by side in one run.

Two random checkpoints made here with transformers (save_pretrained, safetensors) and a byte-level BPE
tokenizer.json trained with the tokenizers library, both 12 layers x 12 heads, width 768:

    gpt2   GPT-2 small's shape (learned positions, fused c_attn, tied unembedding, vocabulary 50,257)
    llama  LLaMA-shaped (rotary, RMSNorm, SwiGLU with hidden 2,048, 4 K/V groups, vocabulary 32,000)

A real `attnlab serve` (ATTNLAB_MODELS=gpt2=DIR,llama=DIR, CPU, ATTNLAB_CACHE_BYTES=0 so every request runs its
forward, ATTNLAB_REFERENCE=off so start-up does not load each model twice) listens on a free loopback port. Timed:

    api      POST /api/attention with the tokens as attnlab answered them, include weights (every layer's every
             head), the arrays form at float16, decoded by wire.arrays.read_arrays; from sending the request to
             holding the decoded answer
    api streamed  the same in the streamed arrays form (the page's transport: a layer a frame, sent as the forward
             computes the next), read frame by frame with wire.arrays.read_frames and put together with assemble
    forward  transformers' eager forward with output_attentions=True on the same ids, in this process
    load     engine.models.checkpoint.load_checkpoint(reference=False) in this process
    from_pretrained  transformers' AutoModelForCausalLM.from_pretrained(DIR, attn_implementation="eager")

Every call's first answer is checked against transformers' attentions (float16 transport: within 2e-3) before
anything is timed. Calls interleave and their order rotates every round, so load on the machine falls on all
alike; each figure is the median over rounds and `spread` the 25th to 75th percentile of the per-round ratio.

Goals (issue 22): api at most 1.5x forward at 512 tokens; load at most 2x from_pretrained. Prints PASS or MISS.

    .venv/bin/python -m bench.checkpoints [--tokens 512] [--rounds 5] [--threads 2] [--families gpt2,llama]
"""

from __future__ import annotations

import argparse
import os
import platform
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

from bench.serving import attnlab_server
from wire.arrays import MEDIA_TYPE as ARRAYS_MEDIA_TYPE
from wire.arrays import STREAM_MEDIA_TYPE, assemble, read_arrays, read_frames

LAYERS, HEADS, WIDTH = 12, 12, 768
API_GOAL, LOAD_GOAL = 1.5, 2.0
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


def make_checkpoint(family: str, directory: Path, positions: int) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model: Any
    if family == "gpt2":
        cfg = GPT2Config(n_layer=LAYERS, n_head=HEADS, n_embd=WIDTH, n_positions=max(1024, positions))
        model = GPT2LMHeadModel(cfg)
    else:
        cfg = LlamaConfig(
            hidden_size=WIDTH,
            intermediate_size=2048,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            num_key_value_heads=4,
            vocab_size=32000,
            max_position_embeddings=max(2048, positions),
        )
        model = LlamaForCausalLM(cfg)
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer_json(directory)


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

    hf = AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager").eval()
    pieces = TokenPieces(Tokenizer.from_file(str(directory / "tokenizer.json")))
    ids = pieces.encode(TEXT * (s // 40 + 2)).ids[:s]
    tokens = pieces.labels(ids)
    input_ids = torch.tensor([ids])

    def forward() -> Any:
        with torch.inference_mode():
            return hf(input_ids=input_ids, output_attentions=True)

    body = orjson.dumps({"model": family, "tokens": tokens, "include": ["weights"], "precision": "float16"})
    reference = torch.stack([a[0] for a in forward().attentions]).float().numpy()  # (L, H, S, S)
    for streamed in (False, True):
        answer = post(conn, body, streamed)
        if list(answer["tokens"]) != tokens:
            raise SystemExit(f"{family}: the server read other tokens than were sent")
        for layer in (0, LAYERS - 1):
            for head in (0, HEADS - 1):
                got = np.asarray(answer["layers"][layer]["heads"][head]["weights"], dtype=np.float32)
                diff = float(np.abs(got - reference[layer, head]).max())
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
        f"| {family} | transformers eager forward, output_attentions | {med['forward']:.0f} | 1.00 | |",
        f"| {family} | load_checkpoint | {med['load']:.0f} | {load:.2f} x from_pretrained | {l_lo:.2f}-{l_hi:.2f} |",
        f"| {family} | transformers from_pretrained | {med['from_pretrained']:.0f} | 1.00 | |",
        f"  {'PASS' if api <= API_GOAL else 'MISS'} {family} api / forward at {s} tokens: {api:.2f} "
        f"(goal <= {API_GOAL})",
        f"  {'PASS' if streamed <= API_GOAL else 'MISS'} {family} api streamed / forward at {s} tokens: "
        f"{streamed:.2f} (goal <= {API_GOAL})",
        f"  {'PASS' if load <= LOAD_GOAL else 'MISS'} {family} load / from_pretrained: {load:.2f} "
        f"(goal <= {LOAD_GOAL})",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="torch threads, here and in the server")
    parser.add_argument("--families", default="gpt2,llama")
    args = parser.parse_args()
    families = [f for f in args.families.split(",") if f]
    if unknown := sorted(set(families) - {"gpt2", "llama"}):
        parser.error(f"--families: got {unknown}, choose from gpt2, llama")
    torch.set_num_threads(args.threads)
    os.environ["HF_HUB_OFFLINE"] = "1"
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: torch {torch.__version__}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, CPU, {args.threads} torch thread(s) "
        f"here and in the server; {LAYERS} layers x {HEADS} heads, width {WIDTH}, {args.tokens} tokens; median of "
        f"{args.rounds} interleaved rounds; load average {os.getloadavg()[0]:.1f} at the start",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {f: Path(tmp, f) for f in families}
        for f, d in dirs.items():
            make_checkpoint(f, d, args.tokens)
        models = ",".join(f"{f}={d}" for f, d in dirs.items())
        env = {"ATTNLAB_REFERENCE": "off", "ATTNLAB_MAX_TOKENS": str(max(args.tokens, 512))}
        with attnlab_server(args.threads, Path(tmp, "server.log"), models=models, env=env) as port:
            conn = HTTPConnection("127.0.0.1", port, timeout=600)
            print("| model | call | median ms | ratio | spread |\n| --- | --- | ---: | ---: | ---: |", flush=True)
            verdicts: list[str] = []
            for f, d in dirs.items():
                lines = bench_family(f, d, conn, args.tokens, args.rounds)
                print("\n".join(line for line in lines if line.startswith("|")), flush=True)
                verdicts += [line for line in lines if not line.startswith("|")]
            conn.close()
    print(f"\nGoals (issue 22); load average {os.getloadavg()[0]:.1f} at the end:")
    print("\n".join(verdicts))


if __name__ == "__main__":
    main()
