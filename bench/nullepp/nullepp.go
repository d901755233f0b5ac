// Package nullepp is the protocol floor of the benchmarks: an ext_proc
// server that answers every request with one fixed endpoint without
// parsing anything, echoing the streamed bodies back as FULL_DUPLEX_STREAMED
// mode requires. An EPP's overhead is reported as a ratio to it.
//
// Who imports it: bench/cmd/nullepp and the loadgen tests. Serve's caller
// owns the gRPC server's goroutines (Stop them).
package nullepp

import (
	"errors"
	"io"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Server answers with Endpoint.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	headers *extprocv3.ProcessingResponse
	empty   *extprocv3.ProcessingResponse
}

var _ extprocv3.ExternalProcessorServer = (*Server)(nil)

// New returns a server routing everything to endpoint (ip:port).
func New(endpoint string) *Server {
	md := &structpb.Struct{Fields: map[string]*structpb.Value{
		"envoy.lb": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			"x-gateway-destination-endpoint": structpb.NewStringValue(endpoint),
		}}),
	}}
	return &Server{
		headers: &extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
				ClearRouteCache: true,
				HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
					{Header: &corev3.HeaderValue{Key: "x-gateway-destination-endpoint", RawValue: []byte(endpoint)}},
				}},
			}}},
			DynamicMetadata: md,
		},
		empty: &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}},
	}
}

// Process implements the ext_proc stream.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var out *extprocv3.ProcessingResponse
		switch v := m.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			out = s.headers
		case *extprocv3.ProcessingRequest_RequestBody:
			out = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: echo(v.RequestBody)}}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			out = s.empty
		case *extprocv3.ProcessingRequest_ResponseBody:
			out = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: echo(v.ResponseBody)}}
		case *extprocv3.ProcessingRequest_RequestTrailers:
			out = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			out = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
		default:
			continue
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

// echo returns the chunk unchanged, as a streamed response.
func echo(b *extprocv3.HttpBody) *extprocv3.BodyResponse {
	return &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
			Body: b.GetBody(), EndOfStream: b.GetEndOfStream(),
		}},
	}}}
}
