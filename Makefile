# Switchyard developer targets. Everything runs from the repository root.
GO ?= go

.PHONY: build test bench lint fuzz

build:
	$(GO) build -o bin/epp ./cmd/epp

# The test command the README gives and CI runs.
test:
	$(GO) vet ./...
	$(GO) test -race ./...

# Benchmarks of every plugin and of whole profiles, with allocations.
bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./pkg/...

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Short fuzzing runs over every parser (the corpus stays in testdata/fuzz).
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzLoad -fuzztime=$(FUZZTIME) ./pkg/config/
	$(GO) test -run='^$$' -fuzz=FuzzParseMetricSpec -fuzztime=$(FUZZTIME) ./pkg/plugins/datalayer/coremetrics/
