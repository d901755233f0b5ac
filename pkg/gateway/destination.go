package gateway

import (
	"fmt"
	"net/netip"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// parseEndpointList splits the EPP's destination value ("ip:port[,ip:port...]",
// primary first) into its valid entries, in order, and reports the invalid
// ones. Like Envoy's ORIGINAL_DST cluster the gateway only connects to literal
// IP addresses (IPv6 in brackets, without zone); blanks around entries and empty entries are
// skipped; duplicates are kept only once.
func parseEndpointList(s string) (valid []string, invalid []string) {
	for entry := range strings.SplitSeq(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		if err := checkEndpoint(entry); err != nil {
			invalid = append(invalid, entry)
			continue
		}
		if !containsString(valid, entry) {
			valid = append(valid, entry)
		}
	}
	return valid, invalid
}

// checkEndpoint reports why entry is not a dialable ip:port.
func checkEndpoint(entry string) error {
	ap, err := netip.ParseAddrPort(entry)
	if err != nil {
		return fmt.Errorf("endpoint %q: want ip:port: %w", entry, err)
	}
	if ap.Port() == 0 {
		return fmt.Errorf("endpoint %q: port 0", entry)
	}
	if !ap.Addr().IsValid() || ap.Addr().IsUnspecified() {
		return fmt.Errorf("endpoint %q: unspecified address", entry)
	}
	if ap.Addr().Zone() != "" {
		return fmt.Errorf("endpoint %q: IPv6 zones are not supported", entry)
	}
	return nil
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// destinationFromMetadata returns dynamic_metadata["envoy.lb"]["x-gateway-destination-endpoint"]
// as a comma-separated string. The protocol defines a string; a list of
// strings is accepted too and joined. ok is false when the key is absent.
func destinationFromMetadata(md *structpb.Struct) (dest string, ok bool) {
	ns := md.GetFields()[LBNamespace].GetStructValue()
	v, found := ns.GetFields()[DestinationHeader]
	if !found || v == nil {
		return "", false
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return k.StringValue, true
	case *structpb.Value_ListValue:
		parts := make([]string, 0, len(k.ListValue.GetValues()))
		for _, e := range k.ListValue.GetValues() {
			if s, isString := e.GetKind().(*structpb.Value_StringValue); isString {
				parts = append(parts, s.StringValue)
			}
		}
		return strings.Join(parts, ","), true
	}
	return "", false
}

// parseSubsetHint splits the subset header's values (each comma-separated)
// into trimmed, non-empty entries in order. Entries are not validated: that is
// the EPP's job, as with Envoy's header-to-metadata filter.
func parseSubsetHint(values []string) []string {
	var out []string
	for _, v := range values {
		for entry := range strings.SplitSeq(v, ",") {
			if entry = strings.TrimSpace(entry); entry != "" {
				out = append(out, entry)
			}
		}
	}
	return out
}

// subsetStruct builds {"x-gateway-destination-endpoint-subset": [entries...]}.
func subsetStruct(entries []string) *structpb.Struct {
	vals := make([]*structpb.Value, len(entries))
	for i, e := range entries {
		vals[i] = structpb.NewStringValue(e)
	}
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		SubsetKey: structpb.NewListValue(&structpb.ListValue{Values: vals}),
	}}
}

// requestMetadata is the metadata_context of request-phase messages: the
// subset hint, or nil when there is none (Envoy sends no metadata_context when
// no forwarded namespace has data).
func requestMetadata(subset *structpb.Struct) *corev3.Metadata {
	if subset == nil {
		return nil
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{SubsetNamespace: subset}}
}

// responseMetadata is the metadata_context of response-phase messages: the
// served endpoint under envoy.lb (when an upstream served) plus the subset hint.
func responseMetadata(subset *structpb.Struct, served string) *corev3.Metadata {
	if subset == nil && served == "" {
		return nil
	}
	fm := make(map[string]*structpb.Struct, 2)
	if subset != nil {
		fm[SubsetNamespace] = subset
	}
	if served != "" {
		fm[LBNamespace] = &structpb.Struct{Fields: map[string]*structpb.Value{
			ServedKey: structpb.NewStringValue(served),
		}}
	}
	return &corev3.Metadata{FilterMetadata: fm}
}
