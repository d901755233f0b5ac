// Package matrix holds the side-by-side benchmark drivers: the request
// path overhead matrix (overhead_test.go) of Switchyard, GIE's v1.5.0 EPP
// and the null EPP, each started with GIE's Helm chart arguments in
// Kubernetes mode against one real kube-apiserver and etcd, on one
// InferencePool whose pods have loopback addresses and serve modelsim's
// metrics.
//
// The drivers are Go tests behind the `bench` build tag, so CI (which
// runs no benchmark) never builds them; `make bench` (short) and
// `make bench-full` run them and write bench/results. The rate search
// (search.go) and how the fixed-rate rounds combine (fixed.go) are
// untagged, so their unit tests run in CI with those of the rest of the
// harness (bench/loadgen, bench/report).
package matrix
