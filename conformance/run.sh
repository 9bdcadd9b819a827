#!/usr/bin/env bash
# Record how the serving engines load the conformance checkpoints, on CPU (see conformance/README.md).
#
#   conformance/run.sh [--keep] [--live] ENGINE@VERSION...      e.g. conformance/run.sh vllm@0.32.0 sglang@0.5.14
#
# One release at a time: each gets a fresh virtualenv under $CONFORMANCE_VENVS (default: .conformance-venvs in the
# repository) with ENGINE==VERSION installed, every dependency pinned by conformance/constraints/ENGINE-VERSION.txt
# when that file exists (the freeze of the environment the committed recordings were made in; a first recording
# writes it). The recording replaces tests/conformance/recorded/ENGINE-VERSION/ and the engine's own compute of each
# drafter it built tests/conformance/computed/ENGINE-VERSION.json; the virtualenv (several GB) is
# removed afterwards unless --keep is given. The checkpoint set is generated once, into a temporary directory, with
# $PYTHON (default: python3; it needs eagle3_checks importable). --live then judges every checkpoint with
# --engine ENGINE@installed in that environment (conformance/test_live.py, run by $PYTHON with pytest), which holds the
# live verdicts to the recording just made and to the release's profile.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
venvs="${CONFORMANCE_VENVS:-$repo/.conformance-venvs}"
python="${PYTHON:-python3}"
keep=0
live=0
releases=()
for arg in "$@"; do
    case "$arg" in
        --keep) keep=1 ;;
        --live) live=1 ;;
        vllm@*|sglang@*) releases+=("$arg") ;;
        *) echo "usage: conformance/run.sh [--keep] [--live] ENGINE@VERSION... (ENGINE: vllm, sglang); got '$arg'" >&2; exit 2 ;;
    esac
done
if [ ${#releases[@]} -eq 0 ]; then
    echo "usage: conformance/run.sh [--keep] [--live] ENGINE@VERSION... (recorded so far: $(ls "$repo/tests/conformance/recorded" | tr '\n' ' '))" >&2
    exit 2
fi
# Engine error messages print Python sets (vLLM lists the parameters it has): a fixed hash seed keeps their
# order, and so the recordings, reproducible.
export PYTHONHASHSEED=0

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" "$here/checkpoints.py" "$work/checkpoints"

for release in "${releases[@]}"; do
    engine="${release%@*}"
    version="${release#*@}"
    venv="$venvs/$engine-$version"
    pins="$here/constraints/$engine-$version.txt"
    if [ ! -x "$venv/bin/python" ]; then
        echo "building $venv (several GB, minutes)"
        started=$SECONDS
        python3 -m venv "$venv"
        # The release without its dependencies, then every dependency it declares except the placeholders PyPI
        # holds for wheels on NVIDIA's own index (conformance/unreachable.txt: a GPU kernel package no CPU loader
        # imports, whose PyPI sdist downloads the real wheel at install time and fails without that index).
        "$venv/bin/pip" install -q --no-deps "$engine==$version"
        "$venv/bin/python" "$here/requirements_of.py" "$engine" "$here/unreachable.txt" > "$venv/requirements.txt"
        if [ -f "$pins" ]; then
            "$venv/bin/pip" install -q -r "$venv/requirements.txt" -c "$pins"
        else
            "$venv/bin/pip" install -q -r "$venv/requirements.txt"
        fi
        # Media packages the text drafters never use: where the build does not match the torch the release
        # resolves to here (vLLM 0.30.0 to 0.32.0 on this machine's CPU torch), it fails at import (torchvision's
        # ops) before any engine code runs, and goes. SGLang imports torchvision itself (see README.md, 0.5.20).
        if ! "$venv/bin/python" -c "import torchvision" 2>/dev/null; then
            "$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
        fi
        if [ ! -f "$pins" ]; then
            "$venv/bin/pip" freeze --exclude-editable > "$pins"
        fi
        echo "$release: installed in $((SECONDS - started)) s, $(du -sh "$venv" | cut -f1) on disk"
    fi
    out="$repo/tests/conformance/recorded/$engine-$version"
    computed="$repo/tests/conformance/computed/$engine-$version.json"
    rm -rf "$out"
    mkdir -p "$(dirname "$computed")"
    # --compute: each drafter the engine built also runs its own forward, K draft steps on CPU (_compute.py)
    "$venv/bin/python" "$repo/eagle3_checks/live/recorders/record_$engine.py" "$work/checkpoints/manifest.json" "$out" \
        --compute "$computed"
    if [ "$live" = 1 ]; then
        EAGLE3_LIVE_ENGINE="$engine" EAGLE3_LIVE_PYTHON="$venv/bin/python" \
            "$python" -m pytest -q -p no:cacheprovider -p no:randomly "$here/test_live.py"
    fi
    if [ "$keep" = 0 ]; then
        rm -rf "$venv"
    fi
done
