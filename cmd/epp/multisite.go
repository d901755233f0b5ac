package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/switchyard-ai/switchyard/pkg/multisite/poller"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology/poolimport"
	"github.com/switchyard-ai/switchyard/pkg/server"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
)

// multisiteFlags turn on the multi-site signals source: the EPP polls its
// site's relay and keeps every site's load in its site store.
type multisiteFlags struct {
	site, cluster, topologyFile string
	relayURL                    string
	pollInterval, pollTimeout   time.Duration
	caFile, certFile, keyFile   string
	relayIdentity               string
	imports                     bool
}

func (m *multisiteFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.site, "site-name", "", "multi-site: this site's name (a DNS-1123 label: the grid_site of its rows, the <name> of its relay's SPIFFE ID spiffe://<domain>/site/<name>); with --signals-relay-url it turns the multi-site signals source on")
	fs.StringVar(&m.cluster, "site-cluster", "", "multi-site: this site's cluster (a DNS-1123 subdomain, the grid_cluster of its rows and its name in InferencePoolImport status); default: --site-name")
	fs.StringVar(&m.topologyFile, "site-topology-file", "", "multi-site: YAML file of the sites (name, cluster, gateway host:port, models), watched for changes; see pkg/multisite/topology")
	fs.BoolVar(&m.imports, "site-topology-imports", true, "multi-site, Kubernetes mode with --pool-name: also take sites from the status of the InferencePoolImport named like the pool (needs get, list and watch on inferencepoolimports)")
	fs.StringVar(&m.relayURL, "signals-relay-url", "", "multi-site: https URL of this site's relay signals endpoint, e.g. https://site-relay:9443/v1/site/signals; the EPP polls this relay only")
	fs.DurationVar(&m.pollInterval, "signals-poll-interval", poller.DefaultInterval, "multi-site: how often the relay is polled")
	fs.DurationVar(&m.pollTimeout, "signals-poll-timeout", poller.DefaultTimeout, "multi-site: bound of one poll, connection included")
	fs.StringVar(&m.caFile, "signals-ca-file", "", "multi-site: PEM CA bundle the relay's certificate must chain to (reloaded on change); required when --signals-relay-identity is a SPIFFE ID")
	fs.StringVar(&m.certFile, "signals-cert-file", "", "multi-site: the EPP's client certificate (PEM chain) for its relay (reloaded on change)")
	fs.StringVar(&m.keyFile, "signals-key-file", "", "multi-site: the key of --signals-cert-file")
	fs.StringVar(&m.relayIdentity, "signals-relay-identity", "", "multi-site: what the relay's certificate must prove: its SPIFFE ID (spiffe://<domain>/site/<name>), sha256:<hex of the certificate's SHA-256> (a pin), or both, comma-separated")
}

// multisiteNames are the flags of the source, for "needs" errors.
var multisiteNames = []string{"site-cluster", "site-topology-file", "site-topology-imports", "signals-poll-interval", "signals-poll-timeout", "signals-ca-file", "signals-cert-file", "signals-key-file", "signals-relay-identity"}

// parseIdentity reads --signals-relay-identity.
func parseIdentity(s string) (tlsutil.Identity, error) {
	var id tlsutil.Identity
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		switch {
		case part == "":
		case strings.HasPrefix(part, "spiffe://"):
			if id.SPIFFEID != "" {
				return id, fmt.Errorf("two SPIFFE IDs (%s and %s)", id.SPIFFEID, part)
			}
			id.SPIFFEID = part
		case strings.HasPrefix(strings.ToLower(part), "sha256:"):
			if id.SHA256 != "" {
				return id, fmt.Errorf("two pins")
			}
			id.SHA256 = part[len("sha256:"):]
		default:
			return id, fmt.Errorf("%q is neither a SPIFFE ID (spiffe://...) nor a pin (sha256:<hex>)", part)
		}
	}
	return id, id.Validate()
}

// kubeImports is what Kubernetes mode gives the source: the client
// configuration and the pool whose InferencePoolImport is watched.
type kubeImports struct {
	config          *rest.Config
	namespace, pool string
}

// config returns the source's configuration (nil when off) or the flag
// errors. poolMode says whether the EPP runs in Kubernetes mode with
// --pool-name, where the InferencePoolImport can be watched (addImports).
func (m *multisiteFlags) config(set map[string]bool, poolMode bool) (*server.MultisiteConfig, []string) {
	if m.site == "" && m.relayURL == "" {
		var errs []string
		for _, name := range multisiteNames {
			if set[name] {
				errs = append(errs, fmt.Sprintf("--%s needs --site-name and --signals-relay-url (the multi-site signals source)", name))
			}
		}
		return nil, errs
	}
	var errs []string
	if m.site == "" {
		errs = append(errs, "--signals-relay-url needs --site-name (this site's name)")
	}
	if m.relayURL == "" {
		errs = append(errs, "--site-name needs --signals-relay-url (this site's relay)")
	}
	if len(errs) > 0 {
		return nil, errs
	}
	cfg := &server.MultisiteConfig{
		Site: m.site, Cluster: m.cluster, TopologyFile: m.topologyFile, RelayURL: m.relayURL,
		PollInterval: m.pollInterval, PollTimeout: m.pollTimeout,
		CAFile: m.caFile, CertFile: m.certFile, KeyFile: m.keyFile,
	}
	if cfg.Cluster == "" {
		cfg.Cluster = m.site
	}
	if m.pollInterval <= 0 {
		errs = append(errs, fmt.Sprintf("--signals-poll-interval: must be positive, got %s", m.pollInterval))
	}
	if m.pollTimeout <= 0 {
		errs = append(errs, fmt.Sprintf("--signals-poll-timeout: must be positive, got %s", m.pollTimeout))
	}
	id, err := parseIdentity(m.relayIdentity)
	if err != nil {
		errs = append(errs, "--signals-relay-identity: "+err.Error())
	}
	cfg.RelayIdentity = id
	if verr := cfg.Validate(); verr != nil {
		for _, line := range strings.Split(verr.Error(), "\n") {
			// The identity was reported above when it did not parse; the
			// poll bounds too.
			if err != nil && strings.HasPrefix(line, "--signals-relay-identity") ||
				strings.HasPrefix(line, "--signals-poll-") || slices.Contains(errs, line) {
				continue
			}
			errs = append(errs, line)
		}
	}
	if set["site-topology-imports"] && m.imports && !poolMode {
		errs = append(errs, "--site-topology-imports needs Kubernetes mode with --pool-name (the InferencePoolImport is named like the pool)")
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return cfg, nil
}

// addImports sets the InferencePoolImport watch of Kubernetes mode, unless
// --site-topology-imports=false.
func (m *multisiteFlags) addImports(cfg *server.MultisiteConfig, k kubeImports, logger logr.Logger) {
	if cfg == nil || !m.imports || k.pool == "" {
		return
	}
	cfg.Imports = func(setClusters func([]string)) (server.Runner, error) {
		return poolimport.New(poolimport.Options{Config: k.config, Namespace: k.namespace, Name: k.pool, Set: setClusters, Logger: logger.WithName("inferencepoolimport")})
	}
}
