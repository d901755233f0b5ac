package loadgen

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// DestinationKey is where an EPP names the endpoint: the request header
// and the envoy.lb dynamic-metadata key (GIE's protocol).
const DestinationKey = "x-gateway-destination-endpoint"

// DefaultChunkSize is the size of the body chunks sent, as the in-repo
// gateway (and Envoy reading an HTTP/1 client) sends them.
const DefaultChunkSize = 32 << 10

// protocolConfig is sent on the first message of every stream, as Envoy
// does with GIE's reference processing mode.
var protocolConfig = &extprocv3.ProtocolConfiguration{
	RequestBodyMode:  extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
	ResponseBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
}

// Exchange is one request as the gateway sends it. The messages are
// built once (Prepare) and shared by every stream: the gRPC client does
// not modify what it sends.
type Exchange struct {
	// Path, ID and Headers are the request's :path, x-request-id and
	// extra headers (lower-case names).
	Path    string
	Headers map[string]string
	// Body is the request body, sent in chunks of ChunkSize (0:
	// DefaultChunkSize), the last one with end_of_stream.
	Body      []byte
	ChunkSize int
	// ResponseBody is the upstream's answer (JSON with usage, or SSE
	// events), sent as one chunk with end_of_stream after the response
	// headers (:status 200).
	ResponseBody []byte
	ContentType  string

	reqHeaders []*corev3.HeaderValue
	reqBody    []*extprocv3.ProcessingRequest
	respMsgs   []*extprocv3.ProcessingRequest
}

// Prepare builds the messages (Run calls it if the caller did not).
func (x *Exchange) Prepare() {
	size := x.ChunkSize
	if size <= 0 {
		size = DefaultChunkSize
	}
	hm := &corev3.HeaderMap{}
	add := func(k, v string) { hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)}) }
	add(":authority", "loadgen")
	add(":path", x.Path)
	add(":method", "POST")
	add(":scheme", "http")
	add("content-length", strconv.Itoa(len(x.Body)))
	add("content-type", "application/json")
	for k, v := range x.Headers {
		add(k, v)
	}
	x.reqHeaders = hm.Headers
	x.reqBody = x.reqBody[:0]
	for off := 0; off < len(x.Body); off += size {
		end := min(off+size, len(x.Body))
		x.reqBody = append(x.reqBody, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: x.Body[off:end], EndOfStream: end == len(x.Body)},
		}})
	}
	ct := x.ContentType
	if ct == "" {
		ct = "application/json"
	}
	rh := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":status", RawValue: []byte("200")},
		{Key: "content-type", RawValue: []byte(ct)},
	}}
	x.respMsgs = []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: rh, EndOfStream: len(x.ResponseBody) == 0}}},
	}
	if len(x.ResponseBody) > 0 {
		x.respMsgs = append(x.respMsgs, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: x.ResponseBody, EndOfStream: true},
		}})
	}
}

// Result is one exchange's outcome.
type Result struct {
	// Decision is the time from the first message sent to the EPP's
	// routing answer (the request_headers response, or an immediate
	// response); Total the time to the end of the stream.
	Decision, Total time.Duration
	// Destination is the endpoint the EPP chose ("" when refused).
	Destination string
	// Status is the immediate response's HTTP status, 0 when routed.
	Status int
}

// ErrProtocol marks an EPP answer out of the protocol's order.
var ErrProtocol = errors.New("ext_proc protocol error")

// Run plays the exchange on a new stream of client; id is its
// x-request-id (Envoy always sets one).
func (x *Exchange) Run(ctx context.Context, client extprocv3.ExternalProcessorClient, id string) (Result, error) {
	var res Result
	if x.reqHeaders == nil {
		x.Prepare()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	stream, err := client.Process(ctx)
	if err != nil {
		return res, err
	}
	hs := make([]*corev3.HeaderValue, len(x.reqHeaders), len(x.reqHeaders)+1)
	copy(hs, x.reqHeaders)
	hs = append(hs, &corev3.HeaderValue{Key: "x-request-id", RawValue: []byte(id)})
	first := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: hs}, EndOfStream: len(x.Body) == 0}},
		ProtocolConfig: protocolConfig,
	}
	if err := stream.Send(first); err != nil {
		return res, err
	}
	for _, m := range x.reqBody {
		if err := stream.Send(m); err != nil {
			return res, err
		}
	}
	// The request phase: the headers answer, then the streamed body back
	// to its end (or an immediate response at any point).
	gotHeaders, bodyDone := false, len(x.reqBody) == 0
	for !gotHeaders || !bodyDone {
		m, err := stream.Recv()
		if err != nil {
			return res, fmt.Errorf("request phase: %w", err)
		}
		switch v := m.GetResponse().(type) {
		case *extprocv3.ProcessingResponse_RequestHeaders:
			if gotHeaders {
				return res, fmt.Errorf("%w: second request_headers response", ErrProtocol)
			}
			gotHeaders = true
			res.Decision = time.Since(start)
			res.Destination = destination(m, v.RequestHeaders)
		case *extprocv3.ProcessingResponse_RequestBody:
			if !gotHeaders {
				return res, fmt.Errorf("%w: request_body response before request_headers", ErrProtocol)
			}
			if v.RequestBody.GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
				bodyDone = true
			}
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			res.Decision = time.Since(start)
			res.Status = int(v.ImmediateResponse.GetStatus().GetCode())
			res.Total = res.Decision
			return res, nil
		default:
			return res, fmt.Errorf("%w: %T in the request phase", ErrProtocol, v)
		}
	}
	for _, m := range x.respMsgs {
		if err := stream.Send(m); err != nil {
			return res, err
		}
	}
	// The response phase: the headers answer, then the body to its end.
	gotHeaders, bodyDone = false, len(x.ResponseBody) == 0
	for !gotHeaders || !bodyDone {
		m, err := stream.Recv()
		if err != nil {
			return res, fmt.Errorf("response phase: %w", err)
		}
		switch v := m.GetResponse().(type) {
		case *extprocv3.ProcessingResponse_ResponseHeaders:
			gotHeaders = true
		case *extprocv3.ProcessingResponse_ResponseBody:
			if v.ResponseBody.GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
				bodyDone = true
			}
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			res.Status = int(v.ImmediateResponse.GetStatus().GetCode())
			res.Total = time.Since(start)
			return res, nil
		default:
			return res, fmt.Errorf("%w: %T in the response phase", ErrProtocol, v)
		}
	}
	// Envoy half-closes and the EPP ends the stream.
	if err := stream.CloseSend(); err != nil {
		return res, err
	}
	for {
		// io.EOF, or a status some EPPs end the stream with after the last
		// answer: the exchange itself is complete either way.
		if _, err := stream.Recv(); err != nil {
			break
		}
	}
	res.Total = time.Since(start)
	return res, nil
}

// destination reads the chosen endpoint from the dynamic metadata, else
// from the header mutation.
func destination(m *extprocv3.ProcessingResponse, h *extprocv3.HeadersResponse) string {
	if ns := m.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue(); ns != nil {
		if v, ok := ns.GetFields()[DestinationKey]; ok {
			switch k := v.GetKind().(type) {
			case *structpb.Value_StringValue:
				return k.StringValue
			case *structpb.Value_ListValue:
				if vals := k.ListValue.GetValues(); len(vals) > 0 {
					return vals[0].GetStringValue()
				}
			}
		}
	}
	for _, o := range h.GetResponse().GetHeaderMutation().GetSetHeaders() {
		if o.GetHeader().GetKey() == DestinationKey {
			if rv := o.GetHeader().GetRawValue(); len(rv) > 0 {
				return string(rv)
			}
			return o.GetHeader().GetValue()
		}
	}
	return ""
}
