"""torch_bin.read_records: a torch.save of a dict, or a list of dicts, of tensors, read without unpickling."""

from __future__ import annotations

import io
import os

import pytest

torch = pytest.importorskip("torch")

from eagle3_checks.storage.torch_bin import RecordsRefused, read_records  # noqa: E402


def _saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def test_a_list_of_dicts_of_tensors_and_plain_values():
    x = torch.randn(5, 4).bfloat16()
    got = read_records(_saved([{"id": 1, "input_ids": torch.arange(5), "hidden_state": x}, {"id": 2}]), "d.pt")
    assert [r["id"] for r in got] == [1, 2]
    t = got[0]["hidden_state"]
    assert (t.dtype, t.shape) == ("BF16", (5, 4))
    assert t.data == x.view(torch.int16).numpy().tobytes()
    assert got[0]["input_ids"].data == torch.arange(5).numpy().tobytes()


def test_a_dict_and_a_sliced_view_of_one_storage():
    base = torch.arange(12, dtype=torch.float32)
    got = read_records(_saved({"a": base[4:8], "b": base.reshape(3, 4)}), "d.ckpt")[0]
    assert got["a"].data == base[4:8].numpy().tobytes() and got["b"].shape == (3, 4)


class _Runs:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


@pytest.mark.parametrize("make", [
    lambda p: [{"x": _Runs(p)}],
    lambda p: {"x": [torch.zeros(1)]},
    lambda p: [torch.zeros(1)],
    lambda p: {"x": 1.5},
])
def test_anything_else_is_refused_and_never_run(tmp_path, make):
    marker = tmp_path / "ran"
    with pytest.raises(RecordsRefused):
        read_records(_saved(make(marker)), "bad.pt")
    assert not marker.exists()


def test_a_truncated_archive_is_refused():
    raw = _saved({"x": torch.zeros(100)})
    with pytest.raises(RecordsRefused, match="bad.pt"):
        read_records(raw[: len(raw) // 2], "bad.pt")
