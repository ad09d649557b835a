"""The gRPC services beside the inference protocol, through a real server process: grpc.health.v1
for the server and each model, and server reflection (v1 and v1alpha) as grpcurl and grpcio's
reflection client use it."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc


def test_grpc_health_for_server_and_each_model(server):
    with grpc.insecure_channel(server.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        serving = health_pb2.HealthCheckResponse.SERVING
        assert stub.Check(health_pb2.HealthCheckRequest(service="")).status == serving
        # The service's own name, as grpc-health-probe -service and per-service checks ask.
        assert stub.Check(health_pb2.HealthCheckRequest(service="inference.GRPCInferenceService")).status == serving
        assert stub.Check(health_pb2.HealthCheckRequest(service="identity")).status == serving
        with pytest.raises(grpc.RpcError) as info:
            stub.Check(health_pb2.HealthCheckRequest(service="no-such-model"))
        assert info.value.code() == grpc.StatusCode.NOT_FOUND


def _reflection_call(channel, version: str):
    """The reflection stream of ``version``, with v1alpha's messages (the same on the wire as v1's)."""
    from grpc_reflection.v1alpha import reflection_pb2

    return channel.stream_stream(
        f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_reflection_lists_the_services(server, version):
    """grpcurl asks grpc.reflection.v1 first; older tools ask v1alpha. The messages are the same
    on the wire, so v1alpha's classes call the v1 method too."""
    from grpc_reflection.v1alpha import reflection_pb2

    with grpc.insecure_channel(server.address) as channel:
        call = _reflection_call(channel, version)
        listing = next(call(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10))
        symbol = reflection_pb2.ServerReflectionRequest(file_containing_symbol="inference.GRPCInferenceService")
        described = next(call(iter([symbol]), timeout=10))
    names = {service.name for service in listing.list_services_response.service}
    assert {"inference.GRPCInferenceService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"} <= names
    assert described.file_descriptor_response.file_descriptor_proto


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_reflection_describes_every_service_it_lists(server, version):
    """A client lists the services, then asks for the file defining each (grpcurl describe):
    grpc.reflection.v1.ServerReflection was listed but answered NOT_FOUND, its file being in no
    descriptor pool."""
    from google.protobuf import descriptor_pb2
    from grpc_reflection.v1alpha import reflection_pb2

    with grpc.insecure_channel(server.address) as channel:
        call = _reflection_call(channel, version)
        listing = next(call(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10))
        names = [service.name for service in listing.list_services_response.service]
        asks = [reflection_pb2.ServerReflectionRequest(file_containing_symbol=name) for name in names]
        answers = list(call(iter(asks), timeout=10))
    for name, answer in zip(names, answers, strict=True):
        assert not answer.HasField("error_response"), f"{name}: {answer.error_response.error_message}"
        files = [descriptor_pb2.FileDescriptorProto.FromString(raw)
                 for raw in answer.file_descriptor_response.file_descriptor_proto]
        declared = {f"{file.package}.{service.name}" for file in files for service in file.service}
        assert name in declared, f"{name}: the answer declares only {sorted(declared)}"


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_reflection_finds_the_file_of_a_method(server, version):
    """grpcurl describe SERVICE.METHOD asks for the file containing the method's full name; an
    unknown method of a known service, and an unknown service, are still NOT_FOUND."""
    from google.protobuf import descriptor_pb2
    from grpc_reflection.v1alpha import reflection_pb2

    symbols = ["inference.GRPCInferenceService.ModelInfer", "grpc.health.v1.Health.Check",
               "inference.GRPCInferenceService.NoSuchMethod", "inference.NoSuchService.ModelInfer"]
    with grpc.insecure_channel(server.address) as channel:
        asks = [reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol) for symbol in symbols]
        answers = list(_reflection_call(channel, version)(iter(asks), timeout=10))
    for answer, service in zip(answers[:2], ["GRPCInferenceService", "Health"], strict=True):
        assert not answer.HasField("error_response"), answer.error_response.error_message
        files = [descriptor_pb2.FileDescriptorProto.FromString(raw)
                 for raw in answer.file_descriptor_response.file_descriptor_proto]
        assert service in {entry.name for entry in files[0].service}
    assert [answer.error_response.error_code for answer in answers[2:]] == [grpc.StatusCode.NOT_FOUND.value[0]] * 2


def test_a_shipped_v1_reflection_module_is_used_instead_of_the_renamed_copy(monkeypatch):
    """Should grpcio-reflection ship the v1 module, its file goes into the pool when it is imported;
    a renamed copy added first would make that import fail, so the module is imported first and
    no copy is added."""
    from google.protobuf import descriptor_pb2, descriptor_pool
    from grpc_reflection.v1alpha import reflection_pb2

    from serving.grpc import reflection

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(reflection_pb2.DESCRIPTOR.serialized_pb)
    shipped = descriptor_pb2.FileDescriptorProto(name=reflection.V1_FILE, package="grpc.reflection.v1")
    shipped.service.add(name="ServerReflection")
    imported = []

    def import_module(name):
        imported.append(name)
        pool.AddSerializedFile(shipped.SerializeToString())

    monkeypatch.setattr(reflection.importlib, "import_module", import_module)
    reflection._add_v1_descriptor(pool)
    assert imported == [reflection.V1_MODULE]
    found = pool.FindFileContainingSymbol(reflection.SERVICE_NAME_V1)
    assert not found.message_types_by_name, "the renamed copy replaced the shipped file"


def test_grpcio_reflection_client_resolves_the_v1_service(server):
    """grpcio-reflection's own client (it speaks v1alpha) finds the v1 service and its method."""
    from google.protobuf.descriptor_pool import DescriptorPool
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    with grpc.insecure_channel(server.address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        service = DescriptorPool(database).FindServiceByName("grpc.reflection.v1.ServerReflection")
        method = service.methods_by_name["ServerReflectionInfo"]
        assert method.input_type.full_name == "grpc.reflection.v1.ServerReflectionRequest"
