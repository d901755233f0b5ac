package manifests_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

const fieldOwner = "switchyard-manifests-test"

// readCRDs returns the CustomResourceDefinitions among the YAML documents
// of files, skipping any other document (the Gateway API folder also holds
// a ValidatingAdmissionPolicy), keeping only the names in keep when given.
func readCRDs(t testing.TB, files []string, keep ...string) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(readFile(t, f))))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if meta.Kind != "CustomResourceDefinition" {
				continue
			}
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(doc, crd); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(keep) == 0 || slices.Contains(keep, crd.Name) {
				out = append(out, crd)
			}
		}
	}
	for _, name := range keep {
		found := false
		for _, crd := range out {
			found = found || crd.Name == name
		}
		if !found {
			t.Fatalf("no CRD %s in %v", name, files)
		}
	}
	return out
}

func globYAML(t testing.TB, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no YAML files in %s (%v)", dir, err)
	}
	return files
}

// testCRDs are the CRDs the manifests' objects need besides GIE's (which
// kubetest installs at go.mod's version): the Gateway API standard channel
// and Istio's DestinationRule.
func testCRDs(t testing.TB) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	gw := filepath.Join(moduleDir(t, gatewayAPIModule, gatewayAPIVersion), "config", "crd", "standard")
	istio := filepath.Join(moduleDir(t, istioAPIModule, istioAPIVersion), "kubernetes", "customresourcedefinitions.gen.yaml")
	crds := readCRDs(t, globYAML(t, gw))
	return append(crds, readCRDs(t, []string{istio}, "destinationrules.networking.istio.io")...)
}

// applyDryRun server-side applies obj in dry-run mode, the way
// `kubectl apply --server-side --dry-run=server --force-conflicts` does:
// the API server validates it against the built-in schemas or the CRD's
// OpenAPI schema and CEL rules, and rejects unknown fields (apply is always
// strict). Namespaced objects go to ns. The error names the object.
func applyDryRun(ctx context.Context, c client.Client, ns string, obj *unstructured.Unstructured) error {
	return apply(ctx, c, ns, obj, client.DryRunAll)
}

func apply(ctx context.Context, c client.Client, ns string, obj *unstructured.Unstructured, opts ...client.ApplyOption) error {
	u := obj.DeepCopy()
	namespaced, err := c.IsObjectNamespaced(u)
	if err != nil {
		return fmt.Errorf("%s: %w", describe(u), err)
	}
	if namespaced {
		u.SetNamespace(ns)
	} else {
		if kind := u.GetKind(); kind != "CustomResourceDefinition" {
			return fmt.Errorf("%s: cluster-scoped; only CRDs may be", describe(u))
		}
		u.SetNamespace("")
	}
	opts = append([]client.ApplyOption{client.FieldOwner(fieldOwner), client.ForceOwnership}, opts...)
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), opts...); err != nil {
		return fmt.Errorf("%s: the API server rejected it: %w", describe(u), err)
	}
	return nil
}

// TestManifestsOnAPIServer applies every rendered object of every
// kustomization (and the README's Kubernetes examples) to a real
// kube-apiserver with server-side apply in dry-run mode, shows that the
// same check rejects broken objects, and checks the Role's effective
// permissions with SubjectAccessReviews.
func TestManifestsOnAPIServer(t *testing.T) {
	dirs := kustomizations(t)
	readme := readmeObjects(t)
	cfg := startAPIServer(t, testCRDs(t))
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme, FieldValidation: metav1.FieldValidationStrict})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "manifests-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}

	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			objs := render(t, dir)
			for _, u := range objs {
				// The Prometheus Operator's CRDs are not installed here:
				// checkMonitoring checks those objects' fields instead.
				if u.GroupVersionKind().Group == "monitoring.coreos.com" {
					continue
				}
				if err := applyDryRun(ctx, c, ns.Name, u); err != nil {
					t.Errorf("%s: %v", dir, err)
				}
			}
			t.Logf("%d objects accepted", len(objs))
		})
	}
	t.Run("README", func(t *testing.T) {
		for _, u := range readme {
			if err := applyDryRun(ctx, c, ns.Name, u); err != nil {
				t.Errorf("README.md: %v", err)
			}
		}
	})

	t.Run("rejects", func(t *testing.T) { testRejects(t, c, ns.Name) })
	t.Run("role permissions", func(t *testing.T) { testRolePermissions(t, c, ns.Name, baseDir, wantRules) })
	t.Run("admin API reader ClusterRole", func(t *testing.T) { testAdminReader(t, c, ns.Name) })
	t.Run("multisite role permissions", func(t *testing.T) {
		// A namespace of its own: the overlay's Role has the base's name.
		mns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "manifests-multisite-"}}
		if err := c.Create(ctx, mns); err != nil {
			t.Fatal(err)
		}
		testRolePermissions(t, c, mns.Name, multiDir, append(slices.Clone(wantRules), multisiteRules...))
	})
}

// testRejects: mutated copies of good objects fail applyDryRun with the
// server's reason, so the check above can fail.
func testRejects(t *testing.T, c client.Client, ns string) {
	base := objects(render(t, baseDir))
	istio := objects(render(t, istioDir))
	for _, tc := range []struct {
		name    string
		obj     *unstructured.Unstructured
		mutate  func(map[string]any)
		wantErr string
	}{
		{"InferencePool targetPort out of range", base.get(inferenceGrp, "InferencePool", "vllm-llama3-8b-instruct"),
			func(o map[string]any) { dig(o, "spec", "targetPorts", 0)["number"] = int64(70000) }, "65535"},
		{"InferencePool unknown failure mode", base.get(inferenceGrp, "InferencePool", "vllm-llama3-8b-instruct"),
			func(o map[string]any) { dig(o, "spec", "endpointPickerRef")["failureMode"] = "FailSoftly" }, "FailSoftly"},
		{"Deployment unknown field", base.get("apps", "Deployment", eppName),
			func(o map[string]any) {
				dig(o, "spec", "template", "spec", "containers", 0)["argz"] = []any{"--pool-name"}
			}, "argz"},
		{"Service port out of range", base.get("", "Service", eppName),
			func(o map[string]any) { dig(o, "spec", "ports", 0)["port"] = int64(70000) }, "70000"},
		{"DestinationRule misspelt field", istio.get(istioGrp, "DestinationRule", eppName),
			func(o map[string]any) {
				tls := dig(o, "spec", "trafficPolicy", "tls")
				delete(tls, "insecureSkipVerify")
				tls["insecureSkipVerfy"] = true
			}, "insecureSkipVerfy"},
		{"HTTPRoute backendRef without a name", istio.get(gatewayGrp, "HTTPRoute", "vllm-llama3-8b-instruct"),
			func(o map[string]any) { delete(dig(o, "spec", "rules", 0, "backendRefs", 0), "name") }, "name"},
		{"Gateway without listeners", istio.get(gatewayGrp, "Gateway", "inference-gateway"),
			func(o map[string]any) { delete(dig(o, "spec"), "listeners") }, "listeners"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.obj == nil {
				t.Fatal("object to mutate not found in the rendered output")
			}
			if err := applyDryRun(t.Context(), c, ns, tc.obj); err != nil {
				t.Fatalf("the unmutated object is rejected: %v", err)
			}
			bad := tc.obj.DeepCopy()
			tc.mutate(bad.Object)
			err := applyDryRun(t.Context(), c, ns, bad)
			if err == nil {
				t.Fatal("the mutated object was accepted")
			}
			if !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), bad.GetName()) {
				t.Fatalf("error %q does not name the object and mention %q", err, tc.wantErr)
			}
			t.Logf("rejected: %v", err)
		})
	}
}

// dig walks a decoded object by map keys and list indexes to a map.
func dig(o map[string]any, path ...any) map[string]any {
	var cur any = o
	for _, p := range path {
		switch k := p.(type) {
		case string:
			cur = cur.(map[string]any)[k]
		case int:
			cur = cur.([]any)[k]
		}
	}
	return cur.(map[string]any)
}

// testRolePermissions creates the ServiceAccount, Role and RoleBinding of
// the kustomization in dir for real and asks the API server's RBAC
// authorizer what the ServiceAccount may do: everything in rules, nothing
// else, and only in its own namespace. The base may not read
// InferencePoolImports; the multisite overlay adds them.
func testRolePermissions(t *testing.T, c client.Client, ns, dir string, rules []string) {
	ctx := t.Context()
	base := objects(render(t, dir))
	for _, u := range []*unstructured.Unstructured{
		base.one(t, "", "ServiceAccount"),
		base.one(t, "rbac.authorization.k8s.io", "Role"),
		base.one(t, "rbac.authorization.k8s.io", "RoleBinding"),
	} {
		if err := apply(ctx, c, ns, u); err != nil {
			t.Fatal(err)
		}
	}
	user := "system:serviceaccount:" + ns + ":" + eppName
	can := func(namespace, group, resource, verb string) bool {
		t.Helper()
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   user,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: namespace, Group: group, Resource: resource, Verb: verb,
			},
		}}
		if err := c.Create(ctx, sar); err != nil {
			t.Fatalf("SubjectAccessReview: %v", err)
		}
		return sar.Status.Allowed
	}
	// The RBAC authorizer reads bindings through an informer: wait for it.
	deadline := time.Now().Add(30 * time.Second)
	for !can(ns, "", "pods", "watch") {
		if time.Now().After(deadline) {
			t.Fatal("the RoleBinding never took effect")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, rule := range rules {
		groupRes, verb, _ := strings.Cut(rule, ":")
		group, res, _ := strings.Cut(groupRes, "/")
		if !can(ns, group, res, verb) {
			t.Errorf("%s may not %s %s in its namespace", user, verb, groupRes)
		}
		if can("default", group, res, verb) {
			t.Errorf("%s may %s %s in namespace default", user, verb, groupRes)
		}
		if can("", group, res, verb) {
			t.Errorf("%s may %s %s cluster-wide", user, verb, groupRes)
		}
	}
	denials := []struct{ group, resource, verb string }{
		{"", "pods", "create"}, {"", "pods", "delete"}, {"", "pods", "patch"}, {"", "secrets", "get"}, {"", "secrets", "list"},
		{"", "configmaps", "get"}, {"", "services", "list"}, {"", "endpoints", "list"}, {"discovery.k8s.io", "endpointslices", "list"},
		{"inference.networking.k8s.io", "inferencepools", "update"}, {"inference.networking.k8s.io", "inferencepools", "delete"},
		{"inference.networking.k8s.io", "inferencepools/status", "patch"}, {"inference.networking.x-k8s.io", "inferencepoolimports", "list"},
		{"coordination.k8s.io", "leases", "delete"}, {"coordination.k8s.io", "leases", "list"}, {"", "events", "create"},
		{"rbac.authorization.k8s.io", "roles", "create"}, {"authentication.k8s.io", "tokenreviews", "create"},
		{"inference.networking.x-k8s.io", "inferencepoolimports", "update"}, {"inference.networking.x-k8s.io", "inferencepoolimports/status", "patch"},
	}
	for _, denied := range denials {
		if slices.Contains(rules, denied.group+"/"+denied.resource+":"+denied.verb) {
			continue
		}
		if can(ns, denied.group, denied.resource, denied.verb) {
			t.Errorf("%s may %s %s/%s", user, denied.verb, denied.group, denied.resource)
		}
	}
}

// testAdminReader creates the shipped admin API ClusterRole and its
// example binding (for a ServiceAccount of ns) on the API server, and
// shows with SubjectAccessReviews of non-resource URLs, as the EPP's
// metrics filter asks them, that the bound account may GET every admin
// path and nothing else, and that an unbound one may not.
func testAdminReader(t *testing.T, c client.Client, ns string) {
	ctx := t.Context()
	role, binding := adminReaderObjects(t)
	binding.Subjects[0].Namespace = ns
	for _, o := range []client.Object{role, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("%T %s: %v", o, o.GetName(), err)
		}
	}
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), binding)
		_ = c.Delete(context.Background(), role)
	})
	can := func(sa, path, verb string) bool {
		t.Helper()
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:                  "system:serviceaccount:" + ns + ":" + sa,
			Groups:                []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
		}}
		if err := c.Create(ctx, sar); err != nil {
			t.Fatalf("SubjectAccessReview: %v", err)
		}
		return sar.Status.Allowed
	}
	reader := binding.Subjects[0].Name
	// The RBAC authorizer reads bindings through an informer: wait for it.
	deadline := time.Now().Add(30 * time.Second)
	for !can(reader, "/admin/backends", "get") {
		if time.Now().After(deadline) {
			t.Fatal("the ClusterRoleBinding never took effect")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, p := range []string{"/admin", "/admin/", "/admin/backends", "/admin/stats/backends",
		"/admin/backends/vllm-0/engine-stats", "/admin/prefix-routing/stats"} {
		if !can(reader, p, "get") {
			t.Errorf("%s may not GET %s", reader, p)
		}
		if can(reader, p, "post") || can(reader, p, "delete") {
			t.Errorf("%s may write %s", reader, p)
		}
		if can("stranger", p, "get") {
			t.Errorf("an unbound ServiceAccount may GET %s", p)
		}
	}
	for _, p := range []string{"/metrics", "/debug/endpoints", "/debug/pprof/", "/administrator", "/admins/x", "/logs"} {
		if can(reader, p, "get") {
			t.Errorf("%s may GET %s: the role names the admin API only", reader, p)
		}
	}
}
