package poolimport_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	apixv1alpha1 "sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha1"

	"github.com/switchyard-ai/switchyard/internal/kubetest"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology/poolimport"
)

func TestClusters(t *testing.T) {
	imp := &apixv1alpha1.InferencePoolImport{Status: apixv1alpha1.InferencePoolImportStatus{Controllers: []apixv1alpha1.ImportController{
		{Name: "example.net/a", ExportingClusters: []apixv1alpha1.ExportingCluster{{Name: "c2"}, {Name: "c1"}}},
		{Name: "example.net/b", ExportingClusters: []apixv1alpha1.ExportingCluster{{Name: "c1"}, {Name: "c3"}, {Name: ""}}},
	}}}
	got, truncated := poolimport.Clusters(imp)
	assert.Equal(t, []string{"c1", "c2", "c3"}, got)
	assert.False(t, truncated)

	var many []apixv1alpha1.ExportingCluster
	for i := range poolimport.MaxClusters + 10 {
		many = append(many, apixv1alpha1.ExportingCluster{Name: apixv1alpha1.ClusterName("c" + string(rune('a'+i/26/26%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i%26)))})
	}
	imp.Status.Controllers = []apixv1alpha1.ImportController{{Name: "example.net/a", ExportingClusters: many}}
	got, truncated = poolimport.Clusters(imp)
	assert.Len(t, got, poolimport.MaxClusters)
	assert.True(t, truncated)
	assert.True(t, slices.IsSorted(got))
}

// recorder collects what the source reports.
type recorder struct {
	mu   sync.Mutex
	last []string
	n    int
}

func (r *recorder) set(c []string) { r.mu.Lock(); r.last, r.n = c, r.n+1; r.mu.Unlock() }

func (r *recorder) get() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last, r.n
}

// TestSourceOnAPIServer: against a real kube-apiserver, with only the
// rights the multisite overlay's Role grants (get, list, watch on
// inferencepoolimports in the namespace), the source follows the
// InferencePoolImport named like the pool: its exporting clusters reach
// the topology within a second of a status change, another import in the
// namespace is ignored, and deleting it empties the list.
func TestSourceOnAPIServer(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{})
	ctx := context.Background()
	ns := env.Namespace(t, "poolimport")
	c, err := client.New(env.Config, client.Options{Scheme: poolimport.Scheme()})
	require.NoError(t, err)

	// The EPP's service account and the overlay's rule.
	sa := "system:serviceaccount:" + ns + ":switchyard-epp"
	require.NoError(t, env.Client.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "epp", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{poolimport.GroupVersionResource.Group}, Resources: []string{"inferencepoolimports"}, Verbs: []string{"get", "list", "watch"}}},
	}))
	require.NoError(t, env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "epp", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "epp"},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: sa}},
	}))
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: sa, Groups: []string{"system:serviceaccounts", "system:authenticated"}}

	local := topology.Local{Site: "site-a", Cluster: "cluster-a"}
	w, err := topology.NewWatcher(topology.Options{Local: local})
	require.NoError(t, err)
	var rec recorder
	src, err := poolimport.New(poolimport.Options{
		Config: cfg, Namespace: ns, Name: "pool",
		Set:    func(cl []string) { w.SetExporting(cl); rec.set(cl) }, // the topology first: the test reads it once rec shows the set
		Logger: testr.New(t),
	})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(runCtx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	// No import yet: reported as none.
	require.Eventually(t, func() bool { _, n := rec.get(); return n >= 1 }, 30*time.Second, 10*time.Millisecond, "the first pass")
	got, _ := rec.get()
	assert.Nil(t, got)

	setStatus := func(name string, clusters ...string) {
		t.Helper()
		imp := &apixv1alpha1.InferencePoolImport{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		if err := c.Get(ctx, client.ObjectKeyFromObject(imp), imp); err != nil {
			require.NoError(t, c.Create(ctx, imp))
		}
		ec := make([]apixv1alpha1.ExportingCluster, len(clusters))
		for i, cl := range clusters {
			ec[i] = apixv1alpha1.ExportingCluster{Name: apixv1alpha1.ClusterName(cl)}
		}
		imp.Status.Controllers = []apixv1alpha1.ImportController{{Name: "example.net/import-controller", ExportingClusters: ec}}
		require.NoError(t, c.Status().Update(ctx, imp))
	}
	waitFor := func(want []string) {
		t.Helper()
		start := time.Now()
		require.Eventually(t, func() bool { g, _ := rec.get(); return slices.Equal(g, want) && (g == nil) == (want == nil) }, 10*time.Second, 5*time.Millisecond)
		assert.Less(t, time.Since(start), time.Second, "followed within a second")
	}

	setStatus("other", "cluster-z")
	setStatus("pool", "cluster-b", "cluster-a")
	waitFor([]string{"cluster-a", "cluster-b"})
	top := w.Topology()
	assert.True(t, top.Has("cluster-b"), "an exporting cluster the file does not know becomes a site")
	assert.False(t, top.Has("cluster-z"), "another import is not the pool's")
	assert.True(t, top.Local().Exported)

	setStatus("pool", "cluster-c")
	waitFor([]string{"cluster-c"})
	assert.False(t, w.Topology().Has("cluster-b"))

	require.NoError(t, c.Delete(ctx, &apixv1alpha1.InferencePoolImport{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns}}))
	waitFor(nil)
	assert.Equal(t, 1, w.Topology().Len())
}

func TestOptionsValidate(t *testing.T) {
	_, err := poolimport.New(poolimport.Options{})
	require.Error(t, err)
	for _, want := range []string{"no Kubernetes client configuration", "no namespace", "no InferencePoolImport name", "no Set function"} {
		assert.Contains(t, err.Error(), want)
	}
}
