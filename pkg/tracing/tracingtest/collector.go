// Package tracingtest is an in-process OpenTelemetry collector for tests:
// a gRPC server on 127.0.0.1 that implements the OTLP trace service
// (collector/trace/v1 TraceService) and keeps every span it receives.
//
// Tests of any package may import it; nothing else may. Its gRPC server's
// goroutines are the test's: Start registers their stop with t.Cleanup.
package tracingtest

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	collectortracev1 "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
)

// Span is one received span, flattened for assertions.
type Span struct {
	Name     string
	TraceID  string // 32 hex digits
	SpanID   string // 16 hex digits
	ParentID string // "" for a root span
	Kind     string
	// Attributes are the span's attributes as strings.
	Attributes map[string]string
	// Resource are the attributes of the span's resource (service.name).
	Resource map[string]string
	// Scope is the instrumentation scope name.
	Scope string
	// Start and End are the span's times.
	Start, End time.Time
}

// Collector receives spans over OTLP/gRPC.
type Collector struct {
	collectortracev1.UnimplementedTraceServiceServer
	addr string

	mu      sync.Mutex
	spans   []Span
	exports int
}

// Start serves a Collector on a loopback port until the test ends.
func Start(t testing.TB) *Collector {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	c := &Collector{addr: lis.Addr().String()}
	srv := grpc.NewServer()
	collectortracev1.RegisterTraceServiceServer(srv, c)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return c
}

// Endpoint is the collector's OTLP endpoint URL (plaintext gRPC).
func (c *Collector) Endpoint() string { return "http://" + c.addr }

// Addr is the collector's host:port.
func (c *Collector) Addr() string { return c.addr }

// Export implements the OTLP trace service.
func (c *Collector) Export(_ context.Context, req *collectortracev1.ExportTraceServiceRequest) (*collectortracev1.ExportTraceServiceResponse, error) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Name:       s.GetName(),
					TraceID:    hex.EncodeToString(s.GetTraceId()),
					SpanID:     hex.EncodeToString(s.GetSpanId()),
					Kind:       s.GetKind().String(),
					Attributes: attrs(s.GetAttributes()),
					Resource:   res,
					Scope:      ss.GetScope().GetName(),
					Start:      time.Unix(0, int64(s.GetStartTimeUnixNano())),
					End:        time.Unix(0, int64(s.GetEndTimeUnixNano())),
				}
				if len(s.GetParentSpanId()) > 0 {
					sp.ParentID = hex.EncodeToString(s.GetParentSpanId())
				}
				got = append(got, sp)
			}
		}
	}
	c.mu.Lock()
	c.spans = append(c.spans, got...)
	c.exports++
	c.mu.Unlock()
	return &collectortracev1.ExportTraceServiceResponse{}, nil
}

// Spans returns a copy of the spans received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Exports is the number of export calls received.
func (c *Collector) Exports() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exports
}

func attrs(kvs []*commonv1.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = value(kv.GetValue())
	}
	return m
}

func value(v *commonv1.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonv1.AnyValue_StringValue:
		return x.StringValue
	case *commonv1.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonv1.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonv1.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	default:
		return v.String()
	}
}

// Tree indexes spans of one trace by id for parent/child checks.
type Tree struct {
	ByID     map[string]Span
	Children map[string][]Span
}

// NewTree indexes spans.
func NewTree(spans []Span) Tree {
	t := Tree{ByID: map[string]Span{}, Children: map[string][]Span{}}
	for _, s := range spans {
		t.ByID[s.SpanID] = s
		t.Children[s.ParentID] = append(t.Children[s.ParentID], s)
	}
	return t
}

// Named returns the spans called name.
func (t Tree) Named(name string) []Span {
	var out []Span
	for _, s := range t.ByID {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Parent returns s's parent span, if it was received.
func (t Tree) Parent(s Span) (Span, bool) {
	p, ok := t.ByID[s.ParentID]
	return p, ok
}

// ExporterRunning reports whether a goroutine of the OpenTelemetry batch
// span processor or OTLP exporter is still running in this process, for
// tests that check a provider's shutdown stopped them.
func ExporterRunning() bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	st := string(buf)
	return strings.Contains(st, "go.opentelemetry.io/otel/sdk/trace.(*batchSpanProcessor)") ||
		strings.Contains(st, "go.opentelemetry.io/otel/exporters/otlp/otlptrace")
}
