package objectives_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/switchyard-ai/switchyard/internal/kubetest"
	"github.com/switchyard-ai/switchyard/pkg/objectives"
)

func TestBuild(t *testing.T) {
	obj := func(name, pool, group string, prio *int, deleting bool) objectives.InferenceObjective {
		o := objectives.InferenceObjective{ObjectMeta: metav1.ObjectMeta{Name: name}}
		o.Spec.PoolRef = objectives.PoolObjectReference{Group: group, Name: pool}
		o.Spec.Priority = prio
		if deleting {
			o.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		}
		return o
	}
	tab, capped := objectives.Build([]objectives.InferenceObjective{
		obj("critical", "pool", "", ptr.To(10), false),
		obj("explicit-group", "pool", objectives.DefaultPoolGroup, ptr.To(-3), false),
		obj("unset", "pool", "", nil, false),
		obj("other-pool", "other", "", ptr.To(5), false),
		obj("other-group", "pool", "example.com", ptr.To(5), false),
		obj("deleting", "pool", "", ptr.To(5), true),
	}, "pool", "")
	assert.False(t, capped)
	assert.Equal(t, []string{"critical", "explicit-group", "unset"}, tab.Names())
	p, _ := tab.Priority("unset")
	assert.Equal(t, 0, p, "an unset priority is 0, as GIE treats it")
	p, _ = tab.Priority("explicit-group")
	assert.Equal(t, -3, p)

	many := make([]objectives.InferenceObjective, objectives.MaxObjectives+5)
	for i := range many {
		many[i] = obj("o-"+time.Duration(i).String(), "pool", "", ptr.To(i), false)
	}
	tab, capped = objectives.Build(many, "pool", "")
	assert.True(t, capped)
	assert.Equal(t, objectives.MaxObjectives, tab.Len())
}

// objectiveCRD reads the CRD the manifests ship (GIE v1.5.0's).
func objectiveCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	data, err := os.ReadFile(filepath.Join("..", "..", "manifests", "base", "crds", "inference.networking.x-k8s.io_inferenceobjectives.yaml"))
	require.NoError(t, err)
	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.UnmarshalStrict(data, &crd))
	return &crd
}

// TestKubeSourceOnAPIServer: against a real kube-apiserver with the
// InferenceObjective CRD the manifests ship and only the rights the base
// Role grants (list and watch inferenceobjectives), the source maps the
// pool's objectives to their priorities within a second of a change:
// creation, a priority update, an objective moved to another pool, and a
// deletion, after which the name has no priority (the default band).
func TestKubeSourceOnAPIServer(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{CRDs: []*apiextensionsv1.CustomResourceDefinition{objectiveCRD(t)}})
	ctx := context.Background()
	ns := env.Namespace(t, "objectives")
	c, err := client.New(env.Config, client.Options{Scheme: objectives.Scheme()})
	require.NoError(t, err)

	sa := "system:serviceaccount:" + ns + ":switchyard"
	require.NoError(t, env.Client.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "epp", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{objectives.GroupVersionResource.Group}, Resources: []string{"inferenceobjectives"}, Verbs: []string{"list", "watch"}}},
	}))
	require.NoError(t, env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "epp", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "epp"},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: sa}},
	}))
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: sa, Groups: []string{"system:serviceaccounts", "system:authenticated"}}

	create := func(name, pool string, prio *int) {
		t.Helper()
		o := &objectives.InferenceObjective{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		o.Spec.PoolRef.Name = pool
		o.Spec.Priority = prio
		require.NoError(t, c.Create(ctx, o))
	}
	// One before the source starts: the first pass sees it.
	create("critical", "pool", ptr.To(100))

	set := objectives.NewSet()
	src, err := objectives.NewKubeSource(objectives.KubeOptions{Config: cfg, Namespace: ns, PoolName: "pool", Set: set, Logger: testr.New(t)})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(runCtx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	waitFor := func(name string, want int, present bool) {
		t.Helper()
		start := time.Now()
		require.Eventually(t, func() bool {
			p, ok := set.Lookup(name)
			return ok == present && (!present || p == want)
		}, 30*time.Second, 5*time.Millisecond, "%s: want %d (present %v)", name, want, present)
		assert.Less(t, time.Since(start), time.Second, "followed within a second")
	}
	require.Eventually(t, func() bool { _, ok := set.Lookup("critical"); return ok }, 60*time.Second, 10*time.Millisecond, "the first pass")

	create("batch", "pool", ptr.To(-5))
	waitFor("batch", -5, true)
	create("standard", "pool", nil)
	waitFor("standard", 0, true)
	create("elsewhere", "other-pool", ptr.To(7))

	var o objectives.InferenceObjective
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "critical"}, &o))
	o.Spec.Priority = ptr.To(50)
	require.NoError(t, c.Update(ctx, &o))
	waitFor("critical", 50, true)
	_, ok := set.Lookup("elsewhere")
	assert.False(t, ok, "an objective of another pool is not the EPP's")

	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "batch"}, &o))
	o.Spec.PoolRef.Name = "other-pool"
	require.NoError(t, c.Update(ctx, &o))
	waitFor("batch", 0, false)

	require.NoError(t, c.Delete(ctx, &objectives.InferenceObjective{ObjectMeta: metav1.ObjectMeta{Name: "critical", Namespace: ns}}))
	waitFor("critical", 0, false)
	p, ok := set.Lookup("standard")
	assert.True(t, ok)
	assert.Equal(t, 0, p)
}

func TestKubeOptionsValidate(t *testing.T) {
	_, err := objectives.NewKubeSource(objectives.KubeOptions{})
	require.Error(t, err)
	for _, want := range []string{"no Kubernetes client configuration", "no namespace", "no pool name", "no Set"} {
		assert.Contains(t, err.Error(), want)
	}
}

// TestKubeSourceWithoutCRD: on an API server without the InferenceObjective
// CRD the source waits (no error, empty table: priority 0 for every
// request) and starts watching once the CRD is installed.
func TestKubeSourceWithoutCRD(t *testing.T) {
	old := objectives.CRDCheckInterval
	objectives.CRDCheckInterval = 100 * time.Millisecond
	defer func() { objectives.CRDCheckInterval = old }()
	env := kubetest.Start(t, kubetest.Options{})
	ctx := context.Background()
	ns := env.Namespace(t, "nocrd")
	set := objectives.NewSet()
	src, err := objectives.NewKubeSource(objectives.KubeOptions{Config: env.Config, Namespace: ns, PoolName: "pool", Set: set, Logger: testr.New(t)})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(runCtx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	time.Sleep(300 * time.Millisecond)
	assert.Nil(t, set.Table(), "nothing watched without the CRD")

	crd := objectiveCRD(t)
	require.NoError(t, env.Client.Create(ctx, crd))
	require.Eventually(t, func() bool {
		var got apiextensionsv1.CustomResourceDefinition
		if env.Client.Get(ctx, client.ObjectKeyFromObject(crd), &got) != nil {
			return false
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond)
	c, err := client.New(env.Config, client.Options{Scheme: objectives.Scheme()})
	require.NoError(t, err)
	o := &objectives.InferenceObjective{ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: ns}}
	o.Spec.PoolRef.Name = "pool"
	o.Spec.Priority = ptr.To(3)
	require.Eventually(t, func() bool { return c.Create(ctx, o) == nil }, 30*time.Second, 100*time.Millisecond)
	require.Eventually(t, func() bool { p, ok := set.Lookup("late"); return ok && p == 3 }, 30*time.Second, 10*time.Millisecond)
}
