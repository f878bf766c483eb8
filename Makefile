# Outpost — common tasks. `make test` is what CI runs.
GO ?= go
BIN ?= bin/outpost
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION) -X github.com/outpost-sh/outpost/internal/machine.Version=$(VERSION)

.PHONY: build test deps lint bench up clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/outpost

# lint: formatting and vet.
lint:
	@fmt=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$fmt" ]; then echo "gofmt would change:"; echo "$$fmt"; exit 1; fi
	$(GO) vet ./...

# deps: install what the tests need (Debian packages), when missing.
deps:
	@bash scripts/test-deps.sh

# test: dependencies, lint, then every test with the race detector.
test: deps lint
	$(GO) test -race -count=1 -timeout 20m ./...

# bench: the benchmarks behind docs/benchmarks.md.
bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./test/bench/...

# up: the whole system locally on embedded defaults.
up:
	$(GO) run ./cmd/outpost up

clean:
	rm -rf bin .outpost
