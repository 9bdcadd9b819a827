"""Checkpoints on the Hugging Face Hub (hf://ORG/NAME) and in its cache (models--ORG--NAME), against a stand-in Hub
on 127.0.0.1 (tests/hub_server.py) that counts every request and byte: no test touches the network.

huggingface_hub reads HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE when it is imported: the first test runs the command
as a user does, in fresh processes with those variables set; the others run it in this process, with the same
settings put in ``huggingface_hub.constants`` (the ``hf`` fixture), which eagle3-checks reads once per repository.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from eagle3_checks.cli import main
from eagle3_checks.storage.safetensors import read_header
from helpers import VLLM, assert_golden, write_inputs, write_target
from hub_server import HubServer, running

REPO = "org/drafter"


@pytest.fixture
def hub():
    server = HubServer()
    with running(server):
        yield server


@pytest.fixture
def env(tmp_path, hub) -> dict[str, str]:
    """A Hugging Face cache of its own, the stand-in Hub as the endpoint, online (tox sets HF_HUB_OFFLINE=1)."""
    out = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGINGFACE_")) and k != "TRANSFORMERS_OFFLINE"}
    out.update({"HF_HOME": str(tmp_path / "hf-home"), "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0",
                "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
    return out


def endpoint(monkeypatch, url: str) -> None:
    """HF_ENDPOINT for this process: the URL template is derived from it at import, so both (or the client would
    ask huggingface.co)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")


@pytest.fixture
def hf(tmp_path, hub, monkeypatch) -> Path:
    """This process's huggingface_hub pointed at the stand-in Hub and a cache of its own, online; the HF_HOME."""
    from huggingface_hub import constants

    home = tmp_path / "hf-home"
    endpoint(monkeypatch, hub.url)
    for name, value in (("HF_HUB_CACHE", str(home / "hub")), ("HF_ASSETS_CACHE", str(home / "assets")),
                        ("HF_HUB_OFFLINE", False)):
        monkeypatch.setattr(constants, name, value)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return home


def run(capsys, *args: str) -> tuple[int, str, str]:
    """The command in this process: (exit code, stdout, stderr)."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def cli_process(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eagle3_checks", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def resolves(hub: HubServer) -> list:
    """The requests for repository files (huggingface_hub may also ask the endpoint about AI agent harnesses)."""
    return [r for r in hub.requests if "/resolve/" in r.path]


def statuses(stdout: str) -> dict[str, tuple[str, str]]:
    report = json.loads(stdout)["checkpoints"][0]
    return {c["id"] + (f"[{c['engine']}]" if c.get("engine") else ""): (c["status"], c.get("reason", ""))
            for c in report["checks"]}


def allowed_spans(root: Path) -> dict[str, list[tuple[int, int]]]:
    """What the header level may read of each weight file: its header, and the d2t and t2d tensors."""
    spans = {}
    for f in root.glob("*.safetensors"):
        h = read_header(f, f.name)
        spans[f.name] = [(0, h.data_start)] + [(e.offset, e.offset + e.nbytes) for e in h.entries.values()
                                               if e.name in ("d2t", "t2d")]
    return spans


def weight_bytes_read(hub: HubServer, root: Path) -> tuple[int, int]:
    """(bytes of weight files read outside their headers and d2t/t2d, all bytes of weight files read)."""
    spans = allowed_spans(root)
    outside = total = 0
    for r in resolves(hub):
        name = r.path.rsplit("/", 1)[1]
        if name not in spans or r.method != "GET":
            continue
        assert r.range, f"a whole weight file was asked for: {r}"
        first, last = (int(x) for x in r.range.removeprefix("bytes=").split("-"))
        total += r.sent
        if not any(a <= first and last < b for a, b in spans[name]):
            outside += r.sent
    return outside, total


def test_header_level_reads_headers_only_then_the_cache(drafter, hub, env, capsys):
    root = drafter("flat").write(shards=2)
    repo = hub.add(REPO, root)
    proc = cli_process(env, "check", f"hf://{REPO}", "--level", "header", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    local = run(capsys, "check", str(root), "--level", "header", "--format", "json")
    assert statuses(proc.stdout) == statuses(local[1])  # the same checks, the same outcomes as on the folder itself
    outside, total = weight_bytes_read(hub, root)
    size = sum(f.stat().st_size for f in root.glob("*.safetensors"))
    assert outside == 0 and 0 < total < size / 10
    assert {r.range for r in resolves(hub) if r.path.endswith("00001-of-00002.safetensors")} == \
        {"bytes=0-7", f"bytes=8-{read_header(root / 'model-00001-of-00002.safetensors', '').data_start - 1}"}

    hub.clear()  # a second run: one HEAD resolves the branch to its commit; no byte is fetched
    again = cli_process(env, "check", f"hf://{REPO}", "--level", "header", "--format", "json")
    assert again.returncode == 0 and statuses(again.stdout) == statuses(proc.stdout)
    assert [(r.method, r.path) for r in resolves(hub)] == [("HEAD", f"/{REPO}/resolve/main/config.json")]
    assert hub.body_bytes == sum(r.sent for r in hub.requests if "/resolve/" not in r.path)

    hub.clear()  # naming the commit: not a single request
    pinned = cli_process(env, "check", f"hf://{REPO}@{repo.commit}", "--level", "header", "-q")
    assert pinned.returncode == 0 and resolves(hub) == []

    # what it left is the client's own cache layout: refs, snapshots, blobs
    folder = Path(env["HF_HOME"]) / "hub" / "models--org--drafter"
    assert (folder / "refs" / "main").read_text() == repo.commit
    assert (folder / "snapshots" / repo.commit / "config.json").resolve().parent == folder / "blobs"


def test_scan_and_forward_need_the_weights(drafter, hub, hf, capsys, monkeypatch):
    root = drafter("flat").write()
    hub.add(REPO, root)
    code, out, err = run(capsys, "check", f"hf://{REPO}", "--format", "json")
    assert code == 0, err
    got = statuses(out)
    assert got["scan.values"][0] == "skipped"
    assert_golden("test_hub/test_scan_and_forward_need_the_weights.txt", got["scan.values"][1] + "\n")
    assert got[f"forward.equivalence[vllm@{VLLM}]"] == got["scan.values"]
    assert weight_bytes_read(hub, root)[0] == 0

    code, out, err = run(capsys, "check", f"hf://{REPO}", "--level", "scan", "--download", "--format", "json")
    assert code == 0, err
    assert statuses(out)["scan.values"][0] == "passed"
    assert json.loads(out)["checkpoints"][0]["path"] == f"hf://{REPO}"
    # now the cache folder is a complete checkpoint, gated like any folder, without the Hub
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    hub.clear()
    assert run(capsys, "check", str(hf / "hub" / "models--org--drafter"), "--level", "scan", "-q")[0] == 0
    assert resolves(hub) == []


def test_cache_folder_as_the_client_lays_it_out(drafter, tmp_path, capsys):
    root = drafter("flat").write()
    folder = tmp_path / "hub" / "models--org--drafter"
    commits = ["1" * 40, "2" * 40]
    for commit, names in zip(commits, (["config.json", "model.safetensors"], ["config.json"]), strict=True):
        snap = folder / "snapshots" / commit
        snap.mkdir(parents=True)
        for name in names:
            data = (root / name).read_bytes()
            blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
            blob.parent.mkdir(exist_ok=True)
            blob.write_bytes(data)
            (snap / name).symlink_to(os.path.relpath(blob, snap))
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(commits[0])
    (folder / "refs" / "pr-config-only").write_text(commits[1])

    assert main(["check", str(folder), "--level", "scan", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)["checkpoints"][0]
    assert report["path"] == str(folder)
    assert main(["check", str(folder), "--revision", commits[0], "-q"]) == 0
    capsys.readouterr()
    assert main(["check", str(folder), "--revision", "v2"]) == 2
    said = capsys.readouterr().err  # no refs/v2, and the refs there are
    assert main(["check", str(folder), "--revision", "pr-config-only"]) == 2  # what a header-level run leaves
    said += capsys.readouterr().err  # it holds no weight file
    assert_golden("test_hub/test_cache_folder_as_the_client_lays_it_out.txt", said, {"TMP": tmp_path})
    assert main(["inspect", str(folder), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["files"] == ["model.safetensors"]  # the main snapshot's weights


def test_offline_uses_the_cache_and_says_what_is_missing(drafter, hub, hf, capsys, monkeypatch):
    from huggingface_hub import constants

    hub.add(REPO, drafter("flat").write())
    assert run(capsys, "check", f"hf://{REPO}", "--level", "header", "-q")[0] == 0
    hub.clear()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert run(capsys, "check", f"hf://{REPO}", "--level", "header", "-q")[0] == 0
    assert resolves(hub) == []
    code, _, err = run(capsys, "check", "hf://org/never-fetched", "--level", "header")
    assert code == 2, err
    assert_golden("test_hub/test_offline_uses_the_cache_and_says_what_is_missing.txt", err, {"HF_HOME": hf})
    assert resolves(hub) == []


def test_offline_a_cached_single_file_repo_is_a_single_file_repo(drafter, hub, hf, capsys, monkeypatch):
    """What `hf download ORG/NAME` leaves of a single-file repository: config.json and model.safetensors in the
    cache, and no word of model.safetensors.index.json (the client notes a missing file only when it asked for it).
    Offline, that is a single-file repository: the header level reads the cached file's header and d2t/t2d from
    disk, --download the scan level, and neither asks the Hub anything (both refused it: the index was not cached)."""
    from huggingface_hub import constants, hf_hub_download

    hub.add(REPO, drafter("flat").write())
    for name in ("config.json", "model.safetensors"):  # the client's own downloads, as `hf download` makes them
        hf_hub_download(REPO, name, cache_dir=constants.HF_HUB_CACHE)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    hub.clear()
    code, out, err = run(capsys, "check", f"hf://{REPO}", "--level", "header", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["checkpoints"][0]["path"] == f"hf://{REPO}"
    got = statuses(out)
    assert got["vocab.d2t"][0] == got["vocab.t2d"][0] == "passed"  # their bytes were read from the cached file
    code, out, err = run(capsys, "check", f"hf://{REPO}", "--level", "scan", "--format", "json")
    assert code == 0, err
    assert statuses(out)["scan.values"][0] == "skipped"
    assert_golden("test_hub/test_offline_a_cached_single_file_repo_is_a_single_file_repo.txt",
                  statuses(out)["scan.values"][1] + "\n")
    code, out, err = run(capsys, "check", f"hf://{REPO}", "--level", "scan", "--download", "--format", "json")
    assert code == 0, err
    assert statuses(out)["scan.values"][0] == "passed"
    assert hub.requests == []


def test_offline_an_uncached_index_of_a_sharded_repo_still_says_so(drafter, hub, hf, capsys, monkeypatch):
    """Only a cached model.safetensors makes a missing index mean a single-file repository: with config.json alone
    cached, offline still says what is missing."""
    from huggingface_hub import constants, hf_hub_download

    hub.add(REPO, drafter("flat").write(shards=2))
    hf_hub_download(REPO, "config.json", cache_dir=constants.HF_HUB_CACHE)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    code, _, err = run(capsys, "check", f"hf://{REPO}", "--level", "header")
    assert code == 2, err
    assert_golden("test_hub/test_offline_an_uncached_index_of_a_sharded_repo_still_says_so.txt", err,
                  {"HF_HOME": hf})


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case, args", [
    ("gated", ["check", "hf://org/gated"]),  # a gated repository (401): request access
    ("no repo", ["check", "hf://org/nope"]),  # no such repository on the endpoint
    ("no revision", ["check", "hf://org/drafter@v9"]),  # no revision 'v9' in org/drafter (404)
    ("no files", ["check", "hf://org/empty"]),  # holds neither config.json nor model.safetensors
    ("no target config", ["check", "hf://org/drafter", "--target", "hf://org/empty"]),  # no config.json there (404)
    ("bad name", ["check", "hf://org"]),
    ("no network", ["check", "hf://org/drafter"]),  # cannot reach the endpoint
])
def test_hub_errors_are_one_line_and_exit_2(drafter, hub, hf, tmp_path, capsys, monkeypatch, case, args):
    root = drafter("flat").write()
    hub.add(REPO, root)
    hub.add("org/gated", root, gated_token="hf_secret")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "README.md").write_text("nothing here\n")
    hub.add("org/empty", tmp_path / "empty")
    url = hub.url
    if case == "no network":
        url = f"http://127.0.0.1:{_closed_port()}"
        endpoint(monkeypatch, url)
    code, _, err = run(capsys, *args, "--level", "header")
    assert code == 2, err
    assert err.count("\n") == 1, err  # one line (no traceback)
    assert_golden(f"test_hub/test_hub_errors_are_one_line_and_exit_2-{case.replace(' ', '-')}.txt", err,
                  {"HUB": url, "TMP": tmp_path})
    if case == "gated":  # with a token of an account that has access
        monkeypatch.setenv("HF_TOKEN", "hf_secret")
        assert run(capsys, *args, "--level", "header", "-q")[0] == 0


def test_other_commands_take_hub_names(drafter, hub, hf, tmp_path, capsys):
    root = drafter("flat").write()
    repo = hub.add(REPO, root)
    code, out, _ = run(capsys, "inspect", f"hf://{REPO}", "--format", "json")
    assert code == 0 and json.loads(out)["layout"] == "flat"
    assert run(capsys, "diff", f"hf://{REPO}", str(root))[0] == 0
    assert run(capsys, "check", str(root), "--reference", f"hf://{REPO}@{repo.commit}", "--level", "header",
               "-q")[0] == 0
    assert run(capsys, "spec", f"hf://{REPO}", "-o", str(tmp_path / "spec.json"))[0] == 0
    code, out, _ = run(capsys, "check", str(root), "--source", f"hf://{REPO}", "--level", "scan", "--format", "json")
    assert code == 0 and statuses(out)["scan.values"][0] == "passed"  # the candidate's own weights are here
    code, out, _ = run(capsys, "check", str(root), "--source", f"hf://{REPO}", "--format", "json")
    status, reason = statuses(out)[f"forward.equivalence[vllm@{VLLM}]"]
    assert code == 0 and status == "skipped"  # the source's weights are not here: pass --download
    code, _, err = run(capsys, "convert", f"hf://{REPO}", str(tmp_path / "out"), "--to", "speculators")
    assert code == 2
    assert_golden("test_hub/test_other_commands_take_hub_names.txt", f"forward.equivalence: {reason}\nconvert: {err}",
                  {"TMP": tmp_path})
    assert weight_bytes_read(hub, root)[0] == 0
    code, _, err = run(capsys, "convert", f"hf://{REPO}", str(tmp_path / "out"), "--to", "speculators",
                       "--download", "--verify", "header")
    assert code == 0, err


def test_plugin_gates_a_hub_checkpoint(pytester, drafter, hub, hf):
    hub.add(REPO, drafter("flat").write())
    result = pytester.runpytest(f"--eagle3-ckpt=hf://{REPO}", "--eagle3-level=header")
    result.assert_outcomes(passed=21, skipped=3)  # the target checks need --eagle3-target-config
    assert result.ret == 0


def test_forward_with_a_target_on_the_hub(drafter, hub, hf, tmp_path, capsys):
    """A drafter without embed_tokens, its target on the Hub: only the embedding rows the steps need are read."""
    pytest.importorskip("torch")
    with_embed = drafter("flat")
    table = with_embed.tensors["embed_tokens.weight"]
    target = write_target(tmp_path / "target", table)
    hub.add("org/target", target)
    no_embed = drafter("flat")
    del no_embed.tensors["embed_tokens.weight"]
    inputs = write_inputs(tmp_path / "in.safetensors")
    out = tmp_path / "hub.safetensors"
    code, _, err = run(capsys, "forward", str(no_embed.write()), "--engine", "vllm", "--inputs", str(inputs), "--out",
                       str(out), "--steps", "3", "--target", "hf://org/target")
    assert code == 0, err
    assert main(["forward", str(with_embed.write()), "--engine", "vllm", "--inputs", str(inputs), "--out",
                 str(tmp_path / "own.safetensors"), "--steps", "3"]) == 0
    import safetensors.numpy

    got, want = (safetensors.numpy.load_file(p) for p in (out, tmp_path / "own.safetensors"))
    assert sorted(got) == ["logits", "logits_step_1", "logits_step_2"]
    for k in want:
        assert (got[k] == want[k]).all(), k
    embed_bytes = table.nbytes
    read = sum(r.sent for r in resolves(hub) if r.path.endswith(".safetensors"))
    assert 0 < read < embed_bytes / 4  # the header and 18 rows of 512


def test_without_huggingface_hub_the_install_hint(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails, as where the hub extra is missing
    assert main(["check", f"hf://{REPO}", "--level", "header"]) == 2
    said = capsys.readouterr().err
    assert_golden("test_hub/test_without_huggingface_hub_the_install_hint.txt", said)


def test_accept_with_a_target_on_the_hub_reads_its_head_by_range(drafter, hub, hf, tmp_path, capsys):
    """accept --target hf://ORG/NAME: config.json, the header, then the final norm's and lm_head's bytes by range
    (no other tensor of the target); the figures equal those with the same target on disk."""
    pytest.importorskip("torch")
    import numpy as np
    import safetensors.numpy

    from eagle3_checks.defects import example_data
    from eagle3_checks.drafter.example import EXAMPLE

    data = example_data("speculators", tmp_path)
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"hidden_size": EXAMPLE.ht, "vocab_size": EXAMPLE.vocab_size,
                                                    "rms_norm_eps": 1e-6}))
    rng = np.random.default_rng(0)
    big = rng.standard_normal((4 * EXAMPLE.vocab_size, EXAMPLE.ht), dtype=np.float32)  # never to be read
    safetensors.numpy.save_file({"model.embed_tokens.weight": big,
                                 "model.norm.weight": rng.uniform(0.5, 1.5, EXAMPLE.ht).astype(np.float32),
                                 "lm_head.weight": rng.standard_normal((EXAMPLE.vocab_size, EXAMPLE.ht),
                                                                       dtype=np.float32)},
                                str(target / "model.safetensors"))
    hub.add("org/target", target)
    path = drafter("speculators").write()
    docs = []
    for spec in (str(target), "hf://org/target"):
        code, out, err = run(capsys, "accept", str(path), "--data", str(data), "--target", spec, "--format", "json")
        doc = json.loads(out)
        # the random target's argmax is not what the drafter drafts: it accepts nothing there, the one error
        assert code == 1 and {f["code"] for f in doc["findings"] if f["severity"] == "error"} == \
            {"acceptance.figures/accepts-nothing"}, err
        docs.append(doc)
    assert docs[0] == docs[1] and docs[1]["labels"] == "target" and docs[1]["readings"][0]["alpha"] is not None
    read = sum(r.sent for r in resolves(hub) if r.path.endswith(".safetensors"))
    head_bytes = EXAMPLE.vocab_size * EXAMPLE.ht * 4 + EXAMPLE.ht * 4
    assert head_bytes <= read < head_bytes + big.nbytes / 8
