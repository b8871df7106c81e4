"""A measuring instrument, not an engine: an HTTP server that streams pre-built OpenAI-style SSE
chunks as fast as the socket allows. bench/harness_headroom.py times how many chunks per second a
client can take from it. It generates no text and runs no model; it is never used in place of an
engine in the labs or the tests.

    python bench/sse_source.py --port 18777 [--cpu 1]

Each POST gets `max_tokens` (from its JSON body) token-bearing chunks in vLLM's shape, then the
finish chunk, the usage chunk and [DONE]. It prints "ready <port>" once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os

HEAD = '{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,"model":"bench","choices":[{"index":0,"delta":'
WRITE_BYTES = 1 << 16


@functools.lru_cache(maxsize=8)
def sse_body(n_chunks: int) -> bytes:
    events = ["data: " + HEAD + '{"role":"assistant","content":""},"finish_reason":null}]}\n\n']
    events += [
        "data: " + HEAD + json.dumps({"content": f" tok{i % 1000}"}) + ',"finish_reason":null}]}\n\n' for i in range(n_chunks)
    ]
    events.append("data: " + HEAD + '{},"finish_reason":"length"}]}\n\n')
    usage = {"prompt_tokens": 8, "completion_tokens": n_chunks, "total_tokens": n_chunks + 8}
    events.append(
        'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,"model":"bench",'
        '"choices":[],"usage":' + json.dumps(usage) + "}\n\n"
    )
    events.append("data: [DONE]\n\n")
    return "".join(events).encode()


HEADER = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n"


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        request = json.loads(await reader.readexactly(length)) if length else {}
        body = sse_body(int(request.get("max_tokens", 16)))
        writer.write(HEADER)
        for i in range(0, len(body), WRITE_BYTES):
            writer.write(body[i : i + WRITE_BYTES])
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        pass
    finally:
        writer.close()


async def serve(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=512)
    print(f"ready {port}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cpu", type=int, default=None, help="pin to this CPU (Linux)")
    args = parser.parse_args()
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port))


if __name__ == "__main__":
    main()
