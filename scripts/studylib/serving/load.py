"""Decode-heavy load at a fixed concurrency, timed on the sampler's clock.

C client threads (stdlib only, so it runs on any box) pull from many more prompts than C:
random token ids of a fixed input length, a fixed output length with EOS ignored,
temperature 0, streamed. Per request: start, time of the first token, every later token's
arrival, end, and the server's completion_tokens (checked against the target). The active-
request count over time gives the steady window: the span where at least 0.85 × C requests
are in flight.
"""

from __future__ import annotations

import http.client
import json
import queue
import random
import statistics
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass(frozen=True)
class LoadSpec:
    concurrency: int
    num_prompts: int
    input_len: int
    output_len: int
    vocab_size: int = 32000
    seed: int = 0
    temperature: float = 0.0
    timeout_s: float = 600.0


@dataclass
class RequestRecord:
    index: int
    start: float
    first_token: float | None = None
    token_times: list[float] = field(default_factory=list)
    end: float | None = None
    completion_tokens: int | None = None
    error: str = ""

    @property
    def ttft_s(self) -> float | None:
        return self.first_token - self.start if self.first_token is not None else None

    def itl_s(self) -> list[float]:
        t = self.token_times
        return [b - a for a, b in zip(t, t[1:], strict=False)]


def random_prompts(spec: LoadSpec) -> list[list[int]]:
    """Token-id prompts: fresh random tokens, reproducible from the seed."""
    rng = random.Random(spec.seed)
    # Skip the first ids: special tokens (BOS/EOS/PAD) usually live there.
    low = min(100, spec.vocab_size - 1)
    return [[rng.randrange(low, spec.vocab_size) for _ in range(spec.input_len)]
            for _ in range(spec.num_prompts)]  # fmt: skip


def _stream_completion(base_url, model, prompt, spec, extras, record) -> None:
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=spec.timeout_s)
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": spec.output_len,
        "temperature": spec.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extras,
    }
    try:
        conn.request("POST", "/v1/completions", json.dumps(body),
                     {"Content-Type": "application/json"})  # fmt: skip
        response = conn.getresponse()
        if response.status != 200:
            record.error = f"HTTP {response.status}: {response.read()[:300]!r}"
            return
        for raw in response:
            line = raw.decode("utf-8", errors="replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            now = time.monotonic()
            usage = chunk.get("usage")
            if usage and usage.get("completion_tokens") is not None:
                record.completion_tokens = int(usage["completion_tokens"])
            if any(c.get("text") for c in chunk.get("choices") or []):
                if record.first_token is None:
                    record.first_token = now
                record.token_times.append(now)
    except (OSError, http.client.HTTPException, json.JSONDecodeError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    finally:
        record.end = time.monotonic()
        conn.close()


def run_load(
    base_url: str,
    model: str,
    spec: LoadSpec,
    extras: dict | None = None,
    prompt_format: str = "ids",
):
    """(records, active) where active is [(t, in-flight count)] after every change.

    ``prompt_format`` "text" sends each prompt as the text the study's tokenizer maps back
    to its token ids (for servers that take strings only)."""
    prompts = random_prompts(spec)
    if prompt_format == "text":
        from .model import prompt_text

        prompts = [prompt_text(p) for p in prompts]
    todo: queue.Queue = queue.Queue()
    for i, prompt in enumerate(prompts):
        todo.put((i, prompt))
    records: list[RequestRecord] = []
    active: list[tuple[float, int]] = [(time.monotonic(), 0)]
    lock = threading.Lock()
    in_flight = [0]

    def change(delta: int) -> None:
        with lock:
            in_flight[0] += delta
            active.append((time.monotonic(), in_flight[0]))

    def client() -> None:
        # A client slot counts as in flight from its first request to its last: the next
        # request follows the previous one at once, so the count does not dip in between.
        try:
            index, prompt = todo.get_nowait()
        except queue.Empty:
            return
        change(+1)
        try:
            while True:
                record = RequestRecord(index=index, start=time.monotonic())
                try:
                    _stream_completion(base_url, model, prompt, spec, extras or {}, record)
                finally:
                    with lock:
                        records.append(record)
                try:
                    index, prompt = todo.get_nowait()
                except queue.Empty:
                    return
        finally:
            change(-1)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(spec.concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    records.sort(key=lambda r: r.index)
    return records, active


def steady_window(active: list[tuple[float, int]], concurrency: int, fraction: float = 0.85):
    """The longest span with at least fraction × concurrency requests in flight, or None."""
    threshold = fraction * concurrency
    best, start = None, None
    for t, count in active:
        if count >= threshold and start is None:
            start = t
        elif count < threshold and start is not None:
            if best is None or t - start > best[1] - best[0]:
                best = (start, t)
            start = None
    if start is not None:
        t = active[-1][0]
        if best is None or t - start > best[1] - best[0]:
            best = (start, t)
    return best


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def summarize_load(records: list[RequestRecord], spec: LoadSpec, t0: float, t1: float) -> dict:
    """Throughput and latencies of the steady window [t0, t1]."""
    seconds = t1 - t0
    tokens_in_window = sum(1 for r in records for t in r.token_times if t0 <= t <= t1)
    finished = [r for r in records if not r.error]
    short = [r for r in finished if r.completion_tokens is not None
             and r.completion_tokens != spec.output_len]  # fmt: skip
    itl = [x for r in finished for x in r.itl_s()]
    ttft = [r.ttft_s for r in finished if r.ttft_s is not None]
    tpot = [
        (r.end - r.first_token) / (len(r.token_times) - 1)
        for r in finished
        if r.first_token is not None and len(r.token_times) > 1
    ]
    return {
        "requests": len(records),
        "errors": len(records) - len(finished),
        "first_error": next((r.error for r in records if r.error), ""),
        "wrong_length": len(short),
        "steady_s": seconds,
        "output_tokens_steady": tokens_in_window,
        "output_tok_s": tokens_in_window / seconds if seconds > 0 else None,
        "tpot_ms": 1e3 * statistics.median(tpot) if tpot else None,
        "itl_p50_ms": 1e3 * _pct(itl, 0.5) if itl else None,
        "itl_p99_ms": 1e3 * _pct(itl, 0.99) if itl else None,
        "ttft_p50_ms": 1e3 * _pct(ttft, 0.5) if ttft else None,
    }
