package gateway

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
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
	// DefaultReadHeaderTimeout is the ReadHeaderTimeout of NewHTTPServer.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultIdleTimeout is the IdleTimeout of NewHTTPServer.
	DefaultIdleTimeout = 120 * time.Second
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
	// SubsetHeader, when not empty, names a request header (for example
	// "x-gateway-destination-endpoint-subset") whose comma-separated value the
	// gateway forwards to the EPP as the subset hint: a list of strings under
	// filter_metadata["envoy.lb.subset_hint"]["x-gateway-destination-endpoint-subset"],
	// as Envoy's header-to-metadata filter plus a small Lua/CEL step would. A
	// header that is absent or holds only blanks and commas sends no hint.
	SubsetHeader string
	// Logger receives per-request debug logs at V(4) and failures at V(2).
	Logger logr.Logger
	// Registerer, if set, receives the gateway metrics (see metrics.go).
	Registerer prometheus.Registerer
}

// Gateway is an http.Handler that forwards each request through the EPP to the
// endpoint the EPP picks. It is safe for concurrent use. Create it with New and
// release it with Close.
type Gateway struct {
	conn       *grpc.ClientConn
	client     extprocv3.ExternalProcessorClient
	transport  http.RoundTripper
	ownedTrans *http.Transport // the default transport, closed by Close
	log        logr.Logger
	metrics    *metrics

	msgTimeout   time.Duration
	maxBody      int64
	maxEPPBody   int64
	subsetHeader string // canonical form; "" = off

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

// New validates opts, applies defaults and creates the gRPC client connection
// (which connects lazily, on the first request).
func New(opts Options) (*Gateway, error) {
	if err := validateOptions(&opts); err != nil {
		return nil, err
	}
	g := &Gateway{
		log:        opts.Logger,
		msgTimeout: opts.MessageTimeout,
		maxBody:    opts.MaxRequestBodyBytes,
		transport:  opts.Transport,
	}
	if g.msgTimeout == 0 {
		g.msgTimeout = DefaultMessageTimeout
	}
	if g.maxBody == 0 {
		g.maxBody = DefaultMaxRequestBodyBytes
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
	conn, err := grpc.NewClient(opts.EPPAddr, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("gateway: create gRPC client for EPPAddr %q: %w", opts.EPPAddr, err)
	}
	g.conn = conn
	g.client = extprocv3.NewExternalProcessorClient(conn)
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

// NewHTTPServer returns an *http.Server serving g on addr with a
// ReadHeaderTimeout and an IdleTimeout but no ReadTimeout or WriteTimeout,
// because SSE responses and large uploads may legitimately take long.
func NewHTTPServer(addr string, g *Gateway) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           g,
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		IdleTimeout:       DefaultIdleTimeout,
	}
}

// Close closes the gRPC connection to the EPP and the idle connections of the
// default upstream transport. In-flight requests fail.
func (g *Gateway) Close() error {
	if g.ownedTrans != nil {
		g.ownedTrans.CloseIdleConnections()
	}
	if err := g.conn.Close(); err != nil {
		return fmt.Errorf("gateway: close EPP connection: %w", err)
	}
	return nil
}

func (g *Gateway) getBuf() *[]byte  { return g.bufPool.Get().(*[]byte) }
func (g *Gateway) putBuf(b *[]byte) { g.bufPool.Put(b) }
