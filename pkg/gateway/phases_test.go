package gateway

import (
	"io"
	"net/http"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// scripted runs a fake EPP stream that routes to dest like the default fake,
// then hands response-phase messages to onResponse. onResponse returns the
// messages to send, or done=true to end the stream with err.
func scripted(dest string, onResponse func(req *extprocv3.ProcessingRequest) (out []*extprocv3.ProcessingResponse, done bool, err error)) func(extprocv3.ExternalProcessor_ProcessServer) error {
	router := &fakeEPP{cfg: fakeConfig{dest: dest}}
	return func(srv extprocv3.ExternalProcessor_ProcessServer) error {
		var body []byte
		for {
			req, err := srv.Recv()
			if err != nil {
				return nil
			}
			var out []*extprocv3.ProcessingResponse
			switch {
			case req.GetRequestHeaders() != nil:
				if req.GetRequestHeaders().GetEndOfStream() {
					out = router.route(nil, false, true)
				}
			case req.GetRequestBody() != nil:
				body = append(body, req.GetRequestBody().GetBody()...)
				if req.GetRequestBody().GetEndOfStream() {
					out = router.route(body, true, false)
				}
			default:
				var done bool
				out, done, err = onResponse(req)
				if done {
					return err
				}
			}
			for _, m := range out {
				if err := srv.Send(m); err != nil {
					return nil
				}
			}
		}
	}
}

func echoResponse(req *extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
	switch v := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}}
	case *extprocv3.ProcessingRequest_ResponseBody:
		return []*extprocv3.ProcessingResponse{streamedBodyResponse(false, v.ResponseBody.GetBody(), v.ResponseBody.GetEndOfStream())}
	}
	return nil
}

func TestImmediateResponseInResponsePhase(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "upstream body") })
	h := newHarness(t, fakeConfig{script: scripted(up.hostPort(), func(req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, bool, error) {
		if req.GetResponseHeaders() != nil {
			return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
				ImmediateResponse: immediate(502, "replaced", hvo("x-why", "epp")),
			}}}, false, nil
		}
		return nil, false, nil
	})}, nil)
	resp := post(t, h, "/x", []byte("{}"), nil)
	if b := readAll(t, resp); resp.StatusCode != 502 || string(b) != "replaced" || resp.Header.Get("X-Why") != "epp" {
		t.Errorf("got %d %q x-why=%q, want the EPP's 502 \"replaced\"", resp.StatusCode, b, resp.Header.Get("X-Why"))
	}
}

func TestEPPClosesCleanlyAfterRouting(t *testing.T) {
	eppClosed := make(chan struct{})
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		// Answer only after the EPP ended its stream, plus a moment for the
		// gateway's stream reader to see the end: the gateway only passes the
		// response through when the stream ended before the response phase.
		<-eppClosed
		time.Sleep(100 * time.Millisecond)
		w.Header().Set("X-Up", "1")
		_, _ = io.WriteString(w, "unmodified")
	})
	router := &fakeEPP{cfg: fakeConfig{dest: up.hostPort()}}
	closeAfterRouting := func(srv extprocv3.ExternalProcessor_ProcessServer) error {
		var body []byte
		for {
			req, err := srv.Recv()
			if err != nil {
				return nil
			}
			body = append(body, req.GetRequestBody().GetBody()...)
			if req.GetRequestBody().GetEndOfStream() {
				for _, m := range router.route(body, true, false) {
					_ = srv.Send(m)
				}
				defer close(eppClosed)
				return nil // OK status: like Envoy, the gateway stops processing and passes the response through
			}
		}
	}
	h := newHarness(t, fakeConfig{script: closeAfterRouting}, nil)
	resp := post(t, h, "/x", []byte("{}"), nil)
	if b := readAll(t, resp); resp.StatusCode != 200 || string(b) != "unmodified" || resp.Header.Get("X-Up") != "1" {
		t.Errorf("got %d %q, want the upstream response passed through", resp.StatusCode, b)
	}
}

func TestEPPFailsMidResponse(t *testing.T) {
	firstSeen := make(chan struct{})
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		_, _ = io.WriteString(w, "data: x\n\n")
		_ = rc.Flush()
		select { // the rest only once the EPP holds the first chunk: two separate messages
		case <-firstSeen:
		case <-r.Context().Done():
			return
		}
		for range 50 {
			_, _ = io.WriteString(w, "data: y\n\n")
			_ = rc.Flush()
		}
	})
	var bodies int
	h := newHarness(t, fakeConfig{script: scripted(up.hostPort(), func(req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, bool, error) {
		if req.GetResponseBody() != nil {
			bodies++
			switch bodies {
			case 1:
				defer close(firstSeen)
			case 2:
				return nil, true, status.Error(codes.Internal, "picker crashed mid-stream")
			}
		}
		return echoResponse(req), false, nil
	})}, nil)
	resp := post(t, h, "/x", []byte("{}"), nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, want 200 (headers were already sent)", resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Errorf("read %q without error, want the response aborted after the EPP failed", b)
	}
	if string(b) != "data: x\n\n" {
		t.Errorf("read %q, want the first event before the abort", b)
	}
}

func TestGeneratedRequestIDReachesEPPAndUpstream(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	h := newHarness(t, fakeConfig{dest: up.hostPort()}, nil)
	resp := post(t, h, "/x", []byte("{}"), nil)
	readAll(t, resp)
	ur, _ := up.lastRequest()
	id := ur.Header.Get("X-Request-Id")
	if !uuidV4.MatchString(id) {
		t.Fatalf("upstream x-request-id %q, want a generated UUIDv4", id)
	}
	rec := h.epp.nextStream(t)
	var eppID string
	for _, hv := range rec.reqs[0].GetRequestHeaders().GetHeaders().GetHeaders() {
		if hv.GetKey() == RequestIDHeader {
			eppID = string(hv.GetRawValue())
		}
	}
	if eppID != id {
		t.Errorf("EPP saw x-request-id %q, upstream %q; want the same", eppID, id)
	}
}
