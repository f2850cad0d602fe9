"""``Coalescer``: a lifecycle's items that arrive while its previous send is under way go together next."""

from __future__ import annotations

import asyncio
from typing import Any

from workers.bridge.signals import Coalescer


class _Sends:
    def __init__(self) -> None:
        self.sent: list[tuple[str, list[int]]] = []
        self.gate = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()

    async def send(self, key: str, items: list[int]) -> None:
        self.sent.append((key, items))
        await self.gate.wait()

    def spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def settle(self) -> None:
        for _ in range(300):
            if not self.tasks:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("sends still under way")


async def test_a_lone_item_goes_at_once_and_a_burst_goes_in_the_next_send_in_order() -> None:
    sends = _Sends()
    out: Coalescer[int] = Coalescer(sends.send, sends.spawn, max_batch=3, interval=0)
    out.put("a", 1)
    await asyncio.sleep(0)
    assert sends.sent == [("a", [1])], "alone: sent without waiting for company"
    for item in range(2, 9):  # arrive while the first send is under way
        out.put("a", item)
    out.put("b", 100)
    await asyncio.sleep(0)
    assert sends.sent == [("a", [1]), ("b", [100])], "one send per key at a time; other keys do not wait"
    assert out.waiting() == 7
    sends.gate.set()
    await sends.settle()
    assert [items for key, items in sends.sent if key == "a"] == [[1], [2, 3, 4], [5, 6, 7], [8]]
    assert out.waiting() == 0
    out.put("a", 9)  # quiet again: a new send at once
    await sends.settle()
    assert sends.sent[-1] == ("a", [9])


async def test_a_failing_send_is_logged_and_the_items_queued_behind_it_still_go(caplog: Any) -> None:
    sent: list[list[int]] = []
    sends = _Sends()

    async def send(key: str, items: list[int]) -> None:
        sent.append(items)
        if items == [1]:
            out.put("a", 2)  # arrives while the failing send is under way
            raise RuntimeError("boom")

    out: Coalescer[int] = Coalescer(send, sends.spawn, interval=0)
    out.put("a", 1)
    await sends.settle()
    assert sent == [[1], [2]] and out.waiting() == 0
    assert "sending 1 item(s) to a failed" in caplog.text


async def test_a_burst_waits_for_the_interval_and_a_quiet_key_sends_at_once() -> None:
    """Items that come while a key's last send is less than ``interval`` old go together in the next send; once the
    key is quiet again, an item goes at once."""
    sends = _Sends()
    sends.gate.set()
    loop = asyncio.get_running_loop()
    times: list[float] = []

    async def send(key: str, items: list[int]) -> None:
        times.append(loop.time())
        await sends.send(key, items)

    out: Coalescer[int] = Coalescer(send, sends.spawn, interval=0.2)
    out.put("a", 0)
    await asyncio.sleep(0)
    assert [items for _, items in sends.sent] == [[0]], "the first item at once"
    for item in range(1, 30):  # members created one by one during the interval
        out.put("a", item)
        await asyncio.sleep(0)
    await sends.settle()
    assert [items for _, items in sends.sent] == [[0], list(range(1, 30))]
    assert times[1] - times[0] >= 0.19, "not before the interval"
    quiet = loop.time()
    out.put("a", 30)
    await sends.settle()
    assert sends.sent[-1] == ("a", [30]) and times[-1] - quiet < times[1] - times[0], "quiet again: at once"
