// Package endpointsfile is the standalone endpoint source: it reads the
// pool's endpoints from a YAML (or JSON) file, applies them to a
// datastore.Store with Replace, and watches the file for changes. It needs
// no Kubernetes cluster.
//
// Who may import it: cmd/epp (standalone mode) and tests.
//
// # File format
//
//	endpoints:
//	- name: sim-0              # required, unique: letters, digits, '-', '_', '.'
//	  address: 127.0.0.1       # required: IP address (IPv6 without brackets) or host name
//	  port: 8001               # required: 1..65535
//	  namespace: default       # optional; Endpoint.Key() becomes "default/sim-0"
//	  podName: sim-0           # optional
//	  labels: {app: vllm}      # optional; Kubernetes label keys and string values
//	  weight: 1                # optional, default 1: relative capacity, 1..1000000
//	  metricsPort: 0           # optional; 0 or absent = port
//	  metricsPath: /metrics    # optional; absent = the metrics-data-source path
//	  engine: vllm             # optional; absent = chosen from labels by the
//	                           #   core-metrics-extractor (engine label, default engine)
//	  providerTpm: 200000      # optional: tokens per minute the provider allows, 1..1000000000;
//	                           #   advisory (usage-weight-scorer), never enforced
//	  providerRpm: 500         # optional: requests per minute, same rules
//	  internal: false          # optional; true = only for caller-scope-filter's internalCallers
//	  scrape: true             # optional, default true; false = no metrics to read: never
//	                           #   scraped, always fresh, its load not measured
//	  models:                  # optional; absent or [] = serves every model
//	  - name: meta-llama/Llama-3.1-8B-Instruct  # required: the served name
//	    aliases: [llama-8b]    # optional: names that resolve to it here
//	    pricing: {input: 0.15, output: 0.6}     # optional: USD per 1M tokens, both required;
//	                           #   null or {} = unpriced (shadows the catalog)
//
// `endpoints: []` is an empty pool. Decoding is strict: unknown keys (with a
// "did you mean" hint), repeated keys, wrong types (e.g. an unquoted label
// value `true`), a second YAML document and an empty file are errors.
// Names and address:port pairs must be unique; within an endpoint, a model
// name or alias may appear once (at most 256 models, 64 aliases each,
// prices 0..1000000). Parse reports every problem
// at once with its path, e.g. `endpoints[2].port: must be 1..65535, got 0`.
//
// # Reloading
//
// Source.Load reads the file once (an error should fail start-up) and marks
// the store synced. Source.Run watches the file's directory with fsnotify,
// so that editors' atomic renames and Kubernetes ConfigMap symlink swaps
// are seen, waits 100 ms for events to settle, and re-reads the file (also
// every 10 s as a safety net). Unchanged content is ignored. A broken file
// is refused with an error log and
// switchyard_endpoints_file_reloads_total{result="failure"}; the last good
// endpoint set stays in the store. Endpoints whose identity (namespace,
// name, address, port) is unchanged keep their metrics and statistics
// across reloads.
package endpointsfile
