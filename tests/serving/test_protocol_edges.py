"""Requests that are well-formed protobuf but ask for something the server must refuse, each
with its status code and a message that names it: long names quoted in a status message,
outputs requested twice, reserved parameters of the wrong kind, and loads that would replace
the repository's configuration."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

ROW = np.arange(16, dtype=np.float32).reshape(1, 16)
TIMEOUT = 20.0
C = grpc.StatusCode


@pytest.fixture(scope="module")
def stub(server):
    with grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


@pytest.fixture(autouse=True)
def server_still_serves(stub):
    yield
    answer = stub.ModelInfer(identity_request(), timeout=TIMEOUT)
    assert answer.raw_output_contents[0] == ROW.tobytes()


def identity_request(*, name: str = "INPUT0", datatype: str = "FP32") -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="identity", id="edge")
    request.inputs.add(name=name, datatype=datatype, shape=[1, 16])
    request.raw_input_contents.append(ROW.tobytes())
    return request


def rejected(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


# ----- long names in status messages --------------------------------------------------------------


def _long_input(request: pb.ModelInferRequest) -> None:
    request.inputs[0].name = "n" * 20_000


def _long_non_ascii_input(request: pb.ModelInferRequest) -> None:
    request.inputs[0].name = "\u00e9" * 6_000  # 12,000 bytes of UTF-8, 36,000 percent-encoded


def _long_datatype(request: pb.ModelInferRequest) -> None:
    request.inputs[0].datatype = "D" * 20_000


def _long_output(request: pb.ModelInferRequest) -> None:
    request.outputs.add(name="o" * 20_000)


def _long_classification(request: pb.ModelInferRequest) -> None:
    request.outputs.add(name="OUTPUT0").parameters["classification"].string_param = "x" * 20_000


@pytest.mark.parametrize(("change", "says"), [
    (_long_input, "unknown input(s) ['nnnn"),
    (_long_non_ascii_input, "unknown input(s) ['\u00e9\u00e9"),
    (_long_datatype, "unknown datatype 'DDDD"),
    (_long_output, "unknown output 'oooo"),
    (_long_classification, "classification must be a positive integer"),
], ids=["input-name", "non-ascii-input-name", "datatype", "output-name", "classification-string"])
def test_a_long_name_in_the_message_keeps_the_status(stub, change, says):
    """The status message travels in a trailer that clients refuse past 16 KiB: quoting a 20,000
    character name made the client see RESOURCE_EXHAUSTED "Stream removed" instead of
    INVALID_ARGUMENT."""
    request = identity_request()
    change(request)
    err = rejected(lambda: stub.ModelInfer(request, timeout=TIMEOUT))
    assert err.code() == C.INVALID_ARGUMENT, err.details()
    assert says in err.details()
    assert "characters cut" in err.details() and len(err.details()) <= 1024


def test_a_long_region_name_keeps_the_status_of_an_unregister(stub):
    request = pb.SystemSharedMemoryUnregisterRequest(name="r" * 100_000)
    err = rejected(lambda: stub.SystemSharedMemoryUnregister(request, timeout=TIMEOUT))
    assert err.code() == C.NOT_FOUND, err.details()
    assert "no shared-memory region named 'rrrr" in err.details()


def test_a_short_message_is_not_cut(stub):
    err = rejected(lambda: stub.ModelInfer(identity_request(name="EXTRA"), timeout=TIMEOUT))
    assert err.details() == ("model identity version 1: missing input(s) ['INPUT0']; unknown input(s) ['EXTRA']; "
                             "the model takes ['INPUT0']")


def test_an_answer_over_4_mib_needs_the_client_receive_limit_the_docs_name(server):
    """The server sends answers up to --max-message-bytes (64 MiB), but gRPC clients other than
    tritonclient refuse to receive more than 4 MiB unless told otherwise: docs/serving.md names the
    channel option that raises the limit, and it does."""
    from .conftest import REPO_ROOT

    option = "grpc.max_receive_message_length"
    assert f"`{option}`" in (REPO_ROOT / "docs" / "serving.md").read_text()
    rows = (5 << 20) // ROW.nbytes  # a 5 MiB answer
    request = pb.ModelInferRequest(model_name="identity")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[rows, 16])
    request.raw_input_contents.append(np.zeros((rows, 16), np.float32).tobytes())
    with grpc.insecure_channel(server.address) as channel:
        error = rejected(lambda: pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=TIMEOUT))
    assert error.code() == C.RESOURCE_EXHAUSTED and "larger than max" in error.details()
    with grpc.insecure_channel(server.address, options=[(option, 64 << 20)]) as channel:
        answer = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=TIMEOUT)
    assert len(answer.raw_output_contents[0]) == rows * ROW.nbytes


# ----- requested outputs ----------------------------------------------------------------------------


def test_an_output_requested_twice_is_invalid(stub):
    """It was answered twice under one name; Triton refuses it too."""
    request = identity_request()
    request.outputs.add(name="OUTPUT0")
    request.outputs.add(name="OUTPUT0")
    err = rejected(lambda: stub.ModelInfer(request, timeout=TIMEOUT))
    assert err.code() == C.INVALID_ARGUMENT
    assert "output 'OUTPUT0' is requested twice" in err.details()


# ----- reserved parameters --------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "kind", "value", "says"), [
    ("timeout", "string_param", "1000", "'timeout' must be an integer >= 0 (microseconds; 0: none), got '1000'"),
    ("timeout", "int64_param", -5, "'timeout' must be an integer >= 0 (microseconds; 0: none), got -5"),
    ("timeout", "double_param", 0.5, "'timeout' must be an integer >= 0"),
    ("priority", "string_param", "high", "'priority' must be an integer >= 0, got 'high'"),
    ("priority", "int64_param", -1, "'priority' must be an integer >= 0, got -1"),
    ("sequence_id", "bool_param", True, "'sequence_id' must be an integer >= 0 or a string, got True"),
    ("sequence_start", "int64_param", 1, "'sequence_start' must be a boolean, got 1"),
    ("sequence_end", "string_param", "yes", "'sequence_end' must be a boolean, got 'yes'"),
    ("binary_data_output", "int64_param", 0, "'binary_data_output' must be a boolean, got 0"),
])
def test_a_reserved_parameter_of_the_wrong_kind_is_invalid(stub, key, kind, value, says):
    """A timeout sent as a string was ignored: the request ran without the queue timeout the
    client asked for."""
    request = identity_request()
    setattr(request.parameters[key], kind, value)
    err = rejected(lambda: stub.ModelInfer(request, timeout=TIMEOUT))
    assert err.code() == C.INVALID_ARGUMENT
    assert f"parameter {says}" in err.details()


@pytest.mark.parametrize(("key", "kind", "value"), [
    ("timeout", "int64_param", 0),
    ("timeout", "uint64_param", 10_000_000),
    ("priority", "uint64_param", 2),
    ("sequence_id", "int64_param", 7),
    ("sequence_id", "string_param", "session-7"),
    ("sequence_start", "bool_param", True),
    ("binary_data_output", "bool_param", False),
    ("custom", "string_param", "anything"),
])
def test_reserved_parameters_as_tritonclient_sends_them_are_served(stub, key, kind, value):
    request = identity_request()
    setattr(request.parameters[key], kind, value)
    answer = stub.ModelInfer(request, timeout=TIMEOUT)
    assert answer.raw_output_contents[0] == ROW.tobytes()
    assert getattr(answer.parameters[key], answer.parameters[key].WhichOneof("parameter_choice")) == value


# ----- echoed parameters ------------------------------------------------------------------------------


def test_echoed_parameters_keep_their_kind(stub):
    """An answer echoes the request's parameters as they came: ``uint64_param`` 5 was answered as
    ``int64_param`` 5, which a client that reads the field it sent finds unset."""
    request = identity_request()
    request.parameters["u"].uint64_param = 5
    request.parameters["big"].uint64_param = 2**64 - 1
    request.parameters["i"].int64_param = -5
    request.parameters["flag"].bool_param = False
    request.parameters["x"].double_param = 2.0
    request.parameters["s"].string_param = "abc"
    answer = stub.ModelInfer(request, timeout=TIMEOUT)
    assert dict(answer.parameters) == dict(request.parameters)
    assert answer.parameters["u"].WhichOneof("parameter_choice") == "uint64_param"


# ----- repository control ------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["config", "file:1/model.lite"])
def test_a_load_that_would_override_the_repository_is_refused(stub, key):
    """Triton's load takes a configuration (``config``) and model files (``file:<path>``) in its
    parameters; this server loaded the files on disk instead and answered OK, so the client
    believed its configuration was in effect."""
    request = pb.RepositoryModelLoadRequest(model_name="identity")
    if key == "config":
        request.parameters[key].string_param = '{"max_batch_size": 4}'
    else:
        request.parameters[key].bytes_param = b"not a model"
    err = rejected(lambda: stub.RepositoryModelLoad(request, timeout=TIMEOUT))
    assert err.code() == C.UNIMPLEMENTED
    assert f"the load parameters ['{key}'] would replace its configuration or files" in err.details()
    config = stub.ModelConfig(pb.ModelConfigRequest(name="identity"), timeout=TIMEOUT).config
    assert config.max_batch_size == 0


def test_a_load_with_other_parameters_still_loads(stub):
    request = pb.RepositoryModelLoadRequest(model_name="identity")
    request.parameters["unrelated"].bool_param = True
    stub.RepositoryModelLoad(request, timeout=TIMEOUT)
    assert stub.ModelReady(pb.ModelReadyRequest(name="identity"), timeout=TIMEOUT).ready


# ----- streams ----------------------------------------------------------------------------------------


def _final_flag(answer: pb.ModelInferResponse) -> bool | None:
    if "triton_final_response" not in answer.parameters:
        return None
    return answer.parameters["triton_final_response"].bool_param


def test_stream_answers_and_errors_are_marked_final_when_asked(stub):
    """tritonclient's ``enable_empty_final_response``: clients written for Triton read a request's
    answers until one carries ``triton_final_response`` true; without it they waited for ever."""
    asking = identity_request()
    asking.id = "asks"
    asking.parameters["triton_enable_empty_final_response"].bool_param = True
    failing = identity_request(name="EXTRA")
    failing.id = "fails"
    failing.parameters["triton_enable_empty_final_response"].bool_param = True
    plain = identity_request()
    plain.id = "plain"
    answers = {a.infer_response.id: a for a in stub.ModelStreamInfer(iter([asking, failing, plain]), timeout=TIMEOUT)}
    assert not answers["asks"].error_message and _final_flag(answers["asks"].infer_response) is True
    assert "unknown input(s) ['EXTRA']" in answers["fails"].error_message
    assert _final_flag(answers["fails"].infer_response) is True
    assert _final_flag(answers["plain"].infer_response) is None


def test_tritonclient_sees_the_final_flag(server):
    import queue

    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.address)
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(ROW)
        client.async_stream_infer("identity", [tensor], request_id="one", enable_empty_final_response=True)
        result, error = answers.get(timeout=TIMEOUT)
    finally:
        client.stop_stream()
        client.close()
    assert error is None
    assert result.get_response().parameters["triton_final_response"].bool_param
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), ROW)
