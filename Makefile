# Switchyard developer targets. Everything runs from the repository root.
GO ?= go

.PHONY: build test bench bench-full bench-quality bench-quality-full gobench lint fuzz

build:
	$(GO) build -o bin/epp ./cmd/epp
	$(GO) build -o bin/site-relay ./cmd/site-relay

# The test command the README gives and CI runs. hack/test-binaries.sh
# builds kube-apiserver, etcd and helm from the Go module proxy the first
# time (about 15 minutes on 2 cores) and reuses them from bin/k8s/ after.
# The e2e tests build the binaries they run with `go build` in the test, a
# dependency go test's result cache cannot see: they always run
# (-count=1), the rest may come from the cache.
test:
	$(GO) vet ./...
	@assets=$$(hack/test-binaries.sh) && \
	  echo "KUBEBUILDER_ASSETS=$$assets" && \
	  KUBEBUILDER_ASSETS=$$assets SWITCHYARD_REQUIRE_KUBE=1 $(GO) test -race $$($(GO) list ./... | grep -v '/test/e2e$$') && \
	  KUBEBUILDER_ASSETS=$$assets SWITCHYARD_REQUIRE_KUBE=1 $(GO) test -race -count=1 ./test/e2e/...

# Side-by-side benchmarks against GIE v1.5.0's EPP and the null EPP
# (bench/matrix, behind the bench build tag so CI never runs them):
# `make bench` is the short matrix (at most 10 minutes), `make bench-full`
# the whole one. Both write bench/results/.
bench:
	@assets=$$(hack/test-binaries.sh) && \
	  KUBEBUILDER_ASSETS=$$assets $(GO) test -tags bench -count=1 -timeout 20m -v -run 'TestOverheadMatrix' ./bench/matrix

bench-full: bench-quality-full
	@assets=$$(hack/test-binaries.sh) && \
	  KUBEBUILDER_ASSETS=$$assets $(GO) test -tags bench -count=1 -timeout 120m -v -run 'TestOverheadMatrix' ./bench/matrix -args -full

# Routing quality (bench/quality): round robin, GIE v1.5.0's default
# profile, Switchyard's default and best profiles on the same seeded traces
# through the in-repo gateway to a modelsim fleet. The short run takes about
# 15 minutes, more than `make bench`'s budget, so it is a target of its own;
# `make bench-full` runs the full one (about 70 minutes). Both write
# bench/results/quality[-short].*.
bench-quality:
	@assets=$$(hack/test-binaries.sh) && \
	  KUBEBUILDER_ASSETS=$$assets $(GO) test -tags bench -count=1 -timeout 40m -v -run 'TestRoutingQuality' ./bench/quality

bench-quality-full:
	@assets=$$(hack/test-binaries.sh) && \
	  KUBEBUILDER_ASSETS=$$assets $(GO) test -tags bench -count=1 -timeout 180m -v -run 'TestRoutingQuality' ./bench/quality -args -full

# Go benchmarks of every plugin and of whole profiles, with allocations.
gobench:
	$(GO) test -run='^$$' -bench=. -benchmem ./pkg/...

# The benchmark drivers (behind the bench build tag) are vetted, hence
# compiled, though CI never runs them.
lint:
	$(GO) vet ./...
	$(GO) vet -tags bench ./bench/...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Fuzzing runs over every fuzz target in the repository (the corpora stay
# in each package's testdata/fuzz). FUZZTIME=60s for a release check.
FUZZTIME ?= 30s
fuzz:
	@set -e; for f in $$(grep -rl --include='*_test.go' '^func Fuzz' pkg cmd); do \
	  dir=./$$(dirname $$f); \
	  for t in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$f | cut -d' ' -f2); do \
	    echo "== $$dir $$t"; \
	    $(GO) test -run='^$$' -fuzz="^$$t\$$" -fuzztime=$(FUZZTIME) $$dir; \
	  done; \
	done
