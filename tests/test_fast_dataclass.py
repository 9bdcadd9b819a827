"""eagle3_checks.fast_dataclass.dataclass makes the methods the standard decorator makes: each held, on the same
class body, to ``dataclasses.dataclass`` (construction, defaults and factories, ``__post_init__``, repr, equality,
hashing, frozen assignment, ``replace``, ``asdict``, ``fields``, ``inspect.signature``, pickling), and the header
path defines every package dataclass with it."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import pathlib
import pickle
from dataclasses import field
from typing import ClassVar

import pytest

import eagle3_checks
from eagle3_checks.fast_dataclass import dataclass as fast

PACKAGE = pathlib.Path(eagle3_checks.__file__).parent


def body(frozen: bool):
    """A class body with what the package's dataclasses use: a required field, a plain default, a factory, a field
    left out of repr and one out of comparison, a ClassVar and a __post_init__."""

    class Point:
        """A point."""

        kind: ClassVar[str] = "point"
        x: int
        y: int = 2
        tags: list = field(default_factory=list)
        note: str = field(default="n", repr=False)
        cache: dict = field(default_factory=dict, compare=False)

        def __post_init__(self) -> None:
            if self.x < 0:
                raise ValueError("x < 0")

    return Point


@pytest.mark.parametrize("frozen", [False, True])
def test_each_method_is_the_standard_ones(frozen):
    std = dataclasses.dataclass(frozen=frozen)(body(frozen))
    ours = fast(frozen=frozen)(body(frozen))
    for args, kwargs in (((1,), {}), ((1, 3), {}), ((1,), {"tags": [1]}), ((), {"x": 5, "note": "m"}),
                         ((1, 2, [3], "z", {"a": 1}), {})):
        a, b = std(*args, **kwargs), ours(*args, **kwargs)
        assert repr(a) == repr(b) and dataclasses.asdict(a) == dataclasses.asdict(b)
        assert [f.name for f in dataclasses.fields(a)] == [f.name for f in dataclasses.fields(b)]
        assert dataclasses.replace(b, y=9) == ours(**{**dataclasses.asdict(b), "y": 9})
    assert ours(1) == ours(1, cache={"other": 1}) and ours(1) != ours(2) and ours(1) != std(1)
    assert ours(1).tags is not ours(1).tags  # a factory per instance
    assert str(inspect.signature(std)) == str(inspect.signature(ours))
    for args, kwargs in (((), {}), ((1, 2, [], "", {}, 6), {}), ((1,), {"x": 1}), ((1,), {"z": 1})):
        with pytest.raises(TypeError):
            std(*args, **kwargs)
        with pytest.raises(TypeError):
            ours(*args, **kwargs)
    with pytest.raises(ValueError):
        ours(-1)
    if frozen:
        assert hash(ours(1, tags=(1,))) == hash(ours(1, tags=(1,), cache={"a": 1}))
        with pytest.raises(dataclasses.FrozenInstanceError):
            ours(1).x = 2
        with pytest.raises(dataclasses.FrozenInstanceError):
            del ours(1).y
    else:
        assert ours.__hash__ is None and std.__hash__ is None  # a mutable class with equality is unhashable
        b = ours(1)
        b.x = 4
        assert b.x == 4


@fast(frozen=True)
class Frozen:
    a: int
    b: tuple = ()


@fast
class Mutable:
    a: int
    b: list = field(default_factory=list)


def test_instances_pickle_and_copy_as_the_standard_ones_do():
    """pytest-xdist and the gate's options travel pickled."""
    import copy

    for obj in (Frozen(1, (2,)), Mutable(1, [2])):
        assert pickle.loads(pickle.dumps(obj)) == obj and copy.deepcopy(obj) == obj and copy.copy(obj) == obj


def test_eq_false_keeps_identity_and_a_class_of_its_own_keeps_its_methods():
    @fast(eq=False)
    class Plain:
        a: int = 0

    assert Plain(1) != Plain(1) and hash(Plain(1)) is not None

    @fast(frozen=True)
    class Own:
        a: int = 0

        def __repr__(self) -> str:
            return "own"

    assert repr(Own()) == "own" and Own(1) == Own(1)


def test_every_dataclass_of_the_package_is_made_by_it():
    """The standard decorator compiles each class's methods at import (about 0.8 ms a class: 52 ms of the header
    gate's start-up with 66 of them). Every module of the package imports ``dataclass`` from fast_dataclass (the
    engines' recorder scripts aside: they run in an engine's interpreter)."""
    recorders = PACKAGE / "live" / "recorders"
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if recorders in path.parents or path.name == "fast_dataclass.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "dataclasses" and \
                    any(a.name == "dataclass" for a in node.names):
                wrong.append(str(path.relative_to(PACKAGE)))
    assert not wrong, wrong
