# Trellis build, test and gate targets. `make check` is what CI runs.
GO      ?= go
PKGS    := ./...
# A count, not a duration: a duration races the fuzz coordinator's deadline
# (go.dev/issue/75804, fixed in Go 1.27) and can fail with no crasher.
FUZZTIME ?= 40000x

.PHONY: build test check bench fmt vet race tidy-check flows fuzz schema peerbench

build:
	$(GO) build -o bin/trellis ./cmd/trellis

test:
	$(GO) test -race -shuffle=on $(PKGS)

check: fmt vet tidy-check race flows fuzz

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

race:
	$(GO) test -race -shuffle=on -count=1 $(PKGS)

tidy-check:
	@cp go.mod /tmp/trellis.go.mod.bak; cp go.sum /tmp/trellis.go.sum.bak; \
	$(GO) mod tidy; \
	if ! git diff --quiet -- go.mod go.sum; then git diff -- go.mod go.sum; \
	  cp /tmp/trellis.go.mod.bak go.mod; cp /tmp/trellis.go.sum.bak go.sum; \
	  echo "go mod tidy changes go.mod/go.sum"; exit 1; fi

# Every flow in flows/ validates with no diagnostics.
flows: build
	./bin/trellis validate flows

# Short fuzzing of the loader, the expression glue, the template checker and
# the JSON decoder.
fuzz:
	$(GO) test ./runtime/flow -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runtime/expression -run '^$$' -fuzz '^FuzzCompile$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runtime/prompt -run '^$$' -fuzz '^FuzzCheck$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runtime/schema -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)

# The peer workloads (W1-W3) as YAML flows; compare with ../shared/peerbench.
bench:
	$(GO) test ./flows -run '^$$' -bench . -benchmem -count 5

# The same workloads on the hand-written floor, eino and Trellis in one
# session: copies the peer suite, adds flows/bench/peer as a package of it
# and runs its interleaved rounds (about 3 minutes).
PEERBENCH ?= ../shared/peerbench
PEERDIR   ?= $(or $(TMPDIR),/tmp)/trellis-peerbench
ROUNDS    ?= 5
peerbench:
	@test -x $(PEERBENCH)/run.sh || { echo "no peer suite at $(PEERBENCH); set PEERBENCH=DIR"; exit 1; }
	rm -rf $(PEERDIR) && cp -r $(PEERBENCH) $(PEERDIR) && mkdir -p $(PEERDIR)/trellis
	grep -v '^//go:build ignore' flows/bench/peer/trellis_test.go > $(PEERDIR)/trellis/trellis_test.go
	cd $(PEERDIR) && $(GO) mod edit -require=github.com/trellisflow/trellis@v0.0.0 -replace=github.com/trellisflow/trellis=$(CURDIR) \
	  && GOFLAGS=-mod=mod $(GO) mod tidy \
	  && TRELLIS_FLOWS=$(CURDIR)/flows/bench PKGS="baseline einob trellis" ROUNDS=$(ROUNDS) ./run.sh

# Rewrite schemas/flow.schema.json and nodes/README.md from the node-kind registry.
schema:
	$(GO) test ./nodes/all -run "TestFlowSchemaUpToDate|TestNodeReferenceUpToDate" -update
