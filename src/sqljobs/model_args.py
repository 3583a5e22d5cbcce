"""Pydantic models and dataclasses as task arguments and results.

A parameter annotated with a pydantic ``BaseModel`` subclass or a dataclass (or either
``| None``) is dumped to JSON at enqueue and validated back into its class in the worker,
before the handler is called. Which parameters these are is found once, when the task is
registered (:func:`find_models`); a task without any has no :class:`ModelArgs` and pays
nothing per job.

Pydantic is optional: it is never imported here. A class is a pydantic model only if
pydantic is already loaded (its module defined the class, so it is) and the class derives
from ``pydantic.BaseModel``.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import PayloadError

_SCALARS: tuple[type, ...] = (str, int, float, bool)
"""Field types a dataclass load checks (JSON gives these as they are; int passes for
float). Other annotations are taken as they come: use a pydantic model for deep checks."""


class Shape:
    """How one class goes to JSON and comes back: a pydantic model or a dataclass."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.pydantic = is_pydantic_model(cls)
        self._fields: tuple[_Field, ...] | None = None  # a dataclass's, found on first load

    @property
    def label(self) -> str:
        kind = "pydantic model" if self.pydantic else "dataclass"
        return f"{self.cls.__qualname__} ({kind})"

    def dump(self, value: Any) -> Any:
        """``value`` (an instance) as JSON-ready data."""
        if self.pydantic:
            return value.model_dump(mode="json")
        return dataclasses.asdict(value)

    def load(self, data: Any) -> Any:
        """``data`` (JSON) as an instance; raises ValueError saying what did not fit
        (the caller names the task and the argument)."""
        if self.pydantic:
            return self._load_pydantic(data)
        return self._load_dataclass(data)

    def _load_pydantic(self, data: Any) -> Any:
        pydantic = sys.modules["pydantic"]
        try:
            return self.cls.model_validate(data)  # type: ignore[attr-defined]
        except pydantic.ValidationError as exc:
            problems = [
                f"{'.'.join(map(str, err['loc'])) or 'the value'}: {err['msg']}"
                for err in exc.errors()[:5]
            ]
            more = exc.error_count() - len(problems)
            text = "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")
            # not chained: the ValidationError's text repeats this, with URLs, in a traceback
            raise ValueError(text) from None

    def _load_dataclass(self, data: Any) -> Any:
        if not isinstance(data, Mapping):
            raise ValueError(f"expected an object of its fields, got {_kind(data)}")
        fields = self._fields
        if fields is None:
            fields = self._fields = _dataclass_fields(self.cls)
        unknown = set(data) - {f.name for f in fields}
        if unknown:
            raise ValueError(f"unknown field(s) {', '.join(map(repr, sorted(unknown)))}")
        values: dict[str, Any] = {}
        for field in fields:
            if not field.init:  # asdict wrote it; the class computes it again
                continue
            if field.name not in data:
                if field.required:
                    raise ValueError(f"field {field.name!r} is missing")
                continue
            value = data[field.name]
            try:
                values[field.name] = field.check(value)
            except ValueError as exc:
                raise ValueError(f"field {field.name!r}: {exc}") from None
        try:
            return self.cls(**values)
        except (TypeError, ValueError) as exc:  # __post_init__ refused it
            raise ValueError(f"{type(exc).__name__}: {exc}") from None


@dataclass(frozen=True)
class _Field:
    name: str
    required: bool
    kind: type | None  # a scalar type to check, or None
    nested: Shape | None  # a nested dataclass or model
    optional: bool
    init: bool = True  # False: not an argument of the class (``field(init=False)``)

    def check(self, value: Any) -> Any:
        if value is None and self.optional:
            return None
        if self.nested is not None:
            if isinstance(value, self.nested.cls):
                return value
            return self.nested.load(value)
        kind = self.kind
        if kind is None or isinstance(value, kind):
            if kind is int and isinstance(value, bool):
                raise ValueError("expected int, got bool")
            return value
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        raise ValueError(f"expected {kind.__name__}, got {_kind(value)}")


def _dataclass_fields(cls: type) -> tuple[_Field, ...]:
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # an annotation that does not resolve: check names only
        hints = {}
    found = []
    for f in dataclasses.fields(cls):
        if not f.init:
            found.append(_Field(f.name, False, None, None, True, init=False))
            continue
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        hint, optional = _unwrap_optional(hints.get(f.name))
        nested = Shape(hint) if _is_model(hint) else None
        kind = hint if hint in _SCALARS else None
        found.append(_Field(f.name, required, kind, nested, optional))
    return tuple(found)


@dataclass(frozen=True)
class ModelParam:
    """A parameter of a task that takes a model: its name, its position among the
    positional parameters the caller passes (None if keyword-only), and its class."""

    name: str
    position: int | None
    shape: Shape
    optional: bool


class ModelArgs:
    """The model parameters of one task: dump them at enqueue, load them in the worker."""

    def __init__(self, task: str, params: Sequence[ModelParam]) -> None:
        self.task = task
        self.params = tuple(params)

    def instances(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], offset: int = 0
    ) -> tuple[list[Any], dict[str, Any]]:
        """The call with each model argument an instance of its class: an instance is
        kept, a mapping (from an untyped caller) is validated into one, so a bad one fails
        at enqueue rather than in a worker; anything else is a PayloadError. ``offset``:
        positional arguments the caller leaves out before ``args`` (a group callback's
        results)."""
        new_args, new_kwargs = list(args), dict(kwargs)
        for param, at, value in self._located(new_args, new_kwargs, offset):
            if (value is None and param.optional) or isinstance(value, param.shape.cls):
                continue
            if not isinstance(value, Mapping):
                raise PayloadError(
                    f"argument {param.name!r} of task {self.task!r} takes "
                    f"{param.shape.label} or a dict of its fields, got {_kind(value)}"
                )
            _put(new_args, new_kwargs, at, self._load(param, value))
        return new_args, new_kwargs

    def dump(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], offset: int = 0
    ) -> tuple[list[Any], dict[str, Any]]:
        """The call (as :meth:`instances` returns it) with its model arguments as
        JSON-ready data, to be stored."""
        new_args, new_kwargs = list(args), dict(kwargs)
        for param, at, value in self._located(new_args, new_kwargs, offset):
            if value is None and param.optional:
                continue
            try:
                dumped = param.shape.dump(value)
            except Exception as exc:  # a pydantic serializer that raises
                raise PayloadError(
                    f"argument {param.name!r} of task {self.task!r} ({param.shape.label}) "
                    f"cannot be dumped to JSON: {exc}"
                ) from exc
            _put(new_args, new_kwargs, at, dumped)
        return new_args, new_kwargs

    def load(self, args: list[Any], kwargs: dict[str, Any]) -> None:
        """Turn a decoded call's model arguments back into instances, in place. Raises a
        PayloadError naming the task, the argument and what did not fit."""
        for param, at, value in self._located(args, kwargs, 0):
            if value is None and param.optional:
                continue
            _put(args, kwargs, at, self._load(param, value))

    def _load(self, param: ModelParam, value: Any) -> Any:
        try:
            return param.shape.load(value)
        except ValueError as exc:
            raise PayloadError(
                f"argument {param.name!r} of task {self.task!r} does not fit "
                f"{param.shape.label}: {exc}"
            ) from None

    def _located(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], offset: int
    ) -> list[tuple[ModelParam, int | str, Any]]:
        """Each model parameter the call gives, with where its value is and the value."""
        found: list[tuple[ModelParam, int | str, Any]] = []
        for param in self.params:
            if param.position is not None and 0 <= param.position - offset < len(args):
                at = param.position - offset
                found.append((param, at, args[at]))
            elif param.name in kwargs:
                found.append((param, param.name, kwargs[param.name]))
        return found


def _put(args: list[Any], kwargs: dict[str, Any], at: int | str, value: Any) -> None:
    if isinstance(at, int):
        args[at] = value
    else:
        kwargs[at] = value


class ResultModel:
    """A task's return type when it is a model: dumped in the worker, loaded by
    ``handle.result()``."""

    def __init__(self, task: str, shape: Shape, optional: bool) -> None:
        self.task = task
        self.shape = shape
        self.optional = optional

    def dump(self, value: Any) -> Any:
        if isinstance(value, self.shape.cls):
            return self.shape.dump(value)
        return value  # the result encoder judges anything else as always

    def load(self, data: Any) -> Any:
        if data is None and self.optional:
            return None
        try:
            return self.shape.load(data)
        except ValueError as exc:
            raise PayloadError(
                f"the stored result of task {self.task!r} does not fit {self.shape.label}: {exc}"
            ) from None


def find_models(
    task: str, fn: Callable[..., Any], signature: inspect.Signature
) -> tuple[ModelArgs | None, ResultModel | None]:
    """The model parameters of ``fn`` among those of ``signature`` (what callers pass),
    and its return type if that is a model; None for either when there is none."""
    hints = _hints(fn)
    params: list[ModelParam] = []
    position = 0
    for p in signature.parameters.values():
        positional = p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            hint, optional = _unwrap_optional(hints.get(p.name, p.annotation))
            if _is_model(hint):
                at = position if positional else None
                params.append(ModelParam(p.name, at, Shape(hint), optional))
        if positional:
            position += 1
    returned, optional = _unwrap_optional(hints.get("return"))
    result = ResultModel(task, Shape(returned), optional) if _is_model(returned) else None
    return (ModelArgs(task, params) if params else None), result


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """``fn``'s resolved annotations; {} when one does not resolve (a name imported only
    for type checking): such a task gets no conversion, as before."""
    try:
        return typing.get_type_hints(fn)
    except Exception:
        return {}


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None`` or ``Optional[X]``; ``(hint, False)`` otherwise."""
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(members) == 1 and len(members) < len(typing.get_args(hint)):
            return members[0], True
    return hint, False


def _is_model(hint: Any) -> bool:
    if not isinstance(hint, type):
        return False
    return dataclasses.is_dataclass(hint) or is_pydantic_model(hint)


def is_pydantic_model(cls: type) -> bool:
    """Whether ``cls`` derives from ``pydantic.BaseModel`` (without importing pydantic)."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and issubclass(cls, pydantic.BaseModel)


def _kind(value: Any) -> str:
    return "None" if value is None else type(value).__name__


__all__ = ["ModelArgs", "ModelParam", "ResultModel", "Shape", "find_models", "is_pydantic_model"]
