# Trellis build, test and gate targets. `make check` is what CI runs.
GO      ?= go
PKGS    := ./...
# A count, not a duration: a duration races the fuzz coordinator's deadline
# (go.dev/issue/75804, fixed in Go 1.27) and can fail with no crasher.
FUZZTIME ?= 40000x

.PHONY: build test check check-stress check-stress-ci deps bench bench-prune fmt vet race tidy-check flows fuzz schema peerbench loadtest sandbox-image \
	livekit-server page page-check bench-voice bench-sandbox bench-validate bench-storage image image-push deploy-check deploy-tools deploy-schemas openapi-lint loadtest-retention schedule-soak \
	bench-retention

# The version the binary reports (in validate's SARIF log): git describe.
VERSION ?= $(shell git describe --always --dirty 2>/dev/null)
build:
	$(GO) build -ldflags "-X github.com/trellisflow/trellis/cmd/trellis/internal/cli.version=$(VERSION)" -o bin/trellis ./cmd/trellis

# go test's bound on each package, against a hang: the default (10
# minutes) is less than a loaded machine gives the end-to-end packages
# (cmd/trellis took more than 10 minutes at load 25).
TESTTIMEOUT ?= 45m

test: deps livekit-server
	$(GO) test -race -shuffle=on -timeout $(TESTTIMEOUT) $(PKGS)

check: deps livekit-server fmt vet tidy-check page-check openapi-lint deploy-check race flows

# What the tests need beyond Go and the PostgreSQL server binaries:
# PgBouncer, which the PostgreSQL store's tests put in front of a server;
# bubblewrap, for the local sandbox; a Docker engine (docker.io), which the
# sandbox's tests start on a private socket; Debian's Python, which the
# sandbox's file tree is made of; and for voice, the offline speech
# engines (flite, sox, pocketsphinx with its US English model and its
# Python module, which keeps the recogniser loaded), the Opus
# codec (libopus0), Chromium for the voice page's test, and iproute2 for
# the private network namespace the voice tests run in. As root with
# apt-get (a fresh Debian machine) they are installed; otherwise the
# tests that need them fail and say how to install them. pkg:NAME is a
# package with no command to look for.
DEPS := pgbouncer:pgbouncer bwrap:bubblewrap dockerd:docker.io /usr/bin/python3:python3 \
	flite:flite sox:sox pocketsphinx_continuous:pocketsphinx pkg:pocketsphinx-en-us pkg:python3-pocketsphinx \
	pkg:libopus0 chromium:chromium ip:iproute2
deps:
	@missing=; for d in $(DEPS); do cmd=$${d%%:*}; pkg=$${d#*:}; \
	  if [ "$$cmd" = pkg ]; then \
	    dpkg-query -W -f='$${Status}' $$pkg 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$pkg"; \
	  elif ! command -v $$cmd >/dev/null && [ ! -x /usr/sbin/$$cmd ]; then missing="$$missing $$pkg"; fi; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing$$missing"; export DEBIAN_FRONTEND=noninteractive; log=$$(mktemp); \
	    if ! { apt-get install -y -q --no-install-recommends $$missing || \
	      { apt-get update -q && apt-get install -y -q --no-install-recommends $$missing; }; } >$$log 2>&1; then \
	      cat $$log; rm -f $$log; exit 1; fi; rm -f $$log; \
	  else echo "missing packages:$$missing (the store's, the sandbox's and the voice tests need them)"; fi; \
	fi
	@# gVisor for the sandbox's runsc cases, where Debian's package installs
	@if ! command -v runsc >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends runsc >/dev/null 2>&1; then \
	    echo "installed runsc (gVisor): the sandbox's tests run their cases under it too"; \
	  else echo "runsc (gVisor) did not install: the sandbox's gVisor cases are skipped"; fi; fi
	@# the schema's strict-validator test, the editor test and the
	@# drawings' test run Node.js packages: installed with npm (when there
	@# is one) into .ci/.yls
	@if command -v npm >/dev/null && { [ ! -f .ci/.yls/node_modules/ajv/dist/2020.js ] || \
	  [ ! -e .ci/.yls/node_modules/.bin/yaml-language-server ] || [ ! -d .ci/.yls/node_modules/mermaid ] || \
	  [ ! -d .ci/.yls/node_modules/jsdom ]; }; then \
	  echo "installing ajv, yaml-language-server, mermaid and jsdom with npm into .ci/.yls"; \
	  npm install --prefix .ci/.yls --no-audit --no-fund --loglevel=error yaml-language-server@1 ajv@8 mermaid@11 jsdom@24 >/dev/null; fi
	@# the API document's linter (Redocly) and the generated TypeScript
	@# client's tools (openapi-typescript, TypeScript, openapi-fetch), at
	@# the versions .ci/openapi/package-lock.json pins
	@if command -v npm >/dev/null && { [ ! -x $(OPENAPI_TOOLS)/redocly ] || [ ! -x $(OPENAPI_TOOLS)/openapi-typescript ] || \
	  [ .ci/openapi/package-lock.json -nt .ci/openapi/node_modules/.package-lock.json ]; }; then \
	  echo "installing Redocly, openapi-typescript, TypeScript and openapi-fetch with npm into .ci/openapi"; \
	  (cd .ci/openapi && npm ci --no-audit --no-fund --loglevel=error >/dev/null); fi
	@# the studio's accessibility test injects axe-core, which its web
	@# package pins
	@if command -v npm >/dev/null && [ ! -f cmd/trellis/internal/studio/web/node_modules/axe-core/axe.min.js ]; then \
	  echo "installing the studio's npm packages (axe-core, for its accessibility test) into cmd/trellis/internal/studio/web"; \
	  (cd cmd/trellis/internal/studio/web && npm ci --no-audit --no-fund --loglevel=error >/dev/null); fi

# Redocly's recommended rules on the API's OpenAPI document: no error and
# no warning but those schemas/.redocly.lint-ignore.yaml justifies.
OPENAPI_TOOLS := .ci/openapi/node_modules/.bin
openapi-lint:
	@test -x $(OPENAPI_TOOLS)/redocly || { echo "openapi-lint needs Redocly: make deps installs it with npm into .ci/openapi"; exit 1; }
	@if ! $(OPENAPI_TOOLS)/redocly lint --config schemas/redocly.yaml --format=json schemas/openapi.yaml 2>/dev/null | \
	  node -e 'let s = ""; process.stdin.on("data", (d) => { s += d; }).on("end", () => { const t = JSON.parse(s).totals; process.exit(t.errors + t.warnings ? 1 : 0); })'; then \
	  $(OPENAPI_TOOLS)/redocly lint --config schemas/redocly.yaml --format=stylish schemas/openapi.yaml 2>/dev/null; \
	  echo "schemas/openapi.yaml: fix what Redocly finds, or justify a warning in schemas/.redocly.lint-ignore.yaml"; exit 1; fi

# The LiveKit server the voice tests run (in a private network namespace),
# built from the Go module proxy into the user's cache once (about four
# minutes cold) and reused; the tests find it there, or at
# TRELLIS_LIVEKIT_SERVER.
LIVEKIT_VERSION ?= v1.13.5
LIVEKIT_DIR     ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/trellis/livekit-$(LIVEKIT_VERSION)
livekit-server:
	@if [ ! -x $(LIVEKIT_DIR)/server ]; then \
	  echo "building livekit-server $(LIVEKIT_VERSION) into $(LIVEKIT_DIR) (once; a few minutes)"; \
	  mkdir -p $(LIVEKIT_DIR) && GOBIN=$(LIVEKIT_DIR) $(GO) install -trimpath -ldflags='-s -w' \
	    github.com/livekit/livekit-server/cmd/server@$(LIVEKIT_VERSION); fi

# The pages' scripts, each bundled with esbuild at the versions its
# package-lock.json pins: the voice page's (the LiveKit JS client and its
# code) and the studio's (CodeMirror, dagre and its code). The bundles are
# committed (the command builds with Go alone); page-check fails when one
# differs from a fresh build of its sources.
PAGES := cmd/trellis/internal/page cmd/trellis/internal/studio
page:
	@set -e; for p in $(PAGES); do \
	  (cd $$p/web && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build); done
page-check:
	@command -v npm >/dev/null || { echo "page-check needs npm (Node.js)"; exit 1; }
	@set -e; for p in $(PAGES); do \
	  dir=$$(mktemp -d); trap 'rm -rf $$dir' EXIT; \
	  mkdir -p $$dir/web $$dir/dist; cp -r $$p/web/package.json $$p/web/package-lock.json $$p/web/src $$dir/web/; \
	  (cd $$dir/web && npm ci --no-audit --no-fund --loglevel=error >/dev/null && npm run --silent build >/dev/null 2>&1); \
	  if ! cmp -s $$dir/dist/app.js $(CURDIR)/$$p/dist/app.js; then \
	    echo "$$p/dist/app.js differs from a fresh build of $$p/web: run make page and commit it"; exit 1; fi; \
	  rm -rf $$dir; done

# A spoken turn's stages (end of speech → transcript → reply → first
# audio packet) through a real LiveKit server and the offline speech
# engines. Not part of check: about a minute.
bench-voice: livekit-server
	$(GO) test ./cmd/trellis/internal/voice -run '^$$' -bench SpokenTurn -benchtime 5x -timeout 20m

# What the store keeps per turn of the nine-turn interview served through
# the API (the test model streaming its replies), on SQLite and
# PostgreSQL: with every event, and once the event retention has passed
# (tokens merged or dropped). Not part of check: about a minute.
bench-storage:
	$(GO) test ./runtime/api/server -run '^$$' -bench StoragePerTurn -benchtime 20x -timeout 20m

# The sandbox's file tree (Python, Node.js and the runners' tools, from
# this machine's packages) in SANDBOX_ROOT, imported into the Docker engine
# DOCKER_HOST names as $(SANDBOX_IMAGE). The local backend runs on the tree
# itself: TRELLIS_SANDBOX_ROOT=$(SANDBOX_ROOT); as root, the tree is where
# the sandbox's user (65534) can reach it.
SANDBOX_ROOT  ?= $(if $(filter 0,$(shell id -u)),/var/cache/trellis/sandbox-root,$(HOME)/.cache/trellis/sandbox-root)
SANDBOX_IMAGE ?= trellis-sandbox:1
sandbox-image:
	sh nodes/sandbox/image/rootfs.sh $(SANDBOX_ROOT)
	tar -C $(SANDBOX_ROOT) -c . | docker import - $(SANDBOX_IMAGE)

# One trivial execution at a time on each backend (local, Docker cold and
# warm, gVisor), and rounds of 8 at once. Not part of check: two minutes.
bench-sandbox:
	$(GO) test ./nodes/sandbox -run '^$$' -bench Trivial -benchtime 40x -timeout 20m
	$(GO) test ./nodes/sandbox -run '^$$' -bench Concurrent -benchtime 5x -timeout 20m

# The image of `trellis serve` (cmd/trellis/deploy/Dockerfile), built
# offline: image.sh assembles its context in IMAGE_DIR (the binary,
# static, CA certificates, the flows, the SBOM) on an empty base, and the
# Docker engine DOCKER_HOST names builds it as IMAGE, tagged with the
# revision (never latest); its SBOM is IMAGE_DIR/sbom.spdx.json. The
# deployment files beside it (compose.yaml, kubernetes/) run it by that
# tag or, pushed, by its digest: make image-push pushes IMAGE (a
# registry's name) and prints the digest to pin.
IMAGE     ?= trellis:$(VERSION)
IMAGE_DIR ?= $(or $(TMPDIR),/tmp)/trellis-image
image:
	GO=$(GO) sh cmd/trellis/deploy/image.sh $(IMAGE_DIR)
	docker build -t $(IMAGE) $(IMAGE_DIR)
	@echo "built $(IMAGE) ($$(docker image inspect --format '{{.Id}}' $(IMAGE))); its SBOM: $(IMAGE_DIR)/sbom.spdx.json"
image-push:
	docker push $(IMAGE)
	@digest=$$(docker image inspect --format '{{index .RepoDigests 0}}' $(IMAGE)); \
	  echo "pushed $$digest; pin it: (cd cmd/trellis/deploy/kubernetes && kustomize edit set image trellis=$$digest)"

# The deployment files against their schemas, offline, in seconds once
# the tools are built: every Kubernetes manifest with kubeconform against
# the schemas cmd/trellis/deploy/kubeconform carries (Kubernetes 1.30,
# made by make deploy-schemas; kubeconform alone would download them),
# strict (a field no schema declares is an error); the compose file with
# the Compose Specification's loader. Both tools come from the Go module
# proxy at the pinned versions and are built once into the user's cache
# (about a minute cold), as the LiveKit server is.
TOOLS_DIR          ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/trellis
KUBECONFORM_VERSION ?= v0.8.0
KUBECONFORM        ?= $(TOOLS_DIR)/kubeconform-$(KUBECONFORM_VERSION)/kubeconform
COMPOSE_SPEC_VERSION ?= v2.16.2
COMPOSE_CHECK      ?= $(TOOLS_DIR)/compose-spec-$(COMPOSE_SPEC_VERSION)/cmd
KUBE_SCHEMAS       := cmd/trellis/deploy/kubeconform/kubernetes-1.30
deploy-tools:
	@if [ ! -x $(KUBECONFORM) ]; then echo "building kubeconform $(KUBECONFORM_VERSION) into $(dir $(KUBECONFORM)) (once)"; \
	  mkdir -p $(dir $(KUBECONFORM)) && GOBIN=$(dir $(KUBECONFORM)) $(GO) install github.com/yannh/kubeconform/cmd/kubeconform@$(KUBECONFORM_VERSION); fi
	@if [ ! -x $(COMPOSE_CHECK) ]; then echo "building the Compose Specification's loader $(COMPOSE_SPEC_VERSION) into $(dir $(COMPOSE_CHECK)) (once)"; \
	  mkdir -p $(dir $(COMPOSE_CHECK)) && GOBIN=$(dir $(COMPOSE_CHECK)) $(GO) install github.com/compose-spec/compose-go/v2/cmd@$(COMPOSE_SPEC_VERSION); fi
deploy-check: deploy-tools
	$(KUBECONFORM) -strict -summary -schema-location '$(KUBE_SCHEMAS)/{{ .ResourceKind }}{{ .KindSuffix }}.json' \
	  -ignore-filename-pattern 'kustomization\.yaml$$' cmd/trellis/deploy/kubernetes
	@# the loader does not read the environment: the variables compose.yaml
	@# requires stay as they are written
	cd cmd/trellis/deploy && $(COMPOSE_CHECK) -no-interpolation compose.yaml >/dev/null && echo "compose.yaml: valid"

# Rewrite the schemas deploy-check validates the manifests against from
# the OpenAPI documents of Kubernetes 1.30 that kubectl-validate carries
# (a kind the manifests start using is added to generate.go's list).
KUBECTL_VALIDATE ?= sigs.k8s.io/kubectl-validate@v0.0.4
deploy-schemas:
	@dir=$$($(GO) mod download -json $(KUBECTL_VALIDATE) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p'); \
	cd $(KUBE_SCHEMAS) && $(GO) run generate.go $$dir/pkg/openapiclient/builtins/1.30 .

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# go test runs as many packages at once as the machine has cores (its
# default -p, and -parallel within a package): the end-to-end packages
# each run CPU-heavy processes of their own (race-built servers, Docker
# and gVisor, Chromium, pocketsphinx, a LiveKit server), and the voice
# tests carry real-time audio, which more at once starves first. The
# sandbox's package runs by itself afterwards, beside a busy loop per
# core (.ci/busy): its hostile suite is judged on a loaded machine every
# time, and the load it adds starves no other package's tests.
SANDBOX_PKGS := ./nodes/sandbox/...
race:
	$(GO) test -race -shuffle=on -count=1 -timeout $(TESTTIMEOUT) $$($(GO) list $(PKGS) | grep -v '/nodes/sandbox')
	.ci/busy -- $(GO) test -race -shuffle=on -count=1 -timeout $(TESTTIMEOUT) $(SANDBOX_PKGS)

# The packages whose tests are about time or run real processes beside
# each other (the sandbox, the schedules, the server, the command's
# end-to-end tests, voice and speech, the stores), STRESSCOUNT times
# each, beside a busy loop per core (.ci/busy): a verdict that depends
# on how fast the machine is fails here first. Three clean runs in a row
# before a change to these packages is called done; CI runs it once.
STRESS_PKGS ?= ./nodes/sandbox/... ./runtime/schedule ./runtime/api/server ./cmd/trellis \
	./cmd/trellis/internal/voice/... ./cmd/trellis/internal/speech ./runtime/store/...
STRESSCOUNT ?= 3
check-stress: deps livekit-server
	.ci/busy -- $(GO) test -race -shuffle=on -count=$(STRESSCOUNT) -timeout 4h $(STRESS_PKGS)

# CI's shorter form, after make check: once, and without the sandbox's
# package, which make check's race target ran beside the busy loops
# already.
check-stress-ci:
	$(MAKE) check-stress STRESSCOUNT=1 STRESS_PKGS="$(filter-out $(SANDBOX_PKGS),$(STRESS_PKGS))"

# A schedule every second on three servers sharing SQLite and PostgreSQL
# starts exactly one run per tick, for 30 ticks (the race test watches 6).
schedule-soak:
	$(GO) test -count=1 -run 'TestScheduleOneRunPerTickOnThreeServers' ./runtime/api/server -v -schedule-ticks 30

tidy-check:
	@cp go.mod /tmp/trellis.go.mod.bak; cp go.sum /tmp/trellis.go.sum.bak; \
	$(GO) mod tidy; \
	if ! git diff --quiet -- go.mod go.sum; then git diff -- go.mod go.sum; \
	  cp /tmp/trellis.go.mod.bak go.mod; cp /tmp/trellis.go.sum.bak go.sum; \
	  echo "go mod tidy changes go.mod/go.sum"; exit 1; fi

# Every flow in flows/ validates with no diagnostics, its flow tests
# pass, each also with the state read back between steps (--reload), and
# the datasets beside them (*.eval.yaml) pass offline: every expectation
# holds or is a known failure that still fails.
flows: build
	./bin/trellis validate flows
	./bin/trellis test --reload flows
	./bin/trellis eval flows

# Short fuzzing of the loader, the expression glue, the template checker,
# the JSON decoder, the state values (normalised, each reads back as it
# is held), the HTTP API's request bodies, the command's input values and
# store addresses, whole command lines over generated flows, and the
# differential check of the validator against the engine (random flows
# that validate clean must run, and run alike with their state read back
# between steps; a flow it warns about must fail on some input; what they
# find is kept in nodes/all/testdata/fuzz/FuzzDifferential and
# FuzzWarnings).
fuzz:
	$(GO) test ./runtime/flow -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runtime/expression -run '^$$' -fuzz '^FuzzCompile$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runtime/expression -run '^$$' -fuzz '^FuzzFastPath$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runtime/tmpl -run '^$$' -fuzz '^FuzzCheck$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runtime/value -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runtime/value -run '^$$' -fuzz '^FuzzNormalize$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runtime/engine -run '^$$' -fuzz '^FuzzEventJSON$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runtime/api/server -run '^$$' -fuzz '^FuzzRequests$$' -fuzztime 10000x
	$(GO) test ./cmd/trellis -run '^$$' -fuzz '^FuzzInputsAndStores$$' -fuzztime 3000x
	$(GO) test ./cmd/trellis -run '^$$' -fuzz '^FuzzCommandLine$$' -fuzztime 3000x
	$(GO) test ./nodes/all -run '^$$' -fuzz '^FuzzDifferential$$' -fuzztime 20000x
	$(GO) test ./nodes/all -run '^$$' -fuzz '^FuzzWarnings$$' -fuzztime 3000x

# The peer workloads (W1-W3) as YAML flows; compare with ../shared/peerbench.
bench:
	$(GO) test ./flows -run '^$$' -bench . -benchmem -count 5

# The same workloads on the hand-written floor, eino and Trellis in one
# session: copies the peer suite, adds flows/bench/peer as a package of it
# and runs its interleaved rounds (about 3 minutes). BEFORE=REV adds the
# same package built from revision REV (as module trellisbefore), so a
# change is measured against its base in the same rounds.
PEERBENCH ?= ../shared/peerbench
PEERDIR   ?= $(or $(TMPDIR),/tmp)/trellis-peerbench
ROUNDS    ?= 5
BEFORE    ?=
peerbench:
	@test -x $(PEERBENCH)/run.sh || { echo "no peer suite at $(PEERBENCH); set PEERBENCH=DIR"; exit 1; }
	rm -rf $(PEERDIR) && cp -r $(PEERBENCH) $(PEERDIR) && mkdir -p $(PEERDIR)/trellis
	grep -v '^//go:build ignore' flows/bench/peer/trellis_test.go > $(PEERDIR)/trellis/trellis_test.go
	cd $(PEERDIR) && $(GO) mod edit -require=github.com/trellisflow/trellis@v0.0.0 -replace=github.com/trellisflow/trellis=$(CURDIR)
	@if [ -n "$(BEFORE)" ]; then \
	  set -e; src=$(PEERDIR)/before-src; mkdir -p $$src $(PEERDIR)/trellisbefore; \
	  git archive $(BEFORE) | tar -x -C $$src; \
	  grep -rl 'github.com/trellisflow/trellis' $$src --include='*.go' --include=go.mod | \
	    xargs sed -i 's#github.com/trellisflow/trellis\b#github.com/trellisflow/trellisbefore#g'; \
	  grep -v '^//go:build ignore' $$src/flows/bench/peer/trellis_test.go | \
	    sed 's/^package trellis$$/package trellisbefore/; s/TRELLIS_FLOWS/TRELLIS_FLOWS_BEFORE/' > $(PEERDIR)/trellisbefore/trellis_test.go; \
	  cd $(PEERDIR) && $(GO) mod edit -require=github.com/trellisflow/trellisbefore@v0.0.0 -replace=github.com/trellisflow/trellisbefore=$$src; \
	fi
	cd $(PEERDIR) && GOFLAGS=-mod=mod $(GO) mod tidy \
	  && TRELLIS_FLOWS=$(CURDIR)/flows/bench TRELLIS_FLOWS_BEFORE=$(PEERDIR)/before-src/flows/bench \
	     PKGS="baseline einob trellis$(if $(BEFORE), trellisbefore)" ROUNDS=$(ROUNDS) ./run.sh

# The served interview under load: `trellis dev loadtest` drives a
# `trellis serve` process with LOADTHREADS concurrent interview threads
# (each greeted, then LOADTURNS turns) against the test model server
# answering in 200 ms, on SQLite and on a throwaway PostgreSQL cluster
# (PostgreSQL's default durability, statements prepared once per
# connection as a direct connection allows; a new database each run), and reports
# throughput, turn latency, the server's overhead above the model's time,
# its CPU time per turn and its memory per idle thread; then LOADPEOPLE
# people who think LOADTHINK before each answer. BEFORE=REV also builds
# that revision and loads it the same way first, with the ratios.
# Not part of check: a few minutes.
LOADTHREADS ?= 100 1000
LOADTURNS   ?= 3
LOADPEOPLE  ?= 1000
LOADTHINK   ?= 5s
PGBIN       ?= /usr/lib/postgresql/15/bin
PGPORT      ?= 55439
loadtest: build
	@set -e; dir=$$(mktemp -d); as=""; \
	if [ "$$(id -u)" = 0 ]; then chown postgres $$dir; as="runuser -u postgres --"; fi; \
	trap "$$as $(PGBIN)/pg_ctl -D $$dir/data -m immediate stop >/dev/null 2>&1; rm -rf $$dir" EXIT; \
	$$as $(PGBIN)/initdb -D $$dir/data -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null; \
	$$as $(PGBIN)/pg_ctl -D $$dir/data -l $$dir/server.log -w -t 30 \
	  -o "-c listen_addresses=127.0.0.1 -p $(PGPORT) -k $$dir -c max_connections=300" start >/dev/null; \
	pg="postgres://postgres@127.0.0.1:$(PGPORT)/postgres"; \
	before="$(if $(BEFORE),--before $(BEFORE))"; \
	for n in $(LOADTHREADS); do \
	  ./bin/trellis dev loadtest --threads $$n --turns $(LOADTURNS) $$before; \
	  ./bin/trellis dev loadtest --threads $$n --turns $(LOADTURNS) $$before --store $$pg; \
	done; \
	./bin/trellis dev loadtest --threads $(LOADPEOPLE) --turns $(LOADTURNS) --think $(LOADTHINK) $$before; \
	./bin/trellis dev loadtest --threads $(LOADPEOPLE) --turns $(LOADTURNS) --think $(LOADTHINK) $$before --store $$pg

# The served interview under load with the server's retention deleting
# PRUNEBESIDE idle threads (nine-turn interviews, 40 days old) beside it,
# against the same load without it, rounds alternating: 50 candidates
# taking turns without pause, a new interview after nine turns, each round
# on a new store (a SQLite file; a database of a throwaway PostgreSQL
# cluster). Reports throughput, p50 and p99 of each and how many threads
# the retention deleted during the window. Not part of check: ~15 minutes.
PRUNEBESIDE ?= 2000
PRUNEARGS   ?= --threads 50 --turns 9 --window 1m --rounds 2
loadtest-retention: build
	@set -e; dir=$$(mktemp -d); as=""; \
	if [ "$$(id -u)" = 0 ]; then chown postgres $$dir; as="runuser -u postgres --"; fi; \
	trap "$$as $(PGBIN)/pg_ctl -D $$dir/data -m immediate stop >/dev/null 2>&1; rm -rf $$dir" EXIT; \
	$$as $(PGBIN)/initdb -D $$dir/data -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null; \
	$$as $(PGBIN)/pg_ctl -D $$dir/data -l $$dir/server.log -w -t 30 \
	  -o "-c listen_addresses=127.0.0.1 -p $(PGPORT) -k $$dir -c max_connections=300" start >/dev/null; \
	./bin/trellis dev loadtest --prune-beside $(PRUNEBESIDE) $(PRUNEARGS); \
	./bin/trellis dev loadtest --prune-beside $(PRUNEBESIDE) $(PRUNEARGS) --store postgres://postgres@127.0.0.1:$(PGPORT)/postgres

# How fast the retention packs runs' events, on SQLite and PostgreSQL:
# with the whole machine (runs/s and events/s over 2,000 runs of the
# interview's events), and under load (20 clients taking interview turns
# while the server's sweeps delete 300 idle threads and pack a backlog of
# 3,000 runs and the runs the turns end: runs packed, threads deleted and
# runs served per second, and runs left to pack). Not part of check:
# about three minutes.
bench-retention:
	$(GO) test ./runtime/api/server -run '^$$' -bench PackEvents -benchtime 2000x -timeout 20m
	$(GO) test ./runtime/api/server -run '^$$' -bench RetentionUnderLoad -benchtime 1x -timeout 20m

# Prune on threads of 10^3, 10^5 and 10^6 checkpoints, on SQLite and on
# PostgreSQL (with its default durability). Not part of check: a minute.
bench-prune:
	$(GO) test ./runtime/store/sqlite -run '^$$' -bench Prune -benchtime 1x -timeout 30m
	$(GO) test ./runtime/store/postgres -run '^$$' -bench Prune -benchtime 1x -timeout 30m

# `trellis validate` on the two reference flows as a whole process (start,
# load, validate, exit), RUNS times each, interleaved with the binary of
# revision BEFORE (when given) so that both meet the same machine load:
# median, p90 and fastest wall time per process, and the CPU time (user
# and system) a run takes, which the machine's load moves less. Not part
# of check.
RUNS ?= 20
VALIDATE_FLOWS ?= flows/interview.yaml flows/resume_review.yaml
bench-validate: build
	@set -e; dir=$$(mktemp -d); trap 'rm -rf $$dir' EXIT; bins=bin/trellis; \
	if [ -n "$(BEFORE)" ]; then \
	  mkdir -p $$dir/src && git archive $(BEFORE) | tar -x -C $$dir/src && \
	  (cd $$dir/src && $(GO) build -o $$dir/before ./cmd/trellis) && bins="$$dir/before bin/trellis"; fi; \
	for b in $$bins; do $$b validate $(VALIDATE_FLOWS) 2>/dev/null >/dev/null || { echo "$$b validate fails"; exit 1; }; done; \
	cpu=; [ -x /usr/bin/time ] && cpu="/usr/bin/time -q -f %U+%S -a -o"; \
	for i in $$(seq $(RUNS)); do for b in $$bins; do \
	  s=$$(date +%s%N); $${cpu:+$$cpu $$dir/cpu.$$(basename $$b)} $$b validate $(VALIDATE_FLOWS) >/dev/null 2>&1; e=$$(date +%s%N); \
	  echo "$$b $$(( (e - s) / 1000 ))" >> $$dir/times; done; done; \
	for b in $$bins; do name=$$b; [ "$$b" = "$$dir/before" ] && name="BEFORE=$(BEFORE)"; \
	  c=$$( [ -f $$dir/cpu.$$(basename $$b) ] && awk -F+ '{s += $$1 + $$2} END {printf "  cpu %.0f ms a run", s / NR * 1000}' $$dir/cpu.$$(basename $$b)); \
	  grep "^$$b " $$dir/times | cut -d' ' -f2 | sort -n | awk -v n="$$name" -v c="$$c" '{t[NR]=$$1} END { \
	    m = (NR % 2) ? t[(NR+1)/2] : (t[NR/2] + t[NR/2+1]) / 2; p = t[int(NR*0.9 + 0.999999)]; \
	    printf "%-24s %d runs  median %6.1f ms  p90 %6.1f ms  fastest %6.1f ms%s\n", n, NR, m/1000, p/1000, t[1]/1000, c }'; done

# Rewrite schemas/flow.schema.json and nodes/README.md from the node-kind registry.
schema:
	$(GO) test ./nodes/all -run "TestFlowSchemaUpToDate|TestNodeReferenceUpToDate" -update
	$(GO) test ./runtime/eval -run "TestFormatSchemaUpToDate" -update
