"""`eagle3-checks served` reading a server's /metrics: vLLM's and SGLang's expositions written with prometheus_client
from the metric definitions of their releases (vLLM 0.34.0 v1/spec_decode/metrics.py:227-260; SGLang 0.5.23
observability/metrics_collector.py:511-521, as engines/counting.py cites them), llama.cpp's as its server wrote it
(the recording), two scrapes and their difference, and each way a scrape can be wrong, which ends in one line and
exit 2 before any drafter is run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

prometheus_client = pytest.importorskip("prometheus_client")

from eagle3_checks.acceptance.served import Counters, counters, difference  # noqa: E402
from eagle3_checks.cli import main  # noqa: E402
from eagle3_checks.engines.counting import LLAMACPP, SGLANG, VLLM  # noqa: E402
from eagle3_checks.errors import UsageError  # noqa: E402

RECORDING = Path(__file__).parent / "conformance" / "served" / "llamacpp-0.3.36.json"
ALL = [LLAMACPP, VLLM, SGLANG]


def vllm_exposition(drafts: int, draft_tokens: int, accepted: int, per_pos: list[int], engines: int = 1) -> str:
    """What vLLM 0.34.0's SpecDecodingProm registers (metrics.py:227-260: three Counters and the per-position one,
    labelled by model_name and engine, per engine), counted up and exposed by prometheus_client."""
    registry = prometheus_client.CollectorRegistry()
    labels = ["model_name", "engine"]
    made = [prometheus_client.Counter(name, doc, labelnames=labels, registry=registry) for name, doc in (
        ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts."),
        ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens."),
        ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."))]
    per = prometheus_client.Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                                    "Accepted tokens per draft position.", labelnames=labels + ["position"],
                                    registry=registry)
    def share(x: int, e: int) -> int:  # the counts split over engines, as a data-parallel server exposes them
        return x // engines + (x % engines if e == 0 else 0)

    for e in range(engines):
        for counter, value in zip(made, (drafts, draft_tokens, accepted), strict=True):
            counter.labels("org/target", str(e)).inc(share(value, e))
        for pos, value in enumerate(per_pos):
            per.labels("org/target", str(e), str(pos)).inc(share(value, e))
    return prometheus_client.generate_latest(registry).decode()


def sglang_exposition(accept_length: float, accept_rate: float) -> str:
    """SGLang 0.5.23's gauges (observability/metrics_collector.py:511-521), set and exposed by prometheus_client."""
    registry = prometheus_client.CollectorRegistry()
    labels = ["model_name"]
    prometheus_client.Gauge("sglang:spec_accept_length", "Mean acceptance length of speculative decoding (accepted "
                            "drafts + bonus token per forward).", labelnames=labels,
                            registry=registry).labels("org/target").set(accept_length)
    prometheus_client.Gauge("sglang:spec_accept_rate", "Speculative acceptance rate (`accepted drafts / proposed "
                            "drafts` in batch).", labelnames=labels, registry=registry).labels("org/target").set(
        accept_rate)
    return prometheus_client.generate_latest(registry).decode()


@pytest.mark.parametrize("engines", [1, 2])
def test_vllms_exposition_parses_to_its_counts(engines):
    got = counters(vllm_exposition(1182, 3546, 3019, [1060, 1018, 941], engines), "vllm", VLLM, ALL)
    assert (got.verify_steps, got.drafted, got.accepted, got.accepted_per_position) == (1182, 3546, 3019,
                                                                                        [1060, 1018, 941])
    assert got.acceptance_length == pytest.approx(1 + 3019 / 1182)
    assert got.per_position == pytest.approx([1060 / 1182, 1018 / 1182, 941 / 1182])


def test_sglangs_gauges_parse_to_its_figures():
    got = counters(sglang_exposition(3.554, 0.851), "sglang", SGLANG, ALL)
    assert (got.acceptance_length, got.accept_rate, got.per_position, got.verify_steps) == (3.554, 0.851, None, None)


def test_llamacpps_own_scrape_parses_to_the_counts_its_log_gave():
    recorded = json.loads(RECORDING.read_text())["drafters"]["trained"]
    got = counters(recorded["metrics_scrape"], "llama-server", LLAMACPP, ALL)
    steps = [s for r in recorded["responses"] for s in r["steps"]]
    assert got.verify_steps == len(steps) and got.accepted == sum(a for _, a in steps)
    assert got.accepted_per_position == [sum(1 for _, a in steps if a > i) for i in range(3)]


def test_two_scrapes_give_the_counters_between_them():
    before, after = (counters(vllm_exposition(*x), "vllm", VLLM, ALL) for x in (
        (100, 300, 150, [60, 50, 40]), (1282, 3846, 3169, [1120, 1068, 981])))
    got = difference(before, after, "second")
    assert (got.verify_steps, got.drafted, got.accepted, got.accepted_per_position) == (1182, 3546, 3019,
                                                                                        [1060, 1018, 941])
    with pytest.raises(UsageError, match="restarted between the two scrapes"):
        difference(after, before, "second")


@pytest.mark.parametrize("case, said", [
    ("no-counters", "no speculative-decoding counters of llamacpp in it"),
    ("another-engine", "it holds vllm's: is --engine right?"),
    ("restarted", "restarted between the two scrapes"),
    ("unreachable", "cannot be fetched"),
    ("not-prometheus", "not a Prometheus text exposition"),
    ("three-scrapes", "give one scrape, or two"),
])
def test_a_wrong_scrape_is_one_line_and_exit_2(tmp_path, capsys, case, said):
    scrape = json.loads(RECORDING.read_text())["drafters"]["trained"]["metrics_scrape"]
    first = tmp_path / "a.prom"
    first.write_text(scrape)
    metrics = [str(first)]
    if case == "no-counters":
        first.write_text("".join(line + "\n" for line in scrape.splitlines() if "spec_decode" not in line))
    elif case == "another-engine":
        first.write_text(vllm_exposition(10, 30, 20, [8, 7, 5]))
    elif case == "restarted":
        second = tmp_path / "b.prom"
        drafts = next(line for line in scrape.splitlines() if line.startswith("llamacpp:spec_decode_num_drafts_total "))
        second.write_text(scrape.replace(drafts, "llamacpp:spec_decode_num_drafts_total 12"))  # fewer than before
        metrics.append(str(second))
    elif case == "unreachable":
        metrics = ["http://127.0.0.1:9/metrics"]
    elif case == "not-prometheus":
        first.write_text("{\"this\": is not prometheus\n")
    elif case == "three-scrapes":
        metrics = [str(first)] * 3
    code = main(["served", "drafter-not-read", *[x for m in metrics for x in ("--metrics", m)], "--engine",
                 "llamacpp", "--data", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and said in err, err


def test_a_counters_record_says_where_it_came_from():
    c = Counters("vllm", verify_steps=10, accepted=5, accepted_per_position=[3, 2], read=["x"])
    assert c.record()["acceptance_length"] == 1.5 and c.record()["per_position"] == [0.3, 0.2]


def test_the_gates_markdown_draws_the_acceptance_profiles(drafter, tmp_path, capsys):
    """--format markdown with --data (a CI job summary): the acceptance level's readings as a table, as a server
    counts them, and their per-position profiles as a mermaid chart whose series are the table's rows."""
    pytest.importorskip("torch")
    from eagle3_checks.acceptance.synthetic import write_self_labelled
    from eagle3_checks.drafter.checkpoint import open_checkpoint

    path = drafter("speculators").write()
    data = write_self_labelled(open_checkpoint(path), tmp_path / "data", samples=4, length=12)
    main(["check", str(path), "--data", str(data), "--engine", "vllm,llamacpp", "--format", "markdown"])
    out = capsys.readouterr().out
    section = out[out.index("#### Acceptance, as a server counts it"):]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    table = [line.split("|")[3].split() for line in rows]
    chart = [line.strip()[len("line ["):-1].split(", ") for line in section.splitlines()
             if line.strip().startswith("line [")]
    assert "```mermaid" in section and "xychart-beta" in section
    assert chart == table and len(rows) == 3, (rows, chart)  # the trainer's, vLLM's and llama.cpp's readings
