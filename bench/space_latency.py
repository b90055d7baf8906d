"""Latency and throughput of the Space through `gradio_client`, against the plain HTTP API and the same work
called in-process.

    .venv/bin/python bench/space_latency.py            # default model and models/trec-minilm

For a 20-word question: p50/p95 over N requests of /predict alone (the floor of a request) and of /explain with
label attention, Integrated Gradients (the page's default steps) and SHAP (the page's default samples), each made
three ways, interleaved: through `gradio_client`, through the HTTP API, and by the app's `Backend` in this process
(no HTTP, no queue), so that the differences are the cost of serving; then the throughput of 20 concurrent
clients, against the rate of the same requests one after another. The server is `python -m labelattn.space.app`
in a subprocess, as on a Space. When a trained model is missing, a freshly initialised model of the same
architecture stands in (latency does not depend on the weights) and the table says so.
"""

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from labelattn.space import load_app

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO_ROOT = Path(__file__).resolve().parents[1]

TEXT = "What is the name of the river that flows through the city where the first Olympic Games were held ?"
TREC_LABELS = ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]
METHODS = ("label_attention", "integrated_gradients", "shap")
GOALS = {  # p50 seconds through the client, per backbone (the goals on 2 CPU cores)
    ("embedding", "label_attention"): 0.05,
    ("embedding", "integrated_gradients"): 0.5,
    ("encoder", "integrated_gradients"): 1.5,
}


def stand_in(kind: str, folder: Path) -> str:
    """An untrained model of the default architecture (`embedding`) or on MiniLM (`encoder`), saved to `folder`."""
    from transformers import AutoTokenizer

    from labelattn import minilm_path
    from labelattn.training import build
    from labelattn.training.settings import TrainSettings
    from modeling_labelattn import LabelAttnForSequenceClassification

    labels = dict(id2label=dict(enumerate(TREC_LABELS)))
    if kind == "embedding":  # as `labelattn train` builds it
        model = build.build_model(TrainSettings.of_command([], len(TREC_LABELS)), TREC_LABELS, False, 30522)
    else:
        model = LabelAttnForSequenceClassification.from_encoder(minilm_path(), **labels)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(folder)
    return str(folder)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(model: str, log: Path) -> tuple[subprocess.Popen, str]:
    """`python -m labelattn.space.app` serving `model` on a free loopback port; returns the process and its URL."""
    from gradio_client import Client

    port = free_port()
    env = {**os.environ, "LABELATTN_MODEL": model, "GRADIO_SERVER_PORT": str(port)}
    server = subprocess.Popen(
        [sys.executable, "-m", "labelattn.space.app"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the app exited with {server.returncode}:\n{log.read_text()[-2000:]}")
        try:
            Client(url, verbose=False)
            return server, url
        except Exception:
            time.sleep(0.5)
    server.kill()
    raise RuntimeError(f"the app did not answer within 180 s:\n{log.read_text()[-2000:]}")


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1] if len(values) > 1 else values[0]


class Paths:
    """One request made three ways: through `gradio_client`, through the plain HTTP API (`/gradio_api/call/...`,
    as curl or any language calls it) and in this process with the app's `Backend` (no HTTP, no queue)."""

    def __init__(self, app, backend, url: str):
        import httpx
        from gradio_client import Client

        self.app, self.backend = app, backend
        self.client = Client(url, verbose=False)
        self.http = httpx.Client(base_url=url, timeout=300)
        # The sliders' values, as the page sends them: after the positional inputs, in the page's order.
        self.costs = {cost.parameter: cost.start for cost in backend.costs.values()}

    def inputs(self, method: str) -> tuple[str, list]:
        if method == "predict":
            return "predict", [TEXT, ""]
        return "explain", [TEXT, "", method, self.app.PREDICTED, self.app.NO_CONTRAST, *self.costs.values()]

    def via_client(self, method: str):
        endpoint, data = self.inputs(method)
        return self.client.predict(*data, api_name=f"/{endpoint}")

    def via_http(self, method: str) -> str:
        endpoint, data = self.inputs(method)
        event = self.http.post(f"gradio_api/call/{endpoint}", json={"data": data}).json()["event_id"]
        answer = self.http.get(f"gradio_api/call/{endpoint}/{event}").text
        if "event: complete" not in answer:
            raise RuntimeError(f"/{endpoint} failed over HTTP: {answer[:500]}")
        return answer

    def in_process(self, method: str):
        self.backend.predict(TEXT)
        if method != "predict":
            self.backend.explain(TEXT, method, **self.backend.cost_options(method, {}))


def measure(model: str, requests: dict[str, int], clients: int, log: Path) -> tuple[str, list[dict], dict]:
    """Latency rows (one per request kind) and the concurrency figures of one model."""
    from gradio_client import Client

    app = load_app()
    backend = app.Backend(model)
    config = backend.model.config
    kind = getattr(config, "backbone", config.model_type)  # labelattn's backbone, else the architecture
    server, url = start_server(model, log)
    try:
        paths = Paths(app, backend, url)
        ways = {"client": paths.via_client, "http": paths.via_http, "direct": paths.in_process}
        methods = ["predict", *(m for m in METHODS if m in backend.methods)]
        timings = {(method, way): [] for method in methods for way in ways}
        for method in methods:  # warm-up: first calls pay for lazy imports and allocations
            for call in ways.values():
                call(method)
        for i in range(max(requests.values())):  # interleaved: the machine's load hits every alternative alike
            for method in (m for m in methods if i < requests.get(m, requests["label_attention"])):
                for way, call in ways.items():
                    start = time.perf_counter()
                    call(method)
                    timings[(method, way)].append(time.perf_counter() - start)
        rows = []
        for method in methods:
            p50 = {way: statistics.median(timings[(method, way)]) for way in ways}
            goal = GOALS.get((kind, method))
            verdict = goal and " · ".join(
                f"{way} {'met' if p50[way] <= goal else 'MISSED'}" for way in ("client", "http")
            )
            rows.append(
                dict(
                    method=method,
                    requests=len(timings[(method, "client")]),
                    p50=p50,
                    p95={way: percentile(timings[(method, way)], 95) for way in ("client", "http")},
                    goal=f"≤ {goal * 1000:.0f} ms: {verdict}" if goal else "",
                )
            )

        # Throughput: `clients` clients at once, each sending `per_client` label-attention requests, against
        # the same number sent one after another by one client.
        fast = "label_attention" if "label_attention" in backend.methods else "integrated_gradients"
        per_client = 5
        pool_clients = [Client(url, verbose=False) for _ in range(clients)]

        def burst(client: Client) -> int:
            errors = 0
            for _ in range(per_client):
                try:
                    answer = client.predict(*paths.inputs(fast)[1], api_name="/explain")
                    errors += answer[3]["text"] != TEXT
                except Exception:
                    errors += 1
            return errors

        start = time.perf_counter()
        for _ in range(clients * per_client):
            paths.via_client(fast)
        sequential = clients * per_client / (time.perf_counter() - start)
        start = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            errors = sum(pool.map(burst, pool_clients))
        concurrent = clients * per_client / (time.perf_counter() - start)
        load = dict(
            method=fast,
            clients=clients,
            requests=clients * per_client,
            errors=errors,
            concurrent=concurrent,
            sequential=sequential,
        )
        return kind, rows, load
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="the embedding model (default: models/trec-embedding, else a stand-in)")
    parser.add_argument("--minilm", help="a MiniLM model (default: models/trec-minilm, else a stand-in)")
    parser.add_argument("--requests", type=int, default=50, help="requests per method (default: 50)")
    parser.add_argument(
        "--shap-requests", type=int, default=20, help="SHAP requests, seconds each on MiniLM (default: 20)"
    )
    parser.add_argument("--clients", type=int, default=20, help="concurrent clients (default: 20)")
    parser.add_argument(
        "--backbones",
        nargs="+",
        choices=("embedding", "encoder"),
        default=("embedding", "encoder"),
        help="what to measure",
    )
    args = parser.parse_args()
    # A `kill` of the benchmark still stops its server (the `finally` of `measure`).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    scratch = Path(tempfile.mkdtemp(prefix="space-bench-"))
    models = []
    for given, default, kind in (
        (args.model, "models/trec-embedding", "embedding"),
        (args.minilm, "models/trec-minilm", "encoder"),
    ):
        if kind not in args.backbones:
            continue
        if given or (REPO_ROOT / default / "config.json").is_file():
            models.append((given or str(REPO_ROOT / default), "trained"))
        else:
            models.append((stand_in(kind, scratch / kind), f"untrained stand-in ({default} not found)"))

    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"machine: {os.cpu_count()} CPU cores, shared with other work; load average {os.getloadavg()[0]:.1f}\n")
    print(
        f"Latency of one request for a {len(TEXT.split())}-word text: /predict alone, then /explain (prediction + "
        "explanation) by each method; interleaved. client = gradio_client, http = the plain HTTP API, in-process = "
        "the app's Backend without server.\n"
    )
    print("| model | backbone | request | n | p50 client | p95 client | p50 http | p95 http | p50 in-process | goal |")
    print("|---|---|---|---|---|---|---|---|---|---|", flush=True)
    throughput = [
        "| model | request | clients | requests | errors | req/s concurrent | req/s one by one | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for path, origin in models:
        requests = {"label_attention": args.requests, "integrated_gradients": args.requests, "shap": args.shap_requests}
        kind, rows, load = measure(path, requests, args.clients, scratch / "server.log")
        name = f"{Path(path).name} ({origin})"
        for row in rows:
            ms = {key: f"{value * 1000:.0f} ms" for key, value in row["p50"].items()}
            ms95 = {key: f"{value * 1000:.0f} ms" for key, value in row["p95"].items()}
            print(
                f"| {name} | {kind} | {row['method']} | {row['requests']} | {ms['client']} | {ms95['client']} | "
                f"{ms['http']} | {ms95['http']} | {ms['direct']} | {row['goal']} |",
                flush=True,
            )
        throughput.append(
            f"| {name} | {load['method']} | {load['clients']} | {load['requests']} | {load['errors']} | "
            f"{load['concurrent']:.1f} | {load['sequential']:.1f} | {load['concurrent'] / load['sequential']:.2f} |"
        )
    print(f"\nThroughput, {args.clients} concurrent clients:\n")
    print("\n".join(throughput))


if __name__ == "__main__":
    main()
