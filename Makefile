# postern — build, test, demo, benchmarks.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
BIN     := bin

.PHONY: all build test test-short fuzz bench demo clean man

all: build

# A static binary: the same file runs on any Linux of its architecture. On Linux the
# wall's init, an executable of its own built without the host side (the tag), is
# attached after its last byte: each walled run starts that rather than all of
# postern. A binary without it re-executes itself.
#
# Where postern holds the init's capabilities (root, or any user once the same
# C program, in its launch mode, has put postern in a user namespace of its
# own: carry/netwall/ownns), it sets a run's wall up itself and starts a small
# static C program as the run's pid 1 instead of the Go init
# (carry/netwall/fast_linux.go). It is built with $(PID1_CC) when that
# compiles for the target's architecture, and attached to the Go init's image
# in turn; a build without it runs every wall with the Go init.
WALLINIT = CGO_ENABLED=0 $(GO) build -tags postern_wallinit -trimpath -ldflags '-s -w'
ATTACH   = $(GO) run ./internal/wallimage/cmd/attach
# musl where it is installed (musl-tools): its static binaries start in a third
# of the time glibc's take (0.13 against 0.40 ms to start and exit, measured).
PID1_CC ?= $(shell command -v musl-gcc 2>/dev/null || echo cc)
PID1CC   = $(PID1_CC) -static -Os -s -Wall -Wextra -Werror -o
PID1SRC  = carry/netwall/pid1c/pid1.c
# pid1_for ARCH OUT: build the small pid 1 for ARCH at OUT where this C compiler targets it.
pid1_for = case "$(1):$$($(PID1_CC) -dumpmachine 2>/dev/null)" in \
	  amd64:x86_64-*|arm64:aarch64-*) $(PID1CC) $(2) $(PID1SRC) || exit 1 ;; \
	  *) echo "no C compiler for linux/$(1): its walls start the Go init"; false ;; esac
build: agents
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/postern ./cmd/postern
	@if [ "$$($(GO) env GOOS)" = linux ]; then \
	  $(WALLINIT) -o $(BIN)/.postern-wall ./cmd/postern-wall && \
	  { ! { $(call pid1_for,$$($(GO) env GOARCH),$(BIN)/.postern-pid1); } || $(ATTACH) $(BIN)/.postern-wall $(BIN)/.postern-pid1; } && \
	  $(ATTACH) $(BIN)/postern $(BIN)/.postern-wall && rm -f $(BIN)/.postern-wall $(BIN)/.postern-pid1; \
	fi

# Manual pages, one per command, made from the commands themselves.
man:
	CGO_ENABLED=0 $(GO) build -tags man -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/postern-man ./cmd/postern
	rm -rf $(BIN)/man && $(BIN)/postern-man __man $(BIN)/man/man1 && rm -f $(BIN)/postern-man
	@echo "manual pages in $(BIN)/man (man -M $(BIN)/man postern)"

# The agents postern installs on remote machines over ssh: the same static binary,
# built for each OS and architecture a remote may have (Linux machines get the
# network wall, Macs the connect door). The controller picks one by the OS and
# architecture measured on the remote, and finds it in agents/ beside itself.
AGENT_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
.PHONY: agents
agents:
	@mkdir -p $(BIN)/agents
	@for p in $(AGENT_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; \
	  echo "agent $$os/$$arch"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/agents/postern-$$os-$$arch ./cmd/postern || exit 1; \
	  if [ $$os = linux ]; then \
	    GOOS=$$os GOARCH=$$arch $(WALLINIT) -o $(BIN)/agents/.postern-wall-$$arch ./cmd/postern-wall && \
	    { ! { $(call pid1_for,$$arch,$(BIN)/agents/.postern-pid1-$$arch); } || \
	      $(ATTACH) $(BIN)/agents/.postern-wall-$$arch $(BIN)/agents/.postern-pid1-$$arch; } && \
	    rm -f $(BIN)/agents/.postern-pid1-$$arch && \
	    $(ATTACH) $(BIN)/agents/postern-$$os-$$arch $(BIN)/agents/.postern-wall-$$arch && \
	    rm -f $(BIN)/agents/.postern-wall-$$arch || exit 1; \
	  fi; \
	done

# Every tier: pure, real kernel (as root), end to end through the built binary; and
# postern still builds for macOS, where it runs the connect door. No Mac runs here:
# 'go vet' for darwin type-checks every package with its tests (the tests that need
# a Mac included), which is what a 'go test -c' per package would check short of
# linking, in a fraction of the time.
test:
	$(GO) vet ./...
	CGO_ENABLED=0 GOOS=darwin GOARCH=arm64 $(GO) vet ./...
	CGO_ENABLED=0 GOOS=darwin GOARCH=arm64 $(GO) build -o /dev/null ./cmd/postern
	CGO_ENABLED=0 GOOS=darwin GOARCH=amd64 $(GO) build -o /dev/null ./cmd/postern
	$(GO) test -count=1 -timeout 15m ./...

test-short:
	$(GO) test -count=1 -short ./...

# A short run of every fuzz target (go test runs their seed corpora in 'make test').
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 15s -fuzzminimizetime 2s $$pkg || exit 1; \
	  done; \
	done

# The wall (start-up against bare true, bubblewrap and sandbox-runtime; throughput and
# connection setup against a plain network namespace), then the door against squid and
# tinyproxy, then inspected HTTPS (TLS terminated, each request judged, a header
# injected) against mitmproxy doing the same, then the gateway against squid with
# per-user ACLs (1,000 clients, 10,000 idle tunnels), at a size that ends in a few
# minutes. Needs root. What the rows compare
# with (squid, tinyproxy, wrk, mitmproxy, bubblewrap, and ripgrep, socat and npm for
# sandbox-runtime) is installed with apt-get when missing, as root where apt-get
# exists; elsewhere the one apt-get line is printed and the rows without their tool
# are reported as not measured. sandbox-runtime is installed with npm into the user
# cache on first use (-no-srt leaves it out). Then the fleet's own cost with runs
# that cost nothing: overhead per task and slots in use, 100 tasks on 3 machines;
# and the real thing: 100 tasks of true over 3 sshd test machines, against xargs -P
# of 'postern run' and GNU parallel --sshlogin (installed with apt-get when missing).
bench: build
	$(GO) run ./internal/benchmark/cmd/postern-wallbench -postern $(BIN)/postern
	$(GO) run ./internal/benchmark/cmd/postern-bench -postern $(BIN)/postern -quick
	$(GO) run ./internal/benchmark/cmd/postern-inspectbench -postern $(BIN)/postern -quick
	$(GO) run ./internal/benchmark/cmd/postern-gatewaybench -postern $(BIN)/postern -quick
	$(GO) test -run '^$$' -bench BenchmarkDispatch -benchtime 20x ./dispatch/fleet
	$(GO) test -run '^$$' -bench BenchmarkFleetDispatch -benchtime 3x -timeout 30m ./cmd/postern
	$(GO) test -run '^$$' -bench BenchmarkWorkspace -benchtime 1x -timeout 30m ./cmd/postern

demo: build
	$(GO) run ./examples/demo -postern $(BIN)/postern

clean:
	rm -rf $(BIN)
