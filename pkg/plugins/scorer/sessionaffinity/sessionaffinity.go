// Package sessionaffinity implements llm-d's session-affinity-scorer, which
// sends the requests of one session to the endpoint that served the
// session before. It is a soft preference: the session's endpoint scores 1,
// every other endpoint 0, and other scorers may outweigh it.
//
// Two strategies are supported, as in llm-d:
//
//   - encoded_endpoint_header (default, stateless): the request header
//     x-session-token carries base64("namespace/name") of the endpoint that
//     served the session; that endpoint scores 1. When the response headers
//     arrive, the scorer sets the same header on the response
//     (Response.Headers) to the endpoint that served this request, so the
//     client can echo it back. The server copies the response header
//     mutations that hooks make into the ext_proc header response.
//   - session_id (stateful): the client sends an opaque session identifier
//     (header x-session-id by default). The scorer keeps a server-side map
//     from identifier to the endpoint picked for it, refreshed on every
//     request of the session and forgotten after evictionTtlSeconds unused.
//     An unknown session expresses no preference (all endpoints score 0);
//     the binding is made in PreRequest, after the pick. Nothing is written
//     to the response.
//
// With profileName set (e.g. "prefill" in prefill/decode disaggregation)
// the session is tied to the endpoint picked by that profile instead of the
// primary one; configure one instance per profile, each with its own
// header.
//
// # Parameters
//
// Both llm-d parameter spellings are accepted: the flat headerName,
// evictionTtlSeconds and evictionSweepSeconds, and the nested
// encodedEndpointHeaderConfig.header and sessionIdConfig (sources,
// evictionTtlSeconds, evictionSweepSeconds). A sessionIdConfig source is a
// request header or a request attribute: a string that an upstream data
// producer stored on the request under a StateKey of that name.
//
// # Session map
//
// The session_id map is split into shards with a lock each, so requests of
// different sessions rarely contend. It is keyed by a 128-bit keyed hash of
// the session identifier (two 64-bit maphash values with random seeds), not
// by the identifier itself, so an entry's size does not depend on the
// identifier's length: a client sending long identifiers cannot make the
// map hold more than a fixed number of bytes per session. Two identifiers
// of one picker colliding is about as likely as n²/2¹²⁹ for n sessions, and
// would only give one a soft preference for the other's endpoint.
//
// Expired bindings are ignored when read and dropped lazily: a write to a
// shard sweeps it when evictionSweepSeconds have passed since its last
// sweep. No goroutine is started. The map holds at most MaxSessions
// bindings; a write to a full shard first drops its expired bindings, then
// an arbitrary one.
package sessionaffinity

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "session-affinity-scorer"

// Strategies.
const (
	StrategyEncodedEndpointHeader = "encoded_endpoint_header"
	StrategySessionID             = "session_id"
)

// Default header names of the two strategies.
const (
	DefaultTokenHeader     = "x-session-token"
	DefaultSessionIDHeader = "x-session-id"
)

// MaxSessions bounds the number of session_id bindings one instance keeps.
const MaxSessions = 1 << 20

const (
	shardCount     = 64
	maxPerShard    = MaxSessions / shardCount
	maxTokenLength = 4096 // longer session tokens are ignored
)

// Params is the scorer's parameters.
type Params struct {
	// Strategy selects how sessions are recognised: "encoded_endpoint_header"
	// (default; the client echoes a header naming its endpoint) or
	// "session_id" (the client sends an opaque session identifier and the
	// scorer remembers its endpoint).
	Strategy string `json:"strategy"`
	// ProfileName ties the session to the endpoint picked by this
	// scheduling profile (e.g. "prefill"). Empty (default): the primary
	// profile.
	ProfileName string `json:"profileName"`
	// HeaderName is the request header carrying the session. Default
	// "x-session-token" for encoded_endpoint_header (also the response
	// header written) and "x-session-id" for session_id. Case-insensitive.
	HeaderName string `json:"headerName"`
	// EvictionTTLSeconds is how long a session_id binding survives unused.
	// Default 300; must be >= 0, 0 keeps bindings until the map is full.
	EvictionTTLSeconds float64 `json:"evictionTtlSeconds"`
	// EvictionSweepSeconds is the least time between two sweeps of expired
	// session_id bindings. Default 10; must be > 0.
	EvictionSweepSeconds float64 `json:"evictionSweepSeconds"`
	// EncodedEndpointHeaderConfig is llm-d's nested form of headerName for
	// encoded_endpoint_header.
	EncodedEndpointHeaderConfig *EncodedEndpointHeaderConfig `json:"encodedEndpointHeaderConfig,omitempty"`
	// SessionIDConfig is llm-d's nested configuration of session_id; its
	// values take precedence over the flat keys.
	SessionIDConfig *SessionIDConfig `json:"sessionIdConfig,omitempty"`
}

// EncodedEndpointHeaderConfig configures the encoded_endpoint_header
// strategy.
type EncodedEndpointHeaderConfig struct {
	// Header is the request and response header carrying the encoded
	// endpoint. Default "x-session-token".
	Header string `json:"header"`
}

// SessionIDConfig configures the session_id strategy.
type SessionIDConfig struct {
	// Sources are where the session identifier is read from, in order; the
	// first non-empty one wins. Default: the header "x-session-id".
	Sources []SessionIDSource `json:"sources,omitempty"`
	// EvictionTTLSeconds overrides the flat evictionTtlSeconds.
	EvictionTTLSeconds *float64 `json:"evictionTtlSeconds,omitempty"`
	// EvictionSweepSeconds overrides the flat evictionSweepSeconds.
	EvictionSweepSeconds *float64 `json:"evictionSweepSeconds,omitempty"`
}

// SessionIDSource is one place a session identifier is read from. Exactly
// one field must be set.
type SessionIDSource struct {
	// Header is a request header name.
	Header string `json:"header,omitempty"`
	// Attribute is the name of a string an upstream data producer stores
	// on the request.
	Attribute string `json:"attribute,omitempty"`
}

// DefaultParams returns llm-d's defaults.
func DefaultParams() Params {
	return Params{
		Strategy:             StrategyEncodedEndpointHeader,
		EvictionTTLSeconds:   300,
		EvictionSweepSeconds: 10,
	}
}

// Validate reports every invalid parameter.
func (p *Params) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch p.Strategy {
	case StrategyEncodedEndpointHeader, StrategySessionID:
	default:
		add("strategy: must be %q or %q, got %q", StrategyEncodedEndpointHeader, StrategySessionID, p.Strategy)
	}
	if p.HeaderName != "" && !validHeader(p.HeaderName) {
		add("headerName: %q is not a valid HTTP header name", p.HeaderName)
	}
	checkTTL := func(field string, v float64) {
		if !(v >= 0) || math.IsInf(v, 0) {
			add("%s: must be a finite number >= 0, got %v", field, v)
		}
	}
	checkSweep := func(field string, v float64) {
		if !(v > 0) || math.IsInf(v, 0) {
			add("%s: must be a finite number > 0, got %v", field, v)
		}
	}
	checkTTL("evictionTtlSeconds", p.EvictionTTLSeconds)
	checkSweep("evictionSweepSeconds", p.EvictionSweepSeconds)
	if c := p.EncodedEndpointHeaderConfig; c != nil && c.Header != "" {
		if !validHeader(c.Header) {
			add("encodedEndpointHeaderConfig.header: %q is not a valid HTTP header name", c.Header)
		}
		if p.HeaderName != "" && !strings.EqualFold(p.HeaderName, c.Header) {
			add("encodedEndpointHeaderConfig.header: %q conflicts with headerName %q; set one", c.Header, p.HeaderName)
		}
	}
	if c := p.SessionIDConfig; c != nil {
		if len(c.Sources) > 0 && p.HeaderName != "" && p.Strategy == StrategySessionID {
			add("sessionIdConfig.sources: cannot be combined with headerName; set one")
		}
		for i, src := range c.Sources {
			field := fmt.Sprintf("sessionIdConfig.sources[%d]", i)
			switch {
			case (src.Header == "") == (src.Attribute == ""):
				add("%s: set exactly one of header and attribute", field)
			case src.Header != "" && !validHeader(src.Header):
				add("%s.header: %q is not a valid HTTP header name", field, src.Header)
			}
		}
		if c.EvictionTTLSeconds != nil {
			checkTTL("sessionIdConfig.evictionTtlSeconds", *c.EvictionTTLSeconds)
		}
		if c.EvictionSweepSeconds != nil {
			checkSweep("sessionIdConfig.evictionSweepSeconds", *c.EvictionSweepSeconds)
		}
	}
	return errors.Join(errs...)
}

// validHeader reports whether s is an HTTP header field name (an RFC 9110
// token).
func validHeader(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// source is a resolved session identifier source.
type source struct {
	header string
	attr   scheduling.StateKey[string]
	isAttr bool
}

// Scorer is the session affinity scorer. It is safe for concurrent use.
type Scorer struct {
	typedName   scheduling.TypedName
	sessionID   bool
	profileName string
	header      string   // encoded_endpoint_header: request and response header
	sources     []source // session_id
	picked      scheduling.StateKey[*scheduling.Endpoint]
	store       *store // session_id
}

// New returns a session affinity scorer named name.
func New(name string, p Params, _ scheduling.Handle) (*Scorer, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if name == "" {
		name = Type
	}
	s := &Scorer{
		typedName:   scheduling.TypedName{Type: Type, Name: name},
		sessionID:   p.Strategy == StrategySessionID,
		profileName: p.ProfileName,
		picked:      scheduling.NewStateKey[*scheduling.Endpoint](Type + "/" + name + "/picked"),
	}
	if !s.sessionID {
		s.header = DefaultTokenHeader
		if p.HeaderName != "" {
			s.header = strings.ToLower(p.HeaderName)
		}
		if c := p.EncodedEndpointHeaderConfig; c != nil && c.Header != "" {
			s.header = strings.ToLower(c.Header)
		}
		return s, nil
	}
	ttl, sweep := p.EvictionTTLSeconds, p.EvictionSweepSeconds
	var srcs []SessionIDSource
	if c := p.SessionIDConfig; c != nil {
		srcs = c.Sources
		if c.EvictionTTLSeconds != nil {
			ttl = *c.EvictionTTLSeconds
		}
		if c.EvictionSweepSeconds != nil {
			sweep = *c.EvictionSweepSeconds
		}
	}
	if len(srcs) == 0 {
		h := DefaultSessionIDHeader
		if p.HeaderName != "" {
			h = p.HeaderName
		}
		srcs = []SessionIDSource{{Header: h}}
	}
	for _, src := range srcs {
		if src.Attribute != "" {
			s.sources = append(s.sources, source{attr: scheduling.NewStateKey[string](src.Attribute), isAttr: true})
		} else {
			s.sources = append(s.sources, source{header: strings.ToLower(src.Header)})
		}
	}
	s.store = newStore(seconds(ttl), seconds(sweep), time.Now)
	return s, nil
}

// maxDuration keeps now + duration (in unix nanoseconds) from overflowing.
const maxDuration = time.Duration(1 << 62)

// seconds converts a number of seconds to a duration, capped at about 146
// years.
func seconds(v float64) time.Duration {
	if ns := v * float64(time.Second); ns < float64(maxDuration) {
		return time.Duration(ns)
	}
	return maxDuration
}

// TypedName implements scheduling.Plugin.
func (s *Scorer) TypedName() scheduling.TypedName { return s.typedName }

// Category implements scheduling.Scorer.
func (s *Scorer) Category() scheduling.ScorerCategory { return scheduling.Affinity }

// Score implements scheduling.Scorer: 1 for the session's endpoint, 0 for
// the others and for requests without a (known) session.
func (s *Scorer) Score(_ context.Context, req *scheduling.Request, endpoints []*scheduling.Endpoint, scores []float64) {
	for i := range endpoints {
		scores[i] = 0
	}
	if req == nil {
		return
	}
	if s.sessionID {
		id := s.sessionOf(req)
		if id == "" {
			return
		}
		key, ok := s.store.get(s.store.keyOf(id))
		if !ok {
			return
		}
		for i, e := range endpoints {
			if e.Key() == key {
				scores[i] = 1
			}
		}
		return
	}
	token := req.Headers[s.header]
	if token == "" || len(token) > maxTokenLength {
		return
	}
	target, err := base64.StdEncoding.DecodeString(token)
	if err != nil {
		return
	}
	for i, e := range endpoints {
		if sameEndpoint(target, e) {
			scores[i] = 1
		}
	}
}

// sameEndpoint reports whether id is the endpoint's "namespace/name".
func sameEndpoint(id []byte, e *scheduling.Endpoint) bool {
	m := e.Metadata()
	ns, name := m.Namespace, m.Name
	return len(id) == len(ns)+1+len(name) &&
		string(id[:len(ns)]) == ns && id[len(ns)] == '/' && string(id[len(ns)+1:]) == name
}

// EncodeEndpoint returns the session token of an endpoint:
// base64("namespace/name").
func EncodeEndpoint(e *scheduling.Endpoint) string {
	m := e.Metadata()
	return base64.StdEncoding.EncodeToString([]byte(m.Namespace + "/" + m.Name))
}

// sessionOf returns the request's session identifier, or "".
func (s *Scorer) sessionOf(req *scheduling.Request) string {
	for _, src := range s.sources {
		var v string
		if src.isAttr {
			v, _ = src.attr.Get(req)
		} else {
			v = req.Headers[src.header]
		}
		if v != "" {
			return v
		}
	}
	return ""
}

// PreRequest implements scheduling.PreRequest: it records the endpoint the
// session is tied to (the first target of profileName, or of the primary
// profile) and, for session_id, binds the session to it.
func (s *Scorer) PreRequest(_ context.Context, req *scheduling.Request, result *scheduling.Result) {
	if req == nil || result == nil {
		return
	}
	profile := s.profileName
	if profile == "" {
		profile = result.PrimaryProfile
	}
	pr := result.ProfileResults[profile]
	if pr == nil || len(pr.Targets) == 0 || pr.Targets[0] == nil {
		return
	}
	ep := pr.Targets[0]
	if !s.sessionID {
		s.picked.Set(req, ep)
		return
	}
	if id := s.sessionOf(req); id != "" {
		s.store.put(s.store.keyOf(id), ep.Key())
	}
}

// ResponseReceived implements scheduling.ResponseReceived. For
// encoded_endpoint_header it sets the session header on the response to the
// endpoint that served the request (the target, or with profileName the
// endpoint that profile picked). The server forwards header mutations made
// here to the client.
func (s *Scorer) ResponseReceived(_ context.Context, req *scheduling.Request, resp *scheduling.Response, target *scheduling.Endpoint) {
	if s.sessionID || resp == nil {
		return
	}
	ep := target
	if s.profileName != "" || ep == nil {
		ep = nil
		if req != nil {
			ep, _ = s.picked.Get(req)
		}
	}
	if ep == nil {
		return
	}
	if resp.Headers == nil {
		resp.Headers = make(map[string]string, 1)
	}
	resp.Headers[s.header] = EncodeEndpoint(ep)
}

// Close implements scheduling.Closer: it drops the session bindings (up
// to MaxSessions of them), which the instance replacing this one does not
// share. Requests of the old configuration still running afterwards find
// no binding and record none.
func (s *Scorer) Close(scheduling.CloseInfo) {
	if s.store != nil {
		s.store.close()
	}
}

// Sessions returns the number of session_id bindings held, expired ones
// not yet swept included.
func (s *Scorer) Sessions() int {
	if s.store == nil {
		return 0
	}
	return s.store.len()
}

// sessionKey is a 128-bit keyed hash of a session identifier; the session
// map stores it instead of the identifier.
type sessionKey struct{ hi, lo uint64 }

// binding is a session's endpoint and when it expires. endpoint is the
// endpoint's key string, shared with the endpoint snapshot it came from.
type binding struct {
	endpoint string
	expires  int64 // unix nanoseconds; 0: never
}

type shard struct {
	mu        sync.RWMutex
	m         map[sessionKey]binding
	nextSweep int64
	_         [24]byte // pad to 64 bytes: shards on separate cache lines
}

// store is a sharded, bounded session map with lazy TTL eviction.
type store struct {
	shards   [shardCount]shard
	seeds    [2]maphash.Seed
	ttl      time.Duration
	sweep    time.Duration
	perShard int
	now      func() time.Time
	closed   atomic.Bool
}

func newStore(ttl, sweep time.Duration, now func() time.Time) *store {
	st := &store{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, ttl: ttl, sweep: sweep, perShard: maxPerShard, now: now}
	for i := range st.shards {
		st.shards[i].m = map[sessionKey]binding{}
	}
	return st
}

// keyOf returns the map key of a session identifier.
func (st *store) keyOf(id string) sessionKey {
	return sessionKey{hi: maphash.String(st.seeds[0], id), lo: maphash.String(st.seeds[1], id)}
}

func (st *store) shardOf(k sessionKey) *shard {
	return &st.shards[k.hi%shardCount]
}

func (st *store) get(k sessionKey) (string, bool) {
	sh := st.shardOf(k)
	sh.mu.RLock()
	b, ok := sh.m[k]
	sh.mu.RUnlock()
	if !ok || (b.expires != 0 && st.now().UnixNano() > b.expires) {
		return "", false
	}
	return b.endpoint, true
}

func (st *store) put(k sessionKey, endpoint string) {
	if st.closed.Load() {
		return
	}
	now := st.now().UnixNano()
	var expires int64
	if st.ttl > 0 {
		expires = now + int64(st.ttl)
	}
	sh := st.shardOf(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	swept := false
	if now >= sh.nextSweep {
		sh.dropExpired(now)
		sh.nextSweep = now + int64(st.sweep)
		swept = true
	}
	if _, exists := sh.m[k]; !exists && len(sh.m) >= st.perShard {
		if !swept {
			sh.dropExpired(now)
		}
		for k := range sh.m {
			if len(sh.m) < st.perShard {
				break
			}
			delete(sh.m, k)
		}
	}
	sh.m[k] = binding{endpoint: endpoint, expires: expires}
}

// close drops every binding and refuses new ones.
func (st *store) close() {
	st.closed.Store(true)
	for i := range st.shards {
		sh := &st.shards[i]
		sh.mu.Lock()
		sh.m = map[sessionKey]binding{}
		sh.mu.Unlock()
	}
}

func (sh *shard) dropExpired(now int64) {
	for k, b := range sh.m {
		if b.expires != 0 && now > b.expires {
			delete(sh.m, k)
		}
	}
}

func (st *store) len() int {
	n := 0
	for i := range st.shards {
		sh := &st.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}

// Registration registers the session-affinity-scorer type.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Scorer           = (*Scorer)(nil)
	_ scheduling.PreRequest       = (*Scorer)(nil)
	_ scheduling.ResponseReceived = (*Scorer)(nil)
	_ scheduling.Closer           = (*Scorer)(nil)
)
