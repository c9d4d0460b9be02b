"""One streamed completion over a plain socket (stdlib only, so the load runs on any box):
the request, the response's head and body lines (chunked, sized or closed at the end), and
each server-sent chunk's tokens timed on arrival."""

from __future__ import annotations

import asyncio
import json
import time


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict]:
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("server closed the connection before answering")
    parts = status_line.decode("latin-1").split(" ", 2)
    status = int(parts[1])
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            return status, headers
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()


async def _body_lines(reader: asyncio.StreamReader, headers: dict):
    """The response body line by line, whether chunked, sized or closed at the end."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        pending = b""
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                break
            pending += await reader.readexactly(size)
            await reader.readexactly(2)  # the chunk's CRLF
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line
        if pending:
            yield pending
        return
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
        for line in body.split(b"\n"):
            yield line
        return
    while line := await reader.readline():
        yield line


async def stream_completion(parts, model, prompt, spec, extras, record) -> None:
    """POST one streamed completion of ``prompt`` (decode_load.LoadSpec ``spec``: its
    lengths, temperature and per-chunk usage) and note in ``record`` (decode_load.
    RequestRecord) each token's arrival, the server's count and the end, or the error."""
    body = json.dumps({
        "model": model,
        "prompt": prompt,
        "max_tokens": record.max_tokens or spec.output_len,
        "temperature": spec.temperature,
        "stream": True,
        # continuous_usage_stats: every chunk says how many tokens the request has so far, so
        # tokens a server sends together in one chunk count as tokens (SGLang does so when its
        # HTTP side falls behind: 1.3-2.3 tokens per chunk at FP8 C = 256 on the H200).
        **({"stream_options": {"include_usage": True, "continuous_usage_stats": True}}
           if spec.usage_per_chunk else {}),
        **extras,
    }).encode()  # fmt: skip
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    writer = None
    try:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        writer.write(head + body)
        await writer.drain()
        status, headers = await _read_head(reader)
        if status != 200:
            text = b"".join([line async for line in _body_lines(reader, headers)])
            record.error = f"HTTP {status}: {text[:300]!r}"
            return
        counts = None  # whether the server's chunks carry the tokens so far
        async for raw in _body_lines(reader, headers):
            line = raw.decode("utf-8", errors="replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            now = time.monotonic()
            usage = chunk.get("usage") or {}
            so_far = usage.get("completion_tokens")
            if so_far is not None:
                record.completion_tokens = int(so_far)
            if not chunk.get("choices"):
                continue  # the closing usage chunk: no tokens of its own
            if counts is None:  # the first chunk says whether the server counts per chunk
                counts = so_far is not None
            if counts and so_far is not None:  # every token new since the last chunk: now
                new = int(so_far) - len(record.token_times)
            else:  # one token per chunk with text (a total on the last chunk is no count)
                new = 1 if any(c.get("text") for c in chunk["choices"]) else 0
            if new > 0:
                if record.first_token is None:
                    record.first_token = now
                record.token_times.extend([now] * new)
    except (OSError, ValueError, asyncio.IncompleteReadError, IndexError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    finally:
        record.end = time.monotonic()
        if writer is not None:
            writer.close()
