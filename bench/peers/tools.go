//go:build tools

// Package peers pins the peer EPPs the benchmarks compare against, in a
// module of their own so the product's module never requires their EPP
// packages: `go build -o ../../bin/gie-epp sigs.k8s.io/gateway-api-inference-extension/cmd/epp`
// (run by bench/run.sh) builds GIE's v1.5.0 EPP.
package peers

import _ "sigs.k8s.io/gateway-api-inference-extension/cmd/epp"
