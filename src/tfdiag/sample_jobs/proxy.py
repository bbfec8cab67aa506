"""A delaying TCP proxy for ``slow-ps=I:MS``: ``python -m tfdiag.sample_jobs.proxy``.

It listens on ``--listen`` (127.0.0.1) and forwards every connection to ``--target``,
holding each chunk of bytes for ``--delay-ms`` in *each* direction, so a request/response
round trip through it grows by twice that. The launcher puts one in front of ps I with
``--delay-ms MS/2`` and gives the other tasks the proxy's port as ps I's address, so the
delay sits on the network path — TensorFlow itself is untouched.

gRPC runs HTTP/2 over one long-lived connection, so ordering matters: each direction of
each connection is a FIFO of ``(due_time, chunk)``; a single writer per direction sends
chunks in arrival order once they are due. Throughput is not limited, only latency.

With ``$TFDIAG_PROXY_DELAY_SWITCH`` set to a path, the delay applies only while that file
exists, so a benchmark can switch a link delay on and off mid-run
(``benchmarks/live_latency.py``): ``touch PATH`` delays, ``rm PATH`` stops delaying.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import time

HOST = "127.0.0.1"
CHUNK = 256 * 1024
SWITCH_ENV_VAR = "TFDIAG_PROXY_DELAY_SWITCH"


def _delay_now(delay_s: float) -> float:
    """``delay_s``, or 0 while the switch file (``$TFDIAG_PROXY_DELAY_SWITCH``) is set and absent."""
    switch = os.environ.get(SWITCH_ENV_VAR)
    return delay_s if not switch or os.path.exists(switch) else 0.0


async def _pump(reader, writer, delay_s: float) -> None:
    queue: collections.deque = collections.deque()
    ready = asyncio.Event()
    done = False

    async def read_side():
        nonlocal done
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                queue.append((time.monotonic() + _delay_now(delay_s), data))
                ready.set()
        except (ConnectionError, OSError):
            pass
        finally:
            done = True
            ready.set()

    async def write_side():
        try:
            while True:
                while not queue:
                    if done:
                        return
                    ready.clear()
                    await ready.wait()
                due, data = queue.popleft()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - the peer is gone already
                pass

    await asyncio.gather(read_side(), write_side())


async def serve(listen_port: int, target_port: int, delay_ms: float, host: str = HOST) -> None:
    delay_s = delay_ms / 1000.0

    async def handle(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection(host, target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            _pump(client_reader, server_writer, delay_s),
            _pump(server_reader, client_writer, delay_s),
        )

    server = await asyncio.start_server(handle, host, listen_port, reuse_address=True)
    print(
        f"tfdiag-sample: proxy {host}:{listen_port} -> {host}:{target_port}, {delay_ms:g} ms each way",
        file=sys.stderr, flush=True,
    )
    async with server:
        await server.serve_forever()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfdiag.sample_jobs.proxy", description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=int, required=True, help="port to listen on (127.0.0.1)")
    parser.add_argument("--target", type=int, required=True, help="port to forward to (127.0.0.1)")
    parser.add_argument("--delay-ms", type=float, required=True, help="delay added in each direction")
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(args.listen, args.target, args.delay_ms))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
