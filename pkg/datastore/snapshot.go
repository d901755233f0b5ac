package datastore

import (
	"cmp"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Snapshot is an immutable view of the store at one point in time. Every
// method is safe for concurrent use, allocates nothing on the common path
// and returns slices that callers must not modify.
type Snapshot struct {
	// Version increases with every published snapshot.
	Version uint64
	// Synced reports whether an endpoint source has loaded the pool.
	Synced bool
	// PublishedAt is when the snapshot was built; freshness is judged as of
	// this time.
	PublishedAt time.Time

	idx        *index
	all        []*scheduling.Endpoint // by name
	ready      []*scheduling.Endpoint
	byIP       []*scheduling.Endpoint // by address, then port
	stale      []bool                 // parallel to all
	staleCount int
	// loadUnknownCount counts the endpoints whose last scrape left their
	// load unknown (ScrapeStatus.LoadUnknown); they are among the stale.
	loadUnknownCount int
	failOpen         bool

	// rotation is parallel to all: why an endpoint is not in routable
	// (rotIn when it is fresh and eligible).
	rotation         []rotation
	routable         []*scheduling.Endpoint
	routableFailOpen bool
	// routableSkipsLoadUnknown: failing open, Routable left out the
	// eligible endpoints whose load is unknown (rotStaleLoadUnknown)
	// because others' load was readable.
	routableSkipsLoadUnknown bool
	ineligibleCount          int
}

// rotation is an endpoint's place in the rotation at publish.
type rotation uint8

const (
	rotIn          rotation = iota // eligible and fresh
	rotStale                       // eligible, metrics not fresh
	rotUnhealthy                   // the active health check failed it
	rotBreakerOpen                 // its circuit breaker is open
	// eligible, metrics not fresh and its last scrape left the load
	// unknown: routable only when failing open and every other stale
	// eligible endpoint's load is unknown too
	rotStaleLoadUnknown
)

// Reasons OutOfRotation gives (a closed set, used as label values and on
// /debug/endpoints).
const (
	// OutUnhealthy: the active health check took the endpoint out
	// (scheduling.IneligibleUnhealthy).
	OutUnhealthy = scheduling.IneligibleUnhealthy
	// OutBreakerOpen: the endpoint's circuit breaker is open
	// (scheduling.IneligibleBreakerOpen).
	OutBreakerOpen = scheduling.IneligibleBreakerOpen
	// OutStale: eligible, but its metrics are not fresh while another
	// eligible endpoint's are; or, when none is fresh, its last scrape
	// left its load unknown while another eligible endpoint's load is
	// readable (ScrapeStatus.LoadUnknown).
	OutStale = "stale"
	// OutNotInPool: the snapshot does not hold the endpoint.
	OutNotInPool = "not_in_pool"
)

// index holds lookups that depend only on the endpoint set, shared by the
// snapshots published while the set does not change.
type index struct {
	byKey      map[string]int // keys and names → position in all
	byHostPort map[string]int
	ipPerm     []int // positions in all, ordered by address then port
	ipRange    map[string][2]int
}

func buildIndex(order []*entry) *index {
	n := len(order)
	idx := &index{
		byKey:      make(map[string]int, n),
		byHostPort: make(map[string]int, n),
		ipPerm:     make([]int, n),
		ipRange:    make(map[string][2]int, n),
	}
	for i, e := range order {
		idx.byKey[e.spec.Name] = i
		idx.byKey[e.key] = i
		idx.byHostPort[e.hostPort] = i
		idx.ipPerm[i] = i
	}
	slices.SortFunc(idx.ipPerm, func(a, b int) int {
		if c := cmp.Compare(order[a].spec.Address, order[b].spec.Address); c != 0 {
			return c
		}
		return cmp.Compare(order[a].spec.Port, order[b].spec.Port)
	})
	for lo := 0; lo < n; {
		addr := order[idx.ipPerm[lo]].spec.Address
		hi := lo + 1
		for hi < n && order[idx.ipPerm[hi]].spec.Address == addr {
			hi++
		}
		idx.ipRange[addr] = [2]int{lo, hi}
		lo = hi
	}
	return idx
}

// All returns every endpoint, sorted by name. Read-only.
func (sn *Snapshot) All() []*scheduling.Endpoint { return sn.all }

// Ready returns the endpoints whose metrics were fresh when the snapshot was
// published, in name order; an endpoint that is not scraped
// (EndpointSpec.NoScrape) is always fresh. If scraped endpoints exist but
// none of them is fresh, it fails open (FailOpen reports true: a pool
// whose metrics all fail still serves): every endpoint, but for those
// whose last scrape left their load unknown while another scraped one's
// is readable (their last metrics would make them look idle). While
// scraping is disabled every endpoint is ready. Read-only.
func (sn *Snapshot) Ready() []*scheduling.Endpoint { return sn.ready }

// FailOpen reports whether Ready holds endpoints with stale metrics
// because no scraped endpoint had fresh ones (see Ready).
func (sn *Snapshot) FailOpen() bool { return sn.failOpen }

// Routable returns the endpoints requests may go to, in name order: those
// eligible when the snapshot was published (scheduling.EndpointHealth.
// Eligible: not failed by the active health check, circuit breaker not
// open) whose metrics were fresh (an endpoint that is not scraped always
// is). If some scraped endpoint is eligible but none of the eligible
// scraped ones is fresh, it returns every eligible endpoint (fail-open on
// freshness, RoutableFailOpen reports it; the unscraped ones stay
// beside them), leaving out, as Ready does, those whose last scrape left
// their load unknown unless every eligible scraped endpoint's load is
// unknown (their last metrics would make them look idle; OutOfRotation
// reports them OutStale). Fail-open never re-admits an ineligible
// endpoint: if none is eligible, nothing is routable and Routable is
// empty. The request path reads this slice; it is computed once per
// publish. Read-only.
func (sn *Snapshot) Routable() []*scheduling.Endpoint { return sn.routable }

// RoutableFailOpen reports whether Routable holds eligible endpoints with
// stale metrics because no eligible scraped endpoint had fresh ones (it
// may then leave out the load-unknown ones, see Routable).
func (sn *Snapshot) RoutableFailOpen() bool { return sn.routableFailOpen }

// IneligibleCount returns the number of endpoints out of rotation for
// health (OutUnhealthy) or an open breaker (OutBreakerOpen) when the
// snapshot was published.
func (sn *Snapshot) IneligibleCount() int { return sn.ineligibleCount }

// OutOfRotation reports why e is not in Routable (OutUnhealthy,
// OutBreakerOpen, OutStale, or OutNotInPool for an endpoint the snapshot
// does not hold), or "" when it is routable. Endpoints are matched by
// key, as Stale matches them.
func (sn *Snapshot) OutOfRotation(e *scheduling.Endpoint) string {
	if e == nil || sn.idx == nil {
		return OutNotInPool
	}
	i, ok := sn.idx.byKey[e.Key()]
	if !ok {
		return OutNotInPool
	}
	switch sn.rotation[i] {
	case rotUnhealthy:
		return OutUnhealthy
	case rotBreakerOpen:
		return OutBreakerOpen
	case rotStale:
		if sn.routableFailOpen {
			return ""
		}
		return OutStale
	case rotStaleLoadUnknown:
		if sn.routableFailOpen && !sn.routableSkipsLoadUnknown {
			return ""
		}
		return OutStale
	}
	return ""
}

// Len returns the number of endpoints.
func (sn *Snapshot) Len() int { return len(sn.all) }

// StaleCount returns the number of endpoints whose metrics were not fresh
// when the snapshot was published.
func (sn *Snapshot) StaleCount() int { return sn.staleCount }

// LoadUnknownCount returns the number of endpoints whose last scrape read
// their metrics but left their load unknown (a load metric NaN, ±Inf,
// negative or absent; see ScrapeResult.LoadUnknown). They are counted in
// StaleCount too.
func (sn *Snapshot) LoadUnknownCount() int { return sn.loadUnknownCount }

// Lookup returns the endpoint with this key (Endpoint.Key()) or name.
func (sn *Snapshot) Lookup(key string) (*scheduling.Endpoint, bool) {
	if sn.idx == nil {
		return nil, false
	}
	i, ok := sn.idx.byKey[key]
	if !ok {
		return nil, false
	}
	return sn.all[i], true
}

// ByHostPort returns the endpoint serving at host:port, as the gateway
// writes it ("127.0.0.1:8000", "[::1]:8000"). Non-canonical IP spellings
// are accepted too (at the cost of an allocation).
func (sn *Snapshot) ByHostPort(hp string) (*scheduling.Endpoint, bool) {
	if sn.idx == nil {
		return nil, false
	}
	if i, ok := sn.idx.byHostPort[hp]; ok {
		return sn.all[i], true
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return nil, false
	}
	addr, ok := canonicalAddress(host)
	p, perr := strconv.Atoi(port)
	if !ok || perr != nil {
		return nil, false
	}
	if i, ok := sn.idx.byHostPort[net.JoinHostPort(addr, strconv.Itoa(p))]; ok {
		return sn.all[i], true
	}
	return nil, false
}

// ByIP returns the endpoints at an address (all ports, e.g. the ranks of a
// data-parallel pod), ordered by port; nil if there is none. Read-only.
func (sn *Snapshot) ByIP(ip string) []*scheduling.Endpoint {
	if sn.idx == nil {
		return nil
	}
	r, ok := sn.idx.ipRange[ip]
	if !ok {
		c, valid := canonicalIP(ip)
		if !valid {
			return nil
		}
		if r, ok = sn.idx.ipRange[c]; !ok {
			return nil
		}
	}
	return sn.byIP[r[0]:r[1]:r[1]]
}

// canonicalIP returns the canonical form of an IP address or host name,
// accepting brackets around IPv6 addresses.
func canonicalIP(s string) (string, bool) {
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if ip, err := netip.ParseAddr(s); err == nil {
		return ip.String(), true
	}
	return canonicalAddress(s)
}

// Stale reports whether e's metrics were not fresh when the snapshot was
// published (never scraped, last scrape failed or left the load unknown,
// or last success older than the staleness threshold). An endpoint the snapshot does not hold is
// stale. Endpoints are matched by key, so an endpoint from an older
// snapshot gets this snapshot's answer.
func (sn *Snapshot) Stale(e *scheduling.Endpoint) bool {
	if e == nil || sn.idx == nil {
		return true
	}
	i, ok := sn.idx.byKey[e.Key()]
	if !ok {
		return true
	}
	return sn.stale[i]
}
