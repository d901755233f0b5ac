package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// siteRow matches one site line of the multi-site table: site, ready,
// running, queue, load age, ceiling, rho, tier, weight, silent, picks,
// served, link.
var siteRow = regexp.MustCompile(`(?m)^([a-c]) +(\S+) +(\S+) +(\S+) +(\S+) +(\S+) +(\S+) +(\S+(?: demoted)?) +(\S+) +(\S+) +(\d+|-) +(\d+) +(up|CUT)$`)

// lastRows returns the latest table's row of every site.
func lastRows(out string) map[string][]string {
	rows := map[string][]string{}
	for _, m := range siteRow.FindAllStringSubmatch(out, -1) {
		rows[m[1]] = m
	}
	return rows
}

// everRow reports whether some table so far showed site with value in
// column col.
func everRow(out, site string, col int, value string) bool {
	for _, m := range siteRow.FindAllStringSubmatch(out, -1) {
		if m[1] == site && m[col] == value {
			return true
		}
	}
	return false
}

// epp demo --sites 3: three sites start, the banner names site a's
// gateway, a request through it is served, the table shows the three
// sites with their relayed load, and --cut-site cuts b's relay link for a
// while, which the table shows, then heals it; everything stops cleanly.
func TestDemoSites(t *testing.T) {
	var out, errOut syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	keys, typeKey := io.Pipe()
	defer typeKey.Close()
	f := demoFlags{sites: 3, listen: "127.0.0.1:0", timeScale: 0.01, interval: 200 * time.Millisecond, traffic: 5,
		cutSite: "b", cutAfter: 2 * time.Second, cutFor: 6 * time.Second, stdin: keys}
	t.Cleanup(func() {
		if t.Failed() {
			o := out.String()
			t.Logf("stdout (last 4000 bytes): %s\nstderr: %s", o[max(0, len(o)-4000):], errOut.String())
		}
	})
	done := make(chan error, 1)
	go func() { done <- demoSites(ctx, f, &out, &errOut) }()

	gw := regexp.MustCompile(`site a +gateway (http://127\.0\.0\.1:\d+) \(enter here\)`)
	var url string
	require.Eventually(t, func() bool {
		m := gw.FindStringSubmatch(out.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 60*time.Second, 10*time.Millisecond, "no banner: %s %s", out.String(), errOut.String())
	require.Contains(t, out.String(), "curl -si "+url+"/v1/completions")
	require.Regexp(t, `site b +gateway http://127\.0\.0\.1:\d+ \(remote site\) +3 servers`, out.String())
	require.Contains(t, out.String(), "Site b's relay link is cut after 2s for 6s.")

	client := &http.Client{}
	defer client.CloseIdleConnections()
	resp, err := client.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": "Write a haiku about routers", "max_tokens": 8}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	site := resp.Header.Get("x-grid-site")
	require.Contains(t, []string{"a", "b", "c"}, site, "the response names its site")
	require.Regexp(t, `^`+site+`-sim-\d$`, resp.Header.Get("x-modelsim-id"), "served at the site it names")

	// Every site's relayed load reaches site a's EPP: each row shows the
	// site's ready servers (2, 3, 1).
	require.Eventually(t, func() bool {
		rows := lastRows(out.String())
		return len(rows) == 3 && rows["a"][2] == "2" && rows["b"][2] == "3" && rows["c"][2] == "1"
	}, 30*time.Second, 50*time.Millisecond, "no table: %s", out.String())

	// Site a's learner judges every site: a ceiling, a rho, a tier.
	require.Eventually(t, func() bool {
		rows := lastRows(out.String())
		for _, n := range []string{"a", "b", "c"} {
			if r := rows[n]; r == nil || r[6] == "-" || r[7] == "-" || r[8] == "-" || r[10] != "no" {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "no learned state")

	// The scheduled cut: b goes silent (its freshness window is 3 s),
	// then the heal: it returns.
	require.Eventually(t, func() bool { return everRow(out.String(), "b", 13, "CUT") }, 30*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return everRow(out.String(), "b", 10, "SILENT") }, 30*time.Second, 20*time.Millisecond, "b never went silent")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "healed site b's relay link") }, 30*time.Second, 20*time.Millisecond)
	require.Contains(t, out.String(), "cut site b's relay link")
	require.Eventually(t, func() bool {
		r := lastRows(out.String())["b"]
		return r[13] == "up" && r[10] == "no"
	}, 30*time.Second, 20*time.Millisecond, "b never returned")

	// The c key toggles the link of --cut-site (the last site without it).
	_, err = typeKey.Write([]byte("c\n"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return lastRows(out.String())["b"][13] == "CUT" }, 30*time.Second, 20*time.Millisecond)
	_, err = typeKey.Write([]byte("c\n"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return lastRows(out.String())["b"][13] == "up" }, 30*time.Second, 20*time.Millisecond)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("demo did not stop")
	}
	require.Contains(t, out.String(), "Stopping...")
}

func TestDemoSitesFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sites", "0"}, "--sites: must be 1..8"},
		{[]string{"--sites", "9"}, "--sites: must be 1..8"},
		{[]string{"--cut-site", "b"}, "need --sites 2 or more"},
		{[]string{"--sites", "3", "--cut-site", "a"}, `--cut-site: "a" is not a remote site (b .. c)`},
		{[]string{"--sites", "3", "--cut-site", "d"}, `--cut-site: "d" is not a remote site`},
		{[]string{"--sites", "3", "--cut-site", "b", "--cut-for", "-1s"}, "must not be negative"},
	} {
		var out, errOut bytes.Buffer
		require.Equal(t, 2, runDemo(tc.args, &out, &errOut), "%v", tc.args)
		require.Contains(t, errOut.String(), tc.want, "%v", tc.args)
	}
}

// A start that fails half-way (site a's EPP refuses its configuration
// file, after every listener and site a's servers started) returns the
// error and stops everything it started (goleak checks the goroutines).
func TestDemoSitesStartFailure(t *testing.T) {
	var out, errOut syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := demoFlags{sites: 3, listen: "127.0.0.1:0", timeScale: 0.01, configFile: filepath.Join(t.TempDir(), "missing.yaml")}
	err := demoSites(ctx, f, &out, &errOut)
	require.ErrorContains(t, err, "site a: ")
	require.NotContains(t, out.String(), "Switchyard multi-site demo")
}

// A --listen address in use is named.
func TestDemoSitesListenTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	var out, errOut syncBuffer
	err = demoSites(context.Background(), demoFlags{sites: 3, listen: l.Addr().String(), timeScale: 0.01}, &out, &errOut)
	require.ErrorContains(t, err, "choose another address with --listen")
}
