"""Pydantic model -> structural OpenAPI v3 schema, as a Kubernetes 1.20 apiserver accepts it for a CRD.

A structural schema gives every node a `type` (or marks it `x-kubernetes-preserve-unknown-fields` /
`x-kubernetes-int-or-string`), has no `$ref`, and defaults only where the value is a scalar. Pydantic's own
`model_json_schema()` produces `$ref`s and `anyOf` unions, which a CRD may not contain, so this walks the
models directly. A pure function: models in, a dict out.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, Union

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from slinky.operator.api.base import Atomic, IntOrStringMarker, ListMap, PreserveUnknown

Schema = dict[str, Any]


def model_schema(model: type[BaseModel], *, defaults: bool = True) -> Schema:
    """The object schema of `model`: properties by wire name, `required`, descriptions, scalar defaults."""
    properties: Schema = {}
    required: list[str] = []
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        wire = field.alias or name
        properties[wire] = field_schema(field, defaults=defaults)
        if field.is_required():
            required.append(wire)
    out: Schema = {"type": "object", "properties": dict(sorted(properties.items()))}
    if model.__doc__:
        out = {"description": _first_paragraph(model.__doc__), **out}
    if required:
        out["required"] = sorted(required)
    return out


def field_schema(field: FieldInfo, *, defaults: bool = True) -> Schema:
    """The schema of one field: its type, then its description, default and extra keywords."""
    schema = type_schema(field.annotation, list(field.metadata), defaults=defaults)
    if field.description:
        schema = {"description": field.description, **schema}
    if defaults and _scalar_default(field.default) and not _is_free(schema):
        schema["default"] = field.default
    extra = field.json_schema_extra
    if isinstance(extra, dict):
        schema.update(extra)
    return schema


def type_schema(annotation: Any, metadata: list[Any], *, defaults: bool = True) -> Schema:
    """The schema of a type annotation plus the `Annotated` markers found around it."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *marks = typing.get_args(annotation)
        return type_schema(inner, [*metadata, *marks], defaults=defaults)
    if any(isinstance(m, IntOrStringMarker) for m in metadata):
        return {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"a CRD field cannot be the union {annotation!r}")
        return type_schema(args[0], metadata, defaults=defaults)
    preserve = any(isinstance(m, PreserveUnknown) for m in metadata)
    if origin is list:
        (item,) = typing.get_args(annotation)
        item_marks = [m for m in metadata if isinstance(m, PreserveUnknown)]
        schema: Schema = {"type": "array", "items": type_schema(item, item_marks, defaults=defaults)}
        for mark in metadata:
            if isinstance(mark, ListMap):
                schema["x-kubernetes-list-type"] = "map"
                schema["x-kubernetes-list-map-keys"] = list(mark.keys)
        return schema
    if origin is dict:
        if preserve:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        _key, value = typing.get_args(annotation)
        return {"type": "object", "additionalProperties": type_schema(value, [], defaults=defaults)}
    if origin is Literal:
        values = list(typing.get_args(annotation))
        return {"type": "string", "enum": values}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        schema = model_schema(annotation, defaults=defaults)
        schema.pop("description", None)
        if any(isinstance(m, Atomic) for m in metadata):
            schema["x-kubernetes-map-type"] = "atomic"
        return schema
    scalar = {str: "string", bool: "boolean", int: "integer", float: "number"}.get(annotation)
    if scalar is None:
        raise TypeError(f"no CRD schema for {annotation!r}")
    return {"type": scalar}


def _scalar_default(default: Any) -> bool:
    """A default the apiserver applies (`default: ""` included, as upstream's references have it)."""
    if default is PydanticUndefined:
        return False
    return isinstance(default, str | int | bool)


def _is_free(schema: Schema) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields"))


def _first_paragraph(doc: str) -> str:
    return " ".join(doc.strip().split("\n\n")[0].split())
