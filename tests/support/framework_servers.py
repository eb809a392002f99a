"""For the tests of the TF-free writers (test_writer, test_torch, test_jax): one real
`tensorboard` per loader over one logdir holding all of a module's runs, started together,
and what the plugin's export answers there."""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Iterator

import numpy as np

from tb_server import TensorBoardServer


@contextlib.contextmanager
def both_loaders(logdir: str, steps: dict[str, int]) -> Iterator[dict[str, TensorBoardServer]]:
    """{"fast": server, "python": server} over `logdir`, both started at once, each
    answering once every run of `steps` lists its last step ({run: last_step})."""
    servers = {"fast": TensorBoardServer(logdir, True), "python": TensorBoardServer(logdir, False)}
    errors: list[BaseException] = []

    def start(server: TensorBoardServer) -> None:
        try:
            server.__enter__()
        except BaseException as e:  # noqa: BLE001 (re-raised below)
            errors.append(e)

    threads = [threading.Thread(target=start, args=(s,)) for s in servers.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        if errors:
            raise errors[0]
        for server in servers.values():
            server.wait_for(
                lambda d: {r["run"]: r["last_step"] for r in d["runs"]}.items() >= steps.items(),
                "/data/plugin/wur/runs",
            )
        yield servers
    finally:  # both stopped at once too (each waits for its process group to exit)
        stops = [threading.Thread(target=s.__exit__) for s in servers.values() if s.url]
        for thread in stops:
            thread.start()
        for thread in stops:
            thread.join()


def export(server: TensorBoardServer, run: str) -> dict[str, dict[int, float]]:
    """{tag: {step: ratio}} of `run` from /export?format=json, tags in the export's order."""
    status, _, body = server.get(f"/data/plugin/wur/export?run={run}&format=json")
    assert status == 200, (run, status, body[:300])
    return {
        tag: {step: float(ratio) for _, step, ratio in points}
        for tag, points in json.loads(body).items()
    }


def assert_ratios_match(got: dict[str, dict[int, float]], want: dict[str, dict[int, float]],
                        rtol: float = 1e-5) -> None:
    """Same tags in the same order, same steps, ratios within `rtol` (0, inf and NaN
    exactly)."""
    assert list(got) == list(want)
    for tag in want:
        assert sorted(got[tag]) == sorted(want[tag]), tag
        steps = sorted(want[tag])
        np.testing.assert_allclose(
            [got[tag][s] for s in steps], [want[tag][s] for s in steps], rtol=rtol,
            err_msg=tag,
        )
