package scheduling

import (
	"context"
	"time"
)

// TypedName is a plugin instance's type and name. The name defaults to the
// type in configuration.
type TypedName struct {
	Type string
	Name string
}

// String returns "name (type)", or the type alone when both are equal.
func (t TypedName) String() string {
	if t.Name == "" || t.Name == t.Type {
		return t.Type
	}
	return t.Name + " (" + t.Type + ")"
}

// Plugin is implemented by every plugin.
type Plugin interface {
	TypedName() TypedName
}

// ScorerCategory says what a scorer optimises, as in GIE.
type ScorerCategory string

const (
	// Affinity scorers prefer endpoints that already hold request state
	// (prefix cache, LoRA adapter, session).
	Affinity ScorerCategory = "Affinity"
	// Distribution scorers spread load (queue, KV cache, in-flight).
	Distribution ScorerCategory = "Distribution"
	// Balance scorers trade affinity against distribution.
	Balance ScorerCategory = "Balance"
)

// Filter narrows the candidate endpoints. It returns the kept endpoints
// (a subset of endpoints, in order) and must not modify the input slice.
// Returning no endpoint fails the profile run.
type Filter interface {
	Plugin
	Filter(ctx context.Context, req *Request, endpoints []*Endpoint) []*Endpoint
}

// Scorer rates endpoints. Score writes a score in [0, 1] for endpoints[i]
// into scores[i] (len(scores) == len(endpoints); the slice arrives zeroed).
// Values outside [0, 1] are clamped by the framework. Missing data must give
// a neutral score, not an error.
type Scorer interface {
	Plugin
	Category() ScorerCategory
	Score(ctx context.Context, req *Request, endpoints []*Endpoint, scores []float64)
}

// Picker chooses the targets among scored endpoints, primary first. The
// scored slice belongs to the picker for the call and may be reordered.
// It must return at least one endpoint when scored is not empty.
type Picker interface {
	Plugin
	Pick(ctx context.Context, req *Request, scored []ScoredEndpoint) *ProfileResult
}

// ProfileHandler decides which profiles run and which result is primary.
type ProfileHandler interface {
	Plugin
	// Pick returns the profiles to run next, given the results so far
	// (empty on the first call). Returning none ends the loop.
	Pick(ctx context.Context, req *Request, profiles map[string]*Profile, results map[string]*ProfileResult) []*Profile
	// ProcessResults chooses the primary result. A failed profile maps to nil.
	ProcessResults(ctx context.Context, req *Request, results map[string]*ProfileResult) (*Result, error)
}

// Refusal is an admission decision against a request: the HTTP status the
// client gets, a machine-readable reason (used in the reason header and in
// metric labels; keep the set of reasons closed) and a human message.
type Refusal struct {
	StatusCode int
	Reason     string
	Message    string
	// RetryAfter is the Retry-After the client gets with a 429 or 503,
	// rounded up to whole seconds; 0 means one second.
	RetryAfter time.Duration
	// ErrorType, when set, is the OpenAI error type of the JSON body
	// (e.g. "rate_limit_exceeded"), whose code is then Reason; empty
	// means GIE's body (the status name and the numeric status).
	ErrorType string
}

// Admitter may refuse a request before scheduling. Admit returns nil to
// admit.
type Admitter interface {
	Plugin
	Admit(ctx context.Context, req *Request, candidates []*Endpoint) *Refusal
}

// SaturationDetector reports how saturated a set of endpoints is: 0 is idle,
// 1 or more is saturated. With no flow control, a request with a negative
// priority is shed (429) when the candidates are saturated.
//
// req is the request being admitted; per-request data set by the data
// producers, such as InFlightLoadKey, is on it. A detector that measures
// the endpoints alone may ignore it.
type SaturationDetector interface {
	Plugin
	Saturation(ctx context.Context, req *Request, candidates []*Endpoint) float64
}

// DataProducer computes per-request data before scheduling and stores it
// on the Request under the StateKeys it declares in Produces. Consumes
// names the keys it reads; producers run in dependency order.
type DataProducer interface {
	Plugin
	Produces() []string
	Consumes() []string
	Produce(ctx context.Context, req *Request, candidates []*Endpoint)
}

// DataConsumer is implemented by plugins that read per-request data. The
// configuration loader checks that a producer exists for every key.
type DataConsumer interface {
	Plugin
	Consumes() []string
}

// DefaultProducer is implemented by consumers that can say which producer
// to instantiate when the configuration has none for a key they consume
// (GIE auto-creates the prefix producer from the prefix scorer's
// parameters, for example). It returns the producer's plugin type and the
// parameters to give it.
type DefaultProducer interface {
	DefaultProducer(key string) (pluginType string, params []byte, ok bool)
}

// PreRequest runs after a successful schedule, before the request is
// forwarded (e.g. to count in-flight requests or update the prefix index).
// It runs again if the same request is scheduled again before it completes
// (a retry: hooks should move what they counted), and never after
// ResponseComplete for the request. A hook may call Scheduler methods for
// its own request; a completion it triggers runs after the PreRequest
// hooks.
type PreRequest interface {
	Plugin
	PreRequest(ctx context.Context, req *Request, result *Result)
}

// ResponseReceived runs when the response headers arrive.
type ResponseReceived interface {
	Plugin
	ResponseReceived(ctx context.Context, req *Request, resp *Response, target *Endpoint)
}

// ResponseStreaming runs for every response body chunk.
type ResponseStreaming interface {
	Plugin
	ResponseStreaming(ctx context.Context, req *Request, resp *Response, chunk []byte, target *Endpoint)
}

// ResponseComplete runs exactly once per scheduled request: at the end of
// the response, or when the client disconnects or the stream fails.
// resp.Disconnected tells which.
type ResponseComplete interface {
	Plugin
	ResponseComplete(ctx context.Context, req *Request, resp *Response, target *Endpoint)
}

// Parser names the request-body format of a pool (parser.pluginRef in the
// configuration). The server's request parser handles the format.
type Parser interface {
	Plugin
	// Format is the body format, e.g. "openai" or "passthrough".
	Format() string
}

// DataSource is a background data-layer plugin (e.g. scraping model-server
// metrics). The server runs it; the request path never calls it.
type DataSource interface {
	Plugin
	IsDataSource()
}

// DataExtractor turns a data source's raw data into endpoint metrics or
// attributes (dataLayer.sources[].extractors in the configuration).
type DataExtractor interface {
	Plugin
	IsDataExtractor()
}

// PoolSaturationDetector is an optional SaturationDetector interface for
// callers that have no request, such as the flow-control dispatcher: the
// saturation of the candidates read from published, request-free state
// only (endpoint metrics and attributes, in-flight counts). It runs no
// data producer and records nothing; for the same state it returns what
// Saturation returns for a request the producers have prepared, once the
// host has bound the detector's inputs (InFlightLoadUser.UseInFlightLoad
// for a detector that reads in-flight load); a detector may document a
// different, safer value before that bind (concurrency-detector reads the
// host's counts where Saturation without a producer sees none).
type PoolSaturationDetector interface {
	SaturationDetector
	PoolSaturation(candidates []*Endpoint) float64
}

// EndpointInFlightLoad is an optional InFlightLoad interface: an
// endpoint's in-flight load read without a request and without the
// producer having run over a candidate set (from the endpoint's own
// accounting, LoadKey, and the producer's counters). It gives the counts
// InFlight(e.Key()) gives once the producer has run over candidates that
// include e.
type EndpointInFlightLoad interface {
	InFlightLoad
	EndpointInFlight(e *Endpoint) (requests, tokens int64)
}

// InFlightLoadUser is implemented by plugins that read in-flight load
// without a request (a PoolSaturationDetector counting in-flight
// requests): the host gives them the configuration's producer of
// InFlightLoadKey once the configuration is loaded, and again on every
// load that keeps the plugin. Safe for concurrent use with the plugin's
// other methods.
type InFlightLoadUser interface {
	UseInFlightLoad(load EndpointInFlightLoad)
}
