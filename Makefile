# Trellis build, test and gate targets. `make check` is what CI runs.
GO      ?= go
PKGS    := ./...
FUZZTIME ?= 10s

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

# Short fuzzing of the loader and the expression glue.
fuzz:
	$(GO) test ./runtime/flow -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runtime/expression -run '^$$' -fuzz '^FuzzCompile$$' -fuzztime $(FUZZTIME)

# The peer workloads (W1-W3) as YAML flows; compare with ../shared/peerbench.
bench:
	$(GO) test ./flows -run '^$$' -bench . -benchmem -count 5

# Rewrite schemas/flow.schema.json and nodes/README.md from the node-kind registry.
schema:
	$(GO) test ./nodes/all -run "TestFlowSchemaUpToDate|TestNodeReferenceUpToDate" -update
