package manifests_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	// Every typed_config in the bootstrap must resolve.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/health_check/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
)

const (
	extProcFilter  = "envoy.filters.http.ext_proc"
	routerFilter   = "envoy.filters.http.router"
	hcmFilter      = "envoy.filters.network.http_connection_manager"
	destHeader     = "x-gateway-destination-endpoint"
	httpOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

// decodeBootstrap reads an Envoy bootstrap written in YAML the way Envoy
// does: strict proto JSON (unknown fields are errors), every Any resolved
// to a registered type, then the protoc-gen-validate rules of the
// bootstrap and of every message packed in an Any.
func decodeBootstrap(data []byte) (*bootstrapv3.Bootstrap, error) {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("YAML: %w", err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(j, b); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if err := validateAll(b, "bootstrap"); err != nil {
		return nil, err
	}
	return b, nil
}

type validator interface{ ValidateAll() error }

// validateAll runs m's generated validation, then that of every message
// packed in an Any below m (the generated code does not look inside Any).
func validateAll(m proto.Message, where string) error {
	if v, ok := m.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	var errs []error
	walkAny(m.ProtoReflect(), where, func(a *anypb.Any, at string) {
		inner, err := a.UnmarshalNew()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", at, a.GetTypeUrl(), err))
			return
		}
		if err := validateAll(inner, at+"<"+string(inner.ProtoReflect().Descriptor().FullName())+">"); err != nil {
			errs = append(errs, err)
		}
	})
	return errors.Join(errs...)
}

// walkAny calls f for every Any reachable from m without crossing another Any.
func walkAny(m protoreflect.Message, at string, f func(*anypb.Any, string)) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		f(a, at)
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := at + "." + string(fd.Name())
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				walkAny(l.Get(i).Message(), fmt.Sprintf("%s[%d]", name, i), f)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				walkAny(mv.Message(), fmt.Sprintf("%s[%s]", name, k.String()), f)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			walkAny(v.Message(), name, f)
		}
		return true
	})
}

func loadBootstrap(t testing.TB, data []byte) *bootstrapv3.Bootstrap {
	t.Helper()
	b, err := decodeBootstrap(data)
	if err != nil {
		t.Fatalf("overlays/envoy/envoy.yaml: %v", err)
	}
	return b
}

func unpack[T proto.Message](t testing.TB, a *anypb.Any, what string) T {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	v, ok := m.(T)
	if !ok {
		t.Fatalf("%s is a %s", what, a.GetTypeUrl())
	}
	return v
}

// envoyFacts are what the Kubernetes objects must agree with.
type envoyFacts struct {
	listenPort, readyPort uint32
	eppHost               string
	eppPort               uint32
}

// bootstrapFacts asserts the EPP protocol facts of the bootstrap and
// returns the addresses it uses.
func bootstrapFacts(t testing.TB, b *bootstrapv3.Bootstrap) envoyFacts {
	t.Helper()
	var facts envoyFacts
	if a := b.GetAdmin().GetAddress().GetSocketAddress(); a.GetAddress() != "127.0.0.1" {
		t.Errorf("admin listens on %q, want 127.0.0.1 only", a.GetAddress())
	}
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	listeners := map[string]*listenerv3.Listener{}
	for _, l := range b.GetStaticResources().GetListeners() {
		listeners[l.GetName()] = l
	}
	inference, ready := listeners["inference"], listeners["ready"]
	if inference == nil || ready == nil {
		t.Fatalf("want listeners inference and ready, got %v", keys(listeners))
	}
	facts.listenPort = inference.GetAddress().GetSocketAddress().GetPortValue()
	facts.readyPort = ready.GetAddress().GetSocketAddress().GetPortValue()

	hcm := listenerHCM(t, inference)
	filters := hcm.GetHttpFilters()
	if len(filters) != 2 || filters[0].GetName() != extProcFilter || filters[1].GetName() != routerFilter {
		names := make([]string, len(filters))
		for i, f := range filters {
			names[i] = f.GetName()
		}
		t.Fatalf("http_filters %v, want [%s %s]", names, extProcFilter, routerFilter)
	}
	ep := unpack[*extprocv3.ExternalProcessor](t, filters[0].GetTypedConfig(), extProcFilter)
	pm := ep.GetProcessingMode()
	for _, c := range []struct {
		name      string
		got, want fmt.Stringer
	}{
		{"request_header_mode", pm.GetRequestHeaderMode(), extprocv3.ProcessingMode_SEND},
		{"response_header_mode", pm.GetResponseHeaderMode(), extprocv3.ProcessingMode_SEND},
		{"request_body_mode", pm.GetRequestBodyMode(), extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED},
		{"response_body_mode", pm.GetResponseBodyMode(), extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED},
		{"request_trailer_mode", pm.GetRequestTrailerMode(), extprocv3.ProcessingMode_SEND},
		{"response_trailer_mode", pm.GetResponseTrailerMode(), extprocv3.ProcessingMode_SEND},
	} {
		if c.got.String() != c.want.String() {
			t.Errorf("ext_proc processing_mode.%s = %s, want %s", c.name, c.got, c.want)
		}
	}
	if ep.GetFailureModeAllow() {
		t.Error("ext_proc failure_mode_allow is true: requests would bypass the EPP when it fails")
	}
	if d := ep.GetMessageTimeout().AsDuration(); d < time.Minute {
		t.Errorf("ext_proc message_timeout %s: the EPP answers the request headers only after the whole body; want at least a minute", d)
	}
	eppCluster := ep.GetGrpcService().GetEnvoyGrpc().GetClusterName()
	epp := clusters[eppCluster]
	if epp == nil {
		t.Fatalf("ext_proc calls cluster %q, which is not defined (clusters %v)", eppCluster, keys(clusters))
	}

	// The EPP cluster: DNS name of the Service, HTTP/2, TLS.
	if epp.GetType() != clusterv3.Cluster_STRICT_DNS {
		t.Errorf("EPP cluster type %s, want STRICT_DNS", epp.GetType())
	}
	opts := epp.GetTypedExtensionProtocolOptions()[httpOptionsKey]
	if opts == nil {
		t.Fatalf("EPP cluster has no %s", httpOptionsKey)
	}
	hpo := unpack[*upstreamhttpv3.HttpProtocolOptions](t, opts, httpOptionsKey)
	if hpo.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Error("EPP cluster does not use HTTP/2 (explicit_http_config.http2_protocol_options): gRPC needs it")
	}
	ts := epp.GetTransportSocket()
	if ts == nil || ts.GetTypedConfig() == nil {
		t.Fatal("EPP cluster has no transport socket: the EPP serves TLS")
	}
	utc := unpack[*tlsv3.UpstreamTlsContext](t, ts.GetTypedConfig(), "EPP transport_socket")
	if alpn := utc.GetCommonTlsContext().GetAlpnProtocols(); len(alpn) != 1 || alpn[0] != "h2" {
		t.Errorf("EPP TLS ALPN %v, want [h2] (gRPC servers require ALPN)", alpn)
	}
	eps := epp.GetLoadAssignment().GetEndpoints()
	if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
		t.Fatalf("EPP cluster endpoints %v, want one", eps)
	}
	sa := eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	facts.eppHost, facts.eppPort = sa.GetAddress(), sa.GetPortValue()

	// Every route goes to the original-destination cluster that reads the
	// EPP's header.
	vhosts := hcm.GetRouteConfig().GetVirtualHosts()
	if len(vhosts) == 0 {
		t.Fatal("no virtual hosts")
	}
	for _, vh := range vhosts {
		for _, r := range vh.GetRoutes() {
			name := r.GetRoute().GetCluster()
			c := clusters[name]
			if c == nil {
				t.Fatalf("route %v goes to cluster %q, which is not defined", r.GetMatch(), name)
			}
			if c.GetType() != clusterv3.Cluster_ORIGINAL_DST || c.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED {
				t.Errorf("cluster %s: type %s lb_policy %s, want ORIGINAL_DST and CLUSTER_PROVIDED", name, c.GetType(), c.GetLbPolicy())
			}
			if o := c.GetOriginalDstLbConfig(); !o.GetUseHttpHeader() || o.GetHttpHeaderName() != destHeader {
				t.Errorf("cluster %s original_dst_lb_config %v, want use_http_header with %s", name, o, destHeader)
			}
		}
	}
	// The readiness listener answers /ready itself.
	rh := listenerHCM(t, ready)
	if f := rh.GetHttpFilters(); len(f) == 0 || f[0].GetName() != "envoy.filters.http.health_check" {
		t.Error("the ready listener does not start with the health_check filter")
	}
	return facts
}

func listenerHCM(t testing.TB, l *listenerv3.Listener) *hcmv3.HttpConnectionManager {
	t.Helper()
	chains := l.GetFilterChains()
	if len(chains) != 1 || len(chains[0].GetFilters()) != 1 || chains[0].GetFilters()[0].GetName() != hcmFilter {
		t.Fatalf("listener %s: want one filter chain with only %s", l.GetName(), hcmFilter)
	}
	return unpack[*hcmv3.HttpConnectionManager](t, chains[0].GetFilters()[0].GetTypedConfig(), l.GetName()+" "+hcmFilter)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestEnvoyBootstrap decodes overlays/envoy/envoy.yaml into
// go-control-plane's Bootstrap and checks the EPP protocol facts.
func TestEnvoyBootstrap(t *testing.T) {
	data := readFile(t, filepath.Join(envoyDir, "envoy.yaml"))
	facts := bootstrapFacts(t, loadBootstrap(t, data))
	if facts.eppHost != eppName || facts.eppPort != 9002 {
		t.Errorf("EPP cluster address %s:%d, want %s:9002", facts.eppHost, facts.eppPort, eppName)
	}
}

// TestDecodeBootstrapRejects shows that decodeBootstrap fails on the
// mistakes Envoy would refuse: it is not a rubber stamp.
func TestDecodeBootstrapRejects(t *testing.T) {
	good := string(readFile(t, filepath.Join(envoyDir, "envoy.yaml")))
	for _, tc := range []struct {
		name, old, new, wantErr string
	}{
		{"unknown field in a typed config", "failure_mode_allow: false", "failure_mode_allow: false\n              no_such_field: 1", "no_such_field"},
		{"unknown enum value", "request_body_mode: FULL_DUPLEX_STREAMED", "request_body_mode: FULL_DUPLEX_STREAMING", "FULL_DUPLEX_STREAMING"},
		{"unregistered type", "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router", "type.googleapis.com/envoy.extensions.filters.http.router.v3.Nope", "Nope"},
		{"port out of range", "port_value: 9002", "port_value: 90020", "PortValue"},
		{"empty cluster name in a typed config", "cluster_name: switchyard_epp\n", "cluster_name: \"\"\n", "ClusterName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(good, tc.old) {
				t.Fatalf("envoy.yaml has no %q to mutate", tc.old)
			}
			_, err := decodeBootstrap([]byte(strings.Replace(good, tc.old, tc.new, 1)))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("decodeBootstrap error %v, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
}
