package datastore

import (
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/switchyard-ai/switchyard/pkg/fielderr"
	"github.com/switchyard-ai/switchyard/pkg/plugins/datalayer/coremetrics"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// MaxWeight is the largest accepted EndpointSpec.Weight.
const MaxWeight = 1_000_000

// MaxProviderLimit is the largest accepted EndpointSpec.ProviderTPM and
// ProviderRPM.
const MaxProviderLimit = 1_000_000_000

// Bounds of an endpoint's model declarations (EndpointSpec.Models): every
// entry is searched on requests that name a model, and the declarations
// come from files and pod annotations that outsiders may write.
const (
	// MaxModels is the most models one endpoint declares.
	MaxModels = 256
	// MaxAliases is the most aliases one model entry has.
	MaxAliases = 64
	// MaxModelNameBytes bounds a model name or alias.
	MaxModelNameBytes = 256
	// MaxPrice bounds a price, in USD per 1M tokens.
	MaxPrice = 1_000_000
)

// EndpointSpec describes one model-server endpoint as an endpoint source
// (the endpoints file, or the Kubernetes pod watch) knows it.
type EndpointSpec struct {
	// Name is unique in the pool, e.g. "sim-0" or "<pod>-rank-0": 1 to
	// 253 letters, digits, '-', '_' or '.', starting and ending with a
	// letter or digit.
	Name string
	// Namespace of the pod; empty in standalone mode. A DNS-1123 label
	// when set. Endpoint.Key() is "namespace/name" when it is set.
	Namespace string
	// Site names the site (cluster) of the endpoint; empty, as every
	// endpoint source leaves it, for the local site. A DNS-1123 label when
	// set; it is part of the key ("site:namespace/name", see Key) and of
	// the endpoint's identity. Remote sites are not endpoints of the
	// datastore: their load arrives through the site-relay and lives in
	// the site store (pkg/multisite/sitestore).
	Site string
	// PodName is the pod (or process) serving the endpoint; optional, same
	// rules as Name.
	PodName string
	// Address is the IP address or host name the gateway connects to,
	// without brackets. IP addresses are stored in canonical form (e.g.
	// "::1"), host names in lower case.
	Address string
	// Port is the serving port, 1..65535.
	Port int
	// Labels are the pod's labels: valid Kubernetes label keys and values.
	// The store keeps its own copy.
	Labels map[string]string
	// Weight is the endpoint's relative capacity, 1..MaxWeight; 0 means 1.
	// It is published as the WeightKey attribute.
	Weight int
	// MetricsPort is the port of the metrics endpoint; 0 means Port.
	MetricsPort int
	// MetricsPath is the URL path of the metrics endpoint; "" means the
	// metrics data source's path (default /metrics).
	MetricsPath string
	// Engine names the core-metrics-extractor engine mapping used to read
	// the endpoint's metrics (vllm, sglang, trtllm-serve,
	// triton-tensorrt-llm or a configured engine); "" means the engine is
	// chosen from Labels by the extractor's engine label.
	Engine string
	// Models are the models the endpoint declares it serves, with their
	// aliases and prices (at most MaxModels entries). Empty means it
	// declares none and serves every model. Names and aliases are unique
	// within the endpoint. Published as scheduling.ModelsKey.
	Models []scheduling.ModelEntry
	// Internal reserves the endpoint for internal callers
	// (caller-scope-filter's internalCallers). Published as
	// scheduling.InternalKey.
	Internal bool
	// NoScrape says the endpoint has no metrics to read (the endpoints
	// file's scrape: false, the switchyard.ai/scrape: "false" pod
	// annotation). It is not scraped and counts as fresh for Ready and
	// Routable (it has no metrics to be stale); its load is not measured:
	// its scheduling.Metrics stay zero with a zero UpdateTime, which
	// plugins read as "never measured", not as an idle server.
	NoScrape bool
	// ProviderTPM and ProviderRPM are the tokens and requests per minute
	// the provider behind the endpoint allows, 1..MaxProviderLimit; 0
	// means not declared. They are advisory: nothing enforces them; the
	// usage-weight-scorer ranks endpoints by the share not yet used.
	// Published as ProviderTPMKey and ProviderRPMKey when declared.
	ProviderTPM int
	ProviderRPM int
}

// HostPort returns the address the gateway routes to, formatted by
// net.JoinHostPort (IPv6 addresses in brackets).
func (s EndpointSpec) HostPort() string {
	return net.JoinHostPort(s.Address, strconv.Itoa(s.Port))
}

// MetricsHostPort returns the host:port the endpoint's metrics are scraped
// from.
func (s EndpointSpec) MetricsHostPort() string {
	p := s.MetricsPort
	if p == 0 {
		p = s.Port
	}
	return net.JoinHostPort(s.Address, strconv.Itoa(p))
}

// Key returns the key Endpoint.Key() gives the endpoint, from the one
// definition both use (scheduling.EndpointKey): "site:namespace/name",
// leaving out an empty site (with its ':') or namespace (with its '/').
func (s EndpointSpec) Key() string {
	return scheduling.EndpointKey(s.Site, s.Namespace, s.Name)
}

// FieldError is one invalid field, with its path, e.g.
// `endpoints[2].port`; the path is empty for problems of a whole document.
type FieldError = fielderr.FieldError

// ValidationError lists every problem found in a set of endpoint specs;
// its message starts with "invalid endpoints: ".
type ValidationError = fielderr.ValidationError[endpointsSubject]

// ErrorList collects field errors; its zero value is ready to use. Endpoint
// sources use it to report decoding problems together with validation
// problems. Add records a problem at a path, Len counts them, and Err
// returns a *ValidationError with every problem, or nil.
type ErrorList = fielderr.List[endpointsSubject]

// endpointsSubject names endpoint errors.
type endpointsSubject struct{}

// Subject implements fielderr.Subject.
func (endpointsSubject) Subject() string { return "endpoints" }

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// Validate reports every invalid field of s, with paths relative to the
// spec ("port", `labels["app"]`).
func (s EndpointSpec) Validate() error {
	var errs ErrorList
	validateSpec(&errs, "", &s, nil)
	return errs.Err()
}

// ValidateSpecs reports every invalid field of specs and every conflict
// between them (a name or an address:port used twice), with paths such as
// `endpoints[2].port`.
func ValidateSpecs(specs []EndpointSpec) error {
	var errs ErrorList
	checkSpecs(&errs, "endpoints", specs)
	return errs.Err()
}

// CheckSpecs is ValidateSpecs writing into errs with paths under path
// (e.g. "endpoints"), so that a source can report decoding and validation
// problems together.
func CheckSpecs(errs *ErrorList, path string, specs []EndpointSpec) {
	checkSpecs(errs, path, specs)
}

func checkSpecs(errs *ErrorList, path string, specs []EndpointSpec) {
	names := make(map[string]int, len(specs))
	hostPorts := make(map[string]int, len(specs))
	// Label keys and values repeat across a pool's endpoints; each is
	// checked once.
	labelOK := newLabelCache()
	for i := range specs {
		p := path + "[" + strconv.Itoa(i) + "]"
		s := &specs[i]
		validateSpec(errs, p, s, labelOK)
		if s.Name != "" {
			if j, dup := names[s.Name]; dup {
				errs.Add(join(p, "name"), "%q is also the name of %s[%d]; names must be unique", s.Name, path, j)
			} else {
				names[s.Name] = i
			}
		}
		if addr, ok := canonicalAddress(s.Address); ok && validPort(s.Port) {
			hp := net.JoinHostPort(addr, strconv.Itoa(s.Port))
			if j, dup := hostPorts[hp]; dup {
				errs.Add(join(p, "port"), "%s is also the address of %s[%d]; each endpoint needs its own address:port", hp, path, j)
			} else {
				hostPorts[hp] = i
			}
		}
	}
}

func validPort(p int) bool { return p >= 1 && p <= 65535 }

// validateSpec checks the fields of one spec. labelOK, if not nil, caches
// label keys and values found valid.
func validateSpec(errs *ErrorList, path string, s *EndpointSpec, labelOK *labelCache) {
	if msg := checkName(s.Name); msg != "" {
		errs.Add(join(path, "name"), "%s", msg)
	}
	if s.Namespace != "" {
		if m := validation.IsDNS1123Label(s.Namespace); len(m) > 0 {
			errs.Add(join(path, "namespace"), "invalid namespace %q: %s", s.Namespace, strings.Join(m, "; "))
		}
	}
	if s.Site != "" {
		if m := validation.IsDNS1123Label(s.Site); len(m) > 0 {
			errs.Add(join(path, "site"), "invalid site %q: %s", s.Site, strings.Join(m, "; "))
		}
	}
	if s.PodName != "" {
		if msg := checkName(s.PodName); msg != "" {
			errs.Add(join(path, "podName"), "%s", msg)
		}
	}
	if msg := checkAddress(s.Address); msg != "" {
		errs.Add(join(path, "address"), "%s", msg)
	}
	if !validPort(s.Port) {
		errs.Add(join(path, "port"), "must be 1..65535, got %d", s.Port)
	}
	if s.MetricsPort != 0 && !validPort(s.MetricsPort) {
		errs.Add(join(path, "metricsPort"), "must be 1..65535 (or 0 for the serving port), got %d", s.MetricsPort)
	}
	if msg := checkMetricsPath(s.MetricsPath); msg != "" {
		errs.Add(join(path, "metricsPath"), "%s", msg)
	}
	if s.Weight < 0 || s.Weight > MaxWeight {
		errs.Add(join(path, "weight"), "must be 1..%d (0 means 1), got %d", MaxWeight, s.Weight)
	}
	if s.ProviderTPM < 0 || s.ProviderTPM > MaxProviderLimit {
		errs.Add(join(path, "providerTpm"), "must be 1..%d tokens per minute (0 or absent: not declared), got %d", MaxProviderLimit, s.ProviderTPM)
	}
	if s.ProviderRPM < 0 || s.ProviderRPM > MaxProviderLimit {
		errs.Add(join(path, "providerRpm"), "must be 1..%d requests per minute (0 or absent: not declared), got %d", MaxProviderLimit, s.ProviderRPM)
	}
	if s.Engine != "" {
		switch m := validation.IsValidLabelValue(s.Engine); {
		case len(m) > 0:
			errs.Add(join(path, "engine"), "invalid engine name %q: %s", s.Engine, strings.Join(m, "; "))
		case s.Engine == coremetrics.ReservedEngineName:
			errs.Add(join(path, "engine"), "%q is reserved; name an engine (e.g. vllm) or leave it empty", s.Engine)
		}
	}
	checkLabels(errs, path, s.Labels, labelOK)
	CheckModels(errs, join(path, "models"), s.Models)
}

// CheckModels reports every problem of a list of model declarations with
// paths under path (e.g. `endpoints[0].models`): a missing or oversized
// name or alias, a name or alias used twice within the endpoint (a
// request naming it would be ambiguous), too many entries or aliases, a
// negative, non-finite or absurd price. Sources that read models from
// elsewhere (pod annotations) use it too.
func CheckModels(errs *ErrorList, path string, models []scheduling.ModelEntry) {
	if len(models) > MaxModels {
		errs.Add(path, "%d models exceed the limit of %d", len(models), MaxModels)
		return
	}
	seen := make(map[string]string, len(models))
	claim := func(p, name string) {
		if msg := checkModelName(name); msg != "" {
			errs.Add(p, "%s", msg)
			return
		}
		if other, dup := seen[name]; dup {
			errs.Add(p, "%q is also declared at %s; a name or alias may appear once per endpoint", name, other)
			return
		}
		seen[name] = p
	}
	for i := range models {
		m := &models[i]
		mp := path + "[" + strconv.Itoa(i) + "]"
		claim(mp+".name", m.Name)
		if len(m.Aliases) > MaxAliases {
			errs.Add(mp+".aliases", "%d aliases exceed the limit of %d", len(m.Aliases), MaxAliases)
		} else {
			for j, a := range m.Aliases {
				claim(mp+".aliases["+strconv.Itoa(j)+"]", a)
			}
		}
		if pr := m.Pricing; pr != nil {
			checkPrice(errs, mp+".pricing.input", pr.Input)
			checkPrice(errs, mp+".pricing.output", pr.Output)
		}
	}
}

func checkModelName(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > MaxModelNameBytes:
		return fmt.Sprintf("must be at most %d bytes, got %d", MaxModelNameBytes, len(s))
	case strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return fmt.Sprintf("invalid model name %q: control characters are not allowed", s)
	}
	return ""
}

func checkPrice(errs *ErrorList, path string, v float64) {
	if math.IsNaN(v) || v < 0 || v > MaxPrice {
		errs.Add(path, "must be a number of USD per 1M tokens in 0..%d, got %v", MaxPrice, v)
	}
}

// labelCache remembers label keys and values found valid.
type labelCache struct{ keys, values map[string]bool }

func newLabelCache() *labelCache {
	return &labelCache{keys: map[string]bool{}, values: map[string]bool{}}
}

func (c *labelCache) key(k string) bool {
	if c != nil && c.keys[k] {
		return true
	}
	ok := len(validation.IsQualifiedName(k)) == 0
	if ok && c != nil {
		c.keys[k] = true
	}
	return ok
}

func (c *labelCache) value(v string) bool {
	if c != nil && c.values[v] {
		return true
	}
	ok := len(validation.IsValidLabelValue(v)) == 0
	if ok && c != nil {
		c.values[v] = true
	}
	return ok
}

// checkLabels reports invalid label keys and values, in key order.
func checkLabels(errs *ErrorList, path string, labels map[string]string, cache *labelCache) {
	bad := false
	for k, v := range labels {
		if !cache.key(k) || !cache.value(v) {
			bad = true
			break
		}
	}
	if !bad {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		v := labels[k]
		lp := fmt.Sprintf("%s[%q]", join(path, "labels"), k)
		if m := validation.IsQualifiedName(k); len(m) > 0 {
			errs.Add(lp, "invalid label key: %s", strings.Join(m, "; "))
		}
		if m := validation.IsValidLabelValue(v); len(m) > 0 {
			errs.Add(lp, "invalid label value %q: %s", v, strings.Join(m, "; "))
		}
	}
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// checkName checks an endpoint or pod name.
func checkName(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > 253:
		return fmt.Sprintf("must be at most 253 characters, got %d", len(s))
	case !isAlnum(s[0]) || !isAlnum(s[len(s)-1]):
		return fmt.Sprintf("invalid name %q: must start and end with a letter or digit", s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return fmt.Sprintf("invalid name %q: only letters, digits, '-', '_' and '.' are allowed", s)
		}
	}
	return ""
}

// checkAddress checks an IP address or host name.
func checkAddress(a string) string {
	if a == "" {
		return "must not be empty"
	}
	if _, ok := canonicalAddress(a); ok {
		return ""
	}
	switch {
	case strings.HasPrefix(a, "["):
		return fmt.Sprintf("invalid address %q: write IPv6 addresses without brackets", a)
	case strings.Contains(a, ":"):
		return fmt.Sprintf("invalid address %q: not an IP address (the port goes in port, not in address)", a)
	case numericDotted(a):
		return fmt.Sprintf("invalid address %q: not a valid IPv4 address", a)
	}
	return fmt.Sprintf("invalid address %q: must be an IP address or a DNS host name (letters, digits, '-' and '.')", a)
}

// numericDotted reports whether a consists of digits and dots only (a
// malformed IPv4 address rather than a host name).
func numericDotted(a string) bool {
	for i := 0; i < len(a); i++ {
		if c := a[i]; c != '.' && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// canonicalAddress returns the canonical form of a valid address: an IP
// address as netip formats it, a host name in lower case.
func canonicalAddress(a string) (string, bool) {
	if a == "" {
		return "", false
	}
	if ip, err := netip.ParseAddr(a); err == nil {
		// Keep the caller's string when it is canonical already (saves
		// an allocation per endpoint on every resync).
		var buf [64]byte
		if c := ip.AppendTo(buf[:0]); string(c) == a {
			return a, true
		}
		return ip.String(), true
	}
	if strings.ContainsAny(a, ":[]") || numericDotted(a) {
		return "", false
	}
	lower := strings.ToLower(a)
	if len(validation.IsDNS1123Subdomain(lower)) > 0 {
		return "", false
	}
	return lower, true
}

// checkMetricsPath checks a metrics URL path ("" is allowed).
func checkMetricsPath(p string) string {
	switch {
	case p == "":
		return ""
	case !strings.HasPrefix(p, "/"):
		return fmt.Sprintf("must start with \"/\", got %q", p)
	case strings.ContainsAny(p, "?#"):
		return fmt.Sprintf("must be a path without query or fragment, got %q", p)
	case strings.ContainsFunc(p, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return fmt.Sprintf("must not contain spaces or control characters, got %q", p)
	}
	return ""
}

// normalize returns a copy of a valid spec with defaults applied, the
// address in canonical form and its own copy of the labels.
func normalize(s EndpointSpec) EndpointSpec {
	if s.Weight == 0 {
		s.Weight = 1
	}
	if a, ok := canonicalAddress(s.Address); ok {
		s.Address = a
	}
	if s.Labels != nil {
		s.Labels = maps.Clone(s.Labels)
	}
	s.Models = cloneModels(s.Models)
	return s
}

// cloneModels deep-copies model declarations (nil for none), so that the
// store's copy, which it publishes, never changes under plugins. Every
// field is copied: a field left out (as Unpriced once was) silently
// never reaches the plugins that read it.
func cloneModels(in []scheduling.ModelEntry) []scheduling.ModelEntry {
	if len(in) == 0 {
		return nil
	}
	out := make([]scheduling.ModelEntry, len(in))
	for i, m := range in {
		out[i] = scheduling.ModelEntry{Name: m.Name, Aliases: slices.Clone(m.Aliases), Unpriced: m.Unpriced}
		if m.Pricing != nil {
			p := *m.Pricing
			out[i].Pricing = &p
		}
	}
	return out
}

// sameModels reports whether two model declarations are equal.
func sameModels(a, b []scheduling.ModelEntry) bool {
	return slices.EqualFunc(a, b, func(x, y scheduling.ModelEntry) bool {
		if x.Name != y.Name || x.Unpriced != y.Unpriced || !slices.Equal(x.Aliases, y.Aliases) || (x.Pricing == nil) != (y.Pricing == nil) {
			return false
		}
		return x.Pricing == nil || *x.Pricing == *y.Pricing
	})
}

// sameSpec reports whether two normalized specs are equal.
func sameSpec(a, b *EndpointSpec) bool {
	return a.Name == b.Name && a.Namespace == b.Namespace && a.Site == b.Site && a.PodName == b.PodName &&
		a.Address == b.Address && a.Port == b.Port && a.Weight == b.Weight &&
		a.MetricsPort == b.MetricsPort && a.MetricsPath == b.MetricsPath &&
		a.Engine == b.Engine && a.Internal == b.Internal && a.NoScrape == b.NoScrape &&
		a.ProviderTPM == b.ProviderTPM && a.ProviderRPM == b.ProviderRPM && maps.Equal(a.Labels, b.Labels) &&
		sameModels(a.Models, b.Models)
}
