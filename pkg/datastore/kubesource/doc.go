// Package kubesource is the endpoint source of Kubernetes mode: it watches
// the InferencePool named by --pool-name (inference.networking.k8s.io/v1)
// and the pods of its namespace, or, without the CRD, the pods matching
// --endpoint-selector on --endpoint-target-ports, and keeps the datastore's
// endpoint set equal to the Ready, non-terminating pods the pool selects:
// one endpoint per target port, named "<pod>-rank-<index>" like GIE, with
// the pod's labels (the core-metrics-extractor reads the engine from
// inference.networking.k8s.io/engine-type).
//
// It is built on controller-runtime: a manager whose cache watches the
// pool (by name) and the namespace's pods, and one controller that
// recomputes the whole endpoint set on every change (events coalesce in
// its work queue, so a burst costs one pass) and hands it to
// datastore.Store.Replace. The store is marked synced after the first
// complete pass (in pool mode: once the pool exists), which is what the
// readiness probe waits for; if the pool is deleted, the endpoints are
// dropped and the store is unsynced again.
//
// With leader election (--ha-enable-leader-election), every replica keeps
// its cache and datastore warm, and only the leader reports Ready: the
// Service sends traffic to one replica (active-passive, as GIE), and a
// standby takes over without a cold start. The election is client-go's on
// a Lease (GIE's name for the pool): a leader that stops gracefully
// releases it, so a standby takes it at its next attempt; after a crash the
// Lease expires first. A leader whose renewals fail for the renew deadline
// (an API-server outage, a dead connection) stops being ready before a
// successor could take the Lease and campaigns again; unlike a
// controller-runtime manager's election it does not exit, so an outage
// does not turn into restarts. The caches wait for the API server without
// a deadline.
//
// The manager starts without API discovery (the two kinds' mappings are
// known), so the EPP starts, live but not ready, while the API server is
// away. The pod cache keeps only what the endpoint set is made of
// (TrimPod). GIE's inference.networking.k8s.io/active-ports annotation
// limits a pod's ranks to the listed target ports.
//
// # Endpoint data from pod annotations
//
// Six annotations under Switchyard's own domain give every rank of a pod
// what the endpoints file's fields give an endpoint in standalone mode
// (ReadAnnotations):
//
//	switchyard.ai/weight: "4"        # 1..1000000; the endpoints' relative capacity (scheduling.WeightKey)
//	switchyard.ai/internal: "true"   # "true" or "false"; reserved for internal callers (scheduling.InternalKey)
//	switchyard.ai/scrape: "false"    # "true" (default) or "false"; false: no metrics to read, never scraped, always fresh
//	switchyard.ai/provider-tpm: "200000"  # 1..1000000000; tokens per minute the provider allows (advisory)
//	switchyard.ai/provider-rpm: "500"     # 1..1000000000; requests per minute the provider allows (advisory)
//	switchyard.ai/models: |          # a JSON or YAML list, as the endpoints file's models (scheduling.ModelsKey)
//	  - name: meta-llama/Llama-3.1-8B-Instruct
//	    aliases: [llama-8b]
//	    pricing: {input: 0.15, output: 0.6}   # both required; null or {} = unpriced
//
// An invalid value (a weight that is not an integer in range, internal
// other than true or false, a model list that does not decode strictly or
// fails the endpoints file's model rules) is logged once, at info level,
// with the pod, the annotation and the problem, and ignored: the pod
// still serves, with the default for that field (weight 1, every model,
// not internal). The same value is not logged again at later resyncs; a
// new invalid value is. Parsed model lists are remembered by value
// between resyncs, so a pool whose pods share a list parses it once.
//
// Owner of its goroutines: Source.Run (the manager and the election loop)
// stops them when its context ends. Imported by cmd/epp through
// pkg/server's EndpointSource.
package kubesource
