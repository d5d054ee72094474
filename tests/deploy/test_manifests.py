"""deploy/kubernetes/: every document against the Kubernetes API schemas (kubernetes-validate, offline,
strict: unknown fields fail), and what a schema cannot see: the probes, the drain, the autoscaler's metric, the
commands the pods run."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from voxrt.cli import build_parser
from voxrt.gateway.metrics import GatewayMetrics

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
# the oldest Kubernetes minor still in wide use and the newest kubernetes-validate knows
VERSIONS = ("1.30.0", kubernetes_validate.latest_version())


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


ALL = [(p.name, i, d) for p in MANIFESTS for i, d in enumerate(documents(p))]


def of_kind(kind: str) -> list[dict]:
    return [d for _, _, d in ALL if d["kind"] == kind]


def test_manifests_exist():
    assert {p.name for p in MANIFESTS} >= {"voxrt.yaml", "prometheus-adapter-rules.yaml"}
    kinds = {d["kind"] for _, _, d in ALL}
    assert kinds >= {"Deployment", "Service", "Ingress", "HorizontalPodAutoscaler", "PodDisruptionBudget"}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name,index,doc", ALL, ids=[f"{n}:{d['kind']}/{d['metadata']['name']}" for n, _, d in ALL])
def test_schema(name, index, doc, version):
    kubernetes_validate.validate(doc, version, strict=True)  # raises ValidationError naming the field


def test_schema_check_rejects_a_mistake():
    """The check is live: a misspelt probe field and a wrong type both fail."""
    doc = yaml.safe_load(yaml.safe_dump(of_kind("Deployment")[0]))
    container = doc["spec"]["template"]["spec"]["containers"][0]
    container["readinessProbe"]["httpGet"]["paht"] = "/readyz"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, VERSIONS[-1], strict=True)
    doc = yaml.safe_load(yaml.safe_dump(of_kind("Deployment")[0]))
    doc["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, VERSIONS[-1], strict=True)


def _serve_args(container: dict):
    args = container["args"]
    assert args[0] == "serve"
    return build_parser().parse_args(args)  # SystemExit on an option voxrt does not have


@pytest.mark.parametrize("deployment", of_kind("Deployment"), ids=lambda d: d["metadata"]["name"])
def test_deployment_probes_drain_and_command(deployment):
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"  # ready only once warm, 503 when draining
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300  # weights + graph capture take minutes
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1  # one engine process per GPU
    args = _serve_args(container)
    assert args.host == "0.0.0.0" and args.port == container["ports"][0]["containerPort"]
    assert args.log_json
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    # the kubelet kills the pod at terminationGracePeriodSeconds: the pause, the drain and uvicorn's 5 s must fit
    assert pod["terminationGracePeriodSeconds"] >= float(pre_stop[1]) + args.drain_grace_s + 5
    env = {e["name"]: e for e in container["env"]}
    assert env["VOXRT_API_KEYS"]["valueFrom"]["secretKeyRef"]["name"] == "voxrt-api-keys"  # 0.0.0.0 needs keys
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in deployment["spec"]["selector"]["matchLabels"].items())
    service = of_kind("Service")[0]
    assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())


@pytest.mark.parametrize("deployment", of_kind("Deployment"), ids=lambda d: d["metadata"]["name"])
def test_the_tuning_cache_has_a_writable_volume_where_the_image_keeps_it(deployment):
    """The engine keeps its timed kernel choices in ~/.cache/voxrt/tuning (runtime/tuning_cache.py); the image's
    user is voxrt with home /home/voxrt (docker/Dockerfile.gpu). A volume there, writable, outlives a container
    restart in the pod, so the restart skips the codec's timing."""
    from voxrt.engine.runtime.tuning_cache import cache_dir  # noqa: PLC0415

    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    dockerfile = (ROOT / "docker" / "Dockerfile.gpu").read_text()
    assert "useradd --create-home --uid 10001 voxrt" in dockerfile and "WORKDIR /home/voxrt" in dockerfile
    folder = cache_dir({"HOME": "/home/voxrt"})
    mounts = [m for m in container["volumeMounts"] if str(folder).startswith(m["mountPath"].rstrip("/") + "/")]
    assert len(mounts) == 1 and not mounts[0].get("readOnly", False)
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts[0]["name"]]


def test_autoscalers_scale_every_pool_on_a_metric_the_gateway_exports():
    exported = {m.name for m in GatewayMetrics().registry.collect()}
    deployments = {d["metadata"]["name"] for d in of_kind("Deployment")}
    targets = set()
    for hpa in of_kind("HorizontalPodAutoscaler"):
        targets.add(hpa["spec"]["scaleTargetRef"]["name"])
        for metric in hpa["spec"]["metrics"]:
            assert metric["type"] == "Pods"
            assert metric["pods"]["metric"]["name"] in exported
    assert targets == deployments
    rules = yaml.safe_load(of_kind("ConfigMap")[0]["data"]["config.yaml"])["rules"]
    assert {r["name"]["as"] for r in rules} >= {m["pods"]["metric"]["name"] for h in of_kind("HorizontalPodAutoscaler")
                                               for m in h["spec"]["metrics"]}


def test_ingress_keeps_websockets_open():
    (ingress,) = of_kind("Ingress")
    notes = ingress["metadata"]["annotations"]
    for key in ("nginx.ingress.kubernetes.io/proxy-read-timeout", "nginx.ingress.kubernetes.io/proxy-send-timeout"):
        assert int(notes[key]) >= 3600
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == of_kind("Service")[0]["metadata"]["name"]
