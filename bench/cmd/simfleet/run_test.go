package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/bench/matrix"
)

// TestRunServesFleet starts a fleet of three on loopback, scrapes every
// server's /metrics over HTTP, and checks that cancelling the context
// stops it with every server closed.
func TestRunServesFleet(t *testing.T) {
	// A port free on the first server's address; the other two use it
	// on their own addresses.
	ln, err := net.Listen("tcp", addr(0, 0))
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		// Linux routes all of 127.0.0.0/8 to lo; other systems only 127.0.0.1.
		t.Skipf("127.10.0.1 is not a local address on this system: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- run(ctx, 3, port, 0.01, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("run ended before ready: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not ready after 10 s")
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i, want := range []string{"127.10.0.1", "127.10.0.2", "127.10.0.3"} {
		if got, _, _ := net.SplitHostPort(addr(i, port)); got != want {
			t.Fatalf("server %d listens on %s, want %s", i, got, want)
		}
		resp, err := client.Get("http://" + net.JoinHostPort(want, strconv.Itoa(port)) + "/metrics")
		if err != nil {
			t.Fatalf("server %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "vllm:num_requests_waiting") {
			t.Fatalf("server %d: /metrics answered %d without vllm:num_requests_waiting:\n%.300s", i, resp.StatusCode, body)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return 10 s after cancel")
	}
	if _, err := net.DialTimeout("tcp", addr(1, port), time.Second); err == nil {
		t.Fatal("server 1 still accepts connections after run returned")
	}
}

// TestRunRejectsFleetSize: a fleet size out of range is an error naming
// the flag, before anything listens.
func TestRunRejectsFleetSize(t *testing.T) {
	want := fmt.Sprintf("-n: must be in 1..%d", matrix.FleetMax)
	for _, n := range []int{0, -1, matrix.FleetMax + 1} {
		err := run(context.Background(), n, 8000, 0.01, func() { t.Error("ready called") })
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("run(n=%d) = %v, want the -n range error", n, err)
		}
	}
}
