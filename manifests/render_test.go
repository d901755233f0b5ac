package manifests_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Folder names of the kustomizations, relative to this package.
const (
	baseDir     = "base"
	istioDir    = "overlays/istio"
	kgatewayDir = "overlays/kgateway"
	envoyDir    = "overlays/envoy"
	multiDir    = "overlays/multisite"
	monitorDir  = "overlays/monitoring"
)

// kustomizations lists every folder holding a kustomization.yaml, found on
// disk so that a new overlay or example cannot escape the tests.
func kustomizations(t testing.TB) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == "testdata" && d.IsDir() {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "kustomization.yaml" {
			dirs = append(dirs, filepath.ToSlash(filepath.Dir(path)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs)
	for _, want := range []string{baseDir, istioDir, kgatewayDir, envoyDir, multiDir, monitorDir} {
		if !slices.Contains(dirs, want) {
			t.Fatalf("no kustomization.yaml in %s (found %v)", want, dirs)
		}
	}
	return dirs
}

// render builds the kustomization in dir the way `kubectl apply -k` does:
// krusty with the default options, so files outside a kustomization's own
// folder cannot be loaded (bases can).
func render(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := renderDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func renderDir(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		u, err := decodeObject(y)
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		objs = append(objs, u)
	}
	return objs, nil
}

// decodeObject turns one YAML document into an Unstructured with JSON
// number types (int64, float64), as the API machinery expects.
func decodeObject(y []byte) (*unstructured.Unstructured, error) {
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		return nil, err
	}
	obj, err := runtime.Decode(unstructured.UnstructuredJSONScheme, j)
	if err != nil {
		return nil, err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("decoded a %T, want one object", obj)
	}
	return u, nil
}

// describe names an object in failure messages: Kind group/name.
func describe(u *unstructured.Unstructured) string {
	gvk := u.GroupVersionKind()
	if gvk.Group == "" {
		return gvk.Kind + " " + u.GetName()
	}
	return gvk.Kind + "." + gvk.Group + " " + u.GetName()
}

// objects is a rendered kustomization with lookups.
type objects []*unstructured.Unstructured

func (o objects) ofKind(group, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range o {
		if gvk := u.GroupVersionKind(); gvk.Group == group && gvk.Kind == kind {
			out = append(out, u)
		}
	}
	return out
}

func (o objects) get(group, kind, name string) *unstructured.Unstructured {
	for _, u := range o.ofKind(group, kind) {
		if u.GetName() == name {
			return u
		}
	}
	return nil
}

// one returns the only object of a kind, failing the test otherwise.
func (o objects) one(t testing.TB, group, kind string) *unstructured.Unstructured {
	t.Helper()
	all := o.ofKind(group, kind)
	if len(all) != 1 {
		names := make([]string, len(all))
		for i, u := range all {
			names[i] = u.GetName()
		}
		t.Fatalf("want exactly one %s (group %q), got %d: %s", kind, group, len(all), strings.Join(names, ", "))
	}
	return all[0]
}

// typed converts an Unstructured into an API type.
func typed[T any](t testing.TB, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		t.Fatalf("%s: %v", describe(u), err)
	}
	return out
}
