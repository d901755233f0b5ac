package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/switchyard-ai/switchyard/internal/kubetest"
	"github.com/switchyard-ai/switchyard/internal/testmod"
	"github.com/switchyard-ai/switchyard/pkg/gateway"
	"github.com/switchyard-ai/switchyard/pkg/modelsim"
)

var healthAddrRE = regexp.MustCompile(`"msg":"Switchyard serving".*"health":"([^"]+)"`)

// healthOf checks a gRPC health service of an EPP process.
func healthOf(t *testing.T, addr, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN
	}
	return resp.Status
}

func serving(t *testing.T, addr, service string) bool {
	return healthOf(t, addr, service) == healthpb.HealthCheckResponse_SERVING
}

// haPool starts a control plane with an InferencePool "pool" and one ready
// pod at ip in a new namespace.
func haPool(t *testing.T, prefix, ip string) (*kubetest.Env, string) {
	t.Helper()
	env := kubetest.Start(t, kubetest.Options{})
	ns := env.Namespace(t, prefix)
	require.NoError(t, env.Client.Create(context.Background(), kubetest.Pool(ns, "pool", map[string]string{"app": "sim"}, 8000)))
	env.CreatePod(t, kubetest.Pod{Name: "sim-0", Namespace: ns, IP: ip, Ready: true, Labels: map[string]string{"app": "sim"}})
	return env, ns
}

// leaseTimes are an HA replica's election timings.
type leaseTimes struct{ lease, renew, retry time.Duration }

// haReplica starts an epp process with leader election on the pool of
// haPool and returns it with its health address.
func haReplica(t *testing.T, name, ns, kubeconfig string, lt leaseTimes) (*proc, string) {
	t.Helper()
	p := startProcEnv(t, name, "epp", []string{"NAMESPACE=" + ns, "POD_NAME=" + name},
		"--pool-name", "pool", "--kubeconfig", kubeconfig, "--ha-enable-leader-election",
		"--ha-lease-duration", lt.lease.String(), "--ha-renew-deadline", lt.renew.String(), "--ha-retry-period", lt.retry.String(),
		"--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0", "--secure-serving=false",
		"--zap-encoder", "json", "-v", "1")
	return p, p.waitFor(t, healthAddrRE)
}

// Leader election (--ha-enable-leader-election) against a real API server,
// with real processes: of two replicas exactly one is ready; when the
// leader stops (SIGTERM: it releases the lease) or dies (SIGKILL: the lease
// expires), the standby takes over within the lease duration.
func TestLeaderElection(t *testing.T) {
	env, ns := haPool(t, "ha", "127.10.4.1")

	// The replicas run with the ServiceAccount and Role of manifests/base,
	// nothing more: the least-privilege Role must be enough.
	kubeconfig := applyBaseRBAC(t, env, ns)

	const (
		lease = 6 * time.Second
		renew = 4 * time.Second
		retry = 500 * time.Millisecond
	)
	replica := func(name string) (*proc, string) {
		return haReplica(t, name, ns, kubeconfig, leaseTimes{lease, renew, retry})
	}
	a, aHealth := replica("epp-a")
	b, bHealth := replica("epp-b")
	addrs := map[*proc]string{a: aHealth, b: bHealth}
	readyOnes := func() []*proc {
		var out []*proc
		for p, h := range addrs {
			if serving(t, h, "readiness") {
				out = append(out, p)
			}
		}
		return out
	}
	var leader *proc
	require.Eventually(t, func() bool {
		r := readyOnes()
		if len(r) == 1 {
			leader = r[0]
		}
		return len(r) == 1
	}, 30*time.Second, 50*time.Millisecond, "one replica becomes ready")
	// And it stays so: the standby never turns ready while the leader lives.
	for range 10 {
		require.Len(t, readyOnes(), 1)
		time.Sleep(100 * time.Millisecond)
	}
	for p, h := range addrs {
		require.True(t, serving(t, h, "liveness"), "%s is live, leader or not", p.name)
		if p != leader {
			require.False(t, serving(t, h, "inference-extension"), "the standby's GIE probe service follows readiness")
		}
		require.Equal(t, healthpb.HealthCheckResponse_SERVICE_UNKNOWN, healthOf(t, h, "no-such-service"), "with leader election, as GIE")
	}
	standby := a
	if leader == a {
		standby = b
	}
	t.Logf("leader %s, standby %s", leader.name, standby.name)
	require.NotEmpty(t, leader.jsonLogs("Leader elected: this replica serves"))

	// Graceful stop: the lease is released, the standby takes over at once.
	start := time.Now()
	leader.stop(syscall.SIGTERM)
	delete(addrs, leader)
	require.Eventually(t, func() bool { return serving(t, addrs[standby], "readiness") }, lease, 20*time.Millisecond,
		"the standby takes over within the lease duration after the leader stops")
	took := time.Since(start)
	require.Less(t, took, lease, "measured from the SIGTERM: the stopping leader released the lease")
	t.Logf("takeover after SIGTERM: %s (lease duration %s)", took.Round(time.Millisecond), lease)

	// A new standby, then the leader dies without releasing the lease.
	c, cHealth := replica("epp-c")
	addrs[c] = cHealth
	time.Sleep(2 * retry)
	require.Len(t, readyOnes(), 1)
	require.False(t, serving(t, cHealth, "readiness"))
	start = time.Now()
	standby.stop(syscall.SIGKILL)
	delete(addrs, standby)
	// The lease was renewed at most one retry period before the kill; it
	// expires a lease duration after that, and the candidate notices within
	// one more retry period.
	// The standby may see the last renewal up to one jittered retry period
	// (client-go: up to 2.2 retry periods) late and notice the expiry one
	// more late; the rest is slack for a loaded 2-core machine.
	require.Eventually(t, func() bool { return serving(t, cHealth, "readiness") }, lease+2*2200*retry/1000+2*time.Second, 20*time.Millisecond,
		"the standby takes over once the dead leader's lease expires")
	t.Logf("takeover after SIGKILL: %s (lease duration %s, retry period %s)", time.Since(start).Round(time.Millisecond), lease, retry)

	// The API server goes away for longer than the renew deadline: the
	// leader steps down but does not exit, and once the API server is back
	// a leader is elected again within a few retry periods.
	env.RestartAPIServer(t, func() {
		require.Eventually(t, func() bool { return !serving(t, cHealth, "readiness") }, renew+2*time.Second, 50*time.Millisecond,
			"the leader steps down when it cannot renew")
		require.True(t, serving(t, cHealth, "liveness"), "and stays live")
	})
	start = time.Now()
	require.Eventually(t, func() bool { return serving(t, cHealth, "readiness") }, 30*time.Second, 50*time.Millisecond,
		"a leader again after the API server is back")
	t.Logf("leader again %s after the API server restart", time.Since(start).Round(time.Millisecond))
	select {
	case <-c.done:
		t.Fatalf("the replica exited on losing the lease:\n%s", strings.Join(c.lines(), "\n"))
	default:
	}
}

// Kubernetes mode starts without an API server (no discovery at start):
// live, not ready, and it keeps running instead of crash-looping.
func TestKubernetesModeStartsWithoutAPIServer(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:`+strconv.Itoa(freePort(t))+`", insecure-skip-tls-verify: true}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
users: [{name: u, user: {token: t}}]
`), 0o600))
	p := startProc(t, "epp", "epp", "--pool-name", "pool", "--pool-namespace", "ns", "--kubeconfig", kubeconfig,
		"--ha-enable-leader-election", "--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0", "--zap-encoder", "json")
	h := p.waitFor(t, healthAddrRE)
	require.True(t, serving(t, h, "liveness"))
	for range 10 {
		require.False(t, serving(t, h, "readiness"))
		time.Sleep(200 * time.Millisecond)
	}
	select {
	case <-p.done:
		t.Fatalf("epp exited:\n%s", strings.Join(p.lines(), "\n"))
	default:
	}
}

// The Deployment arguments of GIE v1.5's Helm chart, rendered by helm from
// the chart in the GIE v1.5.0 module, start Switchyard unchanged: same
// args, same environment, the chart's plugin configuration file and its
// InferencePool, against a real API server. Requests then flow.
func TestGIEHelmChartDropIn(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{})
	ns := env.Namespace(t, "gie-chart")
	helm := filepath.Join(kubetest.Assets(t), "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("helm is built by hack/test-binaries.sh: %v", err)
	}
	// The chart gives no ports: GIE's defaults are fixed. Two runs of this
	// test at once (two checkouts testing on one machine) take turns.
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "switchyard-e2e-default-ports.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	require.NoError(t, err)
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		require.ErrorIs(t, err, syscall.EWOULDBLOCK)
		require.True(t, time.Now().Before(deadline), "another run of this test has held %s for 5 minutes", lock.Name())
	}
	t.Cleanup(func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN); _ = lock.Close() })
	for _, port := range []int{9002, 9003, 9090} {
		ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
		require.NoError(t, err, "the chart gives no ports, so the EPP takes GIE's defaults 9002, 9003 and 9090; one is busy")
		require.NoError(t, ln.Close())
	}

	// Render the chart as `helm install` would.
	gie := testmod.Dir(t, kubetest.GIEModule, "v1.5.0")
	charts := t.TempDir()
	for _, c := range []string{"inferencepool", "epplib"} {
		require.NoError(t, os.CopyFS(filepath.Join(charts, c), os.DirFS(filepath.Join(gie, "config", "charts", c))))
	}
	chart := filepath.Join(charts, "inferencepool")
	helmEnv := append(os.Environ(), "HOME="+t.TempDir(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	runHelm := func(args ...string) []byte {
		cmd := exec.Command(helm, args...)
		cmd.Env = helmEnv
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "helm %s: %s", strings.Join(args, " "), stderr.String())
		return out
	}
	// The chart's files are read-only in the module cache; the copy is not.
	require.NoError(t, filepath.WalkDir(charts, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chmod(p, map[bool]os.FileMode{true: 0o755, false: 0o644}[d.IsDir()])
	}))
	runHelm("dependency", "build", chart)
	const release = "vllm-llama3-8b-instruct"
	rendered := runHelm("template", release, chart, "--namespace", ns, "--set", "inferencePool.modelServers.matchLabels.app=vllm-llama3-8b-instruct")

	var (
		deploy  *appsv1.Deployment
		pool    *infv1.InferencePool
		plugins = map[string]string{}
	)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err == io.EOF {
			break
		} else {
			require.NoError(t, err)
		}
		if u.Object == nil {
			continue
		}
		data, err := json.Marshal(u.Object)
		require.NoError(t, err)
		switch u.GetKind() {
		case "Deployment":
			deploy = &appsv1.Deployment{}
			require.NoError(t, json.Unmarshal(data, deploy))
		case "InferencePool":
			pool = &infv1.InferencePool{}
			require.NoError(t, json.Unmarshal(data, pool))
		case "ConfigMap":
			var cm corev1.ConfigMap
			require.NoError(t, json.Unmarshal(data, &cm))
			for k, v := range cm.Data {
				plugins[k] = v
			}
		}
	}
	require.NotNil(t, deploy, "the chart renders the EPP Deployment")
	require.NotNil(t, pool, "the chart renders the InferencePool")
	var epp *corev1.Container
	for i := range deploy.Spec.Template.Spec.Containers {
		if deploy.Spec.Template.Spec.Containers[i].Name == "epp" {
			epp = &deploy.Spec.Template.Spec.Containers[i]
		}
	}
	require.NotNil(t, epp)
	t.Logf("chart args: %q", epp.Args)
	for _, flag := range []string{"--pool-name", "--pool-namespace", "--pool-group", "--zap-encoder", "--config-file", "--tracing=false"} {
		require.Contains(t, epp.Args, flag)
	}

	// The chart's ConfigMap is mounted at /config; here it is a folder.
	mount := ""
	for _, m := range epp.VolumeMounts {
		if m.Name == "plugins-config-volume" {
			mount = m.MountPath
		}
	}
	require.Equal(t, "/config", mount)
	cfgDir := t.TempDir()
	for name, content := range plugins {
		require.NoError(t, os.WriteFile(filepath.Join(cfgDir, name), []byte(content), 0o644))
	}
	args := make([]string, len(epp.Args))
	for i, a := range epp.Args {
		args[i] = strings.Replace(a, mount+"/", cfgDir+"/", 1) // only the mount point moves
	}
	// The environment the chart gives (downward API), plus the API server.
	envVars := []string{"KUBECONFIG=" + env.Kubeconfig}
	for _, e := range epp.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			envVars = append(envVars, e.Name+"="+ns)
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			envVars = append(envVars, e.Name+"="+release+"-epp-5f7c9d8b6-x2x9z")
		default:
			envVars = append(envVars, e.Name+"="+e.Value)
		}
	}

	// The chart's pool and two model-server pods on loopback.
	ctx := context.Background()
	pool.Namespace = ns
	require.NoError(t, env.Client.Create(ctx, pool))
	port := int(pool.Spec.TargetPorts[0].Number)
	var sims []string
	for i := range 2 {
		ip := fmt.Sprintf("127.10.3.%d", i+1)
		name := fmt.Sprintf("vllm-%d", i)
		startSim(t, net.JoinHostPort(ip, strconv.Itoa(port)), name)
		env.CreatePod(t, kubetest.Pod{Name: name, Namespace: ns, IP: ip, Ready: true, Labels: map[string]string{"app": "vllm-llama3-8b-instruct"}})
		sims = append(sims, name)
	}

	p := startProcEnv(t, "epp", "epp", envVars, args...)
	p.waitFor(t, healthAddrRE)
	probe := deploy.Spec.Template.Spec.Containers[0].ReadinessProbe
	for _, c := range deploy.Spec.Template.Spec.Containers {
		if c.Name == "epp" {
			probe = c.ReadinessProbe
		}
	}
	require.NotNil(t, probe.GRPC)
	probeAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(probe.GRPC.Port)))
	require.Eventually(t, func() bool { return serving(t, probeAddr, *probe.GRPC.Service) }, 30*time.Second, 50*time.Millisecond,
		"the chart's readiness probe (%s service %q) passes", probeAddr, *probe.GRPC.Service)
	for _, l := range p.lines() {
		if strings.HasPrefix(l, "{") {
			require.True(t, json.Valid([]byte(l)), "--zap-encoder json: every log line is JSON: %s", l)
		}
	}

	// Requests through a gateway to the EPP's default TLS port.
	gw, err := gateway.New(gateway.Options{EPPAddr: "127.0.0.1:9002", EPPTLS: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = gw.Close() })
	seen := map[string]bool{}
	for i := 0; i < 40 && len(seen) < len(sims); i++ {
		var b [8]byte
		_, _ = rand.Read(b[:])
		body := fmt.Sprintf(`{"model":%q,"prompt":"%s hello","max_tokens":2}`, modelsim.DefaultModel, hex.EncodeToString(b[:]))
		req, err := http.NewRequest(http.MethodPost, "http://gateway.invalid/v1/completions", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("content-type", "application/json")
		rec := httptest.NewRecorder()
		gw.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		seen[rec.Header().Get(modelsim.HeaderID)] = true
	}
	require.Len(t, seen, len(sims), "both pods of the chart's pool served")

	// --metrics-endpoint-auth is on (the chart does not turn it off): the
	// metrics port wants a bearer token that a TokenReview accepts and a
	// SubjectAccessReview allows for the path, as in GIE.
	reader := serviceAccountToken(t, env, ns, "prometheus", "/metrics")
	stranger := serviceAccountToken(t, env, ns, "stranger", "")
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", "not-a-token", http.StatusUnauthorized},
		{"/metrics", stranger, http.StatusForbidden},
		{"/debug/pprof/", "", http.StatusUnauthorized},
		{"/debug/endpoints", reader, http.StatusForbidden}, // the role names /metrics only
		{"/metrics", reader, http.StatusOK},
	} {
		req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:9090"+tc.path, nil)
		require.NoError(t, err)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, tc.want, resp.StatusCode, "GET %s with token %.12q", tc.path, tc.token)
	}

	// The admin API (C-51) is guarded by the same filter: a token bound
	// to the shipped ClusterRole (manifests/cluster/admin-api-reader.yaml)
	// reads it; the /metrics reader's and an unbound token get 403.
	adminReader := adminReaderToken(t, env, ns, "admin-reader")
	adminGet := func(path, token string) int {
		req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:9090"+path, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	// The RBAC authorizer reads the new binding through an informer.
	require.Eventually(t, func() bool { return adminGet("/admin/backends", adminReader) == http.StatusOK }, 30*time.Second, 100*time.Millisecond,
		"GET /admin/backends with a token bound to switchyard-admin-api-reader")
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/admin/backends", "", http.StatusUnauthorized},
		{"/admin/backends", reader, http.StatusForbidden},
		{"/admin/backends", stranger, http.StatusForbidden},
		{"/admin/stats/backends", adminReader, http.StatusOK},
		{"/admin/prefix-routing/stats", adminReader, http.StatusOK},
		{"/metrics", adminReader, http.StatusForbidden},
	} {
		require.Equal(t, tc.want, adminGet(tc.path, tc.token), "GET %s with token %.12q", tc.path, tc.token)
	}
	// One endpoint's engine stats, by the name /admin/backends gives it.
	req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:9090/admin/backends", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminReader)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var backends struct {
		Backends []struct {
			Name string `json:"name"`
		} `json:"backends"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&backends))
	_ = resp.Body.Close()
	require.Len(t, backends.Backends, len(sims))
	require.Equal(t, http.StatusOK, adminGet("/admin/backends/"+backends.Backends[0].Name+"/engine-stats", adminReader))

	// GIE's pool gauges and controller-runtime's own metrics on one /metrics.
	require.Eventually(t, func() bool {
		fams, err := scrapeWithToken(context.Background(), "http://127.0.0.1:9090/metrics", reader)
		if err != nil {
			return false
		}
		_, reconciles := fams["controller_runtime_reconcile_total"]
		pods, ok := fams["inference_pool_ready_pods"]
		return reconciles && ok && pods.sum == float64(len(sims))
	}, 15*time.Second, 200*time.Millisecond, "inference_pool_ready_pods and controller_runtime_reconcile_total on :9090/metrics")
}

// applyBaseRBAC creates manifests/base's ServiceAccount, Role and
// RoleBinding in ns and returns a kubeconfig acting as that ServiceAccount.
func applyBaseRBAC(t *testing.T, env *kubetest.Env, ns string) string {
	t.Helper()
	ctx := context.Background()
	for _, f := range []string{"serviceaccount.yaml", "rbac.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "manifests", "base", f))
		require.NoError(t, err)
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err == io.EOF {
				break
			} else {
				require.NoError(t, err, f)
			}
			if u.Object == nil {
				continue
			}
			u.SetNamespace(ns)
			require.NoError(t, env.Client.Create(ctx, u), "%s %s", u.GetKind(), u.GetName())
		}
	}
	return env.ImpersonatingKubeconfig(t, "system:serviceaccount:"+ns+":switchyard")
}

// serviceAccountToken creates a ServiceAccount and a token for it; with a
// path, a ClusterRole lets it GET that non-resource URL.
func serviceAccountToken(t *testing.T, env *kubetest.Env, ns, name, path string) string {
	t.Helper()
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	if path != "" {
		role := ns + "-" + name
		_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role},
			Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{path}, Verbs: []string{"get"}}}}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tok.Status.Token
}

// adminReaderToken creates a ServiceAccount, binds it to the admin API
// reader ClusterRole that manifests/cluster/admin-api-reader.yaml ships
// (created from the file) and returns a token for it.
func adminReaderToken(t *testing.T, env *kubetest.Env, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	tok := serviceAccountToken(t, env, ns, name, "")
	data, err := os.ReadFile(filepath.Join("..", "..", "manifests", "cluster", "admin-api-reader.yaml"))
	require.NoError(t, err)
	u := &unstructured.Unstructured{}
	require.NoError(t, utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096).Decode(&u.Object))
	require.Equal(t, "ClusterRole", u.GetKind())
	// Cluster-scoped objects outlive the test's namespace: delete them
	// when the test ends, and tolerate a role left by an earlier run.
	if err := env.Client.Create(ctx, u); !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), u) })
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	binding := ns + "-" + name
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: binding},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: u.GetName()},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding, metav1.DeleteOptions{})
	})
	return tok
}

// startSim runs a model-server simulator on addr until the test ends.
func startSim(t *testing.T, addr, id string) {
	t.Helper()
	cfg := modelsim.DefaultConfig()
	cfg.TimeScale = 0.01
	sim, err := modelsim.New(cfg, modelsim.WithID(id))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, sim.Start(ctx))
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	srv := &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = sim.Close()
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(sctx)
		c()
		cancel()
		<-done
	})
}
