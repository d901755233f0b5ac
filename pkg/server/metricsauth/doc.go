// Package metricsauth protects the EPP's metrics port in Kubernetes mode
// (--metrics-endpoint-auth, on by default as in GIE): a request needs a
// bearer token that the API server accepts (TokenReview) and permission
// for its path (SubjectAccessReview on the non-resource URL, e.g. GET
// /metrics, which a ClusterRole with nonResourceURLs ["/metrics"] grants).
// Answers are cached (an accepted token 1 minute, a rejected one 10
// seconds, an allowed path 5 minutes, a denied one 30 seconds; tokens are
// keyed by their SHA-256, never kept or logged), so a Prometheus scrape
// costs no API call most of the time.
//
// Refusals: 401 without a bearer token or with one the API server rejects
// (logged at V(1)), 403 when the token's user may not use the path (V(1)),
// 503 when the API server cannot be asked (logged as an error). Imported by
// cmd/epp.
package metricsauth
