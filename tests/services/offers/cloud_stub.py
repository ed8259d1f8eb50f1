"""A provider cloud for the money tests: Prime Intellect's and Vast's pod APIs as a real HTTP server on
127.0.0.1 (tests/http_stub.py), answering with the recorded payload shapes (the shared fixtures), with state:
a pod that is terminated leaves the list of pods unless the test made it ``stuck`` there (a destroy call that
answers success while the instance keeps billing)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from services.offers.launch import Providers
from tests.http_stub import serve
from tests.shared_data import OFFER_FIXTURES


def load(name: str) -> Any:
    return json.loads((OFFER_FIXTURES / name).read_text())


def prime_pod(
    pod_id: str, name: str, *, status: str = "ACTIVE", price: float = 17.92, created: str = "2026-01-15T10:00:00Z"
) -> dict[str, Any]:
    pod = copy.deepcopy(load("primeintellect-pods-list.json")["data"][0])
    pod.update(id=pod_id, name=name, status=status, priceHr=price, createdAt=created)
    return pod


def vast_instance(
    pod_id: int,
    label: str,
    *,
    status: str = "running",
    msg: str = "success, running",
    price: float = 15.2,
    started: float = 1767225600.0,
) -> dict[str, Any]:
    inst = copy.deepcopy(load("vast-instances-list.json")["instances"][0])
    inst.update(
        id=pod_id,
        label=label,
        actual_status=status,
        cur_state=status,
        status_msg=msg,
        dph_total=price,
        start_date=started,
    )
    return inst


class Cloud:
    def __init__(self) -> None:
        self.prime: list[dict[str, Any]] = []
        self.vast: list[dict[str, Any]] = []
        self.stuck: set[str] = set()  # pod ids a terminate is accepted for but that stay listed, running
        self.calls: list[tuple[str, str]] = []
        self.bodies: list[tuple[str, str, Any]] = []  # (method, path, JSON body) of each request with a body
        self.created = 0

    def answer(self, method: str, path: str) -> tuple:
        self.calls.append((method, path))
        route = path.split("?")[0]
        if route == "/pi/api/v1/pods/" and method == "GET":
            return 200, {"total_count": len(self.prime), "offset": 0, "limit": 100, "data": self.prime}
        if route == "/pi/api/v1/pods/" and method == "POST":
            self.created += 1
            answer = load("primeintellect-pods-create.json")
            self.prime.append(prime_pod(str(answer["id"]), str(answer.get("name") or "created")))
            return 200, answer
        if route.startswith("/pi/api/v1/pods/") and method == "DELETE":
            pod_id = route.rsplit("/", 1)[1]
            if not any(p["id"] == pod_id for p in self.prime):
                return 404, {"detail": "Pod not found"}
            if pod_id not in self.stuck:
                self.prime = [p for p in self.prime if p["id"] != pod_id]
            return 200, load("primeintellect-pods-delete.json")
        if route == "/pi/api/v1/pods/status" and method == "GET":
            return 200, {"data": []}
        if route == "/vast/api/v0/instances" and method == "GET":
            return 200, {"instances": self.vast}
        if route.startswith("/vast/api/v0/instances/") and method == "DELETE":
            pod_id = route.rstrip("/").rsplit("/", 1)[1]
            if pod_id not in self.stuck:
                self.vast = [i for i in self.vast if str(i["id"]) != pod_id]
            return 200, load("vast-instances-destroy.json")
        return 404, {"detail": f"no route {method} {route}"}

    def count(self, method: str, route: str) -> int:
        return sum(1 for m, p in self.calls if m == method and p.split("?")[0] == route)


KEYS = {"primeintellect": "pk-money-test-123456", "vast": "vk-money-test-123456"}


def urls(base: str) -> dict[str, str]:
    return {"primeintellect": f"{base}/pi/api/v1", "vast": f"{base}/vast/api/v0"}


@contextmanager
def cloud() -> Iterator[tuple[Cloud, str]]:
    c = Cloud()
    with serve(c.answer, c.bodies) as base:
        yield c, base


def providers(base: str, keys: dict[str, str] | None = None, teams: dict[str, str] | None = None) -> Providers:
    return Providers(KEYS if keys is None else keys, urls(base), teams=teams)
