package manifests_test

import (
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/switchyard-ai/switchyard/pkg/multisite/relay"
	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
	"github.com/switchyard-ai/switchyard/pkg/tokenauth"
)

const (
	relayName      = "switchyard-site-relay"
	relayContainer = "site-relay"
)

// checkMultisite: only the multisite overlay runs a site-relay and gives
// the EPP the signals flags; there, the pieces fit: the EPP polls the
// relay's Service over mutual TLS with mounted certificates and expects
// the relay's SPIFFE ID, the relay scrapes the EPP Service and knows the
// EPP's identity, both configurations pass their own loaders, and every
// remote site of the topology is a peer of the relay.
func checkMultisite(t *testing.T, objs objects, want expectation) {
	epp := typed[appsv1.Deployment](t, objs.get("apps", "Deployment", eppName))
	pod := &epp.Spec.Template.Spec
	c := container(t, pod, eppContainer)
	flags := parseArgs(c.Args)
	if !want.multisite {
		if objs.get("apps", "Deployment", relayName) != nil {
			t.Errorf("a site-relay outside the multisite overlay")
		}
		for f := range flags {
			if strings.HasPrefix(f, "--site-") || strings.HasPrefix(f, "--signals-") {
				t.Errorf("epp flag %s outside the multisite overlay", f)
			}
		}
		return
	}
	for _, f := range []string{"--site-name", "--site-cluster", "--site-topology-file", "--signals-relay-url", "--signals-relay-identity", "--signals-ca-file", "--signals-cert-file", "--signals-key-file", "--metrics-token-file"} {
		if flags[f] == "" {
			t.Errorf("epp flag %s not set (args %q)", f, c.Args)
		}
	}
	local := topology.Local{Site: flags["--site-name"], Cluster: flags["--site-cluster"]}
	eppCA := secretKey(t, objs, pod, c, flags["--signals-ca-file"])
	secretKey(t, objs, pod, c, flags["--signals-cert-file"])
	secretKey(t, objs, pod, c, flags["--signals-key-file"])
	// The metrics port wants a token (the relay scrapes it with the same
	// one, below); the placeholder shipped is one the EPP refuses, so no
	// well-known token ever guards a real EPP.
	eppToken := secretRef(t, objs, pod, c, flags["--metrics-token-file"])
	if flags["--metrics-endpoint-auth"] != "false" {
		t.Errorf("--metrics-endpoint-auth %q: --metrics-token-file needs it false", flags["--metrics-endpoint-auth"])
	}
	if _, err := tokenauth.ParseToken([]byte(eppToken.data)); err == nil {
		t.Errorf("Secret %s key %q holds a token the EPP accepts: ship a placeholder it refuses", eppToken.secret, eppToken.key)
	}

	// The topology, mounted and valid.
	cm, rel := mountedConfigMap(t, objs, pod, c, flags["--site-topology-file"])
	sites, err := topology.Parse([]byte(cm.Data[rel]), local)
	if err != nil {
		t.Fatalf("ConfigMap %s key %q: %v", cm.Name, rel, err)
	}
	var remote []string
	for _, s := range sites {
		if s.Name != local.Site {
			remote = append(remote, s.Name)
		}
	}
	if len(remote) == 0 {
		t.Error("the topology has no remote site")
	}

	// The relay's Deployment and configuration.
	rdep := typed[appsv1.Deployment](t, objs.get("apps", "Deployment", relayName))
	rpod := &rdep.Spec.Template.Spec
	rc := container(t, rpod, relayContainer)
	if !slices.Equal(rc.Command, []string{"/site-relay"}) || rc.Image != c.Image {
		t.Errorf("site-relay runs %q from %q: want /site-relay from the EPP's image %q (the Dockerfile builds both)", rc.Command, rc.Image, c.Image)
	}
	checkContainerHardening(t, rc)
	if psc := rpod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("site-relay pod securityContext %+v: want runAsNonRoot", psc)
	}
	if a := rpod.AutomountServiceAccountToken; a == nil || *a {
		t.Error("the site-relay talks to no API server: automountServiceAccountToken must be false")
	}
	if rc.Resources.Requests.Cpu().IsZero() || rc.Resources.Limits.Memory().IsZero() {
		t.Errorf("site-relay resources %+v: want a cpu request and a memory limit", rc.Resources)
	}
	rflags := parseArgs(rc.Args)
	rcm, rrel := mountedConfigMap(t, objs, rpod, rc, rflags["--config"])
	cfg, err := relay.Decode([]byte(rcm.Data[rrel]))
	if err != nil {
		t.Fatalf("ConfigMap %s key %q: %v", rcm.Name, rrel, err)
	}
	cfg.SetDefaults()
	if warnings, err := cfg.Validate(); err != nil || len(warnings) > 0 {
		t.Errorf("site-relay configuration: %v (warnings %q)", err, warnings)
	}
	// The relay reads the EPP's pool gauges every scrapeInterval (1 s,
	// G-01); the EPP refreshes them every
	// --refresh-prometheus-metrics-interval (GIE's default 5 s), which must
	// be 1 s, and not slower than the scrapes, or the grid gets old load.
	if v := flags["--refresh-prometheus-metrics-interval"]; v != "1s" {
		t.Errorf("--refresh-prometheus-metrics-interval %q, want 1s (the relay scrapes every %v)", v, cfg.ScrapeInterval)
	} else if d, err := time.ParseDuration(v); err != nil || d > cfg.ScrapeInterval {
		t.Errorf("--refresh-prometheus-metrics-interval %s is slower than the relay's scrapeInterval %v", v, cfg.ScrapeInterval)
	}
	if cfg.Site != local.Site || cfg.Cluster != local.Cluster {
		t.Errorf("relay site %s/%s, EPP --site-name/--site-cluster %s/%s", cfg.Site, cfg.Cluster, local.Site, local.Cluster)
	}
	relayCA := secretKey(t, objs, rpod, rc, cfg.TLS.CAFile)
	secretKey(t, objs, rpod, rc, cfg.TLS.CertFile)
	secretKey(t, objs, rpod, rc, cfg.TLS.KeyFile)
	if relayCA != eppCA {
		t.Error("the EPP and its relay trust different CA bundles")
	}
	id := flags["--signals-relay-identity"]
	if want := tlsutil.SiteSPIFFEID(cfg.TrustDomain, cfg.Site); id != want {
		t.Errorf("--signals-relay-identity %q, but the relay of %s in trust domain %s is %q", id, cfg.Site, cfg.TrustDomain, want)
	}
	if cfg.LocalEPP.Identity.SPIFFEID == "" {
		t.Error("the relay does not know the EPP's identity")
	}

	// The relay scrapes the EPP Service (G-07) for the pool.
	svc := typed[corev1.Service](t, objs.get("", "Service", eppName))
	var metricsPort int32
	for _, p := range svc.Spec.Ports {
		if p.Name == "http-metrics" {
			metricsPort = p.Port
		}
	}
	found := false
	for _, p := range cfg.Providers {
		if p.Name != flags["--pool-name"] {
			continue
		}
		found = true
		if p.MetricsConfig == nil {
			t.Fatalf("provider %s has no metricsConfig", p.Name)
		}
		u, err := url.Parse(p.MetricsConfig.Endpoint)
		if err != nil || strings.Split(u.Hostname(), ".")[0] != svc.Name || u.Port() != itoa(metricsPort) {
			t.Errorf("provider %s scrapes %q, not the EPP Service %s:%d", p.Name, p.MetricsConfig.Endpoint, svc.Name, metricsPort)
		}
		// One Secret key, mounted in both: the relay's bearerTokenFile is
		// the EPP's --metrics-token-file.
		if p.MetricsConfig.BearerTokenFile == "" {
			t.Errorf("provider %s has no bearerTokenFile: the EPP's metrics port (--metrics-token-file) answers 401", p.Name)
		} else if rt := secretRef(t, objs, rpod, rc, p.MetricsConfig.BearerTokenFile); rt.secret != eppToken.secret || rt.key != eppToken.key {
			t.Errorf("provider %s bearerTokenFile is Secret %s key %q, the EPP's --metrics-token-file Secret %s key %q", p.Name, rt.secret, rt.key, eppToken.secret, eppToken.key)
		}
	}
	if !found {
		t.Errorf("the relay has no provider %q (--pool-name)", flags["--pool-name"])
	}
	var peers []string
	for _, p := range cfg.Peers {
		peers = append(peers, p.Site)
	}
	for _, s := range remote {
		if !slices.Contains(peers, s) {
			t.Errorf("site %s of the topology is not a peer of the relay: its load would never arrive", s)
		}
	}

	// The EPP reaches the relay through its Service.
	rsvc := typed[corev1.Service](t, objs.get("", "Service", relayName))
	if !labels.SelectorFromSet(rsvc.Spec.Selector).Matches(labels.Set(rdep.Spec.Template.Labels)) || len(rsvc.Spec.Selector) == 0 {
		t.Errorf("Service %s does not select the relay pods", relayName)
	}
	if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(rdep.Spec.Template.Labels)) {
		t.Error("the EPP Service selects the relay pods")
	}
	u, err := url.Parse(flags["--signals-relay-url"])
	if err != nil || u.Scheme != "https" || u.Hostname() != relayName || u.Path != signals.Path {
		t.Fatalf("--signals-relay-url %q: want https://%s:PORT%s", flags["--signals-relay-url"], relayName, signals.Path)
	}
	_, listenPort, _ := net.SplitHostPort(cfg.ListenAddress)
	ok := false
	for _, p := range rsvc.Spec.Ports {
		if itoa(p.Port) == u.Port() {
			for _, cp := range rc.Ports {
				if (cp.Name == p.TargetPort.String() || cp.ContainerPort == p.TargetPort.IntVal) && itoa(cp.ContainerPort) == listenPort {
					ok = true
				}
			}
		}
	}
	if !ok {
		t.Errorf("--signals-relay-url port %s does not reach the relay's listenAddress %s through Service %s", u.Port(), cfg.ListenAddress, relayName)
	}
}

func itoa(p int32) string { return strconv.Itoa(int(p)) }

// secretKey returns the content of the Secret key that file, mounted in
// c, is; it fails when file is not under a Secret volume mount.
func secretKey(t *testing.T, objs objects, pod *corev1.PodSpec, c *corev1.Container, file string) string {
	t.Helper()
	return secretRef(t, objs, pod, c, file).data
}

// mountedSecretKey is a Secret key and its content.
type mountedSecretKey struct {
	secret, key, data string
}

// secretRef returns the Secret key that file, mounted in c, is; it fails
// when file is not under a Secret volume mount.
func secretRef(t *testing.T, objs objects, pod *corev1.PodSpec, c *corev1.Container, file string) mountedSecretKey {
	t.Helper()
	for _, m := range c.VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, file)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		if !m.ReadOnly {
			t.Errorf("volume mount %s is writable", m.MountPath)
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			su := objs.get("", "Secret", v.Secret.SecretName)
			if su == nil {
				t.Fatalf("container %s: Secret %q is not in the output", c.Name, v.Secret.SecretName)
			}
			sec := typed[corev1.Secret](t, su)
			data, ok := sec.Data[rel]
			if !ok {
				t.Fatalf("Secret %s has no key %q (for %s)", sec.Name, rel, file)
			}
			return mountedSecretKey{secret: sec.Name, key: rel, data: string(data)}
		}
	}
	t.Fatalf("container %s: %q is not under a Secret volume mount", c.Name, file)
	return mountedSecretKey{}
}

// TestDockerfileBuildsSiteRelay: the multisite overlay runs /site-relay
// from the EPP's image, so the Dockerfile must build and copy it.
func TestDockerfileBuildsSiteRelay(t *testing.T) {
	df := string(readFile(t, filepath.Join("..", "Dockerfile")))
	for _, want := range []string{"./cmd/site-relay", "COPY --from=build /out/site-relay /site-relay", "COPY --from=build /out/epp /epp", `ENTRYPOINT ["/epp"]`} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}
