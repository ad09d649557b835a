"""MindSpore registers mind_ir.proto and checkpoint.proto in protobuf's default pool too; lite's
copies build in pools of their own, so both load in one process in either order."""

from __future__ import annotations

import subprocess
import sys


def test_mindspores_own_schemas_register_after_lite_has_read_a_mindir_and_a_checkpoint():
    # In a fresh process: the default pool is process-wide. MindSpore's copies are stood in for by
    # files of the same names and packages with other contents ("duplicate file name" before).
    script = """
from google.protobuf import descriptor_pb2, descriptor_pool
from train._generated import checkpoint_pb2, mind_ir_pb2

model = mind_ir_pb2.ModelProto(producer_name="MindSpore")
assert mind_ir_pb2.ModelProto.FromString(model.SerializeToString()).producer_name == "MindSpore"
checkpoint_pb2.Checkpoint.FromString(checkpoint_pb2.Checkpoint().SerializeToString())
for name, package, message in (("mind_ir.proto", "mind_ir", "ModelProto"), ("checkpoint.proto", "", "Checkpoint")):
    theirs = descriptor_pb2.FileDescriptorProto(name=name, package=package)
    theirs.message_type.add(name=message).field.add(name="other", number=1, type=9, label=1)
    descriptor_pool.Default().AddSerializedFile(theirs.SerializeToString())
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
