"""``NodeList``: Slurm's nodes read again only after a change, once more to be sure, and in full every minute."""

from __future__ import annotations

from typing import cast

from slinky.clients.slurm import Node, NodesPage, SlurmApi
from slinky.clients.slurm.nodelist import NodeList


class _Slurm:
    """``list_nodes_since`` as slurmrestd answers it: every node when the table changed after the second asked,
    else a 304 (unchanged)."""

    def __init__(self) -> None:
        self.changed_at = 100
        self.asked: list[int | None] = []

    async def list_nodes_since(self, update_time: int | None) -> NodesPage:
        self.asked.append(update_time)
        if update_time is not None and update_time >= self.changed_at:
            return NodesPage(last_update=update_time, changed=False)
        return NodesPage(nodes=[Node(name=f"n{self.changed_at}")], last_update=self.changed_at)


async def test_a_read_after_a_304_returns_the_same_list_and_says_so() -> None:
    slurm = _Slurm()
    clock = {"now": 0.0}
    nodes = NodeList(cast(SlurmApi, slurm), full_seconds=60, clock=lambda: clock["now"])
    seen = [await nodes.read() for _ in range(3)]
    assert [changed for _, changed in seen] == [True, True, False]  # the second read confirms from a second earlier
    assert slurm.asked == [None, 99, 100]
    assert seen[2][0] is seen[1][0] and [n.name for n in seen[2][0]] == ["n100"]
    slurm.changed_at = 103
    seen = [await nodes.read(), await nodes.read()]
    clock["now"] = 60.0  # a minute after the first read: every node again
    seen += [await nodes.read(), await nodes.read()]
    assert slurm.asked[3:] == [100, 102, None, 103], "the change, its confirmation, then a full read a minute on"
    assert [changed for _, changed in seen] == [True, True, True, False]
    assert [n.name for n in seen[-1][0]] == ["n103"]
    assert (nodes.reads, nodes.unchanged) == (7, 2)


async def test_a_failed_read_keeps_the_list_and_asks_the_same_next_time() -> None:
    slurm = _Slurm()
    nodes = NodeList(cast(SlurmApi, slurm))
    await nodes.read()
    await nodes.read()

    async def fail(update_time: int | None) -> NodesPage:
        raise RuntimeError("slurmrestd down")

    real = slurm.list_nodes_since
    slurm.list_nodes_since = fail  # type: ignore[method-assign]
    try:
        await nodes.read()
    except RuntimeError:
        pass
    slurm.list_nodes_since = real  # type: ignore[method-assign]
    listed, changed = await nodes.read()
    assert slurm.asked == [None, 99, 100] and not changed and [n.name for n in listed] == ["n100"]
