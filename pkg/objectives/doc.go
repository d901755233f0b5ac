// Package objectives gives requests their priority: it maps the name in
// the x-gateway-inference-objective header to the priority of the
// InferenceObjective of that name (GIE's inference.networking.x-k8s.io
// v1alpha2 API). A name that is not known — never defined, or deleted —
// has no priority, so its requests fall back to the default band
// (priority 0).
//
// The current mapping is a Table, immutable once built; a Set publishes
// it with one atomic swap, and Set.Lookup (extproc.Options.Objective) is
// one atomic load and one map read on the request path.
//
// Two sources fill a Set:
//
//   - Kubernetes mode: KubeSource watches the InferenceObjectives of the
//     pool's namespace (list and watch on inferenceobjectives) and keeps
//     those whose spec.poolRef names the EPP's pool (group and name, as
//     GIE's reconciler matches them); an objective without a priority has
//     priority 0, as GIE treats it. The Go types are this package's own
//     (InferenceObjective): the GIE module the product requires (v1.6)
//     no longer ships the v1alpha2 API, while v1.5 users have its CRD
//     installed; manifests/base/crds ships that CRD. Without the CRD
//     (discovery answers 404) the source logs it once, leaves the table
//     empty and looks again every CRDCheckInterval (30 s).
//   - Standalone mode: FileSource reads a YAML file (--objectives-file)
//     and watches it. Decoding is strict (unknown or repeated keys, wrong
//     types, a second document are errors) and every problem carries its
//     field path (objectives[2].priority). A file refused on an edit is
//     logged and the last good table keeps serving.
//
// The file:
//
//	objectives:
//	- name: critical      # the header's value; a DNS-1123 subdomain
//	  priority: 100       # int32; higher is served first; default 0
//	- name: batch
//	  priority: -10       # negative: sheddable
//
// Bounds: a file is at most MaxFileBytes, a table at most MaxObjectives
// entries (a Kubernetes namespace with more keeps the first by name and
// logs it).
//
// Owner of its goroutines: KubeSource.Run (a controller-runtime manager)
// and FileSource.Run (a file watcher) stop when their context ends; pkg/
// server runs them as loops of Server.Run. Imported by pkg/server and
// cmd/epp; it imports neither.
package objectives
