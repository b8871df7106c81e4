"""A fault injector for tests: a TCP proxy in front of a REAL engine that misbehaves the way networks
and gateways do. It never answers in an engine's place, except as a gateway does when its upstream
is down (502, the body nginx sends). Modes:

- "pass": forward both ways, counting each open response's SSE `data:` lines (`streaming`): a test waits on
  streams seen decoding on the wire, not on an engine's gauges.
- "cut_before_usage": forward the response until the SSE line that carries a non-null `usage`, then
  drop both connections (a connection lost at the end of a stream).
- "gateway": forward; when the upstream refuses the connection, answer 502 Bad Gateway.
- "echo_auth": forward; when the upstream answers 401, answer 401 with a body that echoes the
  Authorization header the client sent (gateways that "help" by quoting the credentials they got).

Provenance. The 502 is nginx's own page, byte for byte: `ngx_http_error_502_page` followed by the tail nginx
writes with `server_tokens off` (`ngx_http_error_tail`), both in nginx's src/http/ngx_http_special_response.c
(1.17 and later, whose pages dropped `bgcolor="white"`). The echoing 401 is constructed, not recorded: no gateway
was caught doing it; it stands for any error body that quotes the credential back, which the harness must mask
wherever it prints a body (tests/test_secrets.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading

BAD_GATEWAY_BODY = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    b"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)
BAD_GATEWAY = (
    b"HTTP/1.1 502 Bad Gateway\r\nServer: nginx\r\nContent-Type: text/html\r\nConnection: close\r\n"
    b"Content-Length: " + str(len(BAD_GATEWAY_BODY)).encode() + b"\r\n\r\n" + BAD_GATEWAY_BODY
)


_AUTHORIZATION = re.compile(rb"^authorization:[ \t]*(.*?)\r?$", re.IGNORECASE | re.MULTILINE)


def echoed_401(request_head: bytes, upstream_head: bytes) -> bytes:
    """A 401 quoting the credentials received and the upstream's status line."""
    sent = _AUTHORIZATION.search(request_head)
    status = upstream_head.split(b"\r\n", 1)[0].decode(errors="replace")
    message = f"upstream said {status}; credentials received: Authorization: {sent.group(1).decode() if sent else '(none)'}"
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": "invalid_api_key"}}).encode()
    return (
        b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nConnection: close\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


class FaultProxy:
    def __init__(self, upstream_port: int, mode: str = "pass"):
        self.upstream_port, self.mode = upstream_port, mode
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self.cuts = 0
        self.echoed: list[str] = []  # echo_auth: the bodies sent in the upstream's place
        self.connections = 0
        self.data_lines: dict[int, int] = {}  # open connection -> SSE data lines its response has relayed
        self.open_writers: set[asyncio.StreamWriter] = set()  # both sides of every relayed connection, until closed
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    def streaming(self, lines: int) -> int:
        """Open connections whose response has relayed at least `lines` SSE data lines (read across threads:
        a snapshot of the dict, which only the proxy's loop writes)."""
        return sum(n >= lines for n in list(self.data_lines.values()))

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            if self.mode == "gateway":
                with contextlib.suppress(Exception):
                    await client_r.read(65536)
                    client_w.write(BAD_GATEWAY)
                    await client_w.drain()
            client_w.close()
            return

        request_head = bytearray()
        self.open_writers |= {client_w, up_w}
        self.connections += 1
        conn = self.connections
        self.data_lines[conn] = 0

        async def pump(reader, writer, response: bool):
            seen = b""
            try:
                while data := await reader.read(65536):
                    if not response and len(request_head) < 65536:
                        request_head.extend(data)
                    if response and self.mode == "echo_auth" and not seen and data.startswith(b"HTTP/1.1 401"):
                        answer = echoed_401(bytes(request_head), data)
                        self.echoed.append(answer.decode(errors="replace"))
                        writer.write(answer)
                        await writer.drain()
                        self.cuts += 1
                        break
                    if response and self.mode == "cut_before_usage":
                        seen += data
                        at = seen.find(b'"usage":{')
                        if at >= 0:
                            keep = seen.rfind(b"data: ", 0, at) - (len(seen) - len(data))
                            if keep > 0:
                                writer.write(data[:keep])
                                await writer.drain()
                            self.cuts += 1
                            break
                        seen = seen[-65536:]
                    if response and conn in self.data_lines:
                        self.data_lines[conn] += data.count(b"data: ")
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                self.data_lines.pop(conn, None)
                for w in (client_w, up_w):
                    w.close()
                    self.open_writers.discard(w)

        await asyncio.gather(pump(client_r, up_w, False), pump(up_r, client_w, True))

    def close(self) -> None:
        """Reset every connection still open, then stop: an upstream left connected (its client gone when the loop
        stops) would keep an engine generating for nobody, e.g. vLLM decoding two abandoned 1,800-token streams for
        two minutes after the frozen-engine test."""

        def abort_all_then_stop() -> None:
            for writer in self.open_writers:
                writer.transport.abort()  # its socket closes in a callback queued now, before the stop below
            self.loop.call_soon(self.loop.stop)

        self.loop.call_soon_threadsafe(abort_all_then_stop)
        self.thread.join(5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
