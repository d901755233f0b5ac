// Package poolimport feeds the site topology from Kubernetes: it watches
// the InferencePoolImport (inference.networking.x-k8s.io/v1alpha1, GIE
// v1.6's API types) named like the EPP's InferencePool in the pool's
// namespace — GIE's exporting controllers mirror an exported pool's name
// and namespace into every member cluster — and reports the union of its
// status.controllers[].exportingClusters[].name to the topology Watcher
// (topology.Watcher.SetExporting): the clusters that export the pool.
// When the import does not exist (or is being deleted) it reports none.
//
// It is built like pkg/datastore/kubesource: a controller-runtime manager
// whose cache watches the one object (field selector on its name, managed
// fields stripped), started without API discovery, and one controller
// that recomputes the cluster list on every change. It needs get, list
// and watch on inferencepoolimports in the pool's namespace (the
// multisite overlay's Role adds them). At most MaxClusters names are read.
//
// Owner of its goroutines: Source.Run (the manager) stops them when its
// context ends; pkg/server runs it as one of Server.Run's loops.
package poolimport
