# Outpost — common tasks. `make test` is what CI runs.
GO ?= go
BIN ?= bin/outpost
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# DIST_ID is the version id of remote builds (scripts/dist.sh id): the commit,
# or a hash of the changes; workers compare it with the id a session pins.
DIST_ID ?= $(shell bash scripts/dist.sh id 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X github.com/outpost-sh/outpost/internal/machine.Version=$(VERSION) \
	-X github.com/outpost-sh/outpost/internal/dist.buildID=$(DIST_ID)

.PHONY: build install dist test deps lint cross bench up clean

# build: bin/outpost, and bin/outpost-operator (the Kubernetes operator,
# which `outpost operator` runs: a program of its own so that the
# Kubernetes libraries stay out of the binary every remote starts).
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/outpost
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(dir $(BIN))outpost-operator ./cmd/outpost-operator

# install: outpost into $(go env GOBIN), else $(go env GOPATH)/bin; put
# that directory on PATH.
install:
	$(GO) install -ldflags "$(LDFLAGS)" ./cmd/outpost
	$(GO) install -ldflags "-X main.version=$(VERSION)" ./cmd/outpost-operator

# dist: cross-build the remote for linux amd64/arm64, darwin arm64/amd64 and
# windows amd64/arm64 into
# dist/ in the /dist/ layout (earlier builds there are kept); publish it with
# `outpost server --dist-dir dist`.
dist:
	@GO="$(GO)" VERSION="$(VERSION)" DIST_ID="$(DIST_ID)" bash scripts/dist.sh dist

# lint: formatting, vet and staticcheck (a tool dependency in go.mod, so
# `go tool` fetches the pinned version; checks turned off are in
# staticcheck.conf, each with its reason).
lint:
	@fmt=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$fmt" ]; then echo "gofmt would change:"; echo "$$fmt"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

# CROSS_PLATFORMS are the GOOS/GOARCH pairs besides linux that `make cross`
# checks: workers and remotes run on each.
CROSS_PLATFORMS ?= windows/amd64 windows/arm64 darwin/arm64 darwin/amd64

# cross: the whole module, tests included, type-checks and vets for each of
# CROSS_PLATFORMS (go vet compiles every package and its tests, so a file
# that builds only on Linux shows here). Linux-only parts are behind build
# constraints; see docs/platforms.md.
cross:
	@for p in $(CROSS_PLATFORMS); do \
	  echo "cross: go vet ./... for $$p"; \
	  GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) vet ./... || exit 1; \
	done

# deps: install what the tests need (Debian packages), when missing.
deps:
	@bash scripts/test-deps.sh

# test: dependencies, lint, the cross-platform check, then every test with
# the race detector. The
# operator's tests run a real kube-apiserver and etcd from
# KUBEBUILDER_ASSETS, which scripts/envtest-assets.sh prepares (builds
# kube-apiserver once, about 5 minutes; cached); without them those tests
# skip, or fail when CI is set. The S3 blob store's tests run versitygw,
# which scripts/s3-server.sh builds once (about 4 minutes; cached). Tests
# get a git identity of their own (GIT_CONFIG_GLOBAL, a temporary file),
# so the run never reads or writes your ~/.gitconfig.
test: deps lint cross
	@assets="$${KUBEBUILDER_ASSETS:-$$(bash scripts/envtest-assets.sh)}" || \
	  echo "test: no kube-apiserver/etcd (scripts/envtest-assets.sh failed); the operator's tests skip" >&2; \
	s3="$${OUTPOST_VERSITYGW:-$$(bash scripts/s3-server.sh)}" || \
	  echo "test: no S3-compatible server (scripts/s3-server.sh failed); the S3 blob tests skip" >&2; \
	gitconfig=$$(mktemp) && printf '[user]\n\tname = Outpost Tests\n\temail = tests@outpost.invalid\n' > "$$gitconfig" && \
	KUBEBUILDER_ASSETS="$$assets" OUTPOST_VERSITYGW="$$s3" GIT_CONFIG_GLOBAL="$$gitconfig" $(GO) test -race -count=1 -timeout 25m ./...; \
	rc=$$?; rm -f "$$gitconfig"; exit $$rc

# bench: the benchmarks behind docs/benchmarks.md.
bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./test/bench/...

# up: the whole system locally on embedded defaults.
up:
	$(GO) run ./cmd/outpost up

clean:
	rm -rf bin .outpost
