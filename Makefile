# Tandem — build, test, demo. Every target installs what a fresh Debian/Ubuntu machine lacks.
SHELL := /bin/bash
SWIFT ?= swift
VENV ?= .venv
PY := $(VENV)/bin/python
TANDEM := .build/debug/tandem
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build demo test unit-test xctest py-test py-pool py-timed deps test-deps proto fuzz fuzz-build fuzz-corpus fuzz-short bench clean help install dist deb test-package

all: build

help:
	@echo "make demo   - build and run the two-node demo on loopback"
	@echo "make test   - install test dependencies, build, run every test"
	@echo "make bench  - release build of tandem-bench and a full run (JSON)"
	@echo "make fuzz   - libFuzzer run of every fuzz target (RUNS=N each; make fuzz-short: the short run of make test)"
	@echo "make fuzz-corpus - merge what make fuzz found into the committed seed corpus Tests/fuzz-corpus"
	@echo "make proto  - regenerate Swift code from Protocol/*.proto (needs protoc)"
	@echo "make install - release build with the Swift runtime inside; installs under PREFIX (default /usr/local)"
	@echo "make deb    - dist/tandem_VERSION_ARCH.deb (dpkg-deb); make test-package installs it into a debootstrap root"

# libsodium, zstd, libvips, zbar and libqrencode (and pkg-config to find them). apt-get on Debian/Ubuntu; elsewhere say what to do.
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
	@if ! pkg-config --exists zbar; then \
	  if command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing libzbar-dev (QR keys) with apt-get…"; \
	    $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq libzbar-dev >/dev/null; \
	  elif [ "$$(uname)" = Darwin ]; then \
	    echo "zbar is missing: run 'brew install zbar', then try again." >&2; exit 1; \
	  else \
	    echo "zbar is missing: install your system's zbar development package (pkg-config name 'zbar')." >&2; exit 1; \
	  fi; \
	fi
	@if ! pkg-config --exists libqrencode; then \
	  if command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing libqrencode-dev (the recovery sheet's QR codes) with apt-get…"; \
	    $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq libqrencode-dev >/dev/null; \
	  elif [ "$$(uname)" = Darwin ]; then \
	    echo "libqrencode is missing: run 'brew install qrencode', then try again." >&2; exit 1; \
	  else \
	    echo "libqrencode is missing: install your system's libqrencode development package (pkg-config name 'libqrencode')." >&2; exit 1; \
	  fi; \
	fi
	@command -v $(SWIFT) >/dev/null 2>&1 || { echo "Swift 6 is needed: see https://www.swift.org/install/" >&2; exit 1; }

build: deps
	$(SWIFT) build

# The bedtime part runs a node under libfaketime (Debian's faketime); without it that part says so and is skipped.
demo: build
	@command -v faketime >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1 || { \
	  echo "Installing faketime (the demo's bedtime part) with apt-get…"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq faketime >/dev/null; }
	$(TANDEM) demo --photos Deploy/demo

# Test and bench tools: iproute2 (network namespaces), faketime (a node with a wrong clock; tandem-bench countdown),
# qrencode (QR key images),
# socat (the plain-splice path of tandem-bench relay), python3-venv, and the Python interop peer;
# chromium and its driver with Selenium and axe-core (the dashboard's browser tests, Tests/web).
test-deps: deps
	@missing=""; \
	command -v ip >/dev/null 2>&1 || missing="$$missing iproute2"; \
	command -v faketime >/dev/null 2>&1 || missing="$$missing faketime"; \
	command -v qrencode >/dev/null 2>&1 || missing="$$missing qrencode"; \
	command -v socat >/dev/null 2>&1 || missing="$$missing socat"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null 2>&1 || missing="$$missing chromium-driver"; \
	python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  if command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing$$missing with apt-get…"; \
	    $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	  else echo "Please install:$$missing" >&2; exit 1; fi; \
	fi
	@if [ ! -x $(PY) ] || ! $(PY) -c 'import nacl, pytest, xdist, secret_handshake, PIL, numpy, selenium, axe_selenium_python' >/dev/null 2>&1; then \
	  echo "Setting up $(VENV) (PyNaCl, pytest, pytest-xdist, secret-handshake, Pillow, numpy, Selenium, axe-selenium-python)…"; \
	  python3 -m venv $(VENV) && \
	  $(PY) -m pip install -q --disable-pip-version-check pynacl async-generator pytest pytest-xdist pillow numpy selenium axe-selenium-python && \
	  $(PY) -m pip install -q --disable-pip-version-check --no-deps secret-handshake; \
	fi

unit-test: deps
	$(SWIFT) build --build-tests
	$(MAKE) --no-print-directory xctest

# The XCTests of a build that already has them (unit-test or test built it).
xctest: deps
	$(SWIFT) test --skip-build --disable-swift-testing

# Three workers (pytest-xdist, a file per worker at a time) for the suites that wait on processes;
# then, alone, the ones whose assertions are about timing between nodes (challenges start and end
# within the protocol's 25 ms skew; the LAN namespaces), so the other workers' load never decides
# them. (Tests/lan stays out of the pool: its conftest would shadow the one Tests/web imports from.) PY_TEST_WORKERS=0 runs everything in one process.
PY_TEST_WORKERS ?= 3
PY_TEST_ENV := TANDEM_BIN=$(CURDIR)/$(TANDEM) TANDEM_RELAY_BIN=$(CURDIR)/.build/debug/tandem-relay
PY_TEST_TIMED := Tests/cli/test_challenges.py Tests/lan
py-test:
	$(MAKE) --no-print-directory py-pool
	$(MAKE) --no-print-directory py-timed

py-pool: test-deps
	$(PY_TEST_ENV) $(PY) -m pytest -q -p no:cacheprovider -n $(PY_TEST_WORKERS) --dist loadfile \
	  Tests/interop Tests/cli Tests/relay Tests/adversarial Tests/web $(addprefix --ignore=,$(PY_TEST_TIMED))

py-timed: test-deps
	$(PY_TEST_ENV) $(PY) -m pytest -q -p no:cacheprovider $(PY_TEST_TIMED)

# make test's build: a debug build without debug info (-gnone): the tests need no debugger, and
# emitting and linking DWARF for every module was a fifth of the build (2,432 steps from a fresh
# clone, quiet machine: 412 s -> 327 s of wall time, 730 -> 584 s of user CPU; the same 925 XCTests
# discovered and passed). A plain `swift build` afterwards rebuilds with debug info.
# (Tried and dropped: --disable-index-store — XCTest discovery on Linux reads the index store;
# -Xswiftc -wmo — SwiftPM's link step then misses per-file objects.)
TEST_BUILD_FLAGS ?= -Xswiftc -gnone

# One debug build with the tests; then, side by side (the suites mostly wait on processes, so one of
# them alone leaves a core idle), the XCTests, the process suites and the short fuzz run, each one's
# output printed whole when it ends; then, alone, the timing suites.
test: test-deps
	$(SWIFT) build --build-tests $(TEST_BUILD_FLAGS)
	@echo "make test: XCTests, pytest ($(PY_TEST_WORKERS) workers) and the short fuzz run side by side; each one's output follows when it ends…"
	$(MAKE) --no-print-directory -j3 --output-sync=target xctest py-pool fuzz-short
	$(MAKE) --no-print-directory py-timed

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
# make fuzz grows fuzz-corpus/TARGET (git-ignored; crash files go to fuzz-corpus/crashes/), seeded with
# the committed corpus Tests/fuzz-corpus/TARGET (read only: libFuzzer adds new inputs to the first
# directory only); make fuzz-corpus then merges what it found into Tests/fuzz-corpus/TARGET
# (libFuzzer -merge=1 -use_counters=0: only inputs that reach a coverage edge it does not). Crashes found
# and kept are in Tests/fuzz-crashes/TARGET/ (Tests/fuzz-corpus/README.md, Tests/fuzz-crashes/README.md).
FUZZ_CONFIG ?= release
FUZZ_BIN := .build-fuzz/$(FUZZ_CONFIG)/tandem-fuzz
# make test's short run needs no libFuzzer build: the replayer of the debug build (unit-test built
# it) replays the kept crash inputs and the seed corpus, then runs FUZZ_SHORT_RUNS mutations of them
# from seed FUZZ_SEED (tandem-fuzz -mutate, Mutator.swift), split across the targets in proportion to
# their short-run shares (tandem-fuzz -list-targets, third column). 24,000: about 50 s of CPU (the node
# and relay targets take two thirds), 85 s on a 2-core machine shared with a build.
REPLAY_BIN := .build/debug/tandem-fuzz
FUZZ_SHORT_RUNS ?= 24000
FUZZ_SEED ?= 1

fuzz-build: deps
	$(SWIFT) build -c $(FUZZ_CONFIG) --scratch-path .build-fuzz --product tandem-fuzz -Xswiftc -sanitize=fuzzer -Xswiftc -parse-as-library

# Every target, RUNS executions each (default 1,000,000), growing fuzz-corpus/TARGET.
fuzz: fuzz-build
	@$(FUZZ_BIN) -list-targets | while IFS=$$'\t' read -r target maxlen share summary; do \
	  echo "== fuzz target $$target ($$summary): $${RUNS:-1000000} runs"; \
	  mkdir -p fuzz-corpus/$$target fuzz-corpus/crashes Tests/fuzz-corpus/$$target; \
	  $(FUZZ_BIN) -target=$$target -runs=$${RUNS:-1000000} -max_len=$$maxlen -timeout=25 -print_final_stats=1 \
	    -artifact_prefix=fuzz-corpus/crashes/$$target- fuzz-corpus/$$target Tests/fuzz-corpus/$$target </dev/null || exit 1; \
	done

# Merge fuzz-corpus/TARGET (from make fuzz) into the committed Tests/fuzz-corpus/TARGET: libFuzzer
# adds only the inputs that reach an edge the corpus does not (edges, not hit counts: the corpus stays
# small and cheap to replay), smallest first, named by their SHA-1. Run make fuzz-short, then commit.
fuzz-corpus: fuzz-build
	@$(FUZZ_BIN) -list-targets | while IFS=$$'\t' read -r target maxlen share summary; do \
	  [ -d fuzz-corpus/$$target ] || continue; \
	  mkdir -p Tests/fuzz-corpus/$$target; \
	  before=$$(ls Tests/fuzz-corpus/$$target | wc -l); \
	  $(FUZZ_BIN) -target=$$target -merge=1 -use_counters=0 -max_len=$$maxlen -timeout=25 \
	    Tests/fuzz-corpus/$$target fuzz-corpus/$$target >/tmp/tandem-fuzz-merge-$$target.log 2>&1 </dev/null \
	    || { tail -20 /tmp/tandem-fuzz-merge-$$target.log; echo "fuzz-corpus: merging $$target failed" >&2; exit 1; }; \
	  echo "== $$target: $$before -> $$(ls Tests/fuzz-corpus/$$target | wc -l) inputs in Tests/fuzz-corpus/$$target"; \
	done

# make test's fuzz step: per target, replay Tests/fuzz-crashes/TARGET and Tests/fuzz-corpus/TARGET,
# then run its share of FUZZ_SHORT_RUNS mutations. Fails on any crash or hang (25 s for one input),
# naming the target and the file that holds the input.
fuzz-short: deps
	@[ -x $(REPLAY_BIN) ] || $(SWIFT) build --product tandem-fuzz
	@list=$$($(REPLAY_BIN) -list-targets); shares=$$(echo "$$list" | awk -F'\t' '{ s += $$3 } END { print s }'); \
	while IFS=$$'\t' read -r target maxlen share summary; do \
	  runs=$$(( $(FUZZ_SHORT_RUNS) * share / shares )); \
	  dirs=; for d in Tests/fuzz-crashes/$$target Tests/fuzz-corpus/$$target; do [ ! -d $$d ] || dirs="$$dirs $$d"; done; \
	  out=$$(mktemp -d); \
	  $(REPLAY_BIN) -target=$$target -mutate=$$runs -seed=$(FUZZ_SEED) -max_len=$$maxlen -timeout=25 \
	    -artifact_prefix=$$out/ $$dirs >$$out/log 2>&1 </dev/null \
	    || { rc=$$?; head -25 $$out/log; echo "fuzz-short: target $$target crashed or hung (exit $$rc); the input is in $$out/current-input" \
	           "(replay: $(REPLAY_BIN) -target=$$target $$out/current-input)" >&2; exit 1; }; \
	  tail -1 $$out/log; \
	  rm -rf $$out; \
	done <<< "$$list"

clean:
	rm -rf .build .build-fuzz .build-protoc $(VENV)

# Release binaries with the Swift runtime and Foundation linked in (--static-swift-stdlib): they run
# on a machine without Swift. Built in .build-dist so a debug tree is not disturbed.
PREFIX ?= /usr/local
DESTDIR ?=
VERSION := $(shell sed -n 's/.*static let string = "\(.*\)".*/\1/p' Sources/tandem/Tandem.swift)
DIST_BUILD := .build-dist
DIST_FLAGS := -c release --static-swift-stdlib --scratch-path $(DIST_BUILD)

dist: deps
	$(SWIFT) build $(DIST_FLAGS) --product tandem
	$(SWIFT) build $(DIST_FLAGS) --product tandem-relay

# The binaries, a systemd user unit for the node (systemctl --user enable --now tandem), the system
# units for a node and a relay, the relay's example config and the hooks' examples.
install: dist
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/systemd/user $(DESTDIR)$(PREFIX)/lib/systemd/system \
	  $(DESTDIR)$(PREFIX)/share/doc/tandem/hooks $(DESTDIR)$(PREFIX)/share/tandem/demo
	install -m 0644 Deploy/demo/sky.jpg Deploy/demo/night.jpg $(DESTDIR)$(PREFIX)/share/tandem/demo/
	install -m 0755 $(DIST_BUILD)/release/tandem $(DIST_BUILD)/release/tandem-relay $(DESTDIR)$(PREFIX)/bin/
	sed 's|@BINDIR@|$(PREFIX)/bin|g' Deploy/systemd/user/tandem.service > $(DESTDIR)$(PREFIX)/lib/systemd/user/tandem.service
	sed 's|/usr/local/bin|$(PREFIX)/bin|g' Deploy/systemd/tandem-node.service > $(DESTDIR)$(PREFIX)/lib/systemd/system/tandem-node.service
	sed 's|/usr/local/bin|$(PREFIX)/bin|g' Deploy/systemd/tandem-relay.service > $(DESTDIR)$(PREFIX)/lib/systemd/system/tandem-relay.service
	chmod 0644 $(DESTDIR)$(PREFIX)/lib/systemd/user/tandem.service $(DESTDIR)$(PREFIX)/lib/systemd/system/tandem-*.service
	install -m 0644 README.md Deploy/relay.conf.example $(DESTDIR)$(PREFIX)/share/doc/tandem/
	install -m 0644 Deploy/hooks/README.md Deploy/hooks/*.sh Deploy/hooks/on-message.example $(DESTDIR)$(PREFIX)/share/doc/tandem/hooks/
	@echo "Installed under $(DESTDIR)$(PREFIX). Start the node for your user: systemctl --user daemon-reload && systemctl --user enable --now tandem"

deb: dist
	@command -v dpkg-deb >/dev/null 2>&1 || $(SUDO) apt-get install -y -qq dpkg >/dev/null
	rm -rf $(DIST_BUILD)/stage
	$(MAKE) --no-print-directory install DESTDIR=$(CURDIR)/$(DIST_BUILD)/stage PREFIX=/usr
	Deploy/package/build-deb.sh $(DIST_BUILD)/stage $(VERSION) dist/tandem_$(VERSION)_$$(dpkg --print-architecture).deb

# Downloads a Debian base system (debootstrap): not part of make test.
test-package: deb
	@command -v debootstrap >/dev/null 2>&1 || $(SUDO) apt-get install -y -qq debootstrap >/dev/null
	$(SUDO) Deploy/package/test-deb.sh dist/tandem_$(VERSION)_$$(dpkg --print-architecture).deb $(DIST_BUILD)/rootfs
