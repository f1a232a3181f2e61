# Tandem — build, test, demo. Every target installs what a fresh Debian/Ubuntu machine lacks.
SHELL := /bin/bash
SWIFT ?= swift
VENV ?= .venv
PY := $(VENV)/bin/python
TANDEM := .build/debug/tandem
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build demo test unit-test py-test deps test-deps proto fuzz bench clean help

all: build

help:
	@echo "make demo   - build and run the two-node demo on loopback"
	@echo "make test   - install test dependencies, build, run every test"
	@echo "make bench  - release build of tandem-bench and a full run (JSON)"
	@echo "make fuzz   - libFuzzer run of the frame and box-stream decoders"
	@echo "make proto  - regenerate Swift code from Protocol/*.proto (needs protoc)"

# libsodium (and pkg-config to find it). apt-get on Debian/Ubuntu; elsewhere say what to do.
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
	@command -v $(SWIFT) >/dev/null 2>&1 || { echo "Swift 6 is needed: see https://www.swift.org/install/" >&2; exit 1; }

build: deps
	$(SWIFT) build

demo: build
	$(TANDEM) demo

# Test tools: iproute2 (network namespaces), faketime (a node with a wrong clock), python3-venv, and the Python interop peer.
test-deps: deps
	@missing=""; \
	command -v ip >/dev/null 2>&1 || missing="$$missing iproute2"; \
	command -v faketime >/dev/null 2>&1 || missing="$$missing faketime"; \
	python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  if command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing$$missing with apt-get…"; \
	    $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	  else echo "Please install:$$missing" >&2; exit 1; fi; \
	fi
	@if [ ! -x $(PY) ] || ! $(PY) -c 'import nacl, pytest, secret_handshake' >/dev/null 2>&1; then \
	  echo "Setting up $(VENV) (PyNaCl, pytest, secret-handshake)…"; \
	  python3 -m venv $(VENV) && \
	  $(PY) -m pip install -q --disable-pip-version-check pynacl async-generator pytest && \
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

# protoc from apt; protoc-gen-swift built from the swift-protobuf checkout SwiftPM already resolved.
proto: deps
	@command -v protoc >/dev/null 2>&1 || $(SUDO) apt-get install -y -qq protobuf-compiler >/dev/null
	$(SWIFT) package resolve
	$(SWIFT) build -c release --package-path .build/checkouts/swift-protobuf --scratch-path .build-protoc --product protoc-gen-swift
	protoc --plugin=protoc-gen-swift=.build-protoc/release/protoc-gen-swift --swift_opt=Visibility=Public \
	  --swift_out=Sources/TandemProtocol/Generated --proto_path=Protocol Protocol/*.proto

bench: deps
	$(SWIFT) build -c release --product tandem-bench
	.build/release/tandem-bench all

fuzz: deps
	$(SWIFT) build -c release --scratch-path .build-fuzz --product tandem-fuzz -Xswiftc -sanitize=fuzzer -Xswiftc -parse-as-library
	.build-fuzz/release/tandem-fuzz -runs=$${RUNS:-1000000} -max_len=70000

clean:
	rm -rf .build .build-fuzz .build-protoc $(VENV)
