package scheduling

import (
	"hash/maphash"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// EndpointMetadata identifies one model-server endpoint (a pod's target
// port, or an entry of an endpoints file).
type EndpointMetadata struct {
	// Name is unique within the pool, e.g. "vllm-0-rank-0".
	Name string
	// Namespace of the pod; empty in standalone mode.
	Namespace string
	// PodName is the pod (or process) that serves this endpoint.
	PodName string
	// Address is the IP address (or host) the gateway connects to.
	Address string
	// Port is the serving port.
	Port int
	// Labels are the pod's labels. Read-only.
	Labels map[string]string
	// Site names the cluster this endpoint belongs to (multi-site); empty
	// for the local site.
	Site string
}

// Metrics is the latest scraped state of an endpoint's model server.
type Metrics struct {
	// WaitingQueueSize is the number of requests waiting to be scheduled.
	WaitingQueueSize int
	// RunningRequestsSize is the number of requests being decoded.
	RunningRequestsSize int
	// KVCacheUsagePercent is the KV cache usage as a fraction in [0, 1].
	KVCacheUsagePercent float64
	// ActiveModels are the LoRA adapters loaded and running. Read-only.
	ActiveModels map[string]int
	// WaitingModels are the LoRA adapters requested but not yet loaded. Read-only.
	WaitingModels map[string]int
	// MaxActiveModels is the number of LoRA adapter slots.
	MaxActiveModels int
	// CacheBlockSize is the KV cache block size in tokens (0 if unknown).
	CacheBlockSize int
	// CacheNumBlocks is the number of KV cache blocks on the GPU (0 if unknown).
	CacheNumBlocks int
	// UpdateTime is when these metrics were scraped. Zero means they were
	// never measured (not scraped yet, or an endpoint that is not scraped
	// at all): the counts above are then zeros that say nothing, and a
	// plugin must not read them as an idle server.
	UpdateTime time.Time
}

// Endpoint is the read-only view of one endpoint that plugins see: its
// metadata, its latest metrics and typed attributes produced by the data
// layer. Endpoints are immutable snapshots shared by concurrent requests;
// plugins must not modify anything reachable from them.
type Endpoint struct {
	key      string
	keyHash  uint64
	hostPort string
	meta     EndpointMetadata
	metrics  Metrics
	attrs    map[string]any
}

// NewEndpoint builds an immutable endpoint snapshot. The maps in meta,
// metrics and attrs are kept, not copied: the caller must not change them
// afterwards.
func NewEndpoint(meta EndpointMetadata, metrics Metrics, attrs map[string]any) *Endpoint {
	key := EndpointKey(meta.Site, meta.Namespace, meta.Name)
	return &Endpoint{
		key:      key,
		keyHash:  maphash.String(keySeed, key),
		hostPort: net.JoinHostPort(meta.Address, strconv.Itoa(meta.Port)),
		meta:     meta,
		metrics:  metrics,
		attrs:    attrs,
	}
}

// Key identifies the endpoint uniquely across sites and namespaces
// ("[site:][namespace/]name", see EndpointKey). Plugins key per-endpoint
// state by it.
func (e *Endpoint) Key() string { return e.key }

// EndpointKey is the one definition of an endpoint's key, which
// Endpoint.Key returns and the datastore indexes by. Without a site it is
// GIE's form, unchanged: "namespace/name", or "name" when the namespace is
// empty. With a site, the site and a ':' come first: "site:namespace/name"
// or "site:name".
//
// The encoding is unambiguous for the names the datastore accepts
// (datastore.ValidateSpecs): a site and a namespace are DNS-1123 labels
// and a name holds only letters, digits, '-', '_' and '.', so none of them
// holds ':' or '/'. A key with a ':' has a site (everything before the
// ':'), a key without one has none, and the rest splits at its '/' as in
// GIE. Thus (site "a", name "b") is "a:b" while (namespace "a", name "b")
// is "a/b".
func EndpointKey(site, namespace, name string) string {
	switch {
	case site == "" && namespace == "":
		return name
	case site == "":
		return namespace + "/" + name
	case namespace == "":
		return site + ":" + name
	}
	return site + ":" + namespace + "/" + name
}

// Name is the endpoint's name within its pool.
func (e *Endpoint) Name() string { return e.meta.Name }

// HostPort is the address the gateway routes to, as net.JoinHostPort
// formats it (IPv6 in brackets).
func (e *Endpoint) HostPort() string { return e.hostPort }

// Metadata returns the endpoint's metadata. Read-only.
func (e *Endpoint) Metadata() *EndpointMetadata { return &e.meta }

// Metrics returns the endpoint's latest metrics. Read-only.
func (e *Endpoint) Metrics() *Metrics { return &e.metrics }

// Attribute returns an attribute set by the data layer.
func (e *Endpoint) Attribute(name string) (any, bool) {
	v, ok := e.attrs[name]
	return v, ok
}

// String returns the endpoint's name and address, for logs.
func (e *Endpoint) String() string { return e.meta.Name + "(" + e.hostPort + ")" }

// AttributeKey is a typed name for an endpoint attribute.
type AttributeKey[T any] struct{ name string }

// NewAttributeKey returns a typed attribute key.
func NewAttributeKey[T any](name string) AttributeKey[T] { return AttributeKey[T]{name: name} }

// Name returns the attribute's name.
func (k AttributeKey[T]) Name() string { return k.name }

// Get returns the endpoint's attribute if it is set and has type T.
func (k AttributeKey[T]) Get(e *Endpoint) (T, bool) {
	v, ok := e.attrs[k.name].(T)
	return v, ok
}

// Prompt is the prompt material of a request, as the request parser
// extracted it.
type Prompt struct {
	// Text is the byte sequence prefix-cache plugins hash: the prompt of a
	// completion, or a canonical rendering of chat messages. Read-only:
	// the Messages' strings alias it, so writing into it would change them.
	Text []byte
	// Messages are the chat messages, when the request is a chat.
	Messages []Message
	// CacheSalt is the request's cache_salt, mixed into prefix hashes.
	CacheSalt string
}

// Message is one chat message.
type Message struct {
	Role    string
	Content string
}

// Request is what plugins know of one inference request.
type Request struct {
	// ID is the request id (x-request-id, generated if absent).
	ID string
	// Model is the model named by the client.
	Model string
	// TargetModel is the model the request is sent to after rewrites.
	TargetModel string
	// Prompt is the prompt material.
	Prompt Prompt
	// Headers are the request headers, lower-case keys. Read-only.
	Headers map[string]string
	// Objective is the InferenceObjective named by the request, if any.
	Objective string
	// Priority is the objective's priority; negative means sheddable.
	Priority int
	// FairnessID is the flow-control tenant key.
	FairnessID string
	// PromptTokens is an estimate of the prompt's length in tokens.
	PromptTokens int
	// BodyBytes is the size of the request body as received, in bytes
	// (0 if unknown). GIE's token estimate divides it by 4.
	BodyBytes int
	// MaxOutputTokens is max_tokens (or its spellings), 0 if absent.
	MaxOutputTokens int
	// Stream is true for streamed (SSE) responses.
	Stream bool
	// SkipSaturationShedding is set by the host when a multi-site site
	// stage routes the request (pkg/multisite/sitestage): saturation of
	// the local pool then never refuses it (the site stage spills to
	// another site, and its shedding rule is the one that refuses).
	SkipSaturationShedding bool

	mu    sync.Mutex
	state map[string]any
	// explain, when set (Explain), records the request's profile runs.
	explain *Explanation

	// lifecycle orders PreRequest and ResponseComplete for this request
	// (see Scheduler.PreRequest); pending holds a completion that arrived
	// while PreRequest hooks were running.
	lifecycle atomic.Int32
	pending   atomic.Pointer[completion]
}

// Header returns a request header by lower-case name.
func (r *Request) Header(name string) string { return r.Headers[name] }

// ScoredEndpoint is an endpoint with its weighted total score.
type ScoredEndpoint struct {
	Endpoint *Endpoint
	Score    float64
}

// ProfileResult is the outcome of one profile run.
type ProfileResult struct {
	// Targets are the picked endpoints, primary first, then fallbacks.
	Targets []*Endpoint
}

// Result is the outcome of scheduling one request.
type Result struct {
	// ProfileResults holds every profile that ran; a failed profile maps to nil.
	ProfileResults map[string]*ProfileResult
	// PrimaryProfile names the profile whose targets the request goes to.
	PrimaryProfile string
}

// Targets returns the primary profile's targets.
func (r *Result) Targets() []*Endpoint {
	if r == nil {
		return nil
	}
	if pr := r.ProfileResults[r.PrimaryProfile]; pr != nil {
		return pr.Targets
	}
	return nil
}

// Response is what response hooks know of the model server's answer.
type Response struct {
	// StatusCode is the HTTP status of the response (0 if unknown).
	StatusCode int
	// Headers are the response headers, lower-case keys.
	Headers map[string]string
	// Served is the endpoint that actually served the request, as the
	// gateway reported it (x-gateway-destination-endpoint-served).
	Served string
	// Usage is the token usage reported by the model server, when known.
	Usage Usage
	// EndOfStream is true on the last body chunk.
	EndOfStream bool
	// Disconnected is true when the client went away before the end.
	Disconnected bool
	// DynamicMetadata collects metadata plugins return to the gateway,
	// namespace → key → value.
	DynamicMetadata map[string]map[string]any
}

// Usage is an OpenAI-style token usage.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	TotalTokens      int
	CachedTokens     int
}
