package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The README's run command: epp demo starts simulators, the EPP and the
// gateway, prints how to send a request, routes it, shows the table and
// stops cleanly.
func TestDemo(t *testing.T) {
	var out, errOut syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := demoFlags{endpoints: 2, listen: "127.0.0.1:0", timeScale: 0.01, interval: 100 * time.Millisecond, traffic: 50}
	done := make(chan error, 1)
	go func() { done <- demo(ctx, f, &out, &errOut) }()

	gw := regexp.MustCompile(`gateway +(http://127\.0\.0\.1:\d+)`)
	var url string
	require.Eventually(t, func() bool {
		m := gw.FindStringSubmatch(out.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 30*time.Second, 10*time.Millisecond, "no banner: %s %s", out.String(), errOut.String())
	require.Contains(t, out.String(), "curl -s "+url+"/v1/completions")

	// The printed request works.
	client := &http.Client{}
	defer client.CloseIdleConnections()
	resp, err := client.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": "Write a haiku about routers", "max_tokens": 32}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Regexp(t, `sim-\d`, resp.Header.Get("x-modelsim-id"))

	// The printed /debug/decisions command explains it: the record of
	// this request names the endpoint that served it and every scorer's
	// scores.
	dec := regexp.MustCompile(`curl -s -H 'Authorization: Bearer ([0-9a-f]+)' '(http://127\.0\.0\.1:\d+/debug/decisions)\?limit=1'`)
	m := dec.FindStringSubmatch(out.String())
	require.NotNil(t, m, "no /debug/decisions command in the banner: %s", out.String())
	var served string
	for _, e := range []string{"sim-0", "sim-1"} {
		if resp.Header.Get("x-modelsim-id") == e {
			served = e
		}
	}
	req, err := http.NewRequest(http.MethodGet, m[2]+"?limit=256", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+m[1])
	dresp, err := client.Do(req)
	require.NoError(t, err)
	var doc struct {
		Records []struct {
			Endpoint string `json:"endpoint"`
			Profiles []struct {
				Scorers []json.RawMessage `json:"scorers"`
			} `json:"profiles"`
		} `json:"records"`
	}
	require.NoError(t, json.NewDecoder(dresp.Body).Decode(&doc))
	_ = dresp.Body.Close()
	require.Equal(t, http.StatusOK, dresp.StatusCode)
	require.NotEmpty(t, doc.Records)
	found := false
	for _, r := range doc.Records {
		if strings.HasPrefix(r.Endpoint, served) && len(r.Profiles) > 0 && len(r.Profiles[0].Scorers) > 0 {
			found = true
		}
	}
	require.True(t, found, "no decision record names %s with its scorers", served)

	// The table shows both endpoints, ready, with the built-in traffic's picks.
	// Columns: endpoint, address, weight, queue, running, KV, picks,
	// in-flight, E2E, TTFT, health, breaker, state.
	row := regexp.MustCompile(`(?m)^sim-(\d) +127\.0\.0\.1:\d+ +[124] +\d+ +\d+ +[\d.]+% +(\d+) +\d+ +\S+ +\S+ +healthy +closed +ready$`)
	require.Eventually(t, func() bool {
		picks := 0
		sc := bufio.NewScanner(strings.NewReader(out.String()))
		seen := map[string]bool{}
		for sc.Scan() {
			if m := row.FindStringSubmatch(sc.Text()); m != nil {
				seen[m[1]] = true
				var n int
				_, _ = fmt.Sscan(m[2], &n)
				picks = max(picks, n)
			}
		}
		return len(seen) == 2 && picks > 0
	}, 30*time.Second, 50*time.Millisecond, "no table: %s", out.String())

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("demo did not stop")
	}
	require.Contains(t, out.String(), "Stopping...")
}

func TestDemoFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 2, runDemo([]string{"--endpoints", "0"}, &out, &errOut))
	require.Contains(t, errOut.String(), "--endpoints: must be 1..64")
	errOut.Reset()
	require.Equal(t, 2, runDemo([]string{"--time-scale", "-1"}, &out, &errOut))
	require.Contains(t, errOut.String(), "--time-scale must be positive")
	errOut.Reset()
	require.Equal(t, 2, runDemo([]string{"--flow-burst", "-1"}, &out, &errOut))
	require.Contains(t, errOut.String(), "--flow-burst: must be 0..10000")
}

// epp demo --selection-strategy runs the demo with that strategy behind the
// scorers and says so.
func TestDemoSelectionStrategy(t *testing.T) {
	var out, errOut syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := demoFlags{endpoints: 4, listen: "127.0.0.1:0", timeScale: 0.01, strategy: "LeastCost"}
	done := make(chan error, 1)
	go func() { done <- demo(ctx, f, &out, &errOut) }()
	gw := regexp.MustCompile(`gateway +(http://127\.0\.0\.1:\d+)`)
	var url string
	require.Eventually(t, func() bool {
		m := gw.FindStringSubmatch(out.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 30*time.Second, 10*time.Millisecond, "no banner: %s %s", out.String(), errOut.String())
	require.Contains(t, out.String(), "Selection strategy LeastCost decides")
	client := &http.Client{}
	defer client.CloseIdleConnections()
	// Idle servers tie on every scorer: the strategy decides, and LeastCost
	// takes the cheapest (sim-3).
	for i := range 5 {
		resp, err := client.Post(url+"/v1/completions", "application/json",
			strings.NewReader(fmt.Sprintf(`{"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": "cost %d", "max_tokens": 2}`, i)))
		require.NoError(t, err)
		_, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "sim-3", resp.Header.Get("x-modelsim-id"))
	}
	cancel()
	require.NoError(t, <-done)
}
