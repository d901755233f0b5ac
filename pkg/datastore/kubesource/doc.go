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
// standby takes over without a cold start. A replica that loses the lease
// stops (Run returns an error), as controller-runtime managers do; its
// pod restarts as a standby. On a graceful stop the leader releases the
// lease, so a standby takes over within one retry period.
//
// Owner of its goroutines: Source.Run (the manager) stops them when its
// context ends. Imported by cmd/epp through pkg/server's EndpointSource.
package kubesource
