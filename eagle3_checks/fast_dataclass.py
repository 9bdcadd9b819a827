"""``dataclass``, built without compiling code at import: the standard library's decorator as the package uses it.

On Python 3.11 ``dataclasses.dataclass`` writes ``__init__``, ``__repr__``, ``__eq__``, ``__hash__`` and a frozen
class's ``__setattr__``/``__delattr__`` as source text and compiles each with ``exec``: about 0.8 ms per class. The
header path defines 66 of them, 52 ms of a 100 ms start-up (benchmarks/test_header_gate.py measures the gate against
a bare safetensors listing). This decorator lets the standard one collect the fields (``fields``, ``replace`` and
``asdict`` work as ever) and gives the class the same methods as closures over its fields: the same semantics (field
order, defaults, ``default_factory``, ``__post_init__``, ``field(repr=False, compare=False)``, value equality within
one class, a frozen class hashable and read-only), made in microseconds. Any other option (``order``,
``unsafe_hash``, ``init=False``, ``kw_only``, ``slots``) is left to the standard decorator.
``tests/test_fast_dataclass.py`` holds each method to what the standard decorator makes.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import MISSING, FrozenInstanceError
from typing import TYPE_CHECKING, Any


class _Factory:
    """The default a ``default_factory`` field shows in a signature, as the standard decorator's."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


class _LazySignature:
    """The class's ``__signature__`` (what ``inspect.signature(cls)`` says: its fields, as the standard ``__init__``
    takes them), built the first time something asks."""

    def __init__(self, fields: tuple[dataclasses.Field[Any], ...]) -> None:
        self.fields = fields
        self.made: inspect.Signature | None = None

    def __get__(self, obj: Any, owner: Any = None) -> inspect.Signature:
        if self.made is None:
            kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
            self.made = inspect.Signature([inspect.Parameter(
                f.name, kind, annotation=f.type, default=f.default if f.default is not MISSING else
                inspect.Parameter.empty if f.default_factory is MISSING else _FACTORY) for f in self.fields],
                return_annotation=None)
        return self.made


def _init(cls: type, fields: tuple[dataclasses.Field[Any], ...]) -> Callable[..., None]:
    """``__init__``: positional then keyword arguments in field order, defaults and factories, ``__post_init__``."""
    names = tuple(f.name for f in fields)
    known = frozenset(names)
    defaults = {f.name: f.default for f in fields if f.default is not MISSING}
    factories = {f.name: f.default_factory for f in fields if f.default_factory is not MISSING}
    required = tuple(n for n in names if n not in defaults and n not in factories)
    post = hasattr(cls, "__post_init__")
    title = cls.__qualname__

    count = len(names)
    default_items = tuple(defaults.items())
    factory_items = tuple(factories.items())

    def refuse(values: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> TypeError:
        if len(args) > count:
            return TypeError(f"{title}.__init__() takes {count + 1} positional arguments but {len(args) + 1} were "
                             "given")
        unknown = [k for k in kwargs if k not in known]
        if unknown:
            return TypeError(f"{title}.__init__() got an unexpected keyword argument {unknown[0]!r}")
        twice = [k for k in kwargs if k in values]
        return TypeError(f"{title}.__init__() got multiple values for argument {twice[0]!r}")

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if args:
            values = dict(zip(names, args, strict=False))
            if len(args) > count or not known.issuperset(kwargs) or not values.keys().isdisjoint(kwargs):
                raise refuse(values, args, kwargs)
            values.update(kwargs)
        elif known.issuperset(kwargs):
            values = kwargs  # a fresh dict each call
        else:
            raise refuse({}, args, kwargs)
        if len(values) < count:
            missing = [n for n in required if n not in values]
            if missing:
                raise TypeError(f"{title}.__init__() missing {len(missing)} required argument(s): "
                                + ", ".join(repr(n) for n in missing))
            for n, default in default_items:
                if n not in values:
                    values[n] = default
            for n, factory in factory_items:
                if n not in values:
                    values[n] = factory()
        self.__dict__.update(values)  # as the standard __init__ writes them, past a frozen class's __setattr__
        if post:
            self.__post_init__()

    __init__.__qualname__ = f"{title}.__init__"
    return __init__


def _compared(cls: type, fields: tuple[dataclasses.Field[Any], ...], frozen: bool) -> None:
    """``__eq__`` over the compared fields within one class, and ``__hash__`` as the standard table sets it: from
    the fields for a frozen class, None (unhashable) for a mutable one, the class's own where it defines one."""
    compared = tuple(f.name for f in fields if f.compare)

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return tuple(getattr(self, n) for n in compared) == tuple(getattr(other, n) for n in compared)
        return NotImplemented

    explicit_hash = cls.__dict__.get("__hash__", MISSING)
    own_eq = "__eq__" in cls.__dict__
    if not own_eq:
        cls.__eq__ = __eq__  # type: ignore[assignment]
    if explicit_hash is not MISSING and (explicit_hash is not None or own_eq):
        return
    if not frozen:
        cls.__hash__ = None  # type: ignore[assignment]
        return
    hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))

    def __hash__(self: Any) -> int:
        return hash(tuple(getattr(self, n) for n in hashed))

    cls.__hash__ = __hash__  # type: ignore[assignment]


def _frozen(cls: type, fields: tuple[dataclasses.Field[Any], ...]) -> None:
    """A frozen class's ``__setattr__`` and ``__delattr__``: its fields cannot be assigned or deleted."""
    known = frozenset(f.name for f in fields)
    owner: Any = cls

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is owner or name in known:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(owner, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is owner or name in known:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(owner, self).__delattr__(name)

    cls.__setattr__ = __setattr__  # type: ignore[assignment]
    cls.__delattr__ = __delattr__  # type: ignore[assignment]


def _methods(cls: type, frozen: bool, eq: bool) -> None:
    fields = dataclasses.fields(cls)
    cls.__init__ = _init(cls, fields)  # type: ignore[misc]
    cls.__signature__ = _LazySignature(fields)  # type: ignore[attr-defined]
    shown = tuple(f.name for f in fields if f.repr)

    def __repr__(self: Any) -> str:
        return f"{type(self).__qualname__}(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in shown) + ")"

    if "__repr__" not in cls.__dict__:
        cls.__repr__ = __repr__  # type: ignore[assignment]
    if eq:
        _compared(cls, fields, frozen)
    if frozen:
        _frozen(cls, fields)


def _dataclass(cls: Any = None, /, *, init: bool = True, repr: bool = True, eq: bool = True, order: bool = False,
              unsafe_hash: bool = False, frozen: bool = False, **more: Any) -> Any:
    """``dataclasses.dataclass`` with the same arguments: the class gets the standard methods, built as closures."""
    def wrap(c: Any) -> Any:
        if order or unsafe_hash or more or not init or not repr:
            return dataclasses.dataclass(c, init=init, repr=repr, eq=eq, order=order, unsafe_hash=unsafe_hash,
                                         frozen=frozen, **more)
        if c.__dict__.get("__doc__") is None:
            c.__doc__ = c.__name__  # the standard one writes the signature, which costs inspect at import
        made = dataclasses.dataclass(c, init=False, repr=False, eq=False)
        _methods(made, frozen, eq)
        return made

    return wrap if cls is None else wrap(cls)


if TYPE_CHECKING:  # to type checkers it is the standard decorator, whose semantics it keeps
    from dataclasses import dataclass as dataclass
else:
    dataclass = _dataclass
