// Package manifests holds Switchyard's Kubernetes manifests as kustomize
// folders, and no Go code: base/ (the InferencePool CRDs, RBAC, the EPP
// Deployment, Service, ConfigMap and an InferencePool), overlays/ (Istio,
// kgateway, standalone Envoy, and multi-site with the site-relay) and
// examples/ (overlays the README shows). README.md explains how to deploy
// them.
//
// The package's tests render every folder with kustomize's krusty (as
// `kubectl apply -k` does), check cross-references and least privilege,
// check that the CRD and configuration copies equal their sources, decode
// the Envoy bootstrap into go-control-plane's types, and server-side apply
// every object in dry-run mode to a real kube-apiserver started by
// controller-runtime's envtest with the binaries hack/test-binaries.sh
// builds (the same conventions as pkg/internal/kubetest, which Go's
// internal-package rule keeps out of reach from here). Nothing imports
// this package.
package manifests
