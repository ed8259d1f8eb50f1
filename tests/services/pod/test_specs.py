"""Pod specs and pods.toml: parsing, round trip, atomic save that keeps comments and a backup."""

from __future__ import annotations

import pytest

from app.settings import load_pods, pods_file, save_pods
from services.errors import PodSpecError, SettingsError
from services.models import PodKind
from services.pod.specs import merge_pods, parse_pod_spec


@pytest.mark.parametrize(
    "spec, host, user, port",
    [
        ("root@203.0.113.7:2222", "203.0.113.7", "root", 2222),
        ("ubuntu@gpu-box", "gpu-box", "ubuntu", None),
        ("my-alias", "my-alias", None, None),
        ("[::1]:22", "::1", None, 22),
        ("a.b@host.example.com", "host.example.com", "a.b", None),
    ],
)
def test_parse_ssh_specs(spec, host, user, port):
    pod = parse_pod_spec(spec)
    assert (pod.kind, pod.host, pod.user, pod.port, pod.name) == (PodKind.SSH, host, user, port, spec)


def test_parse_local_and_demo():
    assert parse_pod_spec("local").kind is PodKind.LOCAL
    assert parse_pod_spec("demo").simulated


@pytest.mark.parametrize("spec", ["", "   ", "user@", "host:99999", "a b", "x@y@z", "host:port"])
def test_bad_specs_are_refused(spec):
    with pytest.raises(PodSpecError):
        parse_pod_spec(spec)


def test_pods_file_honours_env(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "cfg"))
    assert pods_file() == tmp_path / "cfg" / "pods.toml"
    monkeypatch.delenv("PRIME_TRAIN_TUI_CONFIG_DIR")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert pods_file() == tmp_path / "xdg" / "prime-train-tui" / "pods.toml"


def test_save_and_load_round_trip_keeps_comments_and_backup(tmp_path):
    path = tmp_path / "pods.toml"
    path.write_text(
        '# my pods\n[pods.a]\nhost = "10.0.0.1"  # the big one\nuser = "root"\nrun_dir = "/w/run"\n'
        "price_per_hr = 23.92\n"
    )
    pods = load_pods(path)
    assert pods[0].run_dir == "/w/run" and pods[0].price_per_hr == 23.92 and pods[0].saved
    save_pods([*pods, parse_pod_spec("ubuntu@box:2200", name="b"), parse_pod_spec("local")], path)
    text = path.read_text()
    assert "# my pods" in text and "# the big one" in text
    assert (tmp_path / "pods.toml.bak").read_text().startswith("# my pods")
    again = load_pods(path)
    assert [(p.name, p.host, p.user, p.port) for p in again] == [
        ("a", "10.0.0.1", "root", None),
        ("b", "box", "ubuntu", 2200),
    ]  # local is never saved
    save_pods(again[1:], path)
    assert [p.name for p in load_pods(path)] == ["b"]


@pytest.mark.parametrize("text, why", [("[pods.a\nhost='x'", "not valid TOML"), ("pods = 3", "must be a table")])
def test_malformed_pods_file_is_a_clear_error_and_untouched(tmp_path, text, why):
    path = tmp_path / "pods.toml"
    path.write_text(text)
    with pytest.raises(SettingsError, match=why):
        load_pods(path)
    assert path.read_text() == text


@pytest.mark.parametrize(
    "text, why",
    [
        ("[pods.a]\nhost = 'x'\nprot = 22\n", "unknown key"),
        ("[pods.a]\nhost = 'x'\nport = 'ssh'\n", "port must be an integer"),
        ("[pods.a]\nhost = 'x y'\n", "not a pod"),
    ],
)
def test_a_malformed_pod_entry_is_left_out_with_a_clear_error_and_untouched(tmp_path, text, why):
    path = tmp_path / "pods.toml"
    path.write_text(text)
    pods = load_pods(path)
    assert pods == [] and why in str(pods.broken["a"])
    assert path.read_text() == text


def test_missing_file_is_no_pods(tmp_path):
    assert load_pods(tmp_path / "nope.toml") == []


def test_merge_keeps_first_of_each_name():
    a1, a2, b = parse_pod_spec("h1", name="a"), parse_pod_spec("h2", name="a"), parse_pod_spec("b")
    assert merge_pods([a1], [a2, b]) == [a1, b]


def test_a_slurm_login_node_is_a_pod_of_kind_slurm_and_round_trips(tmp_path):
    path = tmp_path / "pods.toml"
    path.write_text(
        '[pods.cluster]\nhost = "login.example.org"\nuser = "ana"\nkind = "slurm"\n\n'
        '[pods.box]\nhost = "10.0.0.2"\nkind = "pod"\n'
    )
    cluster, box = load_pods(path)
    assert (cluster.kind, cluster.host, cluster.scheduler) == (PodKind.SSH, "login.example.org", "slurm")
    assert box.scheduler is None
    save_pods([cluster, box], path)
    again = {p.name: p for p in load_pods(path)}
    assert again["cluster"].scheduler == "slurm" and again["box"].scheduler is None
    assert path.read_text().count("kind") == 1  # the default is not written


@pytest.mark.parametrize(
    "table, why",
    [
        ('host = "h"\nkind = "slurn"', "kind must be one of 'pod', 'slurm'"),
        ('target = "demo"\nkind = "slurm"', "the simulated pod is not a Slurm cluster"),
    ],
)
def test_a_bad_kind_is_a_clear_error(tmp_path, table, why):
    path = tmp_path / "pods.toml"
    path.write_text(f"[pods.c]\n{table}\n")
    pods = load_pods(path)
    assert pods == [] and why in str(pods.broken["c"])
