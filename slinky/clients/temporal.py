"""The workers' data converter (pydantic, as ``temporalio.contrib.pydantic``'s, built once). The way out of a
process without finalizing is ``slinky.clients.temporal_rpc.exit_without_finalizing``.

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

from typing import Any, ClassVar

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
