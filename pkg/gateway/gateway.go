package gateway

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Defaults applied by New to zero-valued Options fields.
const (
	// DefaultMessageTimeout bounds every wait for the EPP: for the routing
	// decision after the last request message was sent, and for the end of the
	// stream after the last response message was sent. GIE's reference Envoy
	// config sets message_timeout: 1000s, and Envoy does not apply
	// message_timeout at all in FULL_DUPLEX_STREAMED mode; 30 s keeps a hung EPP
	// visible in tests without cutting off slow scheduling.
	DefaultMessageTimeout = 30 * time.Second
	// DefaultMaxRequestBodyBytes is the gateway-side request body cap (64 MiB).
	DefaultMaxRequestBodyBytes int64 = 64 << 20
	// DefaultConnectTimeout is the upstream TCP connect timeout of the default
	// transport. A timeout counts as a connect failure and moves on to the next
	// endpoint of the fallback list.
	DefaultConnectTimeout = 2 * time.Second
	// DefaultMaxIdleConnsPerHost is the per-upstream keep-alive pool size of the
	// default transport.
	DefaultMaxIdleConnsPerHost = 256
	// DefaultReadHeaderTimeout is the ReadHeaderTimeout of NewHTTPServer: a
	// client has this long to send its request line and headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultMaxHeaderBytes is the MaxHeaderBytes of NewHTTPServer (64 KiB;
	// Envoy's default max_request_headers_kb is 60). net/http answers a larger
	// header block with 431 itself.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultIdleTimeout is the IdleTimeout of NewHTTPServer.
	DefaultIdleTimeout = 120 * time.Second
	// DefaultBodyReadTimeout bounds how long a client may take to send its
	// whole request body, counted from the start of the request. At the
	// default 64 MiB body cap it asks about 1.1 MB/s of the largest uploads.
	DefaultBodyReadTimeout = 60 * time.Second
	// DefaultUpstreamHeaderTimeout bounds the wait for the upstream's response
	// headers once the request is on its way. It is long because a model
	// server sends the headers of a non-streaming completion only when the
	// whole completion is generated.
	DefaultUpstreamHeaderTimeout = 10 * time.Minute
	// DefaultUpstreamIdleTimeout is the longest gap allowed between two reads
	// of the upstream's response body (Envoy's stream idle timeout is 5 min).
	DefaultUpstreamIdleTimeout = 5 * time.Minute
	// DefaultMaxConcurrentRequests caps the requests in flight through one
	// Gateway, and with them its open ext_proc streams.
	DefaultMaxConcurrentRequests = 10000
)

// Options configure a Gateway. Only EPPAddr is required.
type Options struct {
	// EPPAddr is host:port of the EPP's ext_proc gRPC server.
	EPPAddr string
	// EPPTLS dials the EPP with TLS without verifying its certificate (the EPP's
	// default self-signed certificate; like Istio's DestinationRule with
	// insecureSkipVerify). False dials plaintext HTTP/2 (h2c).
	EPPTLS bool
	// DialOptions are appended to the gateway's own gRPC dial options (tests).
	// The gateway reuses its body buffers once Send returns, so stats handlers
	// that keep sent messages beyond the call are not supported.
	DialOptions []grpc.DialOption
	// MessageTimeout bounds each wait for the EPP (see DefaultMessageTimeout).
	// Zero means DefaultMessageTimeout; negative is an error.
	MessageTimeout time.Duration
	// MaxRequestBodyBytes caps the client request body; a larger body gets 413
	// and the upstream is not called. The body the EPP sends back may be up to
	// twice this size. Zero means DefaultMaxRequestBodyBytes; negative is an
	// error.
	MaxRequestBodyBytes int64
	// Transport carries upstream requests. Nil means a tuned http.Transport:
	// keep-alive, DefaultMaxIdleConnsPerHost idle connections per host,
	// DefaultConnectTimeout, no proxy, no transparent compression. A custom
	// transport must report connect failures as *net.OpError with Op "dial"
	// (as http.Transport does) for fallback walking to work.
	Transport http.RoundTripper
	// BodyReadTimeout bounds the time from the start of a request (its headers
	// read) to the last byte of its body. Past it the gateway answers 408
	// request_timeout and cancels the ext_proc stream, so the EPP releases the
	// body it buffered. A slow upload that finishes in time is not affected.
	// It is enforced with the connection's read deadline
	// (http.ResponseController.SetReadDeadline); behind a ResponseWriter that
	// cannot set one, the ext_proc stream is still cancelled at the deadline
	// but the pending read ends only when the client sends or closes. Zero
	// means DefaultBodyReadTimeout; negative is an error.
	BodyReadTimeout time.Duration
	// UpstreamHeaderTimeout bounds the time from the first upstream attempt
	// (connecting included, across the fallback walk) to the upstream's
	// response headers; past it the upstream request is cancelled and the
	// client gets 504 upstream_timeout. It must exceed the longest
	// non-streaming generation. Zero means DefaultUpstreamHeaderTimeout;
	// negative is an error.
	UpstreamHeaderTimeout time.Duration
	// UpstreamIdleTimeout is the longest wait for the next piece of the
	// upstream's response body (the first one counted from the headers). Past
	// it the upstream request is cancelled and the response is cut: the client
	// gets 504 upstream_timeout if no response header reached it yet, else
	// its connection is aborted, as Envoy does on its stream idle timeout.
	// Zero means DefaultUpstreamIdleTimeout; negative is an error.
	UpstreamIdleTimeout time.Duration
	// MaxConcurrentRequests caps the requests being handled at once; one more
	// is answered 503 overloaded with Retry-After: 1 without opening an
	// ext_proc stream. Zero means DefaultMaxConcurrentRequests; negative is an
	// error.
	MaxConcurrentRequests int
	// ReadHeaderTimeout and MaxHeaderBytes are the header bounds NewHTTPServer
	// sets on the http.Server that serves this Gateway. Zero means
	// DefaultReadHeaderTimeout and DefaultMaxHeaderBytes; negative is an error.
	ReadHeaderTimeout time.Duration
	MaxHeaderBytes    int
	// SubsetHeader, when not empty, names a request header (for example
	// "x-gateway-destination-endpoint-subset") whose comma-separated value the
	// gateway forwards to the EPP as the subset hint: a list of strings under
	// filter_metadata["envoy.lb.subset_hint"]["x-gateway-destination-endpoint-subset"],
	// as Envoy's header-to-metadata filter plus a small Lua/CEL step would. A
	// header that is absent or holds only blanks and commas sends no hint.
	SubsetHeader string
	// StreamsPerConnection is how many ext_proc streams share one gRPC
	// connection to the EPP; when every connection holds this many, the next
	// stream dials another (see DefaultStreamsPerConnection). Keep it at or
	// below the EPP's SETTINGS_MAX_CONCURRENT_STREAMS, or streams past the
	// EPP's cap wait for a free slot until MessageTimeout. Zero means
	// DefaultStreamsPerConnection; negative is an error.
	StreamsPerConnection int
	// Logger receives per-request debug logs at V(4) and failures at V(2).
	Logger logr.Logger
	// Registerer, if set, receives the gateway metrics (see metrics.go).
	Registerer prometheus.Registerer
}

// Gateway is an http.Handler that forwards each request through the EPP to the
// endpoint the EPP picks. It is safe for concurrent use. Create it with New and
// release it with Close.
type Gateway struct {
	conns      *connPool
	transport  http.RoundTripper
	ownedTrans *http.Transport // the default transport, closed by Close
	log        logr.Logger
	metrics    *metrics

	msgTimeout   time.Duration
	maxBody      int64
	maxEPPBody   int64
	subsetHeader string // canonical form; "" = off

	bodyTimeout       time.Duration
	upHeaderTimeout   time.Duration
	upIdleTimeout     time.Duration
	maxInFlight       int64
	inFlight          atomic.Int64
	readHeaderTimeout time.Duration
	maxHeaderBytes    int

	bufPool sync.Pool // *[]byte of chunkSize
}

// chunkSize is the read size for client and upstream bodies. Envoy hands the
// filter chain data in slices of similar size.
const chunkSize = 32 << 10

// protocolConfig is sent on the first ProcessingRequest of every stream, as
// Envoy does. send_body_without_waiting_for_header_response is false in the
// reference config (it only matters for STREAMED mode).
var protocolConfig = &extprocv3.ProtocolConfiguration{
	RequestBodyMode:  extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
	ResponseBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
}

// New validates opts, applies defaults and creates the first gRPC connection
// of the EPP pool (which connects lazily, on the first request); more are
// dialed as streams fill them.
func New(opts Options) (*Gateway, error) {
	if err := validateOptions(&opts); err != nil {
		return nil, err
	}
	g := &Gateway{
		log:               opts.Logger,
		msgTimeout:        orDefault(opts.MessageTimeout, DefaultMessageTimeout),
		maxBody:           orDefault(opts.MaxRequestBodyBytes, DefaultMaxRequestBodyBytes),
		transport:         opts.Transport,
		bodyTimeout:       orDefault(opts.BodyReadTimeout, DefaultBodyReadTimeout),
		upHeaderTimeout:   orDefault(opts.UpstreamHeaderTimeout, DefaultUpstreamHeaderTimeout),
		upIdleTimeout:     orDefault(opts.UpstreamIdleTimeout, DefaultUpstreamIdleTimeout),
		maxInFlight:       int64(orDefault(opts.MaxConcurrentRequests, DefaultMaxConcurrentRequests)),
		readHeaderTimeout: orDefault(opts.ReadHeaderTimeout, DefaultReadHeaderTimeout),
		maxHeaderBytes:    orDefault(opts.MaxHeaderBytes, DefaultMaxHeaderBytes),
	}
	g.maxEPPBody = 2 * g.maxBody
	if g.maxEPPBody < g.maxBody { // overflow
		g.maxEPPBody = g.maxBody
	}
	if opts.SubsetHeader != "" {
		g.subsetHeader = http.CanonicalHeaderKey(opts.SubsetHeader)
	}
	if g.transport == nil {
		g.ownedTrans = NewTransport()
		g.transport = g.ownedTrans
	}
	g.bufPool.New = func() any { b := make([]byte, chunkSize); return &b }

	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	g.metrics = m

	creds := insecure.NewCredentials()
	if opts.EPPTLS {
		// The EPP serves a self-signed certificate by default; GIE's reference
		// Envoy config accepts it without verification, and so does the gateway.
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // see comment
	}
	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// Reconnect quickly after an EPP restart (the gRPC default backs off up
		// to 120 s, during which every request would fail fast with 503).
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
	}
	dialOpts = append(dialOpts, opts.DialOptions...)
	limit := orDefault(opts.StreamsPerConnection, DefaultStreamsPerConnection)
	dial := func() (*grpc.ClientConn, error) { return grpc.NewClient(opts.EPPAddr, dialOpts...) }
	onNew := func(total int) {
		g.metrics.eppConns.Inc()
		g.log.V(2).Info("all EPP connections hold their streams, dialed another", "connections", total, "streamsPerConnection", limit)
	}
	g.conns, err = newConnPool(limit, dial, onNew)
	if err != nil {
		return nil, fmt.Errorf("gateway: create gRPC client for EPPAddr %q: %w", opts.EPPAddr, err)
	}
	g.metrics.eppConns.Inc()
	return g, nil
}

func validateOptions(o *Options) error {
	var errs []error
	if o.EPPAddr == "" {
		errs = append(errs, errors.New("EPPAddr: required (host:port of the EPP's ext_proc server)"))
	} else if host, port, err := net.SplitHostPort(o.EPPAddr); err != nil {
		errs = append(errs, fmt.Errorf("EPPAddr: %q is not host:port: %w", o.EPPAddr, err))
	} else if host == "" {
		errs = append(errs, fmt.Errorf("EPPAddr: %q has an empty host", o.EPPAddr))
	} else if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		errs = append(errs, fmt.Errorf("EPPAddr: %q has an invalid port %q (want 1-65535)", o.EPPAddr, port))
	}
	if o.MessageTimeout < 0 {
		errs = append(errs, fmt.Errorf("MessageTimeout: must be >= 0 (0 = default %s), got %s", DefaultMessageTimeout, o.MessageTimeout))
	}
	if o.MaxRequestBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxRequestBodyBytes: must be >= 0 (0 = default %d), got %d", DefaultMaxRequestBodyBytes, o.MaxRequestBodyBytes))
	}
	for _, d := range []struct {
		name   string
		v, def time.Duration
	}{
		{"BodyReadTimeout", o.BodyReadTimeout, DefaultBodyReadTimeout},
		{"UpstreamHeaderTimeout", o.UpstreamHeaderTimeout, DefaultUpstreamHeaderTimeout},
		{"UpstreamIdleTimeout", o.UpstreamIdleTimeout, DefaultUpstreamIdleTimeout},
		{"ReadHeaderTimeout", o.ReadHeaderTimeout, DefaultReadHeaderTimeout},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must be >= 0 (0 = default %s), got %s", d.name, d.def, d.v))
		}
	}
	if o.MaxConcurrentRequests < 0 {
		errs = append(errs, fmt.Errorf("MaxConcurrentRequests: must be >= 0 (0 = default %d), got %d", DefaultMaxConcurrentRequests, o.MaxConcurrentRequests))
	}
	if o.StreamsPerConnection < 0 {
		errs = append(errs, fmt.Errorf("StreamsPerConnection: must be >= 0 (0 = default %d), got %d", DefaultStreamsPerConnection, o.StreamsPerConnection))
	}
	if o.MaxHeaderBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxHeaderBytes: must be >= 0 (0 = default %d), got %d", DefaultMaxHeaderBytes, o.MaxHeaderBytes))
	}
	if o.SubsetHeader != "" && !validHeaderName(o.SubsetHeader) {
		errs = append(errs, fmt.Errorf("SubsetHeader: %q is not a valid HTTP header name", o.SubsetHeader))
	}
	if len(errs) > 0 {
		return fmt.Errorf("gateway: invalid options: %w", errors.Join(errs...))
	}
	return nil
}

// NewTransport returns the default upstream transport: HTTP/1.1 keep-alive,
// DefaultMaxIdleConnsPerHost idle connections per host, DefaultConnectTimeout,
// no environment proxy, and no transparent gzip (a proxy must pass
// Accept-Encoding and compressed bodies through untouched).
func NewTransport() *http.Transport {
	d := &net.Dialer{Timeout: DefaultConnectTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:               nil,
		DialContext:         d.DialContext,
		MaxIdleConns:        0, // no global cap; the per-host cap bounds the pool
		MaxIdleConnsPerHost: DefaultMaxIdleConnsPerHost,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		WriteBufferSize:     32 << 10,
		ReadBufferSize:      32 << 10,
	}
}

// NewHTTPServer returns an *http.Server serving g on addr with g's
// ReadHeaderTimeout and MaxHeaderBytes (Options) and DefaultIdleTimeout, but
// no ReadTimeout or WriteTimeout: SSE responses may legitimately take long,
// and g bounds the request body itself (Options.BodyReadTimeout).
func NewHTTPServer(addr string, g *Gateway) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           g,
		ReadHeaderTimeout: g.readHeaderTimeout,
		MaxHeaderBytes:    g.maxHeaderBytes,
		IdleTimeout:       DefaultIdleTimeout,
	}
}

// orDefault returns v, or def when v is zero.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Close closes the gRPC connections to the EPP and the idle connections of the
// default upstream transport. In-flight requests fail.
func (g *Gateway) Close() error {
	if g.ownedTrans != nil {
		g.ownedTrans.CloseIdleConnections()
	}
	n, err := g.conns.close()
	g.metrics.eppConns.Sub(float64(n))
	if err != nil {
		return fmt.Errorf("gateway: close EPP connections: %w", err)
	}
	return nil
}

func (g *Gateway) getBuf() *[]byte  { return g.bufPool.Get().(*[]byte) }
func (g *Gateway) putBuf(b *[]byte) { g.bufPool.Put(b) }
