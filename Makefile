# Long-running reliability checks (docs/reliability.md). CI runs the bounded versions in pytest.
PYTHON ?= python
FUZZ_COUNT ?= 100000
FUZZ_JOBS ?= 2
SOAK_MINUTES ?= 10

.PHONY: fuzz fuzz-lite fuzz-onnx fuzz-mindir fuzz-ckpt soak

fuzz:  ## 100,000 mutated inputs per format through every loader
	$(PYTHON) -m tests.fuzz.run --format all --count $(FUZZ_COUNT) --jobs $(FUZZ_JOBS) --report fuzz-report.json

fuzz-lite fuzz-onnx fuzz-mindir fuzz-ckpt:
	$(PYTHON) -m tests.fuzz.run --format $(@:fuzz-%=%) --count $(FUZZ_COUNT) --jobs $(FUZZ_JOBS) --report fuzz-$(@:fuzz-%=%).json

soak:  ## 10 minutes at concurrency 64 against ResNet-18 with dynamic batching
	$(PYTHON) bench/soak.py --minutes $(SOAK_MINUTES)
