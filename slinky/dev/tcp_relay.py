"""A TCP relay: ``python -m slinky.dev.tcp_relay LISTEN_HOST:PORT TARGET_HOST:PORT [LISTEN TARGET ...]``.

The real nodes and their pods reach the API server, Temporal and the stack's slurmrestd through it: those
listen on loopback only, and a node's network namespace has a loopback of its own. It relays bytes (TLS passes
through untouched), one task pair per connection; several pairs, one listener each.
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


async def relay_all(pairs: list[tuple[tuple[str, int], tuple[str, int]]]) -> None:
    await asyncio.gather(*(relay(listen, target) for listen, target in pairs))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("addresses", type=split, nargs="+", metavar="LISTEN TARGET")
    args = parser.parse_args()
    if len(args.addresses) % 2:
        parser.error("give LISTEN TARGET pairs")
    pairs = list(zip(args.addresses[::2], args.addresses[1::2], strict=True))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(relay_all(pairs))


if __name__ == "__main__":
    main()
