"""The deployment files stay consistent with the code: config valid, least privilege, probes, pins."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement

from config.load import parse_config

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def _documents(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def test_the_config_map_holds_a_valid_kubernetes_config():
    (config_map,) = _documents("configmap.yaml")
    config = parse_config(yaml.safe_load(config_map["data"]["foresail.yaml"]), "deploy/configmap.yaml")
    assert config.target.kind == "prometheus+kubernetes"
    assert config.kubernetes.leader_election and config.knowledge.path.startswith("/var/lib/foresail/")


def test_the_role_grants_exactly_what_the_daemon_uses():
    role = next(d for d in _documents("rbac.yaml") if d["kind"] == "Role")
    grants = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
              for v in rule["verbs"]}  # fmt: skip
    assert grants == {
        ("apps", "deployments", "get"),  # desired replicas and readiness
        ("apps", "deployments", "patch"),  # memory levels: the TaskManager template's memory
        ("apps", "deployments/scale", "patch"),  # the rescale
        ("coordination.k8s.io", "leases", "create"),  # leader election
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "patch"),
    }


def test_the_sidecar_is_probed_on_the_configured_port_and_runs_unprivileged():
    (config_map,) = _documents("configmap.yaml")
    port = yaml.safe_load(config_map["data"]["foresail.yaml"])["server"]["port"]
    jobmanager = next(d for d in _documents("flink-reactive.yaml") if d["metadata"]["name"] == "flink-jobmanager"
                      and d["kind"] == "Deployment")  # fmt: skip
    sidecar = next(c for c in jobmanager["spec"]["template"]["spec"]["containers"] if c["name"] == "foresail")
    assert sidecar["ports"][0]["containerPort"] == port
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert sidecar["securityContext"]["runAsNonRoot"] is True
    assert jobmanager["spec"]["template"]["spec"]["serviceAccountName"] == "foresail"


def test_the_image_is_non_root_health_checked_and_installs_pinned_versions():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"^USER 10001$", dockerfile, re.M)
    assert "HEALTHCHECK" in dockerfile and "/healthz" in dockerfile
    assert "--constraint deploy/constraints.txt" in dockerfile
    pins = {}
    for line in (DEPLOY / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for dependency in project["dependencies"]:
        requirement = Requirement(dependency)
        name = requirement.name.lower().replace("_", "-")
        assert name in pins, f"{name} has no pinned version in deploy/constraints.txt"
        assert pins[name] in requirement.specifier, f"{name}=={pins[name]} does not satisfy {requirement}"
