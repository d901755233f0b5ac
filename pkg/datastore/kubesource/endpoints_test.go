package kubesource_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"

	"github.com/switchyard-ai/switchyard/pkg/datastore/kubesource"
)

func pod(name, ip string, ready bool, mods ...func(*corev1.Pod)) corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "sim"}},
		Status: corev1.PodStatus{PodIP: ip, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: st},
		}},
	}
	for _, m := range mods {
		m(&p)
	}
	return p
}

func TestServing(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name string
		pod  corev1.Pod
		want bool
	}{
		{"ready with IP", pod("a", "127.10.0.1", true), true},
		{"not ready", pod("a", "127.10.0.1", false), false},
		{"no IP yet", pod("a", "", true), false},
		{"terminating", pod("a", "127.10.0.1", true, func(p *corev1.Pod) { p.DeletionTimestamp = &now }), false},
		{"no Ready condition", pod("a", "127.10.0.1", true, func(p *corev1.Pod) { p.Status.Conditions = p.Status.Conditions[:1] }), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, kubesource.Serving(&tc.pod))
		})
	}
}

func TestEndpoints(t *testing.T) {
	pods := []corev1.Pod{
		pod("sim-b", "127.10.0.2", true, func(p *corev1.Pod) { p.Labels["inference.networking.k8s.io/engine-type"] = "sglang" }),
		pod("sim-a", "127.10.0.1", true),
		pod("sim-c", "127.10.0.3", false),
		pod("sim-d", "127.10.0.1", true), // same IP as sim-a: hostNetwork or a reused address
		pod("sim-e", "bad address!", true),
	}
	specs, skipped := kubesource.Endpoints(pods, []int{8000, 8001}, 9999)
	var names, addrs []string
	for _, s := range specs {
		names = append(names, s.Name)
		addrs = append(addrs, s.HostPort())
		require.Equal(t, "ns", s.Namespace)
		require.Zero(t, s.MetricsPort, "the metrics port flag applies to single-port pools only")
	}
	require.Equal(t, []string{"sim-a-rank-0", "sim-a-rank-1", "sim-b-rank-0", "sim-b-rank-1"}, names)
	require.Equal(t, []string{"127.10.0.1:8000", "127.10.0.1:8001", "127.10.0.2:8000", "127.10.0.2:8001"}, addrs)
	require.Equal(t, "sim-b", specs[2].PodName)
	require.Equal(t, "sglang", specs[2].Labels["inference.networking.k8s.io/engine-type"])
	require.Len(t, skipped, 2)
	require.Contains(t, skipped[0], "pod ns/sim-d: 127.10.0.1:8000 is already the address of pod sim-a")
	require.Contains(t, skipped[1], "pod ns/sim-e: ")

	specs, _ = kubesource.Endpoints(pods[:2], []int{8000}, 9999)
	require.Equal(t, 9999, specs[0].MetricsPort)
	require.Equal(t, "127.10.0.1:9999", specs[0].MetricsHostPort())

	specs, skipped = kubesource.Endpoints(nil, []int{8000}, 0)
	require.Empty(t, specs)
	require.Empty(t, skipped)
}

func TestOptionsValidate(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	sel := labels.SelectorFromSet(labels.Set{"app": "sim"})
	tests := []struct {
		name string
		opts kubesource.Options
		want []string
	}{
		{"pool mode", kubesource.Options{Config: cfg, Namespace: "ns", PoolName: "p"}, nil},
		{"selector mode", kubesource.Options{Config: cfg, Namespace: "ns", Selector: sel, TargetPorts: []int{8000}}, nil},
		{"nothing", kubesource.Options{}, []string{"no Kubernetes client configuration", "--pool-namespace: empty", "give --pool-name or --endpoint-selector"}},
		{"both", kubesource.Options{Config: cfg, Namespace: "ns", PoolName: "p", Selector: sel}, []string{"mutually exclusive"}},
		{"empty selector", kubesource.Options{Config: cfg, Namespace: "ns", Selector: labels.Everything(), TargetPorts: []int{1}}, []string{"selects every pod"}},
		{"ports", kubesource.Options{Config: cfg, Namespace: "ns", Selector: sel, TargetPorts: []int{0, 8000, 8000}}, []string{"--endpoint-target-ports[0]: 0 is not a port", "--endpoint-target-ports[2]: 8000 is listed twice"}},
		{"no ports", kubesource.Options{Config: cfg, Namespace: "ns", Selector: sel}, []string{"--endpoint-target-ports: needed"}},
		{"group", kubesource.Options{Config: cfg, Namespace: "ns", PoolName: "p", PoolGroup: "example.com"}, []string{`--pool-group: "example.com" is not served`}},
		{"lease times", kubesource.Options{Config: cfg, Namespace: "ns", PoolName: "p", LeaderElection: true, LeaseDuration: time.Second}, []string{"need renew deadline (10s) < lease duration (1s)"}},
		{"sub-second lease", kubesource.Options{Config: cfg, Namespace: "ns", PoolName: "p", LeaderElection: true, LeaseDuration: 900 * time.Millisecond, RenewDeadline: 600 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}, []string{"--ha-lease-duration: 900ms is not a whole number of seconds"}},
		{"retry jitter", kubesource.Options{Config: cfg, Namespace: "ns", PoolName: "p", LeaderElection: true, RenewDeadline: 2200 * time.Millisecond, RetryPeriod: 2 * time.Second}, []string{"need renew deadline (2.2s) > 1.2 × retry period (2s)"}},
		{"lease times without election", kubesource.Options{Config: cfg, Namespace: "ns", PoolName: "p", LeaseDuration: time.Second}, nil},
		{"too many ports", kubesource.Options{Config: cfg, Namespace: "ns", Selector: sel, TargetPorts: []int{1, 2, 3, 4, 5, 6, 7, 8, 9}}, []string{"9 ports, at most 8"}},
		{"selector lease without a Deployment pod name", kubesource.Options{Config: cfg, Namespace: "ns", Selector: sel, TargetPorts: []int{8000}, LeaderElection: true}, []string{`must look like <deployment>-<hash>-<suffix>; got "epp-0"`}},
		{"selector lease named", kubesource.Options{Config: cfg, Namespace: "ns", Selector: sel, TargetPorts: []int{8000}, LeaderElection: true, LeaderElectionID: "my-lease"}, nil},
	}
	t.Setenv("POD_NAME", "epp-0") // a StatefulSet's pod: no Deployment name
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

// The cache keeps only what Endpoints and Serving read; trimming changes
// no decision.
func TestTrimPod(t *testing.T) {
	now := metav1.Now()
	full := pod("sim-a", "127.10.0.1", true, func(p *corev1.Pod) {
		p.Annotations = map[string]string{"big": strings.Repeat("x", 1000)}
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
		p.Spec.Containers = []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai"}}
	})
	got, err := kubesource.TrimPod(&full)
	require.NoError(t, err)
	trimmed := got.(*corev1.Pod)
	require.Empty(t, trimmed.Annotations)
	require.Empty(t, trimmed.ManagedFields)
	require.Empty(t, trimmed.Spec.Containers)
	require.Equal(t, full.Labels, trimmed.Labels)
	require.Len(t, trimmed.Status.Conditions, 1)
	for _, p := range []corev1.Pod{
		full,
		pod("b", "127.10.0.2", false),
		pod("c", "", true),
		pod("d", "127.10.0.4", true, func(p *corev1.Pod) { p.DeletionTimestamp = &now }),
	} {
		tp, err := kubesource.TrimPod(&p)
		require.NoError(t, err)
		require.Equal(t, kubesource.Serving(&p), kubesource.Serving(tp.(*corev1.Pod)), p.Name)
		a, _ := kubesource.Endpoints([]corev1.Pod{p}, []int{8000}, 0)
		b, _ := kubesource.Endpoints([]corev1.Pod{*tp.(*corev1.Pod)}, []int{8000}, 0)
		require.Equal(t, a, b, p.Name)
	}
	other := "not a pod"
	same, err := kubesource.TrimPod(other)
	require.NoError(t, err)
	require.Equal(t, other, same)
}

// GIE's active-ports annotation: only the listed target ports of a pod
// serve; ranks keep their index in targetPorts.
func TestEndpointsActivePorts(t *testing.T) {
	ports := []int{8000, 8001, 8002}
	tests := []struct {
		annotation string
		want       []string
	}{
		{"8001", []string{"p-rank-1@127.10.0.1:8001"}},
		{"8000, 8002", []string{"p-rank-0@127.10.0.1:8000", "p-rank-2@127.10.0.1:8002"}},
		{"9000,x,", nil},
		{"", nil},
	}
	for _, tc := range tests {
		t.Run(tc.annotation, func(t *testing.T) {
			p := pod("p", "127.10.0.1", true, func(p *corev1.Pod) {
				p.Annotations = map[string]string{kubesource.ActivePortsAnnotation: tc.annotation}
			})
			trimmed, err := kubesource.TrimPod(&p)
			require.NoError(t, err)
			for _, in := range []corev1.Pod{p, *trimmed.(*corev1.Pod)} {
				specs, _ := kubesource.Endpoints([]corev1.Pod{in}, ports, 0)
				var got []string
				for _, s := range specs {
					got = append(got, s.Name+"@"+s.HostPort())
				}
				require.Equal(t, tc.want, got)
			}
		})
	}
}

func TestDeploymentName(t *testing.T) {
	for pod, want := range map[string]string{
		"epp-7d9f8c6b5-x2x9z":         "epp",
		"my-epp-v2-7d9f8c6b5-x2x9z":   "my-epp-v2",
		"epp-0":                       "",
		"":                            "",
		"vllm-llama3-epp-5f7c9d8b6-a": "",
		"my-epp-0":                    "",
		"my-epp-v2-5f7c9d8b6-a0eio":   "",
	} {
		got, ok := kubesource.DeploymentName(pod)
		require.Equal(t, want, got, pod)
		require.Equal(t, want != "", ok, pod)
	}
}
