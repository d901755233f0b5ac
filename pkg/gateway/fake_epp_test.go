package gateway

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/structpb"
)

// bodyChunkLimit mirrors the reference EPP's 62,000-byte streamed chunks.
const bodyChunkLimit = 62000

// fakeConfig steers the fake EPP.
type fakeConfig struct {
	// dest is the destination list; "" sends none.
	dest string
	// noHeader / noMetadata suppress one of the two destination carriers.
	noHeader, noMetadata bool
	// immediate, if set, is sent instead of routing once the request body is complete.
	immediate *extprocv3.ImmediateResponse
	// hang makes the EPP never answer.
	hang bool
	// mutateBody rewrites the request body.
	mutateBody func([]byte) []byte
	// setHeaders / removeHeaders are added to the request header mutation.
	setHeaders    []*corev3.HeaderValueOption
	removeHeaders []string
	// respSetHeaders is the response header mutation.
	respSetHeaders []*corev3.HeaderValueOption
	// script replaces the whole stream handler.
	script func(srv extprocv3.ExternalProcessor_ProcessServer) error
}

// streamRecord is what the fake EPP saw on one stream.
type streamRecord struct {
	reqs   []*extprocv3.ProcessingRequest
	err    error // the error that ended Recv (io.EOF for a clean half-close)
	ctxErr error // the stream context's error when the handler returned
}

type fakeEPP struct {
	extprocv3.UnimplementedExternalProcessorServer
	cfg     fakeConfig
	addr    string
	srv     *grpc.Server
	streams chan *streamRecord
	opened  atomic.Int64
}

func startFakeEPP(t testing.TB, cfg fakeConfig, serverOpts ...grpc.ServerOption) *fakeEPP {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	f := &fakeEPP{cfg: cfg, addr: lis.Addr().String(), srv: grpc.NewServer(serverOpts...), streams: make(chan *streamRecord, 1024)}
	extprocv3.RegisterExternalProcessorServer(f.srv, f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.srv.Serve(lis)
	}()
	t.Cleanup(func() {
		f.srv.Stop()
		<-done
	})
	return f
}

// nextStream returns the record of the next finished stream.
func (f *fakeEPP) nextStream(t testing.TB) *streamRecord {
	t.Helper()
	select {
	case s := <-f.streams:
		return s
	case <-time.After(10 * time.Second):
		t.Fatalf("fake EPP: no stream finished within 10s")
		return nil
	}
}

func (f *fakeEPP) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	f.opened.Add(1)
	if f.cfg.script != nil {
		return f.cfg.script(srv)
	}
	rec := &streamRecord{}
	defer func() {
		rec.ctxErr = srv.Context().Err()
		f.streams <- rec
	}()
	var body []byte
	for {
		req, err := srv.Recv()
		if err != nil {
			rec.err = err
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		rec.reqs = append(rec.reqs, req)
		if f.cfg.hang {
			continue
		}
		var out []*extprocv3.ProcessingResponse
		switch v := req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			if v.RequestHeaders.GetEndOfStream() {
				if f.cfg.immediate != nil {
					return srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: f.cfg.immediate}})
				}
				out = f.route(nil, false, true)
			}
		case *extprocv3.ProcessingRequest_RequestBody:
			body = append(body, v.RequestBody.GetBody()...)
			if v.RequestBody.GetEndOfStream() {
				if f.cfg.immediate != nil {
					return srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: f.cfg.immediate}})
				}
				out = f.route(body, true, false)
			}
		case *extprocv3.ProcessingRequest_RequestTrailers:
			out = f.route(body, false, false)
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}})
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{
				Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: f.cfg.respSetHeaders}},
			}}})
		case *extprocv3.ProcessingRequest_ResponseBody:
			out = append(out, streamedBodyResponse(false, v.ResponseBody.GetBody(), v.ResponseBody.GetEndOfStream()))
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}})
		}
		for _, m := range out {
			if err := srv.Send(m); err != nil {
				rec.err = err
				return err
			}
		}
	}
}

// route builds the request-phase answer: the header response (destination
// header + content-length + extra mutations, destination metadata), then the
// body in <=62,000-byte chunks. eos marks the last body chunk; noBody sends no
// body chunks at all.
func (f *fakeEPP) route(body []byte, eos, noBody bool) []*extprocv3.ProcessingResponse {
	if f.cfg.mutateBody != nil && !noBody {
		body = f.cfg.mutateBody(body)
	}
	var set []*corev3.HeaderValueOption
	if f.cfg.dest != "" && !f.cfg.noHeader {
		set = append(set, hvo(DestinationHeader, f.cfg.dest))
	}
	if !noBody {
		set = append(set, hvo("content-length", strconv.Itoa(len(body))))
	}
	set = append(set, f.cfg.setHeaders...)
	hdr := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
		Response: &extprocv3.CommonResponse{
			ClearRouteCache: true,
			HeaderMutation:  &extprocv3.HeaderMutation{SetHeaders: set, RemoveHeaders: f.cfg.removeHeaders},
		},
	}}}
	if f.cfg.dest != "" && !f.cfg.noMetadata {
		hdr.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{
			LBNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				DestinationHeader: structpb.NewStringValue(f.cfg.dest),
			}}),
		}}
	}
	out := []*extprocv3.ProcessingResponse{hdr}
	if noBody {
		return out
	}
	for len(body) > bodyChunkLimit {
		out = append(out, streamedBodyResponse(true, body[:bodyChunkLimit], false))
		body = body[bodyChunkLimit:]
	}
	return append(out, streamedBodyResponse(true, body, eos))
}

func streamedBodyResponse(request bool, chunk []byte, eos bool) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: chunk, EndOfStream: eos}},
	}}}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
}

func hvo(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}}
}

func immediate(code int, body string, headers ...*corev3.HeaderValueOption) *extprocv3.ImmediateResponse {
	return &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(code)},
		Headers: &extprocv3.HeaderMutation{SetHeaders: headers},
		Body:    []byte(body),
	}
}

// kinds lists the oneof kinds of the requests, collapsing runs of body chunks.
func kinds(reqs []*extprocv3.ProcessingRequest) []string {
	var out []string
	for _, r := range reqs {
		var k string
		switch r.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			k = "request_headers"
		case *extprocv3.ProcessingRequest_RequestBody:
			k = "request_body"
		case *extprocv3.ProcessingRequest_RequestTrailers:
			k = "request_trailers"
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			k = "response_headers"
		case *extprocv3.ProcessingRequest_ResponseBody:
			k = "response_body"
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			k = "response_trailers"
		default:
			k = "?"
		}
		if len(out) > 0 && out[len(out)-1] == k && (k == "request_body" || k == "response_body") {
			continue
		}
		out = append(out, k)
	}
	return out
}

// bodies concatenates the request or response body chunks and checks that
// only the last one has end_of_stream.
func bodies(t *testing.T, reqs []*extprocv3.ProcessingRequest, response bool) (body []byte, eosOnLast bool) {
	t.Helper()
	var chunks []*extprocv3.HttpBody
	for _, r := range reqs {
		if response {
			if b := r.GetResponseBody(); b != nil {
				chunks = append(chunks, b)
			}
		} else if b := r.GetRequestBody(); b != nil {
			chunks = append(chunks, b)
		}
	}
	for i, c := range chunks {
		body = append(body, c.GetBody()...)
		if c.GetEndOfStream() != (i == len(chunks)-1) {
			t.Errorf("body chunk %d of %d: end_of_stream=%v", i, len(chunks), c.GetEndOfStream())
		}
	}
	return body, len(chunks) > 0 && chunks[len(chunks)-1].GetEndOfStream()
}

// upstream is a loopback model-server stand-in that counts its requests.
type upstream struct {
	*httptest.Server
	hits atomic.Int64
	mu   sync.Mutex
	last *http.Request
	body []byte
}

func startUpstream(t testing.TB, h http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.last, u.body = r, b
		u.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		h(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) hostPort() string { return u.Listener.Addr().String() }

func (u *upstream) lastRequest() (*http.Request, []byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last, u.body
}

// closedPort returns a loopback address that refuses connections.
func closedPort(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

// harness is a gateway in front of a fake EPP, served on loopback.
type harness struct {
	epp    *fakeEPP
	gw     *Gateway
	srv    *httptest.Server
	client *http.Client
	reg    *prometheus.Registry
}

func newHarness(t testing.TB, cfg fakeConfig, mod func(*Options)) *harness {
	t.Helper()
	h := &harness{epp: startFakeEPP(t, cfg), reg: prometheus.NewRegistry()}
	opts := Options{EPPAddr: h.epp.addr, Registerer: h.reg}
	if tt, ok := t.(*testing.T); ok {
		opts.Logger = testr.NewWithOptions(tt, testr.Options{Verbosity: 4})
	}
	if mod != nil {
		mod(&opts)
	}
	gw, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.gw = gw
	h.srv = httptest.NewServer(gw)
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}
	h.client = &http.Client{Transport: tr, Timeout: 20 * time.Second}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		h.srv.Close()
		_ = gw.Close()
	})
	return h
}

func (h *harness) url(path string) string { return h.srv.URL + path }

// selfSignedTLS returns a server TLS certificate for 127.0.0.1.
func selfSignedTLS(t testing.TB) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "epp.example"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func tlsServerOption(t testing.TB) grpc.ServerOption {
	cert := selfSignedTLS(t)
	return grpc.Creds(credentials.NewServerTLSFromCert(&cert))
}

// ctxWithTimeout is a test context that expires.
func ctxWithTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newTestServer serves gw on loopback and closes both at cleanup.
func newTestServer(t testing.TB, gw *Gateway) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(gw)
	t.Cleanup(func() {
		srv.Close()
		_ = gw.Close()
	})
	return srv
}
