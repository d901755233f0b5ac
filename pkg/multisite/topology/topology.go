package topology

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/switchyard-ai/switchyard/pkg/fielderr"
	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
)

// Bounds of a topology.
const (
	// MaxSites bounds the sites of a topology, the local one included
	// (the public grid gateway weighs at most 64 sites per request).
	MaxSites = 64
	// MaxModelsPerSite bounds the models listed for one site.
	MaxModelsPerSite = 256
	// MaxModelNameBytes bounds one model name.
	MaxModelNameBytes = 256
)

// Sources of a site (Site.Source).
const (
	SourceLocal  = "local"               // the EPP's own site (--site-name)
	SourceFile   = "file"                // the topology file
	SourceImport = "inferencepoolimport" // only an InferencePoolImport's exporting clusters
)

// Site is one site the EPP knows: a (site, cluster) candidate for the
// site stage.
type Site struct {
	// Name is the site's name, a DNS-1123 label: the grid_site of its
	// rows and the <name> of its relay's SPIFFE ID.
	Name string `json:"name"`
	// Cluster is the site's cluster, a DNS-1123 subdomain: the grid_cluster
	// of its rows, and the name an InferencePoolImport lists it by.
	Cluster string `json:"cluster"`
	// Gateway is the host:port the EPP routes a request for this site to
	// (the site's inference gateway, GIE's parent mode); "" for the local
	// site, whose requests go to the local pool, and for a site known only
	// from an InferencePoolImport, which is not routable until the
	// topology file gives it an address.
	Gateway string `json:"gateway,omitempty"`
	// Models are the models the site serves, sorted; empty means every
	// model (the site serves what the pool serves: an InferencePool is
	// one serving stack, exported under one name).
	Models []string `json:"models,omitempty"`
	// Local is true for the EPP's own site.
	Local bool `json:"local,omitempty"`
	// Exported is true when an InferencePoolImport lists the site's
	// cluster among the clusters exporting the pool.
	Exported bool `json:"exported,omitempty"`
	// Source says where the site comes from: SourceLocal, SourceFile or
	// SourceImport.
	Source string `json:"source"`
}

// Serves reports whether the site serves model: an empty Models list
// serves every model.
func (s *Site) Serves(model string) bool {
	if len(s.Models) == 0 {
		return true
	}
	_, ok := slices.BinarySearch(s.Models, model)
	return ok
}

// Routable reports whether the EPP can send a request to the site: the
// local site always, a remote site when it has a gateway address.
func (s *Site) Routable() bool { return s.Local || s.Gateway != "" }

// Local names the EPP's own site (--site-name, --site-cluster).
type Local struct {
	Site    string
	Cluster string
}

// Validate checks the names; each error names its flag.
func (l Local) Validate() error {
	var errs []string
	if err := signals.ValidateLabel(l.Site); err != nil {
		errs = append(errs, "--site-name: "+err.Error())
	}
	if err := signals.ValidateSubdomain(l.Cluster); err != nil {
		errs = append(errs, "--site-cluster: "+err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// Topology is an immutable set of sites, sorted by name, with the local
// site always among them. Every method is safe for concurrent use.
type Topology struct {
	// Version increases with every topology a Watcher publishes.
	Version uint64
	sites   []Site
	byName  map[string]int
	local   int
}

// Sites returns every site, sorted by name. Read-only.
func (t *Topology) Sites() []Site { return t.sites }

// Len returns the number of sites.
func (t *Topology) Len() int { return len(t.sites) }

// Site returns the site with this name.
func (t *Topology) Site(name string) (*Site, bool) {
	i, ok := t.byName[name]
	if !ok {
		return nil, false
	}
	return &t.sites[i], true
}

// Has reports whether the topology knows the site.
func (t *Topology) Has(site string) bool {
	_, ok := t.byName[site]
	return ok
}

// HasCluster reports whether site is known with this cluster: the rows
// of a (site, cluster) the topology does not hold are refused
// (site_mismatch).
func (t *Topology) HasCluster(site, cluster string) bool {
	i, ok := t.byName[site]
	return ok && t.sites[i].Cluster == cluster
}

// Local returns the local site.
func (t *Topology) Local() *Site { return &t.sites[t.local] }

// Serving returns the sites serving model, in name order.
func (t *Topology) Serving(model string) []*Site {
	var out []*Site
	for i := range t.sites {
		if t.sites[i].Serves(model) {
			out = append(out, &t.sites[i])
		}
	}
	return out
}

// Equal reports whether two topologies hold the same sites (Version
// aside).
func (t *Topology) Equal(o *Topology) bool {
	return slices.EqualFunc(t.sites, o.sites, func(a, b Site) bool {
		return a.Name == b.Name && a.Cluster == b.Cluster && a.Gateway == b.Gateway &&
			slices.Equal(a.Models, b.Models) && a.Local == b.Local && a.Exported == b.Exported && a.Source == b.Source
	})
}

// Build merges what the EPP knows into a topology: the local site, the
// sites of the topology file (file, as Parse returns them), and the
// clusters that export the pool according to InferencePoolImport status
// (exporting, in any order; duplicates count once). A file entry for the
// local site gives it models (and its cluster must match). An exporting
// cluster marks the site of that cluster Exported; a cluster no site has
// becomes a site of its own, named after the cluster, without a gateway
// address, when its name is a DNS-1123 label and there is room (at most
// MaxSites sites); skipped lists the clusters left out, with why.
func Build(local Local, file []Site, exporting []string) (t *Topology, skipped []string) {
	sites := make([]Site, 0, 1+len(file))
	sites = append(sites, Site{Name: local.Site, Cluster: local.Cluster, Local: true, Source: SourceLocal})
	for _, s := range file {
		if s.Name == local.Site {
			sites[0].Models = slices.Clone(s.Models)
			continue
		}
		s.Models = slices.Clone(s.Models)
		s.Local = false
		s.Source = SourceFile
		sites = append(sites, s)
	}
	byCluster := make(map[string]int, len(sites))
	for i := range sites {
		byCluster[sites[i].Cluster] = i
	}
	clusters := slices.Clone(exporting)
	slices.Sort(clusters)
	clusters = slices.Compact(clusters)
	for _, c := range clusters {
		if i, ok := byCluster[c]; ok {
			sites[i].Exported = true
			continue
		}
		switch {
		case signals.ValidateLabel(c) != nil:
			skipped = append(skipped, fmt.Sprintf("cluster %q: not a DNS-1123 label, so it cannot name a site; list it in the topology file with a site name", c))
			continue
		case len(sites) >= MaxSites:
			skipped = append(skipped, fmt.Sprintf("cluster %q: the topology already has %d sites, its limit", c, MaxSites))
			continue
		}
		if j := slices.IndexFunc(sites, func(s Site) bool { return s.Name == c }); j >= 0 {
			skipped = append(skipped, fmt.Sprintf("cluster %q: site %q already exists with cluster %q", c, c, sites[j].Cluster))
			continue
		}
		sites = append(sites, Site{Name: c, Cluster: c, Exported: true, Source: SourceImport})
		byCluster[c] = len(sites) - 1
	}
	slices.SortFunc(sites, func(a, b Site) int { return cmp.Compare(a.Name, b.Name) })
	t = &Topology{sites: sites, byName: make(map[string]int, len(sites))}
	for i := range sites {
		t.byName[sites[i].Name] = i
		if sites[i].Local {
			t.local = i
		}
	}
	return t, skipped
}

// FieldError is one invalid field of a topology file, with its path
// (`sites[2].gateway`); the path is empty for problems of the whole file.
type FieldError = fielderr.FieldError

// ValidationError lists every problem of a topology file; its message
// starts with "invalid site topology: ".
type ValidationError = fielderr.ValidationError[subject]

type subject struct{}

// Subject implements fielderr.Subject.
func (subject) Subject() string { return "site topology" }

type errorList = fielderr.List[subject]

// CanonicalGateway checks a gateway address (ip:port, IPv6 in brackets)
// and returns it in canonical form, the IP address as netip formats it.
// A host name is refused: the data plane routes a forwarded request to
// a literal address (ORIGINAL_DST-like, pkg/gateway) and the health
// prober dials one, so a site named by a host name could never take a
// request. Resolve names when the topology file is written.
func CanonicalGateway(hp string) (string, error) {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return "", fmt.Errorf("%q is not ip:port (write IPv6 addresses in brackets, [::1]:443)", hp)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 || strconv.Itoa(p) != port {
		return "", fmt.Errorf("%q: the port must be 1..65535", hp)
	}
	if host == "" {
		return "", fmt.Errorf("%q has no host", hp)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		if strings.Trim(host, "0123456789.") == "" {
			return "", fmt.Errorf("%q: the host is not a valid IPv4 address", hp)
		}
		return "", fmt.Errorf("%q: the host must be an IP address: the data plane does not resolve names", hp)
	}
	if ip.Zone() != "" {
		return "", fmt.Errorf("%q: an IPv6 zone is not allowed", hp)
	}
	return net.JoinHostPort(ip.String(), port), nil
}

// checkModel reports what is wrong with a model name, or "".
func checkModel(m string) string {
	switch {
	case m == "":
		return "must not be empty"
	case len(m) > MaxModelNameBytes:
		return fmt.Sprintf("must be at most %d bytes, got %d", MaxModelNameBytes, len(m))
	case strings.ContainsFunc(m, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return fmt.Sprintf("%q: must not contain spaces or control characters", m)
	}
	return ""
}
