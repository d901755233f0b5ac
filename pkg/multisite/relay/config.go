package relay

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/fielderr"
	"github.com/switchyard-ai/switchyard/pkg/internal/suggest"
	"github.com/switchyard-ai/switchyard/pkg/internal/yamldoc"
	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
)

// Defaults of Config.
const (
	DefaultListenAddress       = ":8443"
	DefaultAdminAddress        = ":8080"
	DefaultScrapeInterval      = time.Second // G-01
	DefaultScrapeTimeout       = time.Second
	DefaultPeerPollInterval    = 2 * time.Second
	DefaultConnectTimeout      = 2 * time.Second
	DefaultRequestTimeout      = 2 * time.Second
	DefaultStaleMetricsSeconds = 30 // G-08
	DefaultMetricsPath         = "/metrics"
)

// Bounds of Config.
const (
	// MaxConfigBytes bounds a configuration file.
	MaxConfigBytes = 1 << 20
	// MaxPeers bounds the peer list (a peer label each on the metrics).
	MaxPeers = 63
	// MaxProviders is the per-site provider cap of the wire format.
	MaxProviders = signals.DefaultMaxProvidersPerSite
	// MinInterval is the shortest scrape or poll interval.
	MinInterval = 10 * time.Millisecond
	// MaxInterval is the longest interval or timeout.
	MaxInterval = time.Hour
)

// ScrapeIntervalEnv names the environment variable that sets the scrape
// interval in seconds (G-01): flag > environment > file > default.
const ScrapeIntervalEnv = "GRID_SIGNALS_SCRAPE_INTERVAL_SECS"

// Config is the site-relay's configuration (a YAML or JSON file, flags;
// see the package documentation for every field).
type Config struct {
	Site          string   `json:"site"`
	Cluster       string   `json:"cluster"`
	TrustDomain   string   `json:"trustDomain,omitempty"`
	ListenAddress string   `json:"listenAddress,omitempty"`
	AdminAddress  string   `json:"adminAddress,omitempty"`
	TLS           TLSFiles `json:"tls"`
	LocalEPP      LocalEPP `json:"localEPP"`

	Providers []Provider `json:"providers"`
	Peers     []Peer     `json:"peers,omitempty"`

	ScrapeInterval   time.Duration `json:"scrapeInterval,omitempty"`
	ScrapeTimeout    time.Duration `json:"scrapeTimeout,omitempty"`
	PeerPollInterval time.Duration `json:"peerPollInterval,omitempty"`
	ConnectTimeout   time.Duration `json:"connectTimeout,omitempty"`
	RequestTimeout   time.Duration `json:"requestTimeout,omitempty"`
}

// TLSFiles are the relay's certificate pair (served to peers and to its
// EPP, and presented to peers as a client certificate) and the CA bundle
// that peer and EPP certificates must chain to; all are reloaded on
// change.
type TLSFiles struct {
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
	CAFile   string `json:"caFile,omitempty"`
}

// LocalEPP is the local EPP, the one client that gets every site's rows.
type LocalEPP struct {
	// Identity defaults to spiffe://<trustDomain>/site/<site>/epp.
	Identity tlsutil.Identity `json:"identity"`
}

// Provider is one InferencePool of this site, named as the EPP labels
// its pool gauges (the name label).
type Provider struct {
	Name string `json:"name"`
	// ConfigGeneration, optional, enters the provider's generation (G-06):
	// change it (the InferencePool's metadata.generation, a checksum of the
	// EPP's configuration) to restart ceiling learning.
	ConfigGeneration string `json:"configGeneration,omitempty"`
	// MetricsConfig is nil for a provider with no metrics to scrape, which
	// does not publish load (G-47 a).
	MetricsConfig *MetricsConfig `json:"metricsConfig,omitempty"`
}

// MetricsConfig says where and how to scrape the provider's EPP.
type MetricsConfig struct {
	// Endpoint is the EPP Service's metrics URL (G-07), e.g.
	// http://epp.ns.svc:9090/metrics.
	Endpoint string `json:"endpoint"`
	// StaleMetricsSeconds is how long a failing scrape keeps the last
	// readiness (G-08).
	StaleMetricsSeconds int `json:"staleMetricsSeconds,omitempty"`
	// BearerTokenFile holds the EPP's --metrics-token-file token.
	BearerTokenFile string `json:"bearerTokenFile,omitempty"`
	// TLS applies to an https endpoint.
	TLS *ScrapeTLS `json:"tls,omitempty"`
}

// ScrapeTLS verifies an https EPP metrics endpoint.
type ScrapeTLS struct {
	CAFile             string `json:"caFile,omitempty"`
	ServerName         string `json:"serverName,omitempty"`
	InsecureSkipVerify bool   `json:"insecureSkipVerify,omitempty"`
}

// Peer is another site's relay.
type Peer struct {
	// Site is the peer's site: the grid_site its rows are keyed on once
	// its identity is verified (G-02).
	Site string `json:"site"`
	// Address is host:port or https://host:port of the peer relay.
	Address string `json:"address"`
	// ServerName is sent as SNI (default: the address's host).
	ServerName string `json:"serverName,omitempty"`
	// Identity defaults to spiffe://<trustDomain>/site/<site>.
	Identity tlsutil.Identity `json:"identity"`
}

// URL returns the peer's signals URL.
func (p Peer) URL() string {
	a := p.Address
	if !strings.Contains(a, "://") {
		a = "https://" + a
	}
	return strings.TrimSuffix(a, "/") + signals.Path
}

// configSubject names the relay configuration in errors.
type configSubject struct{}

func (configSubject) Subject() string { return "site-relay configuration" }

// ValidationError lists every problem of a configuration with its path.
type ValidationError = fielderr.ValidationError[configSubject]

type errorList = fielderr.List[configSubject]

var (
	topFields      = []string{"apiVersion", "kind", "site", "cluster", "trustDomain", "listenAddress", "adminAddress", "tls", "localEPP", "providers", "peers", "scrapeInterval", "scrapeTimeout", "peerPollInterval", "connectTimeout", "requestTimeout"}
	tlsFields      = []string{"certFile", "keyFile", "caFile"}
	identityFields = []string{"spiffeID", "sha256"}
	providerFields = []string{"name", "configGeneration", "metricsConfig"}
	metricsFields  = []string{"endpoint", "staleMetricsSeconds", "bearerTokenFile", "tls"}
	scrapeTLSField = []string{"caFile", "serverName", "insecureSkipVerify"}
	peerFields     = []string{"site", "address", "serverName", "identity"}
)

// Kind and APIVersion a file may declare (both optional).
const (
	Kind       = "SiteRelayConfig"
	APIVersion = "switchyard.ai/v1alpha1"
)

// Decode parses a configuration file strictly: an unknown or repeated
// key, a value of the wrong type or a second document is an error, and
// every problem is reported at once with its field path
// (providers[0].metricsConfig.endpoint). It applies no defaults and does
// not validate values; Load does both.
func Decode(data []byte) (*Config, error) {
	var errs errorList
	cfg := decodeConfig(data, &errs)
	if err := errs.Err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func decodeConfig(data []byte, errs *errorList) *Config {
	if len(data) > MaxConfigBytes {
		errs.Add("", "the file is %d bytes; the limit is %d", len(data), MaxConfigBytes)
		return nil
	}
	root, problem := yamldoc.Decode(data, yamldoc.Rules{
		Empty:            "the configuration is empty",
		Check:            checkDocuments,
		Strict:           true,
		NotDecoded:       "not valid YAML",
		MaxExpandedBytes: MaxConfigBytes,
	})
	if problem != "" {
		errs.Add("", "%s", problem)
		return nil
	}
	d := decoder{errs: errs}
	obj, ok := d.object("", root)
	if !ok {
		return nil
	}
	d.keys("", obj, topFields)
	cfg := &Config{}
	if v := d.str("apiVersion", obj["apiVersion"]); v != "" && v != APIVersion {
		errs.Add("apiVersion", "must be %q, got %q", APIVersion, v)
	}
	if v := d.str("kind", obj["kind"]); v != "" && v != Kind {
		errs.Add("kind", "must be %q, got %q", Kind, v)
	}
	cfg.Site = d.str("site", obj["site"])
	cfg.Cluster = d.str("cluster", obj["cluster"])
	cfg.TrustDomain = d.str("trustDomain", obj["trustDomain"])
	cfg.ListenAddress = d.str("listenAddress", obj["listenAddress"])
	cfg.AdminAddress = d.str("adminAddress", obj["adminAddress"])
	if o, ok := d.optObject("tls", obj["tls"]); ok {
		d.keys("tls", o, tlsFields)
		cfg.TLS = TLSFiles{CertFile: d.str("tls.certFile", o["certFile"]), KeyFile: d.str("tls.keyFile", o["keyFile"]), CAFile: d.str("tls.caFile", o["caFile"])}
	}
	if o, ok := d.optObject("localEPP", obj["localEPP"]); ok {
		d.keys("localEPP", o, []string{"identity"})
		cfg.LocalEPP.Identity = d.identity("localEPP.identity", o["identity"])
	}
	for i, p := range d.list("providers", obj["providers"]) {
		path := fmt.Sprintf("providers[%d]", i)
		o, ok := d.object(path, p)
		if !ok {
			cfg.Providers = append(cfg.Providers, Provider{})
			continue
		}
		d.keys(path, o, providerFields)
		pr := Provider{Name: d.str(path+".name", o["name"]), ConfigGeneration: d.scalarString(path+".configGeneration", o["configGeneration"])}
		if mo, ok := d.optObject(path+".metricsConfig", o["metricsConfig"]); ok {
			mp := path + ".metricsConfig"
			d.keys(mp, mo, metricsFields)
			mc := &MetricsConfig{
				Endpoint:            d.str(mp+".endpoint", mo["endpoint"]),
				StaleMetricsSeconds: d.int(mp+".staleMetricsSeconds", mo["staleMetricsSeconds"]),
				BearerTokenFile:     d.str(mp+".bearerTokenFile", mo["bearerTokenFile"]),
			}
			if to, ok := d.optObject(mp+".tls", mo["tls"]); ok {
				tp := mp + ".tls"
				d.keys(tp, to, scrapeTLSField)
				mc.TLS = &ScrapeTLS{CAFile: d.str(tp+".caFile", to["caFile"]), ServerName: d.str(tp+".serverName", to["serverName"]), InsecureSkipVerify: d.bool(tp+".insecureSkipVerify", to["insecureSkipVerify"])}
			}
			pr.MetricsConfig = mc
		}
		cfg.Providers = append(cfg.Providers, pr)
	}
	for i, p := range d.list("peers", obj["peers"]) {
		path := fmt.Sprintf("peers[%d]", i)
		o, ok := d.object(path, p)
		if !ok {
			cfg.Peers = append(cfg.Peers, Peer{})
			continue
		}
		d.keys(path, o, peerFields)
		cfg.Peers = append(cfg.Peers, Peer{
			Site:       d.str(path+".site", o["site"]),
			Address:    d.str(path+".address", o["address"]),
			ServerName: d.str(path+".serverName", o["serverName"]),
			Identity:   d.identity(path+".identity", o["identity"]),
		})
	}
	cfg.ScrapeInterval = d.duration("scrapeInterval", obj["scrapeInterval"])
	cfg.ScrapeTimeout = d.duration("scrapeTimeout", obj["scrapeTimeout"])
	cfg.PeerPollInterval = d.duration("peerPollInterval", obj["peerPollInterval"])
	cfg.ConnectTimeout = d.duration("connectTimeout", obj["connectTimeout"])
	cfg.RequestTimeout = d.duration("requestTimeout", obj["requestTimeout"])
	return cfg
}

// checkDocuments refuses a second YAML document.
func checkDocuments(data []byte) string {
	lines := strings.Split(string(data), "\n")
	content := false
	for i, line := range lines {
		t := strings.TrimRight(line, " \t\r")
		if t == "---" || strings.HasPrefix(t, "--- ") {
			if content {
				for _, rest := range lines[i+1:] {
					if r := strings.TrimSpace(rest); r != "" && !strings.HasPrefix(r, "#") {
						return fmt.Sprintf("a second YAML document starts at line %d; a configuration holds exactly one", i+1)
					}
				}
				return ""
			}
			if r := strings.TrimSpace(t[3:]); r == "" || strings.HasPrefix(r, "#") {
				continue
			}
		}
		if r := strings.TrimSpace(t); r != "" && !strings.HasPrefix(r, "#") && r != "..." {
			content = true
		}
	}
	return ""
}

type decoder struct{ errs *errorList }

func (d decoder) keys(path string, obj map[string]any, allowed []string) {
	for _, k := range yamldoc.UnknownKeys(obj, allowed) {
		msg := fmt.Sprintf("unknown field %q", k)
		if s := closest(k, allowed); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		} else {
			msg += " (allowed: " + strings.Join(allowed, ", ") + ")"
		}
		p := k
		if path != "" {
			p = path + "." + k
		}
		if strings.ContainsAny(k, ".[]\" \t\n") || k == "" {
			p = path + "[" + strconv.Quote(k) + "]"
		}
		d.errs.Add(p, "%s", msg)
	}
}

func closest(s string, candidates []string) string {
	best, bestD := "", 3
	ls := strings.ToLower(s)
	if len(ls) > 64 {
		return ""
	}
	for _, c := range candidates {
		if dist := suggest.Distance(ls, strings.ToLower(c)); dist < bestD {
			best, bestD = c, dist
		}
	}
	return best
}

func (d decoder) object(path string, v any) (map[string]any, bool) {
	o, ok := v.(map[string]any)
	if !ok {
		d.errs.Add(path, "expected an object, got %s", yamldoc.TypeName(v))
	}
	return o, ok
}

// optObject decodes an optional object; null counts as absent.
func (d decoder) optObject(path string, v any) (map[string]any, bool) {
	if v == nil {
		return nil, false
	}
	return d.object(path, v)
}

func (d decoder) list(path string, v any) []any {
	if v == nil {
		return nil
	}
	l, ok := v.([]any)
	if !ok {
		d.errs.Add(path, "expected a list, got %s", yamldoc.TypeName(v))
	}
	return l
}

func (d decoder) str(path string, v any) string {
	if v == nil {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		d.errs.Add(path, "expected a string, got %s", yamldoc.TypeName(v))
	}
	return s
}

// scalarString accepts a string or a number (a generation is often an
// integer) as text.
func (d decoder) scalarString(path string, v any) string {
	if n, ok := v.(json.Number); ok {
		return n.String()
	}
	return d.str(path, v)
}

func (d decoder) bool(path string, v any) bool {
	if v == nil {
		return false
	}
	b, ok := v.(bool)
	if !ok {
		d.errs.Add(path, "expected true or false, got %s", yamldoc.TypeName(v))
	}
	return b
}

func (d decoder) int(path string, v any) int {
	if v == nil {
		return 0
	}
	n, ok := v.(json.Number)
	if !ok {
		d.errs.Add(path, "expected an integer, got %s", yamldoc.TypeName(v))
		return 0
	}
	i, err := n.Int64()
	if err != nil || i > math.MaxInt32 || i < math.MinInt32 {
		d.errs.Add(path, "expected an integer of at most 2147483647, got %s", n)
		return 0
	}
	return int(i)
}

// duration decodes a Go duration string ("1s", "500ms").
func (d decoder) duration(path string, v any) time.Duration {
	if v == nil {
		return 0
	}
	s, ok := v.(string)
	if !ok {
		hint := ""
		if n, isNum := v.(json.Number); isNum {
			hint = fmt.Sprintf(" (write %q for %s seconds)", n.String()+"s", n)
		}
		d.errs.Add(path, "expected a duration such as \"2s\" or \"500ms\", got %s%s", yamldoc.TypeName(v), hint)
		return 0
	}
	dur, err := time.ParseDuration(s)
	if err != nil {
		d.errs.Add(path, "expected a duration such as \"2s\" or \"500ms\", got %q", s)
		return 0
	}
	if dur <= 0 {
		d.errs.Add(path, "must be positive, got %q", s)
		return 0
	}
	return dur
}

func (d decoder) identity(path string, v any) tlsutil.Identity {
	o, ok := d.optObject(path, v)
	if !ok {
		return tlsutil.Identity{}
	}
	d.keys(path, o, identityFields)
	return tlsutil.Identity{SPIFFEID: d.str(path+".spiffeID", o["spiffeID"]), SHA256: d.str(path+".sha256", o["sha256"])}
}

// ApplyEnv applies the environment (getenv is os.Getenv in the binary)
// over the file: GRID_SIGNALS_SCRAPE_INTERVAL_SECS, a positive number of
// seconds. A bad value is an error naming the variable.
func (c *Config) ApplyEnv(getenv func(string) string) error {
	v := strings.TrimSpace(getenv(ScrapeIntervalEnv))
	if v == "" {
		return nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 || f > MaxInterval.Seconds() {
		return fmt.Errorf("%s: must be a positive number of seconds of at most %v, got %q", ScrapeIntervalEnv, MaxInterval.Seconds(), v)
	}
	c.ScrapeInterval = time.Duration(f * float64(time.Second))
	return nil
}

// SetDefaults fills every unset field with its default (G-80: nothing
// needs setting beyond the site, cluster, certificates and providers).
func (c *Config) SetDefaults() {
	if c.ListenAddress == "" {
		c.ListenAddress = DefaultListenAddress
	}
	if c.AdminAddress == "" {
		c.AdminAddress = DefaultAdminAddress
	}
	set := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	set(&c.ScrapeInterval, DefaultScrapeInterval)
	set(&c.ScrapeTimeout, min(DefaultScrapeTimeout, c.ScrapeInterval))
	set(&c.PeerPollInterval, DefaultPeerPollInterval)
	set(&c.ConnectTimeout, DefaultConnectTimeout)
	set(&c.RequestTimeout, DefaultRequestTimeout)
	if c.TrustDomain != "" && c.LocalEPP.Identity.IsZero() && c.Site != "" {
		c.LocalEPP.Identity.SPIFFEID = tlsutil.SiteSPIFFEID(c.TrustDomain, c.Site) + "/epp"
	}
	for i := range c.Peers {
		p := &c.Peers[i]
		if c.TrustDomain != "" && p.Identity.IsZero() && p.Site != "" {
			p.Identity.SPIFFEID = tlsutil.SiteSPIFFEID(c.TrustDomain, p.Site)
		}
	}
	for i := range c.Providers {
		if mc := c.Providers[i].MetricsConfig; mc != nil {
			if mc.StaleMetricsSeconds == 0 {
				mc.StaleMetricsSeconds = DefaultStaleMetricsSeconds
			}
			if u, err := url.Parse(mc.Endpoint); err == nil && u.Host != "" && u.Path == "" {
				u.Path = DefaultMetricsPath
				mc.Endpoint = u.String()
			}
		}
	}
}

// Validate reports every problem of a defaulted configuration with its
// path, and returns warnings (a metrics endpoint that may be a pod, G-07)
// that do not stop the relay.
func (c *Config) Validate() (warnings []string, err error) {
	var errs errorList
	if e := signals.ValidateLabel(c.Site); e != nil {
		errs.Add("site", "%v", e)
	}
	if e := signals.ValidateSubdomain(c.Cluster); e != nil {
		errs.Add("cluster", "%v", e)
	}
	if c.TrustDomain != "" {
		if e := tlsutil.ValidateSPIFFEID("spiffe://" + c.TrustDomain + "/x"); e != nil {
			errs.Add("trustDomain", "%q is not a SPIFFE trust domain (lowercase letters, digits, '.', '-', '_')", c.TrustDomain)
		}
	}
	checkAddr(&errs, "listenAddress", c.ListenAddress)
	checkAddr(&errs, "adminAddress", c.AdminAddress)
	if c.ListenAddress == c.AdminAddress && c.ListenAddress != "" && !strings.HasSuffix(c.ListenAddress, ":0") {
		errs.Add("adminAddress", "must differ from listenAddress (%s)", c.ListenAddress)
	}
	if c.TLS.CertFile == "" {
		errs.Add("tls.certFile", "required: the relay's certificate (served to peers and its EPP, presented to peers)")
	}
	if c.TLS.KeyFile == "" {
		errs.Add("tls.keyFile", "required")
	}
	spiffeUsed := false
	checkIdentity := func(path string, id tlsutil.Identity) {
		if id.IsZero() {
			errs.Add(path, "required: spiffeID or sha256 (or set trustDomain for the default SPIFFE ID)")
			return
		}
		if e := id.Validate(); e != nil {
			for _, m := range strings.Split(e.Error(), "\n") {
				errs.Add(path, "%s", m)
			}
		}
		if id.SPIFFEID != "" {
			spiffeUsed = true
		}
	}
	checkIdentity("localEPP.identity", c.LocalEPP.Identity)

	if len(c.Providers) == 0 {
		errs.Add("providers", "at least one provider (the site's InferencePool, as the EPP names it) is required")
	}
	if len(c.Providers) > MaxProviders {
		errs.Add("providers", "%d providers exceed the limit of %d per site", len(c.Providers), MaxProviders)
	}
	names := map[string]int{}
	for i, p := range c.Providers {
		path := fmt.Sprintf("providers[%d]", i)
		if e := signals.ValidateLabel(p.Name); e != nil {
			errs.Add(path+".name", "%v", e)
		} else if j, dup := names[p.Name]; dup {
			errs.Add(path+".name", "%q is also providers[%d]", p.Name, j)
		} else {
			names[p.Name] = i
		}
		if len(p.ConfigGeneration) > 256 {
			errs.Add(path+".configGeneration", "at most 256 characters")
		}
		if mc := p.MetricsConfig; mc != nil {
			warnings = append(warnings, checkMetrics(&errs, path+".metricsConfig", mc)...)
		}
	}
	if len(c.Peers) > MaxPeers {
		errs.Add("peers", "%d peers exceed the limit of %d", len(c.Peers), MaxPeers)
	}
	sites := map[string]int{}
	for i, p := range c.Peers {
		path := fmt.Sprintf("peers[%d]", i)
		if e := signals.ValidateLabel(p.Site); e != nil {
			errs.Add(path+".site", "%v", e)
		} else if p.Site == c.Site {
			errs.Add(path+".site", "%q is this relay's own site", p.Site)
		} else if j, dup := sites[p.Site]; dup {
			errs.Add(path+".site", "%q is also peers[%d]", p.Site, j)
		} else {
			sites[p.Site] = i
		}
		if p.Address == "" {
			errs.Add(path+".address", "required: host:port or https://host:port of the peer's relay")
		} else if u, e := url.Parse(p.URL()); e != nil || u.Scheme != "https" || u.Host == "" || u.Port() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			errs.Add(path+".address", "expected host:port or https://host:port (mutual TLS, a port), got %q", p.Address)
		}
		if p.ServerName != "" && strings.ContainsAny(p.ServerName, ":/ ") {
			errs.Add(path+".serverName", "expected a host name, got %q", p.ServerName)
		}
		checkIdentity(path+".identity", p.Identity)
	}
	// Identities must tell the EPP, every peer and this relay apart,
	// compared as a verifier sees them (tlsutil.Identity.Overlaps: pins in
	// any case and with or without colons, SPIFFE IDs as parsed): one
	// certificate proving two of them would get the wrong rows.
	ids := append([]tlsutil.Identity{c.LocalEPP.Identity}, identitiesOf(c.Peers)...)
	var self tlsutil.Identity
	if c.TrustDomain != "" && c.Site != "" {
		self.SPIFFEID = tlsutil.SiteSPIFFEID(c.TrustDomain, c.Site)
	}
	for i := range ids {
		if ids[i].Overlaps(self) {
			errs.Add(identityPath(i)+".identity", "the identity of this relay's own site (%s): every client must be told apart", self.SPIFFEID)
		}
		for j := range i {
			if ids[i].Overlaps(ids[j]) {
				errs.Add(identityPath(i)+".identity", "the same identity as %s.identity (%s): every client must be told apart", identityPath(j), ids[j])
			}
		}
	}
	if spiffeUsed && c.TLS.CAFile == "" {
		errs.Add("tls.caFile", "required when an identity is a SPIFFE ID: a SPIFFE ID proves nothing without the CA that signed it (or pin certificates with sha256)")
	}
	checkInterval(&errs, "scrapeInterval", c.ScrapeInterval)
	checkInterval(&errs, "scrapeTimeout", c.ScrapeTimeout)
	checkInterval(&errs, "peerPollInterval", c.PeerPollInterval)
	checkInterval(&errs, "connectTimeout", c.ConnectTimeout)
	checkInterval(&errs, "requestTimeout", c.RequestTimeout)
	if c.ScrapeTimeout > c.ScrapeInterval {
		errs.Add("scrapeTimeout", "%v must not exceed scrapeInterval (%v)", c.ScrapeTimeout, c.ScrapeInterval)
	}
	if c.RequestTimeout > c.PeerPollInterval {
		errs.Add("requestTimeout", "%v must not exceed peerPollInterval (%v): a poll round must end before the next starts", c.RequestTimeout, c.PeerPollInterval)
	}
	if c.ConnectTimeout > c.RequestTimeout {
		errs.Add("connectTimeout", "%v must not exceed requestTimeout (%v)", c.ConnectTimeout, c.RequestTimeout)
	}
	return warnings, errs.Err()
}

func identityPath(i int) string {
	if i == 0 {
		return "localEPP"
	}
	return fmt.Sprintf("peers[%d]", i-1)
}

func identitiesOf(peers []Peer) []tlsutil.Identity {
	out := make([]tlsutil.Identity, len(peers))
	for i, p := range peers {
		out[i] = p.Identity
	}
	return out
}

func checkAddr(errs *errorList, path, addr string) {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		errs.Add(path, "expected host:port or :port, got %q", addr)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		errs.Add(path, "invalid port %q", port)
	}
}

func checkInterval(errs *errorList, path string, d time.Duration) {
	if d < MinInterval || d > MaxInterval {
		errs.Add(path, "must be %v to %v, got %v", MinInterval, MaxInterval, d)
	}
}

// checkMetrics validates a metricsConfig and returns its warnings.
func checkMetrics(errs *errorList, path string, mc *MetricsConfig) []string {
	var warnings []string
	u, err := url.Parse(mc.Endpoint)
	switch {
	case mc.Endpoint == "":
		errs.Add(path+".endpoint", "required: the EPP Service's metrics URL, e.g. http://epp.<namespace>.svc:9090/metrics")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "":
		errs.Add(path+".endpoint", "expected an http:// or https:// URL without user or fragment, got %q", mc.Endpoint)
	default:
		host := u.Hostname()
		if isPodDNSName(host) {
			errs.Add(path+".endpoint", "%q is a pod's DNS name: point at the EPP Service (G-07); a pod address can reach a standby replica that reports nothing", host)
		} else if ip := net.ParseIP(host); ip != nil && !ip.IsLoopback() {
			warnings = append(warnings, fmt.Sprintf("%s.endpoint: %s is an IP address; make sure it is the EPP Service's cluster IP, not a pod's (G-07: a pod address can reach a standby replica that reports nothing)", path, host))
		}
	}
	if mc.StaleMetricsSeconds < 0 || mc.StaleMetricsSeconds > 86400 {
		errs.Add(path+".staleMetricsSeconds", "must be 0 to 86400, got %d", mc.StaleMetricsSeconds)
	}
	if t := mc.TLS; t != nil {
		if u != nil && u.Scheme != "https" {
			errs.Add(path+".tls", "applies to an https endpoint only")
		}
		if t.InsecureSkipVerify && (t.CAFile != "" || t.ServerName != "") {
			errs.Add(path+".tls.insecureSkipVerify", "contradicts caFile and serverName")
		}
	}
	return warnings
}

// isPodDNSName recognises <a-b-c-d>.<namespace>.pod[.<cluster domain>], the
// DNS name Kubernetes gives a pod by its IP.
func isPodDNSName(host string) bool {
	labels := strings.Split(strings.TrimSuffix(strings.ToLower(host), "."), ".")
	if len(labels) < 3 || labels[2] != "pod" {
		return false
	}
	return net.ParseIP(strings.ReplaceAll(labels[0], "-", ".")) != nil || net.ParseIP(strings.ReplaceAll(labels[0], "-", ":")) != nil
}
