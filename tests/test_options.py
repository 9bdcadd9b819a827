"""One option table (eagle3_checks/options.py: each GateOptions field made by `option()` is its row), and one place
that opens the target. Every surface that takes a gate option is derived from it, and they agree: the CLI's parsers
(each command the rows name), the pytest plugin's options and ini keys (this session has the plugin installed), and
the values gate.options_from validates. Adding an option is a field; these tests say what else it needs (a sample
value below that changes what the gate is told)."""

from __future__ import annotations

import argparse

import pytest

from eagle3_checks.cli import build_parser
from eagle3_checks.errors import UsageError
from eagle3_checks.gate import options_from, parse_options
from eagle3_checks.options import GATE_ROWS, OPTIONS, PLUGIN, GateOptions, gate_fields, help_text, taken_by
from eagle3_checks.plugin_options import dest
from helpers import SGLANG

COMMANDS = sorted({c for o in OPTIONS for c in o.commands} - {PLUGIN})


def _parser(command: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def _action(parser: argparse.ArgumentParser, flag: str) -> argparse.Action:
    return next(a for a in parser._actions if flag in a.option_strings)


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_takes_its_rows_as_the_table_says(command):
    parser = _parser(command)
    for o in taken_by(command):
        action = _action(parser, f"--{o.name}")
        assert action.dest == o.field, o.name
        if o.kind == "flag":
            assert isinstance(action, argparse._StoreTrueAction), o.name
        elif o.kind == "list":
            assert isinstance(action, argparse._AppendAction), o.name
            assert action.default == (None if o.default is None else list(o.default)), o.name
        else:
            assert isinstance(action, argparse._StoreAction) and action.default == o.default, o.name
            assert action.type == (o.number if o.type else str), o.name  # a bad number reads as the gate says it
            assert bool(action.choices) == bool(o.choices), o.name
        if o.old:
            assert _action(parser, f"--{o.old}").dest == o.field


def test_the_gating_commands_take_every_gate_option_and_hand_them_to_the_gate(tmp_path):
    """check and fix: every gate row is an argument, and what the parser holds is what options_from is given."""
    for command in ("check", "fix"):
        names = {a for o in OPTIONS if o.gate for a in [f"--{o.name}"]}
        flags = {f for a in _parser(command)._actions for f in a.option_strings}
        assert names <= flags, names - flags
    args = build_parser().parse_args(["check", "x", "--level", "header", "--strict", "--engine", "sglang",
                                      "--waive", "config.head-dim=ok", "--max-drop", "0.2"])
    from eagle3_checks.cli import _gate_values

    got = _gate_values(args)
    assert set(got) == set(gate_fields())
    options = options_from(got)
    assert (options.level, options.strict, options.waive, options.max_drop) == \
        ("header", True, (("config.head-dim", "ok"),), 0.2)
    assert options.engine[0].startswith("sglang@")


def test_the_plugin_takes_its_rows_as_options_and_ini_keys(pytestconfig):
    """This session runs with the plugin installed: each row it takes is --eagle3-NAME and the ini key eagle3_NAME
    (pytest raises ValueError for a name it does not know), help and all."""
    for o in taken_by(PLUGIN):
        assert pytestconfig.getoption(dest(o.name)) is None, o.name  # given on no command line here
        default = pytestconfig.getini(dest(o.name))
        assert default == ([] if o.kind == "list" else False if o.kind == "flag" else None) or \
            default == "", (o.name, default)
        if o.old:
            pytestconfig.getini(dest(o.old))
    assert {o.name for o in taken_by(PLUGIN) if o.gate} == {o.name for o in OPTIONS if o.gate}, \
        "a gate option the plugin does not take"
    assert "{" not in help_text(next(o for o in OPTIONS if o.name == "engine"))  # every placeholder filled


# A value of each gate option that changes what the gate is told: (the values given, the GateOptions field, what it
# holds then; "raises": a usage error naming the option). An option added to the table needs one here.
SAMPLES = {"reference": ({}, "reference", "none"), "target_config": ({}, "target_config", "t.json"),
           "target": ({}, "target", "dir"), "revision": ({}, "revision", "v1"), "download": ({}, "download", True),
           "level": ({}, "level", "header"), "strict": ({}, "strict", True), "fail_on": ({}, "fail_on", ("engine",)),
           "waive": ({}, "waive", (("vocab.d2t", "ok"),)), "engine": ({}, "engine", (f"sglang@{SGLANG}",)),
           "engine_python": ({}, "", "raises"), "source": ({}, "source", "src"),
           "aux_convention": ({}, "aux_convention", "sglang"), "trainer": ({}, "trainer", "speculators@0.9.0"),
           "max_model_len": ({}, "max_model_len", 4096), "tp": ({}, "tensor_parallel", 2),
           "pp": ({}, "pipeline_parallel", 2), "launch": ({}, "", "raises"), "data": ({}, "data", "DATA"),
           "max_drop": ({}, "max_drop", 0.3), "min_acceptance": ({}, "min_acceptance", 2.0),
           "loss_mask": ({"data": "DATA"}, "loss_mask", "DATA"), "loss_mask_start": ({}, "loss_mask_start", 4)}
GIVEN = {"reference": "none", "target_config": "t.json", "target": "dir", "revision": "v1", "download": "true",
         "level": "header", "strict": "1", "fail_on": ["engine"], "waive": ["vocab.d2t=ok"],
         "engine": [f"sglang@{SGLANG}"], "engine_python": "python3", "source": "src", "aux_convention": "sglang",
         "trainer": "speculators@0.9.0", "max_model_len": "4096", "tp": "2", "pp": "2",
         "launch": ["trtllm=nothing.json"],
         "data": "DATA", "max_drop": "0.3", "min_acceptance": "2", "loss_mask": "DATA", "loss_mask_start": "4"}


def test_each_gate_option_is_declared_once_as_its_field():
    """The rows the gate takes are GateOptions' fields made by option(), in their order, each with the field's
    default; the fields that are no option are the ones the gate derives (or a shell sets), and options_from gives
    GateOptions' own defaults for everything it is not told, but the engines it resolves."""
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(GateOptions)}
    assert [name for name, _ in GATE_ROWS] == [n for n, f in fields.items() if "option" in f.metadata]
    assert [o.field for _, o in GATE_ROWS] == list(gate_fields())
    for name, o in GATE_ROWS:
        assert fields[name].default == o.default and o.gate, name
        assert o in OPTIONS, name
    assert {n for n, f in fields.items() if "option" not in f.metadata} == \
        {"engine_notes", "optional_engines", "live", "omit", "progress"}
    assert [o.name for o in OPTIONS if not o.gate] == ["ckpt", "report"]
    told = options_from({})
    assert dataclasses.replace(told, engine=(), engine_notes=()) == GateOptions()
    assert told.engine == GateOptions().engines() and len(told.engine_notes) == len(told.engine)


def test_every_gate_option_reaches_the_gate(tmp_path):
    """Each option the table hands to the gate is validated into its options (its string form, as the plugin's ini
    gives it, converted), and a name that is no option is refused."""
    assert set(SAMPLES) == set(GIVEN) == set(gate_fields()), set(gate_fields()) ^ set(SAMPLES)
    data = str(tmp_path)
    for name, (beside, field_, expected) in SAMPLES.items():
        values = {k: data if v == "DATA" else v for k, v in {**beside, name: GIVEN[name]}.items()}
        if expected == "raises":
            with pytest.raises(UsageError, match=f"--{name.replace('_', '-')}"):
                options_from(values)
            continue
        got = getattr(options_from(values), field_)
        assert got == (data if expected == "DATA" else expected), (name, got)
    assert options_from({}) == parse_options() == options_from(dict.fromkeys(gate_fields()))
    with pytest.raises(TypeError, match="not a gate option: colour"):
        options_from({"colour": "never"})


# ----- the target, opened in one place ---------------------------------------------------------------------------

def test_the_target_is_opened_in_one_place(tmp_path):
    """drafter.target.open_target: --target-config (a file or its folder), --target (a checkpoint folder: its config
    and its embed_tokens, read lazily), both (the config given counts), neither; a file given as a checkpoint is a
    usage error. gate_checkpoint calls it once."""
    import inspect
    import json

    from eagle3_checks import gate
    from eagle3_checks.drafter.example import EXAMPLE, target_config
    from eagle3_checks.drafter.target import open_target

    ckpt = tmp_path / "target"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(target_config(EXAMPLE)))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**target_config(EXAMPLE), "num_hidden_layers": 12}))
    assert open_target(None, None) == (None, None)
    for given in (ckpt / "config.json", ckpt):
        config, embedding = open_target(given, None)
        assert config is not None and config.num_hidden_layers == EXAMPLE.target_layers and embedding is None
    config, embedding = open_target(None, ckpt)
    assert config.num_hidden_layers == EXAMPLE.target_layers and embedding is not None
    config, embedding = open_target(other, ckpt)
    assert config.num_hidden_layers == 12 and embedding is not None
    with pytest.raises(UsageError, match="--target .*not a directory"):
        open_target(None, ckpt / "config.json")
    assert inspect.getsource(gate.gate_checkpoint).count("open_target(") == 1
    assert "load_target" not in inspect.getsource(gate.gate_checkpoint)


@pytest.mark.parametrize("o", [o for _, o in GATE_ROWS if o.type], ids=lambda o: o.name)
def test_a_bad_number_reads_the_same_from_the_cli_and_the_gate(o, capsys):
    """A number option's bad value is a usage error (exit 2) with one message, whether the CLI's parser or the gate
    (the plugin's ini, the library) converts it: both convert with the row (Option.number)."""
    from eagle3_checks.cli import main

    with pytest.raises(UsageError) as raised:
        options_from({o.field: "abc"})
    assert main(["check", "nowhere", f"--{o.name}", "abc"]) == 2
    assert capsys.readouterr().err == f"eagle3-checks: error: {raised.value}\n"
    if o.minimum is not None:
        with pytest.raises(UsageError):
            options_from({o.field: str(o.minimum - 1)})
        assert options_from({o.field: str(o.minimum)}) is not None


@pytest.mark.parametrize("o", [o for _, o in GATE_ROWS if o.kind == "flag"], ids=lambda o: o.name)
def test_a_flag_given_as_text_means_what_it_says(o):
    """A flag as an ini file or the library may give it: pytest's truth words (``false`` is off, not a non-empty
    string), anything else a usage error naming the option."""
    name = next(n for n, row in GATE_ROWS if row is o)
    for word, meant in (("false", False), ("0", False), ("off", False), ("true", True), ("Yes", True), ("1", True)):
        assert getattr(options_from({o.field: word}), name) is meant, word
    with pytest.raises(UsageError, match=f"--{o.name} 'maybe'"):
        options_from({o.field: "maybe"})
