//go:build bench

package matrix

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/switchyard-ai/switchyard/internal/kubetest"
	"github.com/switchyard-ai/switchyard/internal/testmod"
)

// Chart is what GIE v1.5.0's inferencepool Helm chart renders for the
// EPP: its arguments (the config file moved from the ConfigMap mount to a
// folder), its environment (the downward API filled in) and the readiness
// probe's gRPC port and service.
type Chart struct {
	Args, Env    []string
	ProbePort    int32
	ProbeService string
}

// renderChart renders the chart with helm (built by
// hack/test-binaries.sh) for a release in namespace ns selecting app=sim.
func renderChart(t testing.TB, ns, release string) Chart {
	t.Helper()
	helm := filepath.Join(kubetest.Assets(t), "helm")
	gie := testmod.Dir(t, kubetest.GIEModule, "v1.5.0")
	charts := t.TempDir()
	for _, c := range []string{"inferencepool", "epplib"} {
		if err := os.CopyFS(filepath.Join(charts, c), os.DirFS(filepath.Join(gie, "config", "charts", c))); err != nil {
			t.Fatal(err)
		}
	}
	if err := filepath.WalkDir(charts, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chmod(p, map[bool]os.FileMode{true: 0o755, false: 0o644}[d.IsDir()])
	}); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	helmRun := func(args ...string) []byte {
		cmd := exec.Command(helm, args...)
		cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CACHE_HOME="+home+"/c", "HELM_CONFIG_HOME="+home+"/f", "HELM_DATA_HOME="+home+"/d")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("helm %s: %v: %s", strings.Join(args, " "), err, stderr.String())
		}
		return out
	}
	chart := filepath.Join(charts, "inferencepool")
	helmRun("dependency", "build", chart)
	rendered := helmRun("template", release, chart, "--namespace", ns, "--set", "inferencePool.modelServers.matchLabels.app=sim")
	var deploy *appsv1.Deployment
	plugins := map[string]string{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if u.Object == nil {
			continue
		}
		data, _ := json.Marshal(u.Object)
		switch u.GetKind() {
		case "Deployment":
			deploy = &appsv1.Deployment{}
			if err := json.Unmarshal(data, deploy); err != nil {
				t.Fatal(err)
			}
		case "ConfigMap":
			var cm corev1.ConfigMap
			if err := json.Unmarshal(data, &cm); err != nil {
				t.Fatal(err)
			}
			for k, v := range cm.Data {
				plugins[k] = v
			}
		}
	}
	if deploy == nil {
		t.Fatal("the chart rendered no Deployment")
	}
	var c Chart
	for _, ctr := range deploy.Spec.Template.Spec.Containers {
		if ctr.Name != "epp" {
			continue
		}
		mount := ""
		for _, m := range ctr.VolumeMounts {
			if m.Name == "plugins-config-volume" {
				mount = m.MountPath
			}
		}
		cfgDir := t.TempDir()
		for name, content := range plugins {
			if err := os.WriteFile(filepath.Join(cfgDir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, a := range ctr.Args {
			c.Args = append(c.Args, strings.Replace(a, mount+"/", cfgDir+"/", 1))
		}
		for _, e := range ctr.Env {
			switch {
			case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
				c.Env = append(c.Env, e.Name+"="+ns)
			case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
				c.Env = append(c.Env, e.Name+"="+release+"-epp-bench")
			default:
				c.Env = append(c.Env, e.Name+"="+e.Value)
			}
		}
		if p := ctr.ReadinessProbe; p != nil && p.GRPC != nil {
			c.ProbePort = p.GRPC.Port
			if p.GRPC.Service != nil {
				c.ProbeService = *p.GRPC.Service
			}
		}
	}
	if len(c.Args) == 0 {
		t.Fatal("the chart rendered no epp container")
	}
	return c
}
