package relay

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
)

const fullConfig = `apiVersion: switchyard.ai/v1alpha1
kind: SiteRelayConfig
site: eu-1
cluster: gke-eu-1
trustDomain: grid.example
listenAddress: ":9443"
adminAddress: ":9080"
tls:
  certFile: /etc/site-relay/tls/tls.crt
  keyFile: /etc/site-relay/tls/tls.key
  caFile: /etc/site-relay/tls/ca.crt
localEPP:
  identity:
    spiffeID: spiffe://grid.example/site/eu-1/epp
providers:
  - name: llama-pool
    configGeneration: 3
    metricsConfig:
      endpoint: http://llama-epp.serving.svc:9090/metrics
      staleMetricsSeconds: 20
      bearerTokenFile: /var/run/epp-metrics/token
  - name: static-pool
peers:
  - site: us-1
    address: relay.us-1.grid.example:8443
    serverName: relay.us-1.grid.example
  - site: ap-1
    address: https://10.20.0.5:8443
    identity:
      sha256: "AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89"
scrapeInterval: 1s
peerPollInterval: 2s
connectTimeout: 2s
requestTimeout: 2s
`

func TestDecodeFullConfig(t *testing.T) {
	cfg, err := Decode([]byte(fullConfig))
	require.NoError(t, err)
	cfg.SetDefaults()
	warnings, err := cfg.Validate()
	require.NoError(t, err)
	assert.Empty(t, warnings)
	assert.Equal(t, "3", cfg.Providers[0].ConfigGeneration)
	assert.Equal(t, 20, cfg.Providers[0].MetricsConfig.StaleMetricsSeconds)
	assert.Nil(t, cfg.Providers[1].MetricsConfig)
	assert.Equal(t, tlsutil.Identity{SPIFFEID: "spiffe://grid.example/site/us-1"}, cfg.Peers[0].Identity, "the default peer identity")
	assert.Equal(t, "https://relay.us-1.grid.example:8443/v1/site/signals", cfg.Peers[0].URL())
	assert.Equal(t, "https://10.20.0.5:8443/v1/site/signals", cfg.Peers[1].URL())
	assert.Equal(t, 2*time.Second, cfg.RequestTimeout)
	assert.Equal(t, time.Second, cfg.ScrapeTimeout)

	// Minimal: only what has no default.
	cfg, err = Decode([]byte("site: a\ncluster: c\ntrustDomain: t\ntls: {certFile: c, keyFile: k, caFile: ca}\nproviders: [{name: p, metricsConfig: {endpoint: 'http://epp.ns.svc:9090'}}]\n"))
	require.NoError(t, err)
	cfg.SetDefaults()
	_, err = cfg.Validate()
	require.NoError(t, err)
	assert.Equal(t, "http://epp.ns.svc:9090/metrics", cfg.Providers[0].MetricsConfig.Endpoint)
	assert.Equal(t, DefaultStaleMetricsSeconds, cfg.Providers[0].MetricsConfig.StaleMetricsSeconds)
	assert.Equal(t, "spiffe://t/site/a/epp", cfg.LocalEPP.Identity.SPIFFEID)
	assert.Equal(t, DefaultListenAddress, cfg.ListenAddress)
}

// TestDecodeErrors: every problem of a document at once, each with its
// field path.
func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"empty", "", []string{"the configuration is empty"}},
		{"not an object", "[1]", []string{"expected an object, got a list"}},
		{"two documents", "site: a\n---\nsite: b\n", []string{"a second YAML document starts at line 2"}},
		{"repeated key", "site: a\nsite: b\n", []string{"not valid YAML"}},
		{"unknown keys", "site: a\nsitee: b\nproviders: [{name: p, metricsConfg: {}}]\npeers: [{site: b, identity: {spiffeId: x}}]\n",
			[]string{`sitee: unknown field "sitee" (did you mean "site"?)`, `providers[0].metricsConfg: unknown field "metricsConfg" (did you mean "metricsConfig"?)`, `peers[0].identity.spiffeId: unknown field "spiffeId" (did you mean "spiffeID"?)`}},
		{"types", "site: 1\nproviders: {name: p}\npeers: [3]\ntls: x\nscrapeInterval: 2\nrequestTimeout: soon\n",
			[]string{"site: expected a string, got a number", "providers: expected a list, got an object", "peers[0]: expected an object, got a number",
				"tls: expected an object, got a string", `scrapeInterval: expected a duration such as "2s" or "500ms", got a number (write "2s" for 2 seconds)`, `requestTimeout: expected a duration such as "2s" or "500ms", got "soon"`}},
		{"nested types", "providers: [{name: p, metricsConfig: {endpoint: 1, staleMetricsSeconds: 1.5, tls: {insecureSkipVerify: yes please}}}]\n",
			[]string{"providers[0].metricsConfig.endpoint: expected a string", "providers[0].metricsConfig.staleMetricsSeconds: expected an integer", "providers[0].metricsConfig.tls.insecureSkipVerify: expected true or false"}},
		{"kind", "kind: EndpointPickerConfig\napiVersion: v1\n", []string{`kind: must be "SiteRelayConfig"`, `apiVersion: must be "switchyard.ai/v1alpha1"`}},
		{"negative duration", "peerPollInterval: -1s\n", []string{`peerPollInterval: must be positive, got "-1s"`}},
		{"odd key", "\"a.b\": 1\n", []string{`["a.b"]: unknown field`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(tt.doc))
			require.Error(t, err)
			var ve *ValidationError
			require.True(t, errors.As(err, &ve), "%T", err)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.True(t, strings.HasPrefix(err.Error(), "invalid site-relay configuration: "))
		})
	}
	_, err := Decode([]byte(strings.Repeat("#", MaxConfigBytes+1)))
	assert.ErrorContains(t, err, "the limit is")
}

func validConfig() *Config {
	cfg, err := Decode([]byte(fullConfig))
	if err != nil {
		panic(err)
	}
	cfg.SetDefaults()
	return cfg
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"site", func(c *Config) { c.Site = "EU_1" }, "site: \"EU_1\" must be a DNS-1123 label"},
		{"cluster", func(c *Config) { c.Cluster = "" }, "cluster: must not be empty"},
		{"trust domain", func(c *Config) { c.TrustDomain = "Grid" }, "trustDomain: \"Grid\" is not a SPIFFE trust domain"},
		{"listen", func(c *Config) { c.ListenAddress = "8443" }, "listenAddress: expected host:port"},
		{"same ports", func(c *Config) { c.AdminAddress = c.ListenAddress }, "adminAddress: must differ from listenAddress"},
		{"cert", func(c *Config) { c.TLS.CertFile = "" }, "tls.certFile: required"},
		{"ca for spiffe", func(c *Config) { c.TLS.CAFile = "" }, "tls.caFile: required when an identity is a SPIFFE ID"},
		{"no providers", func(c *Config) { c.Providers = nil }, "providers: at least one provider"},
		{"provider name", func(c *Config) { c.Providers[1].Name = "Static" }, "providers[1].name"},
		{"duplicate provider", func(c *Config) { c.Providers[1].Name = c.Providers[0].Name }, "providers[1].name: \"llama-pool\" is also providers[0]"},
		{"endpoint scheme", func(c *Config) { c.Providers[0].MetricsConfig.Endpoint = "ftp://x/metrics" }, "providers[0].metricsConfig.endpoint: expected an http:// or https:// URL"},
		{"endpoint missing", func(c *Config) { c.Providers[0].MetricsConfig.Endpoint = "" }, "providers[0].metricsConfig.endpoint: required"},
		{"stale", func(c *Config) { c.Providers[0].MetricsConfig.StaleMetricsSeconds = -1 }, "staleMetricsSeconds: must be 0 to 86400"},
		{"tls on http", func(c *Config) { c.Providers[0].MetricsConfig.TLS = &ScrapeTLS{InsecureSkipVerify: true} }, "metricsConfig.tls: applies to an https endpoint only"},
		{"peer is self", func(c *Config) { c.Peers[0].Site = c.Site }, "peers[0].site: \"eu-1\" is this relay's own site"},
		{"duplicate peer", func(c *Config) {
			c.Peers[1].Site = c.Peers[0].Site
			c.Peers[1].Identity = tlsutil.Identity{SPIFFEID: "spiffe://x/y"}
		}, "peers[1].site: \"us-1\" is also peers[0]"},
		{"peer address", func(c *Config) { c.Peers[0].Address = "http://relay:80" }, "peers[0].address: expected host:port or https://host:port"},
		{"peer no port", func(c *Config) { c.Peers[0].Address = "relay.example" }, "peers[0].address"},
		{"peer identity", func(c *Config) { c.Peers[1].Identity = tlsutil.Identity{} }, "peers[1].identity: required"},
		{"bad pin", func(c *Config) { c.Peers[1].Identity = tlsutil.Identity{SHA256: "abc"} }, "peers[1].identity: sha256: want 64 hex digits"},
		{"shared identity", func(c *Config) { c.Peers[0].Identity = c.LocalEPP.Identity }, "peers[0].identity: the same identity as localEPP"},
		{"same pin, other case and colons", func(c *Config) {
			c.Peers[0].Identity = tlsutil.Identity{SHA256: strings.Repeat("ab", 32)}
			c.Peers[1].Identity = tlsutil.Identity{SHA256: strings.TrimSuffix(strings.Repeat("AB:", 32), ":")}
		}, "peers[1].identity: the same identity as peers[0].identity (sha256 " + strings.Repeat("ab", 32) + ")"},
		{"same SPIFFE ID, trailing slash and upper-case trust domain", func(c *Config) {
			c.Peers[1].Identity = tlsutil.Identity{SPIFFEID: "spiffe://GRID.example/site/us-1/"}
		}, "peers[1].identity: the same identity as peers[0].identity (spiffe://grid.example/site/us-1)"},
		{"a SPIFFE ID also pinned elsewhere", func(c *Config) {
			c.Peers[1].Identity = tlsutil.Identity{SPIFFEID: c.Peers[0].Identity.SPIFFEID, SHA256: strings.Repeat("0", 64)}
		}, "peers[1].identity: the same identity as peers[0].identity"},
		{"the local EPP's, with a pin", func(c *Config) {
			c.Peers[0].Identity = tlsutil.Identity{SPIFFEID: c.LocalEPP.Identity.SPIFFEID, SHA256: strings.Repeat("1", 64)}
		}, "peers[0].identity: the same identity as localEPP.identity"},
		{"this relay's own identity", func(c *Config) {
			c.Peers[0].Identity = tlsutil.Identity{SPIFFEID: tlsutil.SiteSPIFFEID(c.TrustDomain, c.Site)}
		}, "peers[0].identity: the identity of this relay's own site (spiffe://grid.example/site/eu-1)"},
		{"interval", func(c *Config) { c.ScrapeInterval = time.Millisecond }, "scrapeInterval: must be 10ms to 1h0m0s"},
		{"request over poll", func(c *Config) { c.RequestTimeout = 3 * time.Second }, "requestTimeout: 3s must not exceed peerPollInterval"},
		{"connect over request", func(c *Config) { c.ConnectTimeout = 3 * time.Second; c.RequestTimeout = 2 * time.Second }, "connectTimeout: 3s must not exceed requestTimeout"},
		{"scrape timeout", func(c *Config) { c.ScrapeTimeout = 2 * time.Second }, "scrapeTimeout: 2s must not exceed scrapeInterval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mod(c)
			_, err := c.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	c := validConfig()
	c.Peers = nil
	for i := range MaxPeers + 1 {
		c.Peers = append(c.Peers, Peer{Site: "p" + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + string(rune('a'+i/26)), Address: "h:1", Identity: tlsutil.Identity{SHA256: strings.Repeat("0", 62) + string(rune('a'+i/16)) + string("0123456789abcdef"[i%16])}})
	}
	_, err := c.Validate()
	assert.ErrorContains(t, err, "peers: 64 peers exceed the limit of 63")
}

// TestG07_MetricsEndpointIsTheService: the endpoint must be the EPP
// Service: a pod's DNS name is refused, an IP address other than loopback
// gives a warning (it may be the Service's cluster IP, or a pod's).
func TestG07_MetricsEndpointIsTheService(t *testing.T) {
	tests := []struct {
		endpoint string
		err      string
		warning  string
	}{
		{endpoint: "http://epp.serving.svc.cluster.local:9090/metrics"},
		{endpoint: "http://epp:9090/metrics"},
		{endpoint: "http://127.0.0.1:9090/metrics"},
		{endpoint: "https://[::1]:9090/metrics"},
		{endpoint: "http://10-1-2-3.serving.pod.cluster.local:9090/metrics", err: "is a pod's DNS name: point at the EPP Service (G-07)"},
		{endpoint: "http://fd00-0-0-0-0-0-0-1.serving.pod:9090/metrics", err: "is a pod's DNS name"},
		{endpoint: "http://10.1.2.3:9090/metrics", warning: "10.1.2.3 is an IP address; make sure it is the EPP Service's cluster IP, not a pod's"},
	}
	for _, tt := range tests {
		t.Run(tt.endpoint, func(t *testing.T) {
			c := validConfig()
			c.Providers[0].MetricsConfig.Endpoint = tt.endpoint
			warnings, err := c.Validate()
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "providers[0].metricsConfig.endpoint: ")
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			if tt.warning == "" {
				assert.Empty(t, warnings)
			} else {
				require.Len(t, warnings, 1)
				assert.Contains(t, warnings[0], tt.warning)
				assert.True(t, strings.HasPrefix(warnings[0], "providers[0].metricsConfig.endpoint: "))
			}
		})
	}
}
