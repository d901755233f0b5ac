// Package e2e runs Switchyard as a user does, with real processes on
// loopback: modelsim servers, the EPP in standalone mode (TLS, default
// configuration) and the gateway, talking real HTTP and gRPC.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	dir, err := buildBinaries()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

const modelName = "meta-llama/Llama-3.1-8B-Instruct"

var (
	simAddrRE     = regexp.MustCompile(`"addr"="http://([^"]+)"`)
	gatewayAddrRE = regexp.MustCompile(`gateway listening on http://(\S+)`)
)

// cluster is one running setup.
type cluster struct {
	sims    []*proc
	simAddr []string // 127.0.0.1:port per sim
	epp     *proc
	gateway string // base URL
	metrics string // the EPP's metrics base URL
	token   string // the metrics port's bearer token (--metrics-token-file)
	grpc    string // the EPP's ext_proc address
	client  *http.Client
}

// clusterOpts shape a cluster beyond its size.
type clusterOpts struct {
	// faults[i], when set, is sim-i's --metrics-fault.
	faults []string
	// simArgs[i] are more flags of sim-i.
	simArgs [][]string
	// endpointYAML[i] is more of sim-i's endpoints-file entry, as
	// "key: value" lines (indented by the caller's two spaces).
	endpointYAML []string
	// config, when set, is the EPP's configuration (--config-file).
	config string
	// eppArgs are more EPP flags.
	eppArgs []string
	// noConformance leaves out --enable-conformance-test-headers (the
	// served endpoint echo the tests check), as in production.
	noConformance bool
	// unready is how many sims may stay unready (broken metrics).
	unready int
}

// metricsToken is the bearer token the e2e EPPs guard their metrics port
// with, so /debug/endpoints is served.
const metricsToken = "e2e-metrics-token-0123456789abcdef"

func startCluster(t *testing.T, sims int) *cluster {
	t.Helper()
	return startClusterWith(t, sims, clusterOpts{})
}

func startClusterWith(t *testing.T, sims int, o clusterOpts) *cluster {
	t.Helper()
	c := &cluster{token: metricsToken, client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	t.Cleanup(c.client.CloseIdleConnections)
	var eps strings.Builder
	eps.WriteString("endpoints:\n")
	for i := range sims {
		name := "sim-" + strconv.Itoa(i)
		args := []string{"--port", "0", "--id", name, "--time-scale", "0.1", "--seed", strconv.Itoa(i + 1)}
		if i < len(o.faults) && o.faults[i] != "" {
			args = append(args, "--metrics-fault", o.faults[i])
		}
		if i < len(o.simArgs) {
			args = append(args, o.simArgs[i]...)
		}
		p := startProc(t, name, "modelsim", args...)
		addr := p.waitFor(t, simAddrRE)
		c.sims = append(c.sims, p)
		c.simAddr = append(c.simAddr, addr)
		host, port, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		fmt.Fprintf(&eps, "- name: %s\n  address: %s\n  port: %s\n  labels: {app: modelsim}\n", name, host, port)
		if i < len(o.endpointYAML) && o.endpointYAML[i] != "" {
			for line := range strings.SplitSeq(strings.TrimSpace(o.endpointYAML[i]), "\n") {
				fmt.Fprintf(&eps, "  %s\n", line)
			}
		}
	}
	dir := t.TempDir()
	epFile := filepath.Join(dir, "endpoints.yaml")
	require.NoError(t, os.WriteFile(epFile, []byte(eps.String()), 0o600))
	tokenFile := filepath.Join(dir, "metrics-token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(metricsToken+"\n"), 0o600))

	// The metrics port must be known in advance (0 turns it off): a port
	// free a moment ago on an address of its own in 127.0.0.0/8, so that
	// parallel test runs do not race for it.
	metricsIP, metricsPort := freeLoopbackAddr(t)
	c.metrics = "http://" + net.JoinHostPort(metricsIP, strconv.Itoa(metricsPort))
	args := []string{"--endpoints-file", epFile,
		"--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", strconv.Itoa(metricsPort),
		"--metrics-bind-address", metricsIP, "--grpc-bind-address", "127.0.0.1", "--grpc-health-bind-address", "127.0.0.1",
		"--metrics-token-file", tokenFile,
		"--zap-encoder", "json", "-v", "3", "--seed", "7"}
	if !o.noConformance {
		args = append(args, "--enable-conformance-test-headers")
	}
	if o.config != "" {
		cfgFile := filepath.Join(dir, "config.yaml")
		require.NoError(t, os.WriteFile(cfgFile, []byte(o.config), 0o600))
		args = append(args, "--config-file", cfgFile)
	}
	c.epp = startProc(t, "epp", "epp", append(args, o.eppArgs...)...)
	serving := c.epp.waitFor(t, regexp.MustCompile(`"msg":"Switchyard serving".*"extProc":"([^"]+)"`))
	_, grpcPort, err := net.SplitHostPort(serving)
	require.NoError(t, err)
	c.grpc = "127.0.0.1:" + grpcPort
	gw := startProc(t, "gateway", "epp", "gateway", "--listen", "127.0.0.1:0", "--epp-addr", "127.0.0.1:"+grpcPort)
	c.gateway = "http://" + gw.waitFor(t, gatewayAddrRE)

	// Ready: every endpoint has fresh metrics (but those whose metrics
	// are broken on purpose).
	require.Eventually(t, func() bool {
		st, err := c.state()
		if err != nil || len(st.Endpoints) != sims {
			return false
		}
		ready := 0
		for _, e := range st.Endpoints {
			if e.Ready {
				ready++
			}
		}
		return ready >= sims-o.unready
	}, 20*time.Second, 50*time.Millisecond, "endpoints never became ready")
	return c
}

// poolState is the EPP's /debug/endpoints document.
type poolState struct {
	Endpoints []struct {
		Name             string `json:"name"`
		Address          string `json:"address"`
		Ready            bool   `json:"ready"`
		InFlightRequests int64  `json:"inFlightRequests"`
		InFlightTokens   int64  `json:"inFlightTokens"`
		Served           uint64 `json:"served"`
		LoadUnknown      string `json:"loadUnknown"`
		Routable         bool   `json:"routable"`
		Health           string `json:"health"`
		Breaker          string `json:"breaker"`
	} `json:"endpoints"`
}

func (c *cluster) state() (*poolState, error) {
	req, err := http.NewRequest(http.MethodGet, c.metrics+"/debug/endpoints", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /debug/endpoints: %s", resp.Status)
	}
	var st poolState
	return &st, json.NewDecoder(resp.Body).Decode(&st)
}

// result is one completed request.
type result struct {
	status int
	sim    string // x-modelsim-id: the server that answered
	served string // x-conformance-test-served-endpoint: what the gateway reported
	body   []byte
}

func (c *cluster) post(ctx context.Context, id, path, body string) (result, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.gateway+path, strings.NewReader(body))
	if err != nil {
		return result{}, err
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-request-id", id)
	resp, err := c.client.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, sim: resp.Header.Get("x-modelsim-id"), served: resp.Header.Get("x-conformance-test-served-endpoint"), body: b}, err
}

// routedTo maps request ids to the primary endpoint the EPP chose, from
// its per-request log lines.
func (c *cluster) routedTo() map[string]string {
	out := map[string]string{}
	for _, m := range c.epp.jsonLogs("Routed") {
		id, _ := m["requestID"].(string)
		eps, _ := m["endpoints"].(string)
		out[id] = strings.Split(eps, ",")[0]
	}
	return out
}

// systemPrompt is a long shared prefix, one per group.
func systemPrompt(group int) string {
	topics := []string{"network routers", "French cooking", "tax law", "orbital mechanics", "jazz history", "gardening"}
	return strings.Repeat(fmt.Sprintf("You are an expert on %s. Answer precisely, cite sources, and keep a friendly tone. ", topics[group%len(topics)]), 24)
}

func TestEndToEnd(t *testing.T) {
	c := startCluster(t, 4)
	simByID := map[string]string{}
	for i, a := range c.simAddr {
		simByID["sim-"+strconv.Itoa(i)] = a
	}
	ctx := context.Background()

	// 200 requests in 4 groups sharing a long prefix, 4 at a time.
	const groups, perGroup = 4, 50
	type sent struct {
		id    string
		group int
		res   result
	}
	var (
		mu   sync.Mutex
		done []sent
		wg   sync.WaitGroup
	)
	jobs := make(chan sent)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":8}`, modelName, systemPrompt(j.group)+fmt.Sprintf("Question %s?", j.id))
				res, err := c.post(ctx, j.id, "/v1/completions", body)
				if err != nil {
					t.Errorf("%s: %v", j.id, err)
					continue
				}
				j.res = res
				mu.Lock()
				done = append(done, j)
				mu.Unlock()
			}
		}()
	}
	for i := range groups * perGroup {
		jobs <- sent{id: "prefix-" + strconv.Itoa(i), group: i % groups}
	}
	close(jobs)
	wg.Wait()
	require.Len(t, done, groups*perGroup)

	t.Run("every response came from the endpoint the EPP named", func(t *testing.T) {
		routed := c.routedTo()
		for _, s := range done {
			require.Equal(t, http.StatusOK, s.res.status, "%s: %s", s.id, s.res.body)
			want, ok := routed[s.id]
			require.True(t, ok, "no routing decision logged for %s", s.id)
			require.Equal(t, want, simByID[s.res.sim], "%s: answered by %s, the EPP named %s", s.id, s.res.sim, want)
			require.Equal(t, want, s.res.served, "%s: the served endpoint echoed to the client", s.id)
		}
	})

	t.Run("requests sharing a prefix concentrate on the endpoints holding it", func(t *testing.T) {
		for g := range groups {
			counts := map[string]int{}
			for _, s := range done {
				if s.group == g {
					counts[s.res.sim]++
				}
			}
			top := 0
			for _, n := range counts {
				top = max(top, n)
			}
			t.Logf("group %d: %v", g, counts)
			// Affinity: most of a group's requests land on one endpoint
			// (the queue and KV scorers may move a few).
			require.GreaterOrEqual(t, top, perGroup*3/4, "group %d spread over %v", g, counts)
		}
	})

	t.Run("an unparsable body gets 400 with a JSON error", func(t *testing.T) {
		res, err := c.post(ctx, "bad-1", "/v1/completions", `{"model": "x", "prompt": `)
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, res.status)
		var e struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal(res.body, &e), "body: %s", res.body)
		require.Contains(t, e.Error.Message, "not valid JSON")
		require.Equal(t, 400, e.Error.Code)
	})

	t.Run("a chunked request with trailers is routed when the trailers end it", func(t *testing.T) {
		pr, pw := io.Pipe()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.gateway+"/v1/completions", pr)
		require.NoError(t, err)
		req.Header.Set("content-type", "application/json")
		req.Trailer = http.Header{"X-Checksum": nil}
		go func() {
			_, _ = io.WriteString(pw, fmt.Sprintf(`{"model":%q,`, modelName))
			_, _ = io.WriteString(pw, `"prompt":"with trailers","max_tokens":4}`)
			req.Trailer.Set("X-Checksum", "abc")
			_ = pw.Close()
		}()
		resp, err := c.client.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	})

	t.Run("an SSE response streams through chunk by chunk and its usage is recorded", func(t *testing.T) {
		before, err := scrapeWithToken(ctx, c.metrics+"/metrics", c.token)
		require.NoError(t, err)
		body := fmt.Sprintf(`{"model":%q,"prompt":"Tell me a long story.","max_tokens":60,"stream":true,"stream_options":{"include_usage":true}}`, modelName)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.gateway+"/v1/completions", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("content-type", "application/json")
		resp, err := c.client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, resp.Header.Get("content-type"), "text/event-stream")
		var (
			arrivals []time.Time
			usage    struct {
				Usage *struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			completion int
		)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "data: ") {
				continue
			}
			arrivals = append(arrivals, time.Now())
			if data := strings.TrimPrefix(line, "data: "); data != "[DONE]" {
				if json.Unmarshal([]byte(data), &usage) == nil && usage.Usage != nil {
					completion = usage.Usage.CompletionTokens
				}
			}
		}
		require.NoError(t, sc.Err())
		require.Greater(t, len(arrivals), 50, "one event per token")
		// 60 tokens at 1.5 ms per token (time scale 0.1): the first event
		// arrives well before the last one, i.e. the stream is not buffered.
		require.Greater(t, arrivals[len(arrivals)-1].Sub(arrivals[0]), 40*time.Millisecond)
		require.Equal(t, 60, completion)
		require.Eventually(t, func() bool {
			after, err := scrapeWithToken(ctx, c.metrics+"/metrics", c.token)
			if err != nil {
				return false
			}
			return after["inference_objective_output_tokens"].sum-before["inference_objective_output_tokens"].sum == 60
		}, 5*time.Second, 20*time.Millisecond, "the EPP recorded the stream's output tokens")
	})

	t.Run("a request without body is routed and leaves nothing counted", func(t *testing.T) {
		resp, err := c.client.Get(c.gateway + "/v1/models")
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		require.Contains(t, string(b), modelName)
	})

	t.Run("a client that disconnects mid-stream leaves in-flight counters at zero", func(t *testing.T) {
		rctx, cancel := context.WithCancel(ctx)
		body := fmt.Sprintf(`{"model":%q,"prompt":"Count to a thousand.","max_tokens":2000,"stream":true}`, modelName)
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, c.gateway+"/v1/completions", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("content-type", "application/json")
		resp, err := c.client.Do(req)
		require.NoError(t, err)
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(line, "data: "), line)
		st, err := c.state()
		require.NoError(t, err)
		var inflight int64
		for _, e := range st.Endpoints {
			inflight += e.InFlightRequests
		}
		require.Equal(t, int64(1), inflight, "counted while streaming")
		cancel()
		_ = resp.Body.Close()
		require.Eventually(t, func() bool {
			st, err := c.state()
			if err != nil {
				return false
			}
			for _, e := range st.Endpoints {
				if e.InFlightRequests != 0 || e.InFlightTokens != 0 {
					return false
				}
			}
			m, err := scrapeWithToken(ctx, c.metrics+"/metrics", c.token)
			if err != nil || m["inference_objective_running_requests"].sum != 0 {
				return false
			}
			for _, a := range c.simAddr {
				sm, err := scrape(ctx, "http://"+a+"/metrics")
				if err != nil || sm["vllm:num_requests_running"].sum != 0 {
					return false
				}
			}
			return true
		}, 10*time.Second, 20*time.Millisecond, "in-flight counters did not return to zero")
	})

	t.Run("an endpoint killed mid-test gets no new requests once its metrics are stale", func(t *testing.T) {
		victim := c.sims[3]
		victimAddr := c.simAddr[3]
		victim.stop(syscall.SIGKILL)
		require.Eventually(t, func() bool {
			st, err := c.state()
			if err != nil {
				return false
			}
			for _, e := range st.Endpoints {
				if e.Address == victimAddr {
					return !e.Ready
				}
			}
			return false
		}, 10*time.Second, 20*time.Millisecond, "the killed endpoint never became stale")
		for i := range 40 {
			id := "after-kill-" + strconv.Itoa(i)
			body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":4}`, modelName, systemPrompt(i%groups)+"After the kill?")
			res, err := c.post(ctx, id, "/v1/completions", body)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, res.status, "%s: %s", id, res.body)
			require.NotEqual(t, "sim-3", res.sim)
		}
		routed := c.routedTo()
		for i := range 40 {
			require.NotEqual(t, victimAddr, routed["after-kill-"+strconv.Itoa(i)])
		}
	})
}
