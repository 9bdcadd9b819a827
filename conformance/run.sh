#!/usr/bin/env bash
# Record how the serving engines load the conformance checkpoints, on CPU (see conformance/README.md).
#
#   conformance/run.sh [ENGINE...]        ENGINE: vllm, sglang (default: both)
#
# Each engine gets its own virtualenv under $CONFORMANCE_VENVS (default: .conformance-venvs in the repository),
# built from conformance/requirements-ENGINE.txt when missing, every dependency pinned by constraints-ENGINE.txt
# (the environment the committed recordings were made in: pip freeze of it). The checkpoint set is generated into a temporary
# directory with $PYTHON (default: python3; it needs eagle3_checks importable), and each engine's recordings
# replace tests/conformance/recorded/ENGINE-VERSION/.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
venvs="${CONFORMANCE_VENVS:-$repo/.conformance-venvs}"
python="${PYTHON:-python3}"
engines=("$@")
[ ${#engines[@]} -gt 0 ] || engines=(vllm sglang)
# Engine error messages print Python sets (vLLM lists the parameters it has): a fixed hash seed keeps their
# order, and so the recordings, reproducible.
export PYTHONHASHSEED=0

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" "$here/checkpoints.py" "$work/checkpoints"

for engine in "${engines[@]}"; do
    venv="$venvs/$engine"
    if [ ! -x "$venv/bin/python" ]; then
        echo "building $venv (several GB, minutes)"
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q -r "$here/requirements-$engine.txt" -c "$here/constraints-$engine.txt"
    fi
    version="$("$venv/bin/python" -c "from importlib.metadata import version; print(version('$engine'))")"
    out="$repo/tests/conformance/recorded/$engine-$version"
    rm -rf "$out"
    "$venv/bin/python" "$here/record_$engine.py" "$work/checkpoints/manifest.json" "$out"
done
