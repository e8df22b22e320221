"""The deployment files stay consistent with the code: config valid, least privilege, probes, pins."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import tomllib
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement

from config.load import parse_config
from tests.conftest import require_tool

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
        ("apps", "deployments", "patch"),  # memory levels (the template); a pending release (an annotation)
        ("apps", "deployments/scale", "patch"),  # the rescale
        ("coordination.k8s.io", "leases", "create"),  # leader election
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "patch"),
        ("", "events", "create"),  # Events on the scaled object (backends/oversight.py)
        ("autoscaling", "horizontalpodautoscalers", "list"),  # refuse beside another autoscaler
    }


def test_a_memory_change_replaces_the_taskmanagers_at_once():
    """A rolling update would restart the job once per pod and run both memories side by side."""
    taskmanager = next(
        d for d in _documents("flink-reactive.yaml") if d["metadata"]["name"] == "flink-taskmanager"
    )
    assert taskmanager["spec"]["strategy"] == {"type": "Recreate"}


def test_the_sidecar_is_probed_on_the_configured_port_and_runs_unprivileged():
    (config_map,) = _documents("configmap.yaml")
    port = yaml.safe_load(config_map["data"]["foresail.yaml"])["server"]["port"]
    jobmanager = next(d for d in _documents("flink-reactive.yaml") if d["metadata"]["name"] == "flink-jobmanager"
                      and d["kind"] == "Deployment")  # fmt: skip
    sidecar = next(c for c in jobmanager["spec"]["template"]["spec"]["containers"] if c["name"] == "foresail")
    assert sidecar["ports"][0]["containerPort"] == port
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # a sidecar not ready would make the pod not ready and take the JobManager out of its Service
    assert "readinessProbe" not in sidecar
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


# ---- operations: alerts, dashboard, RBAC text, kustomize, image ---------------------------------------
def _exported_metrics() -> set[str]:
    """Every series name the daemon's /metrics can show (counters with their _total, histograms' parts)."""
    from prometheus_client.parser import text_string_to_metric_families

    from daemon.health import DaemonMetrics

    metrics = DaemonMetrics()
    metrics.capacity.labels("1", "current").set(1)
    metrics.decisions.labels("hold", "x").inc()
    metrics.errors.labels("execute").inc()
    metrics.rescale_outcomes.labels("ready").inc()
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry).decode()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def _metric_names(expression: str) -> set[str]:
    return set(re.findall(r"\bforesail_[a-z_]+", expression))


def test_the_alert_rules_pass_promtool_and_use_exported_metrics():
    promtool = require_tool("promtool")
    checked = subprocess.run(
        [promtool, "check", "rules", str(DEPLOY / "alerts.yaml")], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    rules = yaml.safe_load((DEPLOY / "alerts.yaml").read_text())["groups"][0]["rules"]
    names = {rule["alert"] for rule in rules}
    assert {
        "ForesailLoopStalled",
        "ForesailHoldingOnBadData",
        "ForesailForecastPoor",
        "ForesailRescaleFailed",
    } <= names
    exported = _exported_metrics()
    for rule in rules:
        assert _metric_names(rule["expr"]) <= exported, rule["alert"]


def test_the_dashboard_queries_exported_metrics():
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    used = set().union(*(_metric_names(e) for e in expressions))
    assert used <= _exported_metrics()
    assert {"foresail_current_scaleout", "foresail_forecast_wape", "foresail_paused"} <= used


def test_the_per_vertex_role_adds_only_what_the_vertex_target_calls():
    """KubernetesVertexTarget lists the TaskManager pods and annotates the free ones (pod-deletion-cost)."""
    role = next(d for d in _documents("rbac-vertex.yaml") if d["kind"] == "Role")
    grants = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
              for v in rule["verbs"]}  # fmt: skip
    assert grants == {("", "pods", "list"), ("", "pods", "patch")}
    source = (REPO / "backends" / "kubernetes.py").read_text()
    assert "list_namespaced_pod(" in source and "patch_namespaced_pod(" in source
    binding = next(d for d in _documents("rbac-vertex.yaml") if d["kind"] == "RoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["name"] == "foresail"


def test_the_readme_names_exactly_the_roles_grants():
    readme = (REPO / "README.md").read_text()
    text = readme[readme.index("- **Permissions**") :].split("\n- **", 1)[0]
    for name in ("rbac.yaml", "rbac-vertex.yaml"):
        role = next(d for d in _documents(name) if d["kind"] == "Role")
        for rule in role["rules"]:
            for resource in rule["resources"]:
                assert f"`{resource}`" in text, resource
                for verb in rule["verbs"]:
                    assert f"`{verb}`" in text, (resource, verb)
    assert "nothing else" in text and "rbac-vertex.yaml" in text


def test_kustomize_sets_the_namespace_and_image_once_and_ships_the_operations_files():
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert kustomization["namespace"] == "flink"
    (image,) = kustomization["images"]
    sidecar_images = re.findall(r"image: (\S+)", (DEPLOY / "flink-reactive.yaml").read_text())
    assert any(found.split(":")[0] == image["name"] for found in sidecar_images)
    for resource in kustomization["resources"]:
        assert (DEPLOY / resource).is_file(), resource
    generated = {f for generator in kustomization["configMapGenerator"] for f in generator["files"]}
    assert generated == {"grafana-dashboard.json", "alerts.yaml"}
    (config_map,) = _documents("configmap.yaml")
    config = yaml.safe_load(config_map["data"]["foresail.yaml"])
    assert config["kubernetes"]["namespace"] == kustomization["namespace"]


def test_the_image_copies_every_package_and_leaves_the_rest_out():
    dockerfile = (REPO / "Dockerfile").read_text()
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    for package in {p.split(".")[0] for p in packages}:
        assert re.search(rf"^COPY {package} {package}$", dockerfile, re.M), package
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".git", "tests", ".venv", "data"} <= set(ignored)


KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
"""The oldest Kubernetes the manifests are checked against, and the one of the pinned client."""


def _kubernetes_objects() -> list[tuple[str, dict]]:
    """Every Kubernetes object of deploy/ (not the Kustomization, whose schema is kustomize's, nor the
    Prometheus rule file)."""
    objects = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        for document in _documents(path.name):
            if "apiVersion" in document and document.get("kind") != "Kustomization":
                objects.append((path.name, document))
    return objects


def test_every_manifest_passes_the_api_servers_schema_strictly():
    """An unknown or misspelt field (`httpget`, a probe at the pod level) is dropped by `kubectl apply` with
    a warning at best: the strict schema check of the Kubernetes versions we support rejects it here."""
    objects = _kubernetes_objects()
    kinds = {document["kind"] for _, document in objects}
    assert {"Deployment", "Role", "RoleBinding", "ConfigMap", "Service"} <= kinds
    for version in KUBERNETES_VERSIONS:
        for name, document in objects:
            try:
                kubernetes_validate.validate(document, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                where = f"{name}: {document['kind']}/{document['metadata']['name']} on Kubernetes {version}"
                pytest.fail(f"{where}: {error.message}")


def test_the_schema_check_rejects_a_misspelt_field():
    deployment = next(d for _, d in _kubernetes_objects() if d["kind"] == "Deployment")
    broken = copy.deepcopy(deployment)
    container = broken["spec"]["template"]["spec"]["containers"][0]
    container["resource"] = container.pop("resources", {})
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)


def _memory_of(process: str, config_dir: Path, *flags: str) -> subprocess.CompletedProcess:
    """What Flink's start-up helper computes for the JVM's memory from the config and `flags`."""
    from tests.e2e.stack import flink_home

    home = flink_home()
    classpath = f"{home / 'bin' / 'bash-java-utils.jar'}:{next((home / 'lib').glob('flink-dist-*.jar'))}"
    helper = "org.apache.flink.runtime.util.bash.BashJavaUtils"
    return subprocess.run(
        [
            require_tool("java"),
            "-classpath",
            classpath,
            helper,
            process,
            "--configDir",
            str(config_dir),
            *flags,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _config_map_in(directory: Path) -> Path:
    (config_map,) = _documents("flink-configmap.yaml")
    (directory / "config.yaml").write_text(config_map["data"]["config.yaml"])
    return directory


@pytest.mark.parametrize("process", ["GET_JM_RESOURCE_PARAMS", "GET_TM_RESOURCE_PARAMS"])
def test_flink_starts_with_the_config_map_that_replaces_its_own(process, tmp_path):
    """The config map's config.yaml is mounted over the image's: Flink's start-up scripts compute the JVM's
    memory from it with this helper, which refuses a config without a memory size."""
    run = _memory_of(process, _config_map_in(tmp_path))
    assert run.returncode == 0 and "BASH_JAVA_UTILS_EXEC_RESULT" in run.stdout, run.stdout[-2000:]


def test_every_memory_level_keeps_the_heap_the_shipped_taskmanager_has(tmp_path):
    """A level adds managed memory and nothing else: Flink derives network memory and JVM overhead from the
    process size, so unpinned they grew with it and ate the heap (Flink refused level 6). The shipped
    config is level 0 of the default ladder, so foresail's levels start from what runs."""
    from backends.flink_memory import dynamic_properties
    from config.schema import MemoryConfig

    memory, config_dir = MemoryConfig(), _config_map_in(tmp_path)

    def heap_bytes(*flags: str) -> int:
        run = _memory_of("GET_TM_RESOURCE_PARAMS", config_dir, *flags)
        found = re.search(r"taskmanager\.memory\.task\.heap\.size=(\d+)b", run.stdout)
        assert run.returncode == 0 and found, run.stdout[-2000:]
        return int(found.group(1))

    shipped = heap_bytes()
    managed = re.search(
        r"taskmanager\.memory\.managed\.size=(\d+)b", _memory_of("GET_TM_RESOURCE_PARAMS", config_dir).stdout
    )
    assert int(managed.group(1)) == round(memory.base_mb) * 2**20
    for managed_mb in [
        0.0,
        *(memory.base_mb * 2**level for level in (0, 3, 8)),
    ]:  # release, 0, default top, max
        assert heap_bytes(*dynamic_properties(managed_mb, memory.process_base_mb + managed_mb)) == shipped
