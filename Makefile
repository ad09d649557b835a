# Long-running reliability checks (docs/reliability.md). CI runs the bounded versions in pytest.
PYTHON ?= python
FUZZ_COUNT ?= 100000
# lite inspect + lite run in-process: ~25 files/s per core, so 50,000 is ~17 min on 2 cores
FUZZ_CLI_COUNT ?= 50000
FUZZ_GRPC_COUNT ?= 100000
FUZZ_JOBS ?= 2
SOAK_MINUTES ?= 10

.PHONY: fuzz fuzz-lite fuzz-onnx fuzz-mindir fuzz-ckpt fuzz-lite-path fuzz-lite-run fuzz-lite-cli fuzz-grpc soak

# 100,000 mutated inputs per loader and per .lite surface (path loading, predict on every CPU
# engine), FUZZ_CLI_COUNT through the lite commands, FUZZ_GRPC_COUNT mutated requests to lite serve.
# Every run goes on after a finding; the target fails at the end if any run had one.
fuzz:
	status=0; \
	$(PYTHON) -m tests.fuzz.run --format loaders --count $(FUZZ_COUNT) --jobs $(FUZZ_JOBS) --report fuzz-report.json || status=1; \
	$(PYTHON) -m tests.fuzz.run --format lite-path --format lite-run --count $(FUZZ_COUNT) --jobs $(FUZZ_JOBS) --report fuzz-surfaces.json || status=1; \
	$(PYTHON) -m tests.fuzz.run --format lite-cli --count $(FUZZ_CLI_COUNT) --jobs $(FUZZ_JOBS) --report fuzz-cli.json || status=1; \
	$(PYTHON) -m tests.fuzz.grpc_requests --count $(FUZZ_GRPC_COUNT) --report fuzz-grpc.json || status=1; \
	exit $$status

fuzz-lite fuzz-onnx fuzz-mindir fuzz-ckpt fuzz-lite-path fuzz-lite-run:
	$(PYTHON) -m tests.fuzz.run --format $(@:fuzz-%=%) --count $(FUZZ_COUNT) --jobs $(FUZZ_JOBS) --report fuzz-$(@:fuzz-%=%).json

fuzz-lite-cli:
	$(PYTHON) -m tests.fuzz.run --format lite-cli --count $(FUZZ_CLI_COUNT) --jobs $(FUZZ_JOBS) --report fuzz-lite-cli.json

fuzz-grpc:
	$(PYTHON) -m tests.fuzz.grpc_requests --count $(FUZZ_GRPC_COUNT) --report fuzz-grpc.json

soak:  ## 10 minutes at concurrency 64 against ResNet-18 with dynamic batching
	$(PYTHON) bench/soak.py --minutes $(SOAK_MINUTES)
