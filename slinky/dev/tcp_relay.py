"""A TCP relay: ``python -m slinky.dev.tcp_relay LISTEN_HOST:PORT TARGET_HOST:PORT``.

The real nodes and their pods reach the API server through it: the API server listens on loopback only, and a
node's network namespace has a loopback of its own. It relays bytes (TLS passes through untouched), one task
pair per connection.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging

logger = logging.getLogger("slinky.dev.tcp_relay")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.close()


def split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{address!r} is not HOST:PORT")
    return host, int(port)


async def relay(listen: tuple[str, int], target: tuple[str, int]) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except OSError as err:
            logger.warning("cannot reach %s:%d: %s", *target, err)
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, *listen, reuse_address=True)
    logger.info("relaying %s:%d to %s:%d", *listen, *target)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("listen", type=split)
    parser.add_argument("target", type=split)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(relay(args.listen, args.target))


if __name__ == "__main__":
    main()
