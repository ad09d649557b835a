"""Clients' keepalive pings: a quiet stream or an idle connection of a client that pings every
second stays open under the default settings, and the settings are read and checked like the
others. With gRPC core's own defaults, which the server had before these settings, the same
client is sent away (GOAWAY too_many_pings) within a few seconds: the second case of each test
shows it, so that the test would catch a return to them."""

from __future__ import annotations

import queue
import threading
import time

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from serving.errors import ConfigError
from serving.settings import Settings

from .conftest import start_server

TIMEOUT = 20.0
# A client that pings every second, even without calls and while no data flows (grpc core's
# client otherwise stops after 2 pings without data).
PINGING_CLIENT = [
    ("grpc.keepalive_time_ms", 1000),
    ("grpc.keepalive_timeout_ms", 5000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]
# gRPC core's defaults sent that client away after 3 pings, about 3 s: quiet for twice as long.
QUIET_S = 6.0
GRPC_DEFAULTS = ("--no-grpc-keepalive-permit-without-calls", "--grpc-http2-min-recv-ping-interval-without-data",
                 "300000", "--grpc-http2-max-ping-strikes", "2")


@pytest.fixture(scope="module", params=["defaults", "grpc-core-defaults"])
def pinged_server(request, repository):
    """(server, whether the pinging client should survive)."""
    extra = () if request.param == "defaults" else GRPC_DEFAULTS
    server = start_server(repository, *extra)
    yield server, request.param == "defaults"
    server.stop()


def identity_request(request_id: str) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="identity", id=request_id)
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    request.raw_input_contents.append(np.ones((1, 16), np.float32).tobytes())
    return request


def test_a_quiet_stream_outlives_keepalive_pings(pinged_server):
    server, survives = pinged_server
    sends: queue.Queue = queue.Queue()
    with grpc.insecure_channel(server.address, options=PINGING_CLIENT) as channel:
        stream = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(
            iter(sends.get, None), timeout=QUIET_S + TIMEOUT)
        sends.put(identity_request("before"))
        assert next(stream).infer_response.id == "before"
        time.sleep(QUIET_S)  # the stream stays open and quiet; only pings cross the connection
        sends.put(identity_request("after"))
        try:
            answer = next(stream).infer_response.id
        except grpc.RpcError as err:
            answer = f"{err.code()}: {err.details()}"
        finally:
            sends.put(None)
    if survives:
        assert answer == "after"
    else:
        assert "too_many_pings" in answer.lower() or "too many pings" in answer.lower(), answer


def test_an_idle_connection_stays_connected_under_keepalive_pings(pinged_server):
    """A connection without calls keeps its pings answered: it is not closed (the channel would
    leave READY) and the next call goes over it."""
    server, survives = pinged_server
    states: list[grpc.ChannelConnectivity] = []
    ready = threading.Event()

    def record(state: grpc.ChannelConnectivity) -> None:
        states.append(state)
        if state == grpc.ChannelConnectivity.READY:
            ready.set()

    with grpc.insecure_channel(server.address, options=PINGING_CLIENT) as channel:
        channel.subscribe(record, try_to_connect=True)
        assert ready.wait(TIMEOUT)
        service_pb2_grpc.GRPCInferenceServiceStub(channel).ServerLive(service_pb2.ServerLiveRequest(),
                                                                      timeout=TIMEOUT)
        time.sleep(QUIET_S)
        channel.unsubscribe(record)
    after_ready = states[states.index(grpc.ChannelConnectivity.READY):]
    if survives:
        assert after_ready == [grpc.ChannelConnectivity.READY], after_ready
    else:
        assert grpc.ChannelConnectivity.IDLE in after_ready, after_ready


def test_keepalive_settings_come_from_flags_and_environment():
    import argparse

    from serving.settings import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--grpc-keepalive-time", "30000", "--no-grpc-keepalive-permit-without-calls",
                              "--grpc-http2-max-ping-strikes", "0"])
    settings = Settings.from_sources(args, {"LITE_GRPC_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA": "10000"})
    assert settings.grpc_keepalive_time == 30000
    assert settings.grpc_keepalive_permit_without_calls is False
    assert settings.grpc_http2_max_ping_strikes == 0
    assert settings.grpc_http2_min_recv_ping_interval_without_data == 10000
    assert Settings().grpc_keepalive_permit_without_calls is True


@pytest.mark.parametrize(("name", "value", "says"), [
    ("grpc_keepalive_time", 0, "from 1 to 2147483647, got 0"),
    ("grpc_keepalive_timeout", -1, "from 1 to 2147483647, got -1"),
    ("grpc_http2_min_recv_ping_interval_without_data", -5, "from 0 to 2147483647, got -5"),
    ("grpc_http2_max_ping_strikes", -1, "from 0 to 2147483647"),
    ("grpc_http2_max_pings_without_data", 2**31, "got 2147483648"),
])
def test_bad_keepalive_settings_are_refused_naming_flag_and_variable(name, value, says):
    with pytest.raises(ConfigError, match=says) as info:
        Settings(**{name: value})
    flag = "--" + name.replace("_", "-")
    assert name in str(info.value) and flag in str(info.value) and "LITE_" + name.upper() in str(info.value)


def test_a_keepalive_setting_that_is_not_a_number_is_refused():
    with pytest.raises(ConfigError, match="grpc_keepalive_time: cannot read '2h' as int"):
        Settings.from_sources(None, {"LITE_GRPC_KEEPALIVE_TIME": "2h"})
