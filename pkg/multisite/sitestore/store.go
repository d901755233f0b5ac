package sitestore

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology"
)

// MaxProvidersPerSite bounds the providers the store keeps for one site
// (the relay's and the parser's bound too).
const MaxProvidersPerSite = signals.DefaultMaxProvidersPerSite

// MaxAge is how long a provider the relay stops sending is kept: one
// whose newest row is older than the latest Date minus MaxAge is dropped
// (a row that old would be refused as skew anyway).
const MaxAge = signals.MaxAge

// Reading is one series' latest row: its value and the stamp the relay
// gave it (the time it read the value, on the relay's clock). A zero
// Stamp means no row has been received.
type Reading struct {
	Value float64
	Stamp time.Time
}

// Known reports whether a row has been received.
func (r Reading) Known() bool { return !r.Stamp.IsZero() }

// Provider is the latest state of one provider (an InferencePool and its
// EPP) of a site: one entry per (site, cluster, provider), whose
// Generation scopes learning (G-06, G-12).
type Provider struct {
	// Cluster and Name are the grid_cluster and grid_provider.
	Cluster, Name string
	// Generation is grid_provider_config_generation (an integer); not
	// Known means the relay sends no generation row, and learning stays
	// disabled for the provider (fresh pressure is still usable).
	Generation Reading
	// GenerationSince is the stamp of the first row of the current
	// generation: a new generation clears the readings stamped before it.
	GenerationSince time.Time
	// PublishesLoad is grid_provider_publishes_load (0 or 1, G-47) as the
	// last ingest carried it; not Known when that ingest did not.
	PublishesLoad Reading
	// The EPP's pool gauges (G-05), read by the relay at one instant.
	Running, Queue, Ready, FlowControl, KVCache Reading
	// Stamp is the provider's load freshness: the newest stamp among its
	// pool load readings (Running, Queue, Ready, FlowControl, KVCache)
	// only; zero while none is held. The publishes_load row (stamped at
	// every relay response) and the generation row never advance it, so a
	// provider whose load rows stopped does not look fresh; nor does a
	// Ready reading of 0 (the row the relay sends alone when a failing
	// scrape's readiness is no longer kept, G-08, while the other
	// readings stay old): a provider with no ready endpoint has no load
	// to be fresh about.
	Stamp time.Time
	// LastHeard is the newest stamp among all the provider's rows (load,
	// generation, publishes_load): when the relay last mentioned it. The
	// store drops a provider whose LastHeard is older than MaxAge; it says
	// nothing about the freshness of the load.
	LastHeard time.Time
}

// loadReadings returns the pool load readings, the ones Stamp follows.
func (p *Provider) loadReadings() [5]*Reading {
	return [5]*Reading{&p.Running, &p.Queue, &p.Ready, &p.FlowControl, &p.KVCache}
}

// PublishesLoadKnown reports whether the provider says it publishes load
// (a 1 row in the last ingest); a provider without the row does not (it
// is unmeasured).
func (p *Provider) PublishesLoadKnown() bool {
	return p.PublishesLoad.Known() && p.PublishesLoad.Value == 1
}

// GenerationValue returns the generation as an integer, and whether it
// is known.
func (p *Provider) GenerationValue() (uint64, bool) {
	if !p.Generation.Known() {
		return 0, false
	}
	return uint64(p.Generation.Value), true
}

// Site is the latest state of one site of the topology.
type Site struct {
	// Name and Cluster are the site's, from the topology.
	Name, Cluster string
	// Local is true for the EPP's own site, judged at the EPP's last read
	// of its relay (Snapshot.ReadAt, Snapshot.Date), not by poll rounds.
	Local bool
	// RoundEnd is the value of grid_peer_poll_round_end_timestamp_seconds:
	// the end of the relay's last poll round that tried this peer, on the
	// relay's clock; the clock a peer is judged by (G-41). RoundEndStamp is
	// that row's stamp.
	RoundEnd, RoundEndStamp time.Time
	// Rounds is grid_peer_poll_rounds_total; RoundsKnown is false while
	// the relay reports no poll rounds for the peer, which is then not
	// judged (G-42).
	Rounds      uint64
	RoundsKnown bool
	// Providers are the site's providers, sorted by name (at most
	// MaxProvidersPerSite).
	Providers []Provider
	// Stamp is the newest stamp among the site's rows.
	Stamp time.Time
}

// Provider returns the provider with this name.
func (s *Site) Provider(name string) (*Provider, bool) {
	i, ok := slices.BinarySearchFunc(s.Providers, name, func(p Provider, n string) int { return cmp.Compare(p.Name, n) })
	if !ok {
		return nil, false
	}
	return &s.Providers[i], true
}

// Snapshot is an immutable view of the store. Every method is safe for
// concurrent use and allocates nothing; returned slices are read-only.
type Snapshot struct {
	// Version increases with every published snapshot.
	Version uint64
	// TopologyVersion is the version of the topology the sites follow.
	TopologyVersion uint64
	// ReadAt is when the EPP last read its relay successfully, on the
	// EPP's clock (with its monotonic reading): the judgement clock of
	// the local site (G-41); zero before the first success.
	ReadAt time.Time
	// Date is that response's Date header, on the relay's clock, to
	// compare with the relay's stamps.
	Date time.Time
	// Ingests counts the successful reads ingested.
	Ingests uint64

	sites  []Site
	byName map[string]int
}

// Sites returns every site of the topology, sorted by name. Read-only.
func (sn *Snapshot) Sites() []Site { return sn.sites }

// Site returns the site with this name.
func (sn *Snapshot) Site(name string) (*Site, bool) {
	i, ok := sn.byName[name]
	if !ok {
		return nil, false
	}
	return &sn.sites[i], true
}

// IngestResult is what Ingest refused, beyond what the parser refused.
type IngestResult struct {
	// SiteMismatch counts rows of a site the topology does not hold, or
	// of a provider whose cluster is not the site's.
	SiteMismatch int
	// Cap counts rows of providers beyond MaxProvidersPerSite.
	Cap int
	// Expired counts providers dropped for being older than MaxAge.
	Expired int
}

// Store holds the latest rows of every site of the topology and publishes
// them as immutable Snapshots by atomic swap: the request path reads
// Snapshot (one atomic load, no lock). Ingest and SetTopology, called by
// the poller and the topology watcher, serialize on a mutex.
type Store struct {
	snap atomic.Pointer[Snapshot]

	mu      sync.Mutex
	top     *topology.Topology
	sites   map[string]*siteState
	version uint64
	readAt  time.Time
	date    time.Time
	ingests uint64
}

type siteState struct {
	name, cluster string
	local         bool
	roundEnd      Reading // Value: the round end in Unix seconds
	rounds        Reading
	providers     map[string]*Provider
	// pub is the site as last published; nil after a change.
	pub *Site
}

// New returns a store for the sites of top (which must not be nil).
func New(top *topology.Topology) *Store {
	s := &Store{sites: map[string]*siteState{}}
	s.mu.Lock()
	s.setTopologyLocked(top)
	s.publishLocked()
	s.mu.Unlock()
	return s
}

// Snapshot returns the current snapshot: one atomic load; never nil.
func (s *Store) Snapshot() *Snapshot { return s.snap.Load() }

// SetTopology follows a new topology: sites that left it are dropped with
// their rows, new sites start empty, and a site whose cluster changed
// keeps only its peer-round rows.
func (s *Store) SetTopology(top *topology.Topology) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setTopologyLocked(top)
	s.publishLocked()
}

func (s *Store) setTopologyLocked(top *topology.Topology) {
	s.top = top
	keep := make(map[string]bool, top.Len())
	for _, ts := range top.Sites() {
		keep[ts.Name] = true
		st := s.sites[ts.Name]
		if st == nil {
			s.sites[ts.Name] = &siteState{name: ts.Name, cluster: ts.Cluster, local: ts.Local, providers: map[string]*Provider{}}
			continue
		}
		if st.cluster != ts.Cluster {
			st.cluster = ts.Cluster
			clear(st.providers)
		}
		st.local = ts.Local
		st.pub = nil
	}
	for name := range s.sites {
		if !keep[name] {
			delete(s.sites, name)
		}
	}
}

// Ingest merges the rows of one successful read of the relay (as
// signals.Parse accepted them, in body order), whose Date header was date,
// read at readAt on the EPP's clock, and publishes a new snapshot. A row
// replaces the reading of its series when its stamp is not older; a
// grid_provider_config_generation row with a new value starts a new
// generation and clears the provider's readings stamped before it. The
// read is the relay's whole view: a provider whose
// grid_provider_publishes_load row it does not carry has PublishesLoad
// reset to unknown (unmeasured, G-47..G-49). Rows
// of sites (or clusters) the topology does not hold, and of providers
// beyond MaxProvidersPerSite, are refused and counted.
func (s *Store) Ingest(samples []signals.Sample, date, readAt time.Time) IngestResult {
	var res IngestResult
	s.mu.Lock()
	defer s.mu.Unlock()
	var (
		last     *siteState
		lastProv *Provider
		// The providers whose publishes_load row this ingest carries.
		says = map[*Provider]struct{}{}
	)
	for i := range samples {
		sm := &samples[i]
		st := last
		if st == nil || st.name != sm.Site {
			st = s.sites[sm.Site]
			last, lastProv = st, nil
		}
		if st == nil {
			res.SiteMismatch++
			continue
		}
		if sm.Provider == "" {
			switch sm.Name {
			case signals.NamePeerRoundEnd:
				if merge(&st.roundEnd, sm) {
					st.pub = nil
				}
			case signals.NamePeerRounds:
				if merge(&st.rounds, sm) {
					st.pub = nil
				}
			}
			continue
		}
		if sm.Cluster != st.cluster {
			res.SiteMismatch++
			continue
		}
		p := lastProv
		if p == nil || p.Name != sm.Provider {
			p = st.providers[sm.Provider]
			if p == nil {
				if len(st.providers) >= MaxProvidersPerSite {
					res.Cap++
					continue
				}
				p = &Provider{Cluster: st.cluster, Name: sm.Provider}
				st.providers[sm.Provider] = p
				st.pub = nil
			}
			lastProv = p
		}
		if sm.Name == signals.NamePublishesLoad {
			says[p] = struct{}{}
		}
		if apply(p, sm) {
			st.pub = nil
		}
	}
	s.forgetPublishesLoadLocked(says)
	res.Expired = s.expireLocked(date)
	s.readAt, s.date = readAt, date
	s.ingests++
	s.publishLocked()
	return res
}

// merge sets r from the row unless r holds a newer one, and reports
// whether r changed.
func merge(r *Reading, sm *signals.Sample) bool {
	if sm.Stamp.Before(r.Stamp) {
		return false
	}
	changed := r.Value != sm.Value || !r.Stamp.Equal(sm.Stamp)
	r.Value, r.Stamp = sm.Value, sm.Stamp
	return changed
}

// apply merges one provider row and reports whether the provider changed.
func apply(p *Provider, sm *signals.Sample) bool {
	var r *Reading
	load := false
	switch sm.Name {
	case signals.NameConfigGeneration:
		if sm.Stamp.Before(p.Generation.Stamp) {
			return false
		}
		switch {
		case !p.Generation.Known():
			p.GenerationSince = sm.Stamp
		case p.Generation.Value != sm.Value:
			// A new revision: what was read before it belongs to the old
			// one.
			for _, x := range p.loadReadings() {
				if x.Stamp.Before(sm.Stamp) {
					*x = Reading{}
				}
			}
			if p.PublishesLoad.Stamp.Before(sm.Stamp) {
				p.PublishesLoad = Reading{}
			}
			p.GenerationSince = sm.Stamp
			p.Stamp = p.loadStamp()
		}
		changed := p.Generation.Value != sm.Value || !p.Generation.Stamp.Equal(sm.Stamp)
		p.Generation = Reading{Value: sm.Value, Stamp: sm.Stamp}
		p.heard(sm.Stamp)
		return changed
	case signals.NamePublishesLoad:
		r = &p.PublishesLoad
	case signals.NameAverageRunning:
		r, load = &p.Running, true
	case signals.NameAverageQueue:
		r, load = &p.Queue, true
	case signals.NameReadyEndpoints:
		r, load = &p.Ready, true
	case signals.NameFlowControlQueue:
		r, load = &p.FlowControl, true
	case signals.NameAverageKVCache:
		r, load = &p.KVCache, true
	default:
		return false
	}
	if p.Generation.Known() && sm.Stamp.Before(p.GenerationSince) {
		return false // a row of an older generation
	}
	if !merge(r, sm) {
		return false
	}
	if load {
		p.Stamp = p.loadStamp()
	}
	p.heard(sm.Stamp)
	return true
}

// loadStamp returns the newest stamp among the pool load readings, a
// Ready reading of 0 excepted: the relay sends that row alone when it no
// longer keeps a failing scrape's readiness (G-08), stamped later than
// the load it says nothing about.
func (p *Provider) loadStamp() time.Time {
	var t time.Time
	for _, x := range p.loadReadings() {
		if x == &p.Ready && x.Value == 0 {
			continue
		}
		if x.Stamp.After(t) {
			t = x.Stamp
		}
	}
	return t
}

// heard advances LastHeard to stamp.
func (p *Provider) heard(stamp time.Time) {
	if stamp.After(p.LastHeard) {
		p.LastHeard = stamp
	}
}

// forgetPublishesLoadLocked resets PublishesLoad to unknown for every
// provider whose publishes_load row the ingest did not carry: each read
// of the relay is its whole view, and a relay that no longer states a
// provider's row (one restarted during a partition that has not heard
// from the peer since, G-49) makes it unmeasured (G-47, G-48). The
// provider's other readings stay, and it is dropped by the MaxAge rule
// like any provider the relay stopped sending.
func (s *Store) forgetPublishesLoadLocked(says map[*Provider]struct{}) {
	for _, st := range s.sites {
		for _, p := range st.providers {
			if _, ok := says[p]; ok || !p.PublishesLoad.Known() {
				continue
			}
			p.PublishesLoad = Reading{}
			st.pub = nil
		}
	}
}

// expireLocked drops the providers whose newest row (LastHeard) is older
// than date minus MaxAge.
func (s *Store) expireLocked(date time.Time) int {
	if date.IsZero() {
		return 0
	}
	cutoff := date.Add(-MaxAge)
	n := 0
	for _, st := range s.sites {
		for name, p := range st.providers {
			if p.LastHeard.Before(cutoff) {
				delete(st.providers, name)
				st.pub = nil
				n++
			}
		}
	}
	return n
}

// publishLocked builds and publishes a snapshot; sites that did not
// change since the last one are shared with it.
func (s *Store) publishLocked() {
	s.version++
	sites := s.top.Sites()
	sn := &Snapshot{
		Version:         s.version,
		TopologyVersion: s.top.Version,
		ReadAt:          s.readAt,
		Date:            s.date,
		Ingests:         s.ingests,
		sites:           make([]Site, len(sites)),
		byName:          make(map[string]int, len(sites)),
	}
	for i := range sites {
		st := s.sites[sites[i].Name]
		if st.pub == nil {
			st.pub = st.build()
		}
		sn.sites[i] = *st.pub
		sn.byName[st.name] = i
	}
	s.snap.Store(sn)
}

func (st *siteState) build() *Site {
	out := &Site{Name: st.name, Cluster: st.cluster, Local: st.local, Providers: make([]Provider, 0, len(st.providers))}
	if st.roundEnd.Known() {
		sec, frac := math.Modf(st.roundEnd.Value)
		out.RoundEnd = time.Unix(int64(sec), int64(frac*1e9)).Round(time.Millisecond)
		out.RoundEndStamp = st.roundEnd.Stamp
		out.Stamp = st.roundEnd.Stamp
	}
	if st.rounds.Known() {
		out.Rounds, out.RoundsKnown = uint64(st.rounds.Value), true
		if st.rounds.Stamp.After(out.Stamp) {
			out.Stamp = st.rounds.Stamp
		}
	}
	for _, p := range st.providers {
		out.Providers = append(out.Providers, *p)
		if p.LastHeard.After(out.Stamp) {
			out.Stamp = p.LastHeard
		}
	}
	slices.SortFunc(out.Providers, func(a, b Provider) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
