# Tandem — build, test, demo. Every target installs what a fresh Debian/Ubuntu machine lacks.
SHELL := /bin/bash
SWIFT ?= swift
VENV ?= .venv
PY := $(VENV)/bin/python
TANDEM := .build/debug/tandem
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build demo test unit-test py-test deps test-deps proto fuzz fuzz-build fuzz-short bench clean help

all: build

help:
	@echo "make demo   - build and run the two-node demo on loopback"
	@echo "make test   - install test dependencies, build, run every test"
	@echo "make bench  - release build of tandem-bench and a full run (JSON)"
	@echo "make fuzz   - libFuzzer run of every fuzz target (RUNS=N each; make fuzz-short: the short run of make test)"
	@echo "make proto  - regenerate Swift code from Protocol/*.proto (needs protoc)"

# libsodium, zstd and libvips (and pkg-config to find them). apt-get on Debian/Ubuntu; elsewhere say what to do.
deps:
	@if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists libsodium; then \
	  if command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing libsodium-dev and pkg-config with apt-get…"; \
	    $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq libsodium-dev pkg-config >/dev/null; \
	  elif [ "$$(uname)" = Darwin ]; then \
	    echo "libsodium is missing: run 'brew install libsodium pkg-config', then try again." >&2; exit 1; \
	  else \
	    echo "libsodium is missing: install your system's libsodium development package (pkg-config name 'libsodium')." >&2; exit 1; \
	  fi; \
	fi
	@if ! pkg-config --exists libzstd; then \
	  if command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing libzstd-dev with apt-get…"; \
	    $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq libzstd-dev >/dev/null; \
	  elif [ "$$(uname)" = Darwin ]; then \
	    echo "zstd is missing: run 'brew install zstd', then try again." >&2; exit 1; \
	  else \
	    echo "zstd is missing: install your system's zstd development package (pkg-config name 'libzstd')." >&2; exit 1; \
	  fi; \
	fi
	@if ! pkg-config --exists vips; then \
	  if command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing libvips-dev with apt-get…"; \
	    $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq libvips-dev >/dev/null; \
	  elif [ "$$(uname)" = Darwin ]; then \
	    echo "libvips is missing: run 'brew install vips', then try again." >&2; exit 1; \
	  else \
	    echo "libvips is missing: install your system's libvips development package (pkg-config name 'vips')." >&2; exit 1; \
	  fi; \
	fi
	@command -v $(SWIFT) >/dev/null 2>&1 || { echo "Swift 6 is needed: see https://www.swift.org/install/" >&2; exit 1; }

build: deps
	$(SWIFT) build

demo: build
	$(TANDEM) demo

# Test and bench tools: iproute2 (network namespaces), faketime (a node with a wrong clock; tandem-bench countdown),
# socat (the plain-splice path of tandem-bench relay), python3-venv, and the Python interop peer.
test-deps: deps
	@missing=""; \
	command -v ip >/dev/null 2>&1 || missing="$$missing iproute2"; \
	command -v faketime >/dev/null 2>&1 || missing="$$missing faketime"; \
	command -v socat >/dev/null 2>&1 || missing="$$missing socat"; \
	python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  if command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing$$missing with apt-get…"; \
	    $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	  else echo "Please install:$$missing" >&2; exit 1; fi; \
	fi
	@if [ ! -x $(PY) ] || ! $(PY) -c 'import nacl, pytest, secret_handshake, PIL' >/dev/null 2>&1; then \
	  echo "Setting up $(VENV) (PyNaCl, pytest, secret-handshake, Pillow)…"; \
	  python3 -m venv $(VENV) && \
	  $(PY) -m pip install -q --disable-pip-version-check pynacl async-generator pytest pillow && \
	  $(PY) -m pip install -q --disable-pip-version-check --no-deps secret-handshake; \
	fi

unit-test: deps
	$(SWIFT) build
	$(SWIFT) test --disable-swift-testing

py-test: test-deps
	TANDEM_BIN=$(CURDIR)/$(TANDEM) TANDEM_RELAY_BIN=$(CURDIR)/.build/debug/tandem-relay $(PY) -m pytest -q -p no:cacheprovider Tests/interop Tests/cli Tests/relay Tests/adversarial Tests/lan

test: test-deps
	$(MAKE) --no-print-directory unit-test
	$(MAKE) --no-print-directory py-test
	$(MAKE) --no-print-directory fuzz-short

# protoc from apt; protoc-gen-swift built from the swift-protobuf checkout SwiftPM already resolved.
proto: deps
	@command -v protoc >/dev/null 2>&1 || $(SUDO) apt-get install -y -qq protobuf-compiler >/dev/null
	$(SWIFT) package resolve
	$(SWIFT) build -c release --package-path .build/checkouts/swift-protobuf --scratch-path .build-protoc --product protoc-gen-swift
	protoc --plugin=protoc-gen-swift=.build-protoc/release/protoc-gen-swift --swift_opt=Visibility=Public \
	  --swift_out=Sources/TandemProtocol/Generated --proto_path=Protocol Protocol/*.proto

bench: deps
	@command -v restic >/dev/null 2>&1 || { echo "Installing restic (the vault benchmark's baseline) with apt-get…"; \
	  $(SUDO) apt-get install -y -qq restic >/dev/null; }
	$(SWIFT) build -c release --product tandem-bench
	.build/release/tandem-bench all

# libFuzzer (-sanitize=fuzzer) build of tandem-fuzz; one binary, several targets (tandem-fuzz -list-targets).
# Corpus and crash files go to fuzz-corpus/ (git-ignored); crashes found and kept are in Tests/fuzz-crashes/TARGET/.
FUZZ_CONFIG ?= release
FUZZ_BIN := .build-fuzz/$(FUZZ_CONFIG)/tandem-fuzz
# make test's short run: executions in total, split across the targets in proportion to their
# short-run shares (tandem-fuzz -list-targets, third column: the fast decoder and machine targets
# 4, the structure-aware node and relay targets 1).
FUZZ_SHORT_RUNS ?= 100000

fuzz-build: deps
	$(SWIFT) build -c $(FUZZ_CONFIG) --scratch-path .build-fuzz --product tandem-fuzz -Xswiftc -sanitize=fuzzer -Xswiftc -parse-as-library

# Every target, RUNS executions each (default 1,000,000), growing fuzz-corpus/TARGET.
fuzz: fuzz-build
	@$(FUZZ_BIN) -list-targets | while IFS=$$'\t' read -r target maxlen share summary; do \
	  echo "== fuzz target $$target ($$summary): $${RUNS:-1000000} runs"; \
	  mkdir -p fuzz-corpus/$$target fuzz-corpus/crashes; \
	  $(FUZZ_BIN) -target=$$target -runs=$${RUNS:-1000000} -max_len=$$maxlen -timeout=25 -print_final_stats=1 \
	    -artifact_prefix=fuzz-corpus/crashes/$$target- fuzz-corpus/$$target </dev/null || exit 1; \
	done

# A short run for CI: first the kept crash inputs (Tests/fuzz-crashes/TARGET/*) replayed as regression
# inputs, then FUZZ_SHORT_RUNS executions split across the targets from a fixed seed. Fails on any crash.
fuzz-short: fuzz-build
	@targets=$$($(FUZZ_BIN) -list-targets | cut -f1); shares=$$($(FUZZ_BIN) -list-targets | awk -F'\t' '{ s += $$3 } END { print s }'); \
	for target in $$targets; do \
	  maxlen=$$($(FUZZ_BIN) -list-targets | awk -F'\t' -v t=$$target '$$1 == t { print $$2 }'); \
	  share=$$($(FUZZ_BIN) -list-targets | awk -F'\t' -v t=$$target '$$1 == t { print $$3 }'); \
	  runs=$$(( $(FUZZ_SHORT_RUNS) * share / shares )); \
	  kept=$$(ls Tests/fuzz-crashes/$$target/* 2>/dev/null); \
	  if [ -n "$$kept" ]; then \
	    echo "== $$target: replaying $$(echo $$kept | wc -w) kept inputs from Tests/fuzz-crashes/$$target"; \
	    $(FUZZ_BIN) -target=$$target $$kept >/tmp/tandem-fuzz-$$target.log 2>&1 \
	      || { tail -40 /tmp/tandem-fuzz-$$target.log; echo "fuzz-short: a kept input crashes target $$target" >&2; exit 1; }; \
	  fi; \
	  echo "== $$target: $$runs runs (seed $${FUZZ_SEED:-1})"; \
	  dir=$$(mktemp -d); \
	  $(FUZZ_BIN) -target=$$target -runs=$$runs -seed=$${FUZZ_SEED:-1} -max_len=$$maxlen -timeout=25 -print_final_stats=1 \
	    -artifact_prefix=$$dir/ $$dir >/tmp/tandem-fuzz-$$target.log 2>&1 </dev/null \
	    || { tail -40 /tmp/tandem-fuzz-$$target.log; echo "fuzz-short: target $$target crashed; the input is in $$dir" >&2; exit 1; }; \
	  grep -E "^(stat::number_of_executed_units|Done )" /tmp/tandem-fuzz-$$target.log | head -2; \
	  rm -rf $$dir; \
	done

clean:
	rm -rf .build .build-fuzz .build-protoc $(VENV)
