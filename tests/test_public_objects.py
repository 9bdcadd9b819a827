"""The objects a user touches (the plugin's fixtures, what the library returns) behave as the Python objects they look
like: the effective config is a read-only mapping, and nothing that is not a container pretends to be one (a
``__getitem__`` without ``__iter__``/``__contains__`` makes ``in`` probe 0, 1, 2, ... forever). Each protocol is
exercised in a subprocess with a timeout, so that a regression fails instead of hanging the suite."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.drafter.config_values import DERIVED, FIELDS


def test_the_config_is_a_read_only_mapping_of_effective_values(drafter):
    path = drafter("speculators").write()
    cfg = open_checkpoint(path).config
    assert "head_dim" in cfg and cfg["head_dim"] == 24 and cfg.get("head_dim") == 24
    assert "no_such_field" not in cfg and cfg.get("no_such_field", 7) == 7
    with pytest.raises(KeyError):
        cfg["no_such_field"]
    assert list(cfg) == [n for n, v in cfg.fields.items() if v.value is not None] and len(cfg) == len(list(cfg)) > 10
    assert dict(cfg) == {name: v.value for name, v in cfg.fields.items() if v.value is not None} == dict(cfg.items())
    assert set(cfg.keys()) <= set(FIELDS) | set(DERIVED)
    unset = next(name for name in FIELDS if name not in cfg)
    assert cfg[unset] is None and cfg.get(unset) is None  # a field the format knows, left unset
    assert cfg.entry("head_dim").explicit and cfg.entry("head_dim").value == 24
    assert not hasattr(cfg, "__setitem__") and "24" in repr(cfg)


PROTOCOLS = """
import json, sys
from eagle3_checks.gate import gate, parse_options
from eagle3_checks.drafter.config_values import read_target_config

result = gate(sys.argv[1], parse_options())
ckpt = result.ckpt
out = {}
cfg = ckpt.config
out["config"] = ["head_dim" in cfg, len(cfg) == len(list(cfg)), len(dict(cfg)) == len(cfg)]
def probe(obj):
    got = []
    for op in (lambda o: 0 in o, lambda o: list(iter(o)), len):
        try:
            op(obj)
            got.append("ok")
        except TypeError:
            got.append("TypeError")
    return got
target = read_target_config({"num_hidden_layers": 4, "hidden_size": 64, "vocab_size": 512}, "t.json")
for name, obj in {"Checkpoint": ckpt, "GateResult": result, "CheckResult": result.results[0],
                  "Finding": (result.findings() or [None])[0], "Value": cfg.entry("head_dim"),
                  "TargetConfig": target}.items():
    if obj is not None:
        out[name] = probe(obj)
print(json.dumps(out))
"""


def test_no_public_object_hangs_the_container_protocols(drafter):
    """``in``, iteration and ``len`` on every public type return at once: the config answers them, the others
    (records, not containers) raise TypeError."""
    path = drafter("flat").write()
    done = subprocess.run([sys.executable, "-c", PROTOCOLS, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    got = json.loads(done.stdout.splitlines()[-1])
    assert got.pop("config") == [True, True, True]
    assert got and all(ops == ["TypeError"] * 3 for ops in got.values()), got


def test_a_users_plugin_test_asking_the_config_returns(pytester, drafter):
    """What a team writes in its own test with the plugin's fixture: ``in``, ``dict()``, ``len`` and ``KeyError``
    answer at once (the subprocess would time out on the old config, whose ``in`` never returned)."""
    path = drafter("flat", trained=True).write()
    pytester.makepyfile(test_mine=textwrap.dedent("""
        import pytest

        def test_config(eagle3_checkpoint):
            config = eagle3_checkpoint.config
            assert "head_dim" in config and "no_such_field" not in config
            assert dict(config)["head_dim"] == config["head_dim"] == 24 and len(config) == len(dict(config))
            with pytest.raises(KeyError):
                config["no_such_field"]
    """))
    result = pytester.runpytest_subprocess(f"--eagle3-ckpt={path}", "-k", "test_config", timeout=180)
    result.assert_outcomes(passed=1)
