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
}

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
// published, in name order. If endpoints exist but none is fresh, it
// returns All (fail-open: a pool whose metrics all fail still serves) and
// FailOpen reports true. While scraping is disabled every endpoint is
// ready. Read-only.
func (sn *Snapshot) Ready() []*scheduling.Endpoint { return sn.ready }

// FailOpen reports whether Ready returns every endpoint because none had
// fresh metrics.
func (sn *Snapshot) FailOpen() bool { return sn.failOpen }

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
