// Package metricsauth protects the EPP's metrics port in Kubernetes mode
// (--metrics-endpoint-auth, on by default as in GIE): a request needs a
// bearer token that the API server accepts (TokenReview) and permission
// for its path (SubjectAccessReview on the non-resource URL, e.g. GET
// /metrics, which a ClusterRole with nonResourceURLs ["/metrics"] grants).
// Answers are cached (1 minute for tokens, 5 minutes for allowed and 30
// seconds for denied decisions), so a Prometheus scrape costs no API call
// most of the time.
//
// Refusals: 401 without a token or with one that cannot be verified (the
// API server rejects it, or cannot be reached: the log says which, at
// V(1)), 403 when the token's user may not GET the path, 503 when the API
// server cannot be asked for access. Imported by cmd/epp.
package metricsauth
