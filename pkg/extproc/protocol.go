package extproc

import (
	"net"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// headerOption sets a header, replacing any value the client sent (the
// append action is explicit: data planes have differed on the default).
func headerOption(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// destinationMetadata is {"envoy.lb": {"x-gateway-destination-endpoint": dest}}.
func destinationMetadata(dest string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		LBNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			DestinationHeader: structpb.NewStringValue(dest),
		}}),
	}}
}

func joinTargets(targets []*scheduling.Endpoint) string {
	if len(targets) == 1 {
		return targets[0].HostPort()
	}
	var b strings.Builder
	for i, e := range targets {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.HostPort())
	}
	return b.String()
}

func requestBodyResponse(chunk []byte, eos bool) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: streamedBody(chunk, eos)},
	}}
}

func responseBodyResponse(chunk []byte, eos bool) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: streamedBody(chunk, eos)},
	}}
}

func streamedBody(chunk []byte, eos bool) *extprocv3.CommonResponse {
	return &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: chunk, EndOfStream: eos},
		},
	}}
}

// appendBodyChunks appends body as streamed responses of at most
// BodyChunkLimit bytes; eos marks the last one. An empty body still makes
// one (empty) message, so an end of stream is never lost.
func appendBodyChunks(out []*extprocv3.ProcessingResponse, body []byte, eos bool, mk func([]byte, bool) *extprocv3.ProcessingResponse) []*extprocv3.ProcessingResponse {
	if len(body) == 0 {
		return append(out, mk(nil, eos))
	}
	for len(body) > 0 {
		n := min(len(body), BodyChunkLimit)
		out = append(out, mk(body[:n], eos && n == len(body)))
		body = body[n:]
	}
	return out
}

// subsetHint reads the gateway's subset hint: a list of strings, or one
// comma-separated string (what Envoy header-to-metadata produces). ok is
// false when the key is absent; an empty list is present and matches
// nothing.
func subsetHint(msg *extprocv3.ProcessingRequest) (entries []string, ok bool) {
	ns := msg.GetMetadataContext().GetFilterMetadata()[SubsetNamespace]
	if ns == nil {
		return nil, false
	}
	v, ok := ns.GetFields()[SubsetKey]
	if !ok {
		return nil, false
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_ListValue:
		for _, item := range k.ListValue.GetValues() {
			if s := strings.TrimSpace(item.GetStringValue()); s != "" {
				entries = append(entries, s)
			}
		}
		return entries, true
	case *structpb.Value_StringValue:
		return splitList(k.StringValue), true
	default:
		return nil, true
	}
}

// servedEndpoint reads envoy.lb x-gateway-destination-endpoint-served.
func servedEndpoint(msg *extprocv3.ProcessingRequest) string {
	ns := msg.GetMetadataContext().GetFilterMetadata()[LBNamespace]
	if ns == nil {
		return ""
	}
	return ns.GetFields()[ServedKey].GetStringValue()
}

func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// filterEndpoints keeps the endpoints an entry names: "ip:port" (or
// "[v6]:port") names one endpoint exactly, a bare IP every port of it.
func filterEndpoints(cands []*scheduling.Endpoint, entries []string) []*scheduling.Endpoint {
	hostPorts := make(map[string]bool, len(entries))
	ips := make(map[string]bool, len(entries))
	for _, e := range entries {
		if host, port, err := net.SplitHostPort(e); err == nil {
			hostPorts[net.JoinHostPort(host, port)] = true
			continue
		}
		ips[strings.Trim(e, "[]")] = true
	}
	var out []*scheduling.Endpoint
	for _, c := range cands {
		if hostPorts[c.HostPort()] || ips[c.Metadata().Address] {
			out = append(out, c)
		}
	}
	return out
}
