// Package admin serves the EPP's admin API on the metrics port (C-51):
// read-only JSON views of the pool and of the routing terms' state.
//
//	GET /admin/backends                          the pool's endpoints
//	GET /admin/stats/backends                    per endpoint: engine stats, request counts, usage and quota
//	GET /admin/backends/{name}/engine-stats      one endpoint's engine stats and quota
//	GET /admin/prefix-routing/stats              the prefix-aware-hash-picker instances' statistics
//
// Handler builds the routes over a Source and guards nothing itself: the
// host wraps it with a guard (TokenGuard over --admin-token-file in
// standalone mode, the metrics port's TokenReview/SubjectAccessReview
// filter in Kubernetes mode). Without either the API is off and its paths
// answer 404. In Kubernetes mode the SubjectAccessReview asks for `get` on
// the request's path as a non-resource URL; the repository ships the
// ClusterRole that allows it, switchyard-admin-api-reader
// (nonResourceURLs "/admin" and "/admin/*", manifests/cluster/), with an
// example binding (see manifests/README.md, "Admin API access"). The documents' fields are described in the repository's
// README ("Admin API").
//
// Imported by pkg/server. It starts no goroutine.
package admin
