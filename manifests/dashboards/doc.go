// Package dashboards holds Switchyard's Grafana dashboards (the *.json files
// of this folder) and gives Go access to every PromQL expression they and
// the PrometheusRule alerts of manifests/overlays/monitoring evaluate.
//
// The files are generated: internal/build defines the dashboards with the
// typed builders of github.com/grafana/grafana-foundation-sdk/go and the
// alerts as Go values, and `go generate ./manifests/dashboards` (or
// `go run ./manifests/dashboards/gen`) writes the JSON, the ConfigMaps that
// ship it to Grafana's dashboard sidecar and the PrometheusRule. A test
// fails when a committed file differs from what the generator produces.
//
// Queries decodes the embedded JSON with the SDK's typed dashboard model and
// lists each panel query; Expand turns Grafana's variables into values a
// plain Prometheus evaluates; Alerts lists the alerting rules and
// TargetJobs is the job regex of the target-down alert. Its tests check
// every expression's metric names, label names and closed label values
// against what Switchyard declares, and run promtool's rule unit tests on
// the alerts. Tests import
// it (this package's, and the end-to-end tests that evaluate every query
// against a real Prometheus); the Switchyard binaries do not. It starts no
// goroutines.
package dashboards
