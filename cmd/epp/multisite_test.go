package main

import (
	"bytes"
	"flag"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
)

const pin = "aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99"

// The multi-site flags are off when unset, map to the server's
// configuration when set, and every problem names its flag.
func TestServeMultisiteFlags(t *testing.T) {
	parse := func(args ...string) (serveFlags, *flag.FlagSet) {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		var f serveFlags
		f.register(fs)
		require.NoError(t, fs.Parse(args))
		return f, fs
	}
	f, fs := parse("--endpoints-file", "e.yaml")
	cfg, err := f.serverConfig(fs, logr.Discard())
	require.NoError(t, err)
	assert.Nil(t, cfg.Multisite, "off when unset")

	f, fs = parse("--endpoints-file", "e.yaml", "--site-name", "site-a", "--signals-relay-url", "https://site-relay:9443",
		"--signals-cert-file", "c.crt", "--signals-key-file", "c.key", "--signals-ca-file", "ca.crt",
		"--signals-relay-identity", "spiffe://grid.example/site/site-a, sha256:"+pin, "--site-topology-file", "t.yaml",
		"--signals-poll-interval", "250ms")
	cfg, err = f.serverConfig(fs, logr.Discard())
	require.NoError(t, err)
	require.NotNil(t, cfg.Multisite)
	m := cfg.Multisite
	assert.Equal(t, "site-a", m.Site)
	assert.Equal(t, "site-a", m.Cluster, "the cluster defaults to the site name")
	assert.Equal(t, "https://site-relay:9443", m.RelayURL)
	assert.Equal(t, 250*time.Millisecond, m.PollInterval)
	assert.Equal(t, 2*time.Second, m.PollTimeout)
	assert.Equal(t, tlsutil.Identity{SPIFFEID: "spiffe://grid.example/site/site-a", SHA256: pin}, m.RelayIdentity)
	assert.Equal(t, "t.yaml", m.TopologyFile)
	assert.Nil(t, m.Imports, "standalone mode watches no InferencePoolImport")

	// A pin alone needs no CA.
	f, fs = parse("--endpoints-file", "e.yaml", "--site-name", "a", "--site-cluster", "c.example", "--signals-relay-url", "https://r:1",
		"--signals-cert-file", "c", "--signals-key-file", "k", "--signals-relay-identity", "sha256:"+pin)
	cfg, err = f.serverConfig(fs, logr.Discard())
	require.NoError(t, err)
	assert.Equal(t, "c.example", cfg.Multisite.Cluster)

	// Kubernetes mode with a pool watches its InferencePoolImport, unless
	// told not to.
	t.Setenv("KUBECONFIG", "")
	kube := []string{"--pool-name", "pool", "--pool-namespace", "ns", "--kubeconfig", "testdata/kubeconfig.yaml", "--metrics-endpoint-auth=false",
		"--site-name", "a", "--signals-relay-url", "https://r:1", "--signals-cert-file", "c", "--signals-key-file", "k", "--signals-relay-identity", "sha256:" + pin}
	f, fs = parse(kube...)
	cfg, err = f.serverConfig(fs, logr.Discard())
	require.NoError(t, err)
	assert.NotNil(t, cfg.Multisite.Imports)
	f, fs = parse(append(kube, "--site-topology-imports=false")...)
	cfg, err = f.serverConfig(fs, logr.Discard())
	require.NoError(t, err)
	assert.Nil(t, cfg.Multisite.Imports)
}

func TestServeMultisiteFlagErrors(t *testing.T) {
	base := []string{"serve", "--endpoints-file", "e.yaml"}
	full := append(append([]string{}, base...), "--site-name", "a", "--signals-relay-url", "https://r:1",
		"--signals-cert-file", "c", "--signals-key-file", "k", "--signals-relay-identity", "sha256:"+pin)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"a signals flag without the source", append(append([]string{}, base...), "--signals-ca-file", "ca"), []string{"--signals-ca-file needs --site-name and --signals-relay-url"}},
		{"site without relay", append(append([]string{}, base...), "--site-name", "a"), []string{"--site-name needs --signals-relay-url"}},
		{"relay without site", append(append([]string{}, base...), "--signals-relay-url", "https://r:1"), []string{"--signals-relay-url needs --site-name"}},
		{"everything wrong at once", append(append([]string{}, base...), "--site-name", "A_B", "--signals-relay-url", "http://r", "--signals-relay-identity", "me", "--signals-poll-interval", "0s"),
			[]string{"--site-name: ", "--signals-relay-url: ", "--signals-relay-identity: \"me\" is neither", "--signals-poll-interval: must be positive"}},
		{"no client certificate", append(append([]string{}, base...), "--site-name", "a", "--signals-relay-url", "https://r:1", "--signals-relay-identity", "sha256:"+pin),
			[]string{"--signals-cert-file and --signals-key-file: the EPP's client certificate"}},
		{"SPIFFE ID without a CA", append(append([]string{}, full[:len(full)-1]...), "spiffe://grid.example/site/a"), []string{"--signals-ca-file: required with a SPIFFE ID"}},
		{"bad pin", append(append([]string{}, full[:len(full)-1]...), "sha256:abc"), []string{"--signals-relay-identity: sha256: want 64 hex digits"}},
		{"imports in standalone mode", append(append([]string{}, full...), "--site-topology-imports"), []string{"--site-topology-imports needs Kubernetes mode with --pool-name"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			require.Equal(t, 2, run(tc.args, &out, &errOut), errOut.String())
			for _, w := range tc.want {
				assert.Contains(t, errOut.String(), w)
			}
		})
	}
}
