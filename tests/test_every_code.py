"""Finding codes no other test made the gate produce (tests/conftest.py lists them after a whole-suite run), each
with a drafter that raises it and the same drafter without the defect, which does not."""

from __future__ import annotations

import os

from eagle3_checks.drafter.layout import FLAT
from helpers import run


def codes(result) -> set[str]:
    return {f.code for f in result.findings()}


def test_files_broken_symlink(drafter, tmp_path):
    path = drafter(FLAT).write()
    assert "files/broken-symlink" not in codes(run(path, level="header"))
    (path / "model.safetensors").rename(tmp_path / "elsewhere.safetensors")
    os.symlink(tmp_path / "gone.safetensors", path / "model.safetensors")
    assert "files/broken-symlink" in codes(run(path, level="header"))


def test_files_duplicate_tensor(drafter):
    d = drafter(FLAT)
    path = d.write(shards=2)
    (path / "model.safetensors.index.json").unlink()  # the shards alone: each one's tensors, nothing to reconcile
    assert "files/duplicate-tensor" not in codes(run(path, level="header"))
    shards = sorted(path.glob("*.safetensors"))
    shards[1].write_bytes(shards[0].read_bytes())  # the second shard repeats the first
    assert "files/duplicate-tensor" in codes(run(path, level="header"))
