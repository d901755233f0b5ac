package manifests_test

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"

	"github.com/switchyard-ai/switchyard/internal/kubetest"
	"github.com/switchyard-ai/switchyard/internal/testmod"
)

// Modules whose CRDs the tests install, at internal/kubetest's versions.
const (
	gatewayAPIModule  = "sigs.k8s.io/gateway-api"
	gatewayAPIVersion = kubetest.GatewayAPIVersion
	istioAPIModule    = "istio.io/api"
	istioAPIVersion   = kubetest.IstioAPIVersion
)

// goModVersion returns the version of module that the repository's go.mod
// requires: the CRDs shipped must be those of the API types compiled in.
func goModVersion(t testing.TB, module string) string {
	t.Helper()
	return kubetest.ModuleVersion(t, module)
}

// moduleDir downloads module@version through the Go module proxy and
// returns its folder.
func moduleDir(t testing.TB, module, version string) string {
	return testmod.Dir(t, module, version)
}

// startAPIServer runs etcd and kube-apiserver (hack/test-binaries.sh)
// with GIE's CRDs and crds installed and stops them when the test ends.
func startAPIServer(t testing.TB, crds []*apiextensionsv1.CustomResourceDefinition) *rest.Config {
	t.Helper()
	return kubetest.Start(t, kubetest.Options{CRDs: crds}).Config
}
