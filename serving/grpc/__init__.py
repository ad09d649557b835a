"""gRPC transport of the serving data plane (KServe v2 / Open Inference Protocol)."""
