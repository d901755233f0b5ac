package kubesource_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/switchyard-ai/switchyard/internal/kubetest"
	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/datastore/kubesource"
	"github.com/switchyard-ai/switchyard/pkg/gateway"
	"github.com/switchyard-ai/switchyard/pkg/modelsim"
	"github.com/switchyard-ai/switchyard/pkg/server"
)

// followWithin is how fast the datastore must follow a change of the pool
// or its pods (issue 4).
const followWithin = time.Second

// fleet is a set of simulated model servers: pod i listens on
// 127.10.<subnet>.(i+1) on every port of ports. The server on pod i, port
// p answers with x-modelsim-id "sim-i:p".
type fleet struct {
	ips   []string
	ports []int
}

func startFleet(t *testing.T, subnet, pods, nports int) *fleet {
	t.Helper()
	f := &fleet{}
	for i := range pods {
		f.ips = append(f.ips, fmt.Sprintf("127.10.%d.%d", subnet, i+1))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for range nports {
		port, lns := listenAll(t, f.ips)
		f.ports = append(f.ports, port)
		for i, ln := range lns {
			cfg := modelsim.DefaultConfig()
			cfg.TimeScale = 0.01
			cfg.Seed = uint64(i + 1)
			sim, err := modelsim.New(cfg, modelsim.WithID(fmt.Sprintf("sim-%d:%d", i, port)))
			require.NoError(t, err)
			require.NoError(t, sim.Start(ctx))
			srv := &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 5 * time.Second}
			wg.Add(1)
			go func() { defer wg.Done(); _ = srv.Serve(ln) }()
			t.Cleanup(func() {
				_ = sim.Close()
				sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
				defer c()
				_ = srv.Shutdown(sctx)
			})
		}
	}
	return f
}

// listenAll binds one port on every address.
func listenAll(t *testing.T, ips []string) (int, []net.Listener) {
	t.Helper()
	for range 20 {
		first, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
		require.NoError(t, err, "bind a loopback address (Linux routes all of 127.0.0.0/8 to lo)")
		port := first.Addr().(*net.TCPAddr).Port
		lns := []net.Listener{first}
		for _, ip := range ips[1:] {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		if len(lns) == len(ips) {
			return port, lns
		}
		for _, ln := range lns {
			_ = ln.Close()
		}
	}
	t.Fatal("no port free on every fleet address")
	return 0, nil
}

// rig is the EPP in Kubernetes mode with a gateway in front.
type rig struct {
	env    *kubetest.Env
	ns     string
	srv    *server.Server
	gwURL  string
	http   *http.Client
	health healthpb.HealthClient
}

func startRig(t *testing.T, env *kubetest.Env, ns string, opts kubesource.Options) *rig {
	t.Helper()
	opts.Config = env.Config
	opts.Namespace = ns
	opts.Logger = testr.NewWithOptions(t, testr.Options{Verbosity: 1})
	srv, err := server.New(server.Config{
		GRPCAddr:   "127.0.0.1:0",
		HealthAddr: "127.0.0.1:0",
		PoolName:   "pool",
		Source: func(store *datastore.Store) (server.EndpointSource, error) {
			return kubesource.New(store, opts)
		},
		Logger: testr.NewWithOptions(t, testr.Options{Verbosity: 0}),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	gw, err := gateway.New(gateway.Options{EPPAddr: srv.GRPCAddr()})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: gw, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	conn, err := grpc.NewClient(srv.HealthAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	r := &rig{env: env, ns: ns, srv: srv, gwURL: "http://" + ln.Addr().String(), http: &http.Client{Timeout: 20 * time.Second}, health: healthpb.NewHealthClient(conn)}
	t.Cleanup(func() {
		r.http.CloseIdleConnections()
		_ = conn.Close()
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		_ = hs.Shutdown(sctx)
		c()
		gw.Close()
		cancel()
		require.NoError(t, <-done)
	})
	return r
}

// ready asks the health server's readiness service.
func (r *rig) ready(t *testing.T) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := r.health.Check(ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
	require.NoError(t, err)
	return resp.Status == healthpb.HealthCheckResponse_SERVING
}

// send posts one completion with a fresh random prompt through the gateway
// and returns the status and the model server that answered.
func (r *rig) send(t *testing.T) (int, string) {
	t.Helper()
	var b [12]byte
	_, _ = rand.Read(b[:])
	body := fmt.Sprintf(`{"model":%q,"prompt":"%s tell me about routers","max_tokens":2}`, modelsim.DefaultModel, hex.EncodeToString(b[:]))
	resp, err := r.http.Post(r.gwURL+"/v1/completions", "application/json", bytes.NewBufferString(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get(modelsim.HeaderID)
}

// routesTo sends requests until every server in want has answered one,
// and fails if any other server answers or a request fails.
func (r *rig) routesTo(t *testing.T, want ...string) {
	t.Helper()
	seen := map[string]bool{}
	deadline := time.Now().Add(15 * time.Second)
	for n := 0; ; n++ {
		code, id := r.send(t)
		require.Equal(t, http.StatusOK, code, "request %d", n)
		require.Contains(t, want, id, "request %d was served by %s, not by the pool's endpoints", n, id)
		seen[id] = true
		if len(seen) == len(want) && n >= 2*len(want) {
			return
		}
		require.True(t, time.Now().Before(deadline), "after %d requests only %v of %v answered", n, seen, want)
	}
}

// refused checks that requests get the 503 of an empty pool.
func (r *rig) refused(t *testing.T) {
	t.Helper()
	for range 3 {
		code, id := r.send(t)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Empty(t, id)
	}
}

// follows waits until the endpoint set is want ("name@ip:port", see ep)
// and returns how long it took.
func (r *rig) follows(t *testing.T, since time.Time, limit time.Duration, want ...string) time.Duration {
	t.Helper()
	sort.Strings(want)
	var got []string
	for {
		got = got[:0]
		for _, e := range r.srv.Store().Snapshot().All() {
			got = append(got, e.Name()+"@"+e.HostPort())
		}
		sort.Strings(got)
		if slices.Equal(got, want) {
			return time.Since(since)
		}
		if time.Since(since) > limit {
			t.Fatalf("endpoint set %v after %s, want %v", got, limit, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stays checks that the endpoint set is want throughout d.
func (r *rig) stays(t *testing.T, d time.Duration, want ...string) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		var got []string
		for _, e := range r.srv.Store().Snapshot().All() {
			got = append(got, e.Name()+"@"+e.HostPort())
		}
		sort.Strings(got)
		require.Equal(t, want, got)
	}
}

// change runs an API change and checks the datastore follows within
// followWithin.
func (r *rig) change(t *testing.T, what string, apply func(), want ...string) {
	t.Helper()
	apply()
	// Measured from the API server's acknowledgement: the change exists
	// from then on (the first write of a CRD kind can take seconds on a
	// fresh API server, which is not the EPP's time).
	took := r.follows(t, time.Now(), followWithin, want...)
	t.Logf("%s: endpoint set followed in %s", what, took.Round(time.Millisecond))
}

// ep names the endpoint of rank on pod, serving the fleet's port portIdx.
func ep(f *fleet, pod, rank, portIdx int) string {
	return fmt.Sprintf("sim-%d-rank-%d@%s:%d", pod, rank, f.ips[pod], f.ports[portIdx])
}

func ids(f *fleet, pod int, portIdx ...int) []string {
	var out []string
	for _, p := range portIdx {
		out = append(out, fmt.Sprintf("sim-%d:%d", pod, f.ports[p]))
	}
	return out
}

// The InferencePool mode against a real API server, checked through real
// requests: gateway → ext_proc → EPP → the model server it picked.
func TestInferencePoolThroughRequests(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{})
	ns := env.Namespace(t, "pool")
	f := startFleet(t, 1, 3, 2)
	r := startRig(t, env, ns, kubesource.Options{PoolName: "pool"})
	ctx := context.Background()

	// Pods first, then the pool: not ready until the pool exists.
	pods := make([]*corev1.Pod, 3)
	for i := range pods {
		pods[i] = env.CreatePod(t, kubetest.Pod{Name: fmt.Sprintf("sim-%d", i), Namespace: ns, IP: f.ips[i], Ready: true,
			Labels: map[string]string{"app": "sim", "inference.networking.k8s.io/engine-type": "vllm"}})
	}
	time.Sleep(300 * time.Millisecond)
	require.False(t, r.ready(t), "ready before the InferencePool exists")
	r.refused(t)

	pool := kubetest.Pool(ns, "pool", map[string]string{"app": "sim"}, int32(f.ports[0]))
	r.change(t, "pool created", func() { require.NoError(t, env.Client.Create(ctx, pool)) }, ep(f, 0, 0, 0), ep(f, 1, 0, 0), ep(f, 2, 0, 0))
	require.Eventually(t, func() bool { return r.ready(t) }, 5*time.Second, 10*time.Millisecond, "ready after the first full sync")
	for _, e := range r.srv.Store().Snapshot().All() {
		require.Equal(t, ns, e.Metadata().Namespace)
	}
	// The engine comes from the pod label inference.networking.k8s.io/engine-type
	// (the core-metrics-extractor's default engineLabelKey) at the first scrape.
	require.Eventually(t, func() bool {
		for _, e := range r.srv.Store().Snapshot().All() {
			if eng, _ := datastore.EngineKey.Get(e); eng != "vllm" {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond)
	r.routesTo(t, slices.Concat(ids(f, 0, 0), ids(f, 1, 0), ids(f, 2, 0))...)

	// Readiness flips.
	r.change(t, "pod sim-1 not ready", func() { env.SetPodStatus(t, pods[1], f.ips[1], false) }, ep(f, 0, 0, 0), ep(f, 2, 0, 0))
	r.routesTo(t, slices.Concat(ids(f, 0, 0), ids(f, 2, 0))...)
	r.change(t, "pod sim-1 ready again", func() { env.SetPodStatus(t, pods[1], f.ips[1], true) }, ep(f, 0, 0, 0), ep(f, 1, 0, 0), ep(f, 2, 0, 0))
	r.routesTo(t, slices.Concat(ids(f, 0, 0), ids(f, 1, 0), ids(f, 2, 0))...)

	// Deletion.
	r.change(t, "pod sim-2 deleted", func() { require.NoError(t, env.Client.Delete(ctx, pods[2])) }, ep(f, 0, 0, 0), ep(f, 1, 0, 0))
	r.routesTo(t, slices.Concat(ids(f, 0, 0), ids(f, 1, 0))...)

	// A label change takes a pod out of the pool.
	r.change(t, "pod sim-0 relabelled", func() {
		env.Update(t, pods[0], func() { pods[0].Labels["app"] = "other" })
	}, ep(f, 1, 0, 0))
	r.routesTo(t, ids(f, 1, 0)...)

	// The pool's selector changes: now only sim-0 matches.
	r.change(t, "pool selector changed", func() {
		env.Update(t, pool, func() { pool.Spec.Selector.MatchLabels = map[infv1.LabelKey]infv1.LabelValue{"app": "other"} })
	}, ep(f, 0, 0, 0))
	r.routesTo(t, ids(f, 0, 0)...)

	// targetPorts: two ranks per pod, then only the second port.
	r.change(t, "targetPorts grew", func() {
		env.Update(t, pool, func() {
			pool.Spec.TargetPorts = []infv1.Port{{Number: infv1.PortNumber(f.ports[0])}, {Number: infv1.PortNumber(f.ports[1])}}
		})
	}, ep(f, 0, 0, 0), ep(f, 0, 1, 1))
	r.routesTo(t, ids(f, 0, 0, 1)...)
	r.change(t, "targetPorts changed", func() {
		env.Update(t, pool, func() { pool.Spec.TargetPorts = []infv1.Port{{Number: infv1.PortNumber(f.ports[1])}} })
	}, ep(f, 0, 0, 1))
	r.routesTo(t, ids(f, 0, 1)...)

	// The API server restarts: the EPP keeps serving what it knows, then
	// follows changes made after the restart.
	env.Update(t, pool, func() { pool.Spec.Selector.MatchLabels = map[infv1.LabelKey]infv1.LabelValue{"app": "sim"} })
	r.follows(t, time.Now(), followWithin, ep(f, 1, 0, 1))
	env.Update(t, pods[0], func() { pods[0].Labels["app"] = "sim" })
	r.follows(t, time.Now(), followWithin, ep(f, 0, 0, 1), ep(f, 1, 0, 1))
	env.RestartAPIServer(t, func() {
		time.Sleep(2 * time.Second)
		require.True(t, r.ready(t), "readiness does not depend on the API server being up")
		r.routesTo(t, slices.Concat(ids(f, 0, 1), ids(f, 1, 1))...)
	})
	start := time.Now()
	env.SetPodStatus(t, pods[1], f.ips[1], false)
	took := r.follows(t, start, 60*time.Second, ep(f, 0, 0, 1))
	t.Logf("after the API server restart, the first change was followed in %s (client-go's watch back-off)", took.Round(time.Millisecond))
	r.routesTo(t, ids(f, 0, 1)...)
	// Each watch reconnects on its own back-off; the pool's too.
	start = time.Now()
	env.Update(t, pool, func() { pool.Spec.TargetPorts = []infv1.Port{{Number: infv1.PortNumber(f.ports[0])}} })
	took = r.follows(t, start, 60*time.Second, ep(f, 0, 0, 0))
	t.Logf("after the API server restart, the first pool change was followed in %s", took.Round(time.Millisecond))
	r.change(t, "pod sim-1 ready after the restart", func() { env.SetPodStatus(t, pods[1], f.ips[1], true) }, ep(f, 0, 0, 0), ep(f, 1, 0, 0))
	r.routesTo(t, slices.Concat(ids(f, 0, 0), ids(f, 1, 0))...)

	// The pool is deleted: no endpoints and not ready; back when recreated.
	r.change(t, "pool deleted", func() { require.NoError(t, env.Client.Delete(ctx, pool)) })
	require.Eventually(t, func() bool { return !r.ready(t) }, 5*time.Second, 10*time.Millisecond)
	r.refused(t)
	pool = kubetest.Pool(ns, "pool", map[string]string{"app": "sim"}, int32(f.ports[0]))
	r.change(t, "pool recreated", func() { require.NoError(t, env.Client.Create(ctx, pool)) }, ep(f, 0, 0, 0), ep(f, 1, 0, 0))
	require.Eventually(t, func() bool { return r.ready(t) }, 5*time.Second, 10*time.Millisecond)
	r.routesTo(t, slices.Concat(ids(f, 0, 0), ids(f, 1, 0))...)
}

// GIE's --endpoint-selector mode: no CRD, the pods of a label selector on
// fixed target ports. An empty selection is a synced (ready) pool.
func TestEndpointSelectorThroughRequests(t *testing.T) {
	env := kubetest.Start(t, kubetest.Options{})
	ns := env.Namespace(t, "selector")
	f := startFleet(t, 2, 2, 1)
	r := startRig(t, env, ns, kubesource.Options{
		Selector:    labels.SelectorFromSet(labels.Set{"app": "sim"}),
		TargetPorts: []int{f.ports[0]},
	})
	require.Eventually(t, func() bool { return r.ready(t) }, 10*time.Second, 10*time.Millisecond, "an empty selection is still a full sync")
	r.refused(t)
	var pods []*corev1.Pod
	r.change(t, "two pods", func() {
		for i := range 2 {
			pods = append(pods, env.CreatePod(t, kubetest.Pod{Name: fmt.Sprintf("sim-%d", i), Namespace: ns, IP: f.ips[i], Ready: true, Labels: map[string]string{"app": "sim"}}))
		}
	}, ep(f, 0, 0, 0), ep(f, 1, 0, 0))
	r.routesTo(t, slices.Concat(ids(f, 0, 0), ids(f, 1, 0))...)
	r.change(t, "pod sim-0 not ready", func() { env.SetPodStatus(t, pods[0], f.ips[0], false) }, ep(f, 1, 0, 0))
	r.routesTo(t, ids(f, 1, 0)...)
	// A pod in another namespace with the same labels is not ours.
	other := env.Namespace(t, "other")
	env.CreatePod(t, kubetest.Pod{Name: "sim-0", Namespace: other, IP: f.ips[0], Ready: true, Labels: map[string]string{"app": "sim"}})
	r.stays(t, time.Second, ep(f, 1, 0, 0))
	require.NoError(t, env.Client.DeleteAllOf(context.Background(), &corev1.Pod{}, client.InNamespace(ns)))
	r.follows(t, time.Now(), followWithin)
	r.refused(t)
}
