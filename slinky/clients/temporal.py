"""What every process with a Temporal client shares: the workers' data converter (pydantic, as
``temporalio.contrib.pydantic``'s, built once) and the way out of a process without finalizing.

temporalio 1.35 builds a new data converter for every workflow activation, and another for each command with its
own serialization context (an activity's); each one constructs its payload converter afresh: a pydantic
``SchemaSerializer``, a type-adapter cache, the composite of encodings. On the bridge worker at 10,000 open
lifecycles that construction was 7-8 % of its CPU (py-spy), for converters that are never used: the per-command
converter delegates to the one of the current context.

:class:`SharedPydanticPayloadConverter` is the same converter (same encodings, same JSON on the wire, so clients
with the stock ``pydantic_data_converter`` read and write the same payloads), whose instances share one set of
state: the second construction costs an attribute copy. The state is the encodings (stateless) and the
type-adapter cache (an ``lru_cache``, safe across the workflow threads).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Any, ClassVar, NoReturn

from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import DataConverter


class SharedPydanticPayloadConverter(PydanticPayloadConverter):
    """``PydanticPayloadConverter`` whose instances share the first one's state (see the module)."""

    _state: ClassVar[dict[str, Any] | None] = None

    def __init__(self) -> None:
        state = SharedPydanticPayloadConverter._state
        if state is None:
            super().__init__()
            SharedPydanticPayloadConverter._state = self.__dict__
        else:
            self.__dict__ = state


data_converter = DataConverter(payload_converter_class=SharedPydanticPayloadConverter)
"""What workers and tests pass as ``data_converter``: ``pydantic_data_converter`` with a shared converter."""


def exit_without_finalizing(code: int) -> NoReturn:
    """Exit with ``code`` once the work is done, without the interpreter's finalization.

    temporalio's Rust threads may still complete a call (one cancelled at shutdown, a client's last RPC) and take
    the GIL to hand back its result; if the interpreter is finalizing by then, CPython 3.11 aborts the process
    ("Fatal Python error: PyGILState_Release ... finalizing", exit -6): seen after short CLI commands and, under
    load, when a worker stopped on SIGTERM. Callers have stopped and closed their clients; only the logs and the
    standard streams need flushing.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
