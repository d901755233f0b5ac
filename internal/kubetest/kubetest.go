// Package kubetest runs a real Kubernetes control plane for tests: etcd
// and kube-apiserver, built from the Go module proxy by
// hack/test-binaries.sh, started by controller-runtime's envtest with the
// InferencePool CRDs of the GIE module installed. There is no fake client
// here: every object goes through the API server's validation, storage and
// watch.
//
// The binaries are found through KUBEBUILDER_ASSETS, or else in the
// repository's bin/k8s/<version>-<os>-<arch>/ folder that the script fills.
// Without them a test is skipped with the command to run, unless
// SWITCHYARD_REQUIRE_KUBE is set (make test and CI set it), in which case
// it fails.
package kubetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/switchyard-ai/switchyard/internal/testmod"
)

// Versions of the modules whose CRDs the tests install besides GIE's,
// which come at the version go.mod requires (the API types compiled in).
const (
	// GatewayAPIVersion provides Gateway, HTTPRoute and friends.
	GatewayAPIVersion = "v1.5.1"
	// IstioAPIVersion provides Istio's DestinationRule CRD.
	IstioAPIVersion = "v1.32.0"
)

// RequireEnv makes missing control-plane binaries a failure instead of a
// skip.
const RequireEnv = "SWITCHYARD_REQUIRE_KUBE"

// Scheme knows the core types, leases and InferencePool v1.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{clientgoscheme.AddToScheme, infv1.Install, apiextensionsv1.AddToScheme, coordinationv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// Assets returns the folder holding kube-apiserver and etcd.
func Assets(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		if !hasBinaries(d) {
			t.Fatalf("KUBEBUILDER_ASSETS=%s holds no kube-apiserver and etcd; run hack/test-binaries.sh", d)
		}
		return d
	}
	if root, ok := repoRoot(); ok {
		matches, _ := filepath.Glob(filepath.Join(root, "bin", "k8s", "*-"+runtime.GOOS+"-"+runtime.GOARCH))
		for i := len(matches) - 1; i >= 0; i-- {
			if hasBinaries(matches[i]) {
				return matches[i]
			}
		}
	}
	msg := "no kube-apiserver and etcd for this test: run `export KUBEBUILDER_ASSETS=$(hack/test-binaries.sh)` (or `make test`)"
	if os.Getenv(RequireEnv) != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func hasBinaries(dir string) bool {
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
			return false
		}
	}
	return true
}

// repoRoot walks up from the working directory to the folder holding the
// repository's go.mod.
func repoRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(data), "module github.com/switchyard-ai/switchyard\n") {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// Options adds to the control plane.
type Options struct {
	// CRDDirs are more folders of CRD YAML files to install (the GIE
	// InferencePool CRDs are always installed).
	CRDDirs []string
	// CRDs are more CRD objects to install.
	CRDs []*apiextensionsv1.CustomResourceDefinition
}

// Env is a running control plane.
type Env struct {
	env *envtest.Environment
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is a controller-runtime client (no cache) with Scheme().
	Client client.Client
	// Kubeconfig is the path of a kubeconfig file for an administrator
	// (group system:masters), for processes started by the test.
	Kubeconfig string
}

// GIEModule is the Gateway API Inference Extension module.
const GIEModule = "sigs.k8s.io/gateway-api-inference-extension"

// GIEVersion is the version of GIE the repository's go.mod requires (the
// API types compiled in).
func GIEVersion(t testing.TB) string {
	t.Helper()
	return ModuleVersion(t, GIEModule)
}

// ModuleVersion returns the version of module that the repository's
// go.mod requires.
func ModuleVersion(t testing.TB, module string) string {
	t.Helper()
	root, ok := repoRoot()
	if !ok {
		t.Fatal("cannot find the repository's go.mod above the working directory")
	}
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(fields) >= 2 && fields[0] == module {
			return fields[1]
		}
	}
	t.Fatalf("go.mod does not require %s", module)
	return ""
}

// GIECRDDir returns the folder of the GIE module's CRDs, at GIEVersion.
func GIECRDDir(t testing.TB) string {
	return filepath.Join(testmod.Dir(t, GIEModule, GIEVersion(t)), "config", "crd", "bases")
}

// Start starts etcd and kube-apiserver with the GIE CRDs and stops them
// when the test ends.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	assets := Assets(t)
	dirs := append([]string{GIECRDDir(t)}, opts.CRDDirs...)
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     dirs,
		CRDs:                  opts.CRDs,
		ErrorIfCRDPathMissing: true,
		// The first start on a loaded 2-core machine can be slow.
		ControlPlaneStartTimeout: 2 * time.Minute,
		// kube-apiserver waits up to a minute for open watches when it
		// is told to stop; after this long it is killed.
		ControlPlaneStopTimeout: 5 * time.Second,
	}
	// A certificate folder of our own survives an API server restart, so
	// clients keep trusting the restarted server.
	env.ControlPlane.APIServer = &envtest.APIServer{CertDir: t.TempDir()}
	if testing.Verbose() {
		env.AttachControlPlaneOutput = os.Getenv("SWITCHYARD_KUBE_LOGS") != ""
	}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		t.Fatalf("start control plane (kube-apiserver and etcd from %s): %v", assets, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	t.Logf("control plane up in %s", time.Since(start).Round(time.Millisecond))
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{env: env, Config: cfg, Client: c}
	user, err := env.AddUser(envtest.User{Name: "switchyard-test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	e.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(e.Kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

// ImpersonatingKubeconfig writes a kubeconfig that acts as user (for
// example "system:serviceaccount:NS:NAME") through the administrator's
// credentials, so a process started by the test has only that user's
// rights.
func (e *Env) ImpersonatingKubeconfig(t testing.TB, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(e.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// RestartAPIServer stops kube-apiserver (etcd keeps running), calls
// whileDown, and starts it again on the same address with the same
// certificates. The stop is SIGTERM, then SIGKILL after 5 s: with clients
// holding watches open, kube-apiserver's graceful shutdown waits up to a
// minute for them, so the restart is often a crash, as in real outages.
func (e *Env) RestartAPIServer(t testing.TB, whileDown func()) {
	t.Helper()
	api := e.env.ControlPlane.GetAPIServer()
	switch err := api.Stop(); {
	case err == nil:
		t.Log("kube-apiserver stopped")
	case strings.Contains(err.Error(), "timeout waiting for process"):
		t.Log("kube-apiserver killed (did not stop within 5 s of SIGTERM)")
	default:
		t.Fatalf("stop kube-apiserver: %v", err)
	}
	if whileDown != nil {
		whileDown()
	}
	start := time.Now()
	if err := api.Start(); err != nil {
		t.Fatalf("restart kube-apiserver: %v", err)
	}
	t.Logf("kube-apiserver restarted in %s", time.Since(start).Round(time.Millisecond))
}

// Namespace creates a namespace with a name unique to the test.
func (e *Env) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// Pod describes a model-server pod for CreatePod.
type Pod struct {
	Name, Namespace string
	Labels          map[string]string
	// IP is the pod IP (a loopback address in tests); the status is set
	// with it, as a kubelet would.
	IP string
	// Ready sets the Ready condition.
	Ready bool
}

// CreatePod creates the pod and sets its status (phase Running, pod IP,
// Ready condition), as a kubelet would; there is no kubelet in the test.
func (e *Env) CreatePod(t testing.TB, p Pod) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "model-server", Image: "registry.example/model-server:test",
			Ports: []corev1.ContainerPort{{ContainerPort: 8000}},
		}}},
	}
	ctx := context.Background()
	if err := e.Client.Create(ctx, pod); err != nil {
		t.Fatalf("create pod %s: %v", p.Name, err)
	}
	e.SetPodStatus(t, pod, p.IP, p.Ready)
	return pod
}

// SetPodStatus sets the pod's IP and Ready condition through the status
// subresource.
func (e *Env) SetPodStatus(t testing.TB, pod *corev1.Pod, ip string, ready bool) {
	t.Helper()
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	ctx := context.Background()
	err := retry(func() error {
		if err := e.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.PodIP = ip
		pod.Status.PodIPs = nil
		if ip != "" {
			pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		}
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: cond, LastTransitionTime: metav1.Now()}}
		return e.Client.Status().Update(ctx, pod)
	})
	if err != nil {
		t.Fatalf("set status of pod %s: %v", pod.Name, err)
	}
}

// Update reads obj, applies mutate and writes it back, retrying on
// conflicts.
func (e *Env) Update(t testing.TB, obj client.Object, mutate func()) {
	t.Helper()
	ctx := context.Background()
	err := retry(func() error {
		if err := e.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate()
		return e.Client.Update(ctx, obj)
	})
	if err != nil {
		t.Fatalf("update %T %s: %v", obj, obj.GetName(), err)
	}
}

// retry runs f up to 5 times while it fails with a conflict.
func retry(f func() error) error {
	var err error
	for range 5 {
		if err = f(); err == nil || !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("still conflicting: %w", err)
}

// Pool returns an InferencePool selecting matchLabels on ports.
func Pool(namespace, name string, matchLabels map[string]string, ports ...int32) *infv1.InferencePool {
	sel := map[infv1.LabelKey]infv1.LabelValue{}
	for k, v := range matchLabels {
		sel[infv1.LabelKey(k)] = infv1.LabelValue(v)
	}
	p := &infv1.InferencePool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: infv1.InferencePoolSpec{
			Selector:          infv1.LabelSelector{MatchLabels: sel},
			EndpointPickerRef: &infv1.EndpointPickerRef{Name: infv1.ObjectName(name + "-epp"), Port: &infv1.Port{Number: 9002}},
		},
	}
	for _, port := range ports {
		p.Spec.TargetPorts = append(p.Spec.TargetPorts, infv1.Port{Number: infv1.PortNumber(port)})
	}
	return p
}
