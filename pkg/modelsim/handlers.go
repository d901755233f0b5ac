package modelsim

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/common/expfmt"
)

// maxBodyBytes bounds a request body (413 beyond it).
const maxBodyBytes = 16 << 20

var canonicalID = http.CanonicalHeaderKey(HeaderID)
var canonicalRequestID = http.CanonicalHeaderKey(HeaderRequestID)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.generate(kindCompletion))
	mux.HandleFunc("POST /v1/chat/completions", s.generate(kindChat))
	models := s.modelsJSON()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(models)
	})
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.HandleFunc("GET /metrics", s.handleMetrics)
	var id []string
	if s.id != "" {
		id = []string{s.id}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		if id != nil {
			h[canonicalID] = id
		}
		if v := r.Header[canonicalRequestID]; len(v) > 0 {
			h[canonicalRequestID] = v[:1:1]
		}
		mux.ServeHTTP(w, r)
	})
}

// errorBody is vLLM's error response.
type errorBody struct {
	Object  string  `json:"object"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

func errorJSON(status int, typ, msg string) []byte {
	b, _ := json.Marshal(errorBody{Object: "error", Message: msg, Type: typ, Code: status})
	return b
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(errorJSON(status, typ, msg))
}

func writeAPIError(w http.ResponseWriter, e *apiError) { writeError(w, e.status, e.typ, e.msg) }

const closedMessage = "The server is shutting down."

// generation carries what a response needs besides the engine's sequence.
type generation struct {
	kind         apiKind
	id           string
	created      int64
	model        string // as requested (base model or adapter name)
	textKey      uint64
	includeUsage bool
}

func (s *Server) generate(kind apiKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeError(w, http.StatusRequestEntityTooLarge, "BadRequestError",
					fmt.Sprintf("request body larger than %d bytes", maxBodyBytes))
				return
			}
			writeError(w, http.StatusBadRequest, "BadRequestError", "reading request body: "+err.Error())
			return
		}
		req, perr := parseRequest(kind, body)
		if perr != nil {
			writeAPIError(w, perr)
			return
		}
		model, lora, aerr := s.resolveModel(req.model)
		if aerr != nil {
			writeAPIError(w, aerr)
			return
		}
		promptTokens := countTokens(len(req.material))
		maxTokens, finish, aerr := s.outputBudget(req.maxTokens, promptTokens)
		if aerr != nil {
			writeAPIError(w, aerr)
			return
		}
		if d := time.Duration(s.extraLatency.Load()); d > 0 && !s.pause(r.Context(), w, d) {
			return
		}
		if s.injectError() {
			writeError(w, http.StatusInternalServerError, "InternalServerError",
				"Simulated internal server error (modelsim error injection).")
			return
		}
		hashes := appendBlockHashes(make([]uint64, 0, len(req.material)/(s.cfg.BlockSize*bytesPerToken)),
			rootHash(s.cfg.Seed, lora), req.material, s.cfg.BlockSize)
		sq := newSeq(lora, promptTokens, maxTokens, finish, hashes)
		if err := s.eng.submit(sq); err != nil {
			if errors.Is(err, ErrQueueFull) {
				w.Header().Set("Retry-After", "1")
				writeError(w, http.StatusTooManyRequests, "RateLimitError",
					fmt.Sprintf("The waiting queue is full (%d requests).", s.cfg.MaxWaiting))
				return
			}
			writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", closedMessage)
			return
		}
		g := generation{
			kind:         kind,
			id:           s.responseID(kind, r),
			created:      time.Now().Unix(),
			model:        model,
			textKey:      splitmix64(s.cfg.Seed ^ xxhash.Sum64String(req.material)),
			includeUsage: req.includeUsage,
		}
		if req.stream {
			s.stream(r.Context(), w, sq, &g)
			return
		}
		s.respond(r.Context(), w, sq, &g)
	}
}

// resolveModel maps the request's model to the name echoed back and the
// LoRA adapter ("" for the base model).
func (s *Server) resolveModel(name string) (model, lora string, err *apiError) {
	if name == "" || name == s.cfg.Model {
		return s.cfg.Model, "", nil
	}
	for _, l := range s.cfg.LoRAs {
		if name == l {
			return l, l, nil
		}
	}
	return "", "", &apiError{status: http.StatusNotFound, typ: "NotFoundError",
		msg: fmt.Sprintf("The model `%s` does not exist.", name)}
}

// outputBudget decides how many tokens a request generates and how it
// finishes, enforcing the context length like vLLM.
func (s *Server) outputBudget(requested, promptTokens int) (int, string, *apiError) {
	maxLen := s.cfg.MaxModelLen
	if requested > 0 {
		if promptTokens+requested > maxLen {
			return 0, "", badRequest("This model's maximum context length is %d tokens. However, you requested %d tokens "+
				"(%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
				maxLen, promptTokens+requested, promptTokens, requested)
		}
		return requested, finishLength, nil
	}
	if promptTokens >= maxLen {
		return 0, "", badRequest("This model's maximum context length is %d tokens. However, your request has %d input tokens. "+
			"Please reduce the length of the input messages.", maxLen, promptTokens)
	}
	if room := maxLen - promptTokens; room < s.cfg.DefaultMaxTokens {
		return room, finishLength, nil
	}
	return s.cfg.DefaultMaxTokens, finishStop, nil
}

// pause waits d before a request proceeds. It reports false, having answered
// if needed, when the client left or the server closed meanwhile.
func (s *Server) pause(ctx context.Context, w http.ResponseWriter, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.stop:
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", closedMessage)
		return false
	}
}

// injectError decides, deterministically from the seed and the arrival
// order, whether this request fails under the current error rate.
func (s *Server) injectError() bool {
	p := math.Float64frombits(s.errorRate.Load())
	if p <= 0 {
		return false
	}
	n := s.faultSeq.Add(1)
	u := float64(splitmix64(s.cfg.Seed^0x6661756c74+n)>>11) / (1 << 53)
	return u < p
}

// responseID is "cmpl-"/"chatcmpl-" followed by the request's x-request-id
// (as vLLM does) or by 32 hex digits derived from the seed.
func (s *Server) responseID(kind apiKind, r *http.Request) string {
	prefix := "cmpl-"
	if kind == kindChat {
		prefix = "chatcmpl-"
	}
	if v := r.Header.Get(HeaderRequestID); v != "" {
		return prefix + v
	}
	n := s.idSeq.Add(1)
	var raw [16]byte
	binary.BigEndian.PutUint64(raw[:8], splitmix64(s.cfg.Seed+n))
	binary.BigEndian.PutUint64(raw[8:], splitmix64(^s.cfg.Seed+n))
	buf := make([]byte, 0, len(prefix)+32)
	buf = append(buf, prefix...)
	return string(hex.AppendEncode(buf, raw[:]))
}

// await blocks until the sequence ends. If the client goes away first it
// aborts the sequence (freeing its KV blocks) and reports false.
func (s *Server) await(ctx context.Context, sq *seq) (seqState, bool) {
	for {
		if st := sq.loadState(); st.terminal() {
			return st, true
		}
		select {
		case <-sq.notify:
		case <-ctx.Done():
			s.eng.abort(sq)
			return stateAborted, false
		}
	}
}

type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

type usageJSON struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	PromptTokensDetails promptTokensDetails `json:"prompt_tokens_details"`
}

func usageOf(sq *seq) usageJSON {
	n := int(sq.generated.Load())
	return usageJSON{
		PromptTokens:        sq.promptTokens,
		TotalTokens:         sq.promptTokens + n,
		CompletionTokens:    n,
		PromptTokensDetails: promptTokensDetails{CachedTokens: int(sq.cached.Load())},
	}
}

type completionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     *string `json:"logprobs"`
	FinishReason string  `json:"finish_reason"`
	StopReason   *string `json:"stop_reason"`
}

type chatMessageJSON struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	ToolCalls []int  `json:"tool_calls"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      chatMessageJSON `json:"message"`
	Logprobs     *string         `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
	StopReason   *string         `json:"stop_reason"`
}

type responseJSON struct {
	ID      string    `json:"id"`
	Object  string    `json:"object"`
	Created int64     `json:"created"`
	Model   string    `json:"model"`
	Choices any       `json:"choices"`
	Usage   usageJSON `json:"usage"`
}

// respond writes a non-streaming response once the sequence is done.
func (s *Server) respond(ctx context.Context, w http.ResponseWriter, sq *seq, g *generation) {
	st, ok := s.await(ctx, sq)
	if !ok {
		return
	}
	if st != stateFinished {
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", closedMessage)
		return
	}
	n := int(sq.generated.Load())
	text := outputText(g.textKey, n)
	resp := responseJSON{ID: g.id, Created: g.created, Model: g.model, Usage: usageOf(sq)}
	if g.kind == kindChat {
		resp.Object = "chat.completion"
		resp.Choices = [1]chatChoice{{Message: chatMessageJSON{Role: "assistant", Content: text, ToolCalls: []int{}},
			FinishReason: sq.finish}}
	} else {
		resp.Object = "text_completion"
		resp.Choices = [1]completionChoice{{Text: text, FinishReason: sq.finish}}
	}
	b, err := json.Marshal(resp)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "InternalServerError", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// sseWriter writes server-sent events and flushes each one.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	g       *generation
	base    []byte // `data: {"id":...,"object":...,"created":...,"model":...`
	buf     []byte
	started bool
	failed  bool // a write failed: the client is gone
}

func newSSEWriter(w http.ResponseWriter, g *generation) *sseWriter {
	object := "text_completion"
	if g.kind == kindChat {
		object = "chat.completion.chunk"
	}
	id, _ := json.Marshal(g.id)
	model, _ := json.Marshal(g.model)
	base := make([]byte, 0, 96+len(id)+len(model))
	base = append(base, `data: {"id":`...)
	base = append(base, id...)
	base = append(base, `,"object":"`...)
	base = append(base, object...)
	base = append(base, `","created":`...)
	base = strconv.AppendInt(base, g.created, 10)
	base = append(base, `,"model":`...)
	base = append(base, model...)
	return &sseWriter{w: w, rc: http.NewResponseController(w), g: g, base: base, buf: make([]byte, 0, 256)}
}

func (sw *sseWriter) begin() {
	if sw.started {
		return
	}
	sw.started = true
	h := sw.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	sw.w.WriteHeader(http.StatusOK)
}

func (sw *sseWriter) send(event []byte) {
	if sw.failed {
		return
	}
	sw.begin()
	if _, err := sw.w.Write(event); err != nil {
		sw.failed = true
		return
	}
	if err := sw.rc.Flush(); err != nil {
		sw.failed = true
	}
}

// roleChunk is the first chat chunk, announcing the assistant role.
func (sw *sseWriter) roleChunk() {
	b := append(sw.buf[:0], sw.base...)
	b = append(b, `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	sw.buf = b
	sw.send(b)
}

// tokenChunk sends output token i; the last token carries the finish reason.
func (sw *sseWriter) tokenChunk(i int, finish string) {
	b := append(sw.buf[:0], sw.base...)
	if sw.g.kind == kindChat {
		b = append(b, `,"choices":[{"index":0,"delta":{"content":"`...)
	} else {
		b = append(b, `,"choices":[{"index":0,"text":"`...)
	}
	if i > 0 {
		b = append(b, ' ')
	}
	b = append(b, outputWord(sw.g.textKey, i)...)
	if sw.g.kind == kindChat {
		b = append(b, `"},"logprobs":null,"finish_reason":`...)
	} else {
		b = append(b, `","logprobs":null,"finish_reason":`...)
	}
	if finish == "" {
		b = append(b, "null"...)
	} else {
		b = append(b, '"')
		b = append(b, finish...)
		b = append(b, '"')
	}
	if sw.g.kind == kindChat {
		b = append(b, "}]}\n\n"...)
	} else {
		b = append(b, `,"stop_reason":null}]}`+"\n\n"...)
	}
	sw.buf = b
	sw.send(b)
}

// usageChunk sends the usage-only chunk (empty choices) of include_usage.
func (sw *sseWriter) usageChunk(u usageJSON) {
	ub, _ := json.Marshal(u)
	b := append(sw.buf[:0], sw.base...)
	b = append(b, `,"choices":[],"usage":`...)
	b = append(b, ub...)
	b = append(b, "}\n\n"...)
	sw.buf = b
	sw.send(b)
}

func (sw *sseWriter) errorEvent(status int, typ, msg string) {
	b := append(sw.buf[:0], "data: "...)
	b = append(b, errorJSON(status, typ, msg)...)
	b = append(b, "\n\n"...)
	sw.buf = b
	sw.send(b)
}

func (sw *sseWriter) done() { sw.send([]byte("data: [DONE]\n\n")) }

// stream writes one SSE chunk per generated token as the engine produces
// them, then (with include_usage) a usage chunk, then [DONE]. The first bytes
// go out with the first token, as in vLLM.
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, sq *seq, g *generation) {
	sw := newSSEWriter(w, g)
	sent := 0
	for {
		st := sq.loadState()
		n := int(sq.generated.Load())
		if n > sent && sent == 0 && g.kind == kindChat {
			sw.roleChunk()
		}
		for ; sent < n; sent++ {
			finish := ""
			if sent == sq.maxTokens-1 {
				finish = sq.finish
			}
			sw.tokenChunk(sent, finish)
		}
		if sw.failed {
			s.eng.abort(sq)
			return
		}
		if st.terminal() {
			switch {
			case st == stateAborted:
				return
			case st == stateFailed && !sw.started:
				writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", closedMessage)
				return
			case st == stateFailed:
				sw.errorEvent(http.StatusServiceUnavailable, "ServiceUnavailableError", closedMessage)
			}
			if g.includeUsage {
				sw.usageChunk(usageOf(sq))
			}
			sw.done()
			return
		}
		select {
		case <-sq.notify:
		case <-ctx.Done():
			s.eng.abort(sq)
			return
		}
	}
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if s.ready.Load() {
		w.WriteHeader(http.StatusOK)
		return
	}
	writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "The engine is not running.")
}

// modelJSON is one entry of /v1/models in vLLM's shape.
type modelJSON struct {
	ID          string           `json:"id"`
	Object      string           `json:"object"`
	Created     int64            `json:"created"`
	OwnedBy     string           `json:"owned_by"`
	Root        string           `json:"root"`
	Parent      *string          `json:"parent"`
	MaxModelLen *int             `json:"max_model_len"`
	Permission  []permissionJSON `json:"permission"`
}

type permissionJSON struct {
	ID                 string  `json:"id"`
	Object             string  `json:"object"`
	Created            int64   `json:"created"`
	AllowCreateEngine  bool    `json:"allow_create_engine"`
	AllowSampling      bool    `json:"allow_sampling"`
	AllowLogprobs      bool    `json:"allow_logprobs"`
	AllowSearchIndices bool    `json:"allow_search_indices"`
	AllowView          bool    `json:"allow_view"`
	AllowFineTuning    bool    `json:"allow_fine_tuning"`
	Organization       string  `json:"organization"`
	Group              *string `json:"group"`
	IsBlocking         bool    `json:"is_blocking"`
}

func (s *Server) modelsJSON() []byte {
	perm := func(i int) []permissionJSON {
		return []permissionJSON{{
			ID: fmt.Sprintf("modelperm-%016x", splitmix64(s.cfg.Seed+uint64(i))), Object: "model_permission",
			Created: s.created, AllowSampling: true, AllowLogprobs: true, AllowView: true, Organization: "*",
		}}
	}
	maxLen := s.cfg.MaxModelLen
	base := s.cfg.Model
	data := []modelJSON{{ID: base, Object: "model", Created: s.created, OwnedBy: "vllm", Root: base,
		MaxModelLen: &maxLen, Permission: perm(0)}}
	for i, l := range s.cfg.LoRAs {
		data = append(data, modelJSON{ID: l, Object: "model", Created: s.created, OwnedBy: "vllm", Root: l,
			Parent: &base, Permission: perm(i + 1)})
	}
	b, _ := json.Marshal(struct {
		Object string      `json:"object"`
		Data   []modelJSON `json:"data"`
	}{"list", data})
	return b
}

// garbageMetrics is what MetricsGarbage serves: no Prometheus parser
// accepts it (the first line is not a metric name).
const garbageMetrics = "<html>modelsim: garbage metrics \x00\xff</html>\nvllm:num_requests_waiting{model_name=\"broken 1\n"

// brokenLoadValue is the value the load gauges read under a fault that
// breaks them.
func brokenLoadValue(f MetricsFault) (float64, bool) {
	switch f {
	case MetricsNaN:
		return math.NaN(), true
	case MetricsInf:
		return math.Inf(1), true
	case MetricsNegative:
		return -5, true
	}
	return 0, false
}

var metricsBufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// handleMetrics serves the Prometheus text format (version 0.0.4) only, as
// vLLM's Python exporter does, whatever the Accept header asks for. With
// name[] query parameters it answers only the families named, as
// Prometheus client_python (vLLM's exporter) does; client_python matches
// sample names, so it tells a histogram's _bucket, _sum and _count apart,
// where modelsim keeps or drops a family whole by its name.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	switch MetricsFault(s.metricsFault.Load()) {
	case MetricsGarbage:
		w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
		_, _ = io.WriteString(w, garbageMetrics)
		return
	case MetricsSlow:
		select {
		case <-r.Context().Done():
		case <-s.stop:
			http.Error(w, "server closed", http.StatusServiceUnavailable)
		}
		return
	case Metrics500:
		http.Error(w, "modelsim: simulated metrics failure", http.StatusInternalServerError)
		return
	}
	var only map[string]bool
	reg := s.regs.gauges
	if names := r.URL.Query()["name[]"]; len(names) > 0 {
		only = make(map[string]bool, len(names))
		for _, n := range names {
			only[n] = true
			if otherNames[n] {
				reg = s.regs.all
			}
		}
	} else {
		reg = s.regs.all
	}
	mfs, err := reg.Gather()
	if err != nil {
		http.Error(w, "gathering metrics: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if v, ok := brokenLoadValue(MetricsFault(s.metricsFault.Load())); ok {
		for _, mf := range mfs {
			switch mf.GetName() {
			case metricWaiting, metricRunning, metricKVUsage, metricGPUCacheUsage:
				for _, m := range mf.GetMetric() {
					if m.GetGauge() != nil {
						m.Gauge.Value = &v
					}
				}
			}
		}
	}
	buf := metricsBufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer metricsBufPool.Put(buf)
	for _, mf := range mfs {
		if only != nil && !only[mf.GetName()] {
			continue
		}
		if _, err := expfmt.MetricFamilyToText(buf, mf); err != nil {
			http.Error(w, "encoding metrics: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	_, _ = w.Write(buf.Bytes())
}
