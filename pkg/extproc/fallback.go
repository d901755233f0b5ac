package extproc

// Model fallback chains: when admission refuses a request retryably, the
// request is scheduled again for the next model of its chain.

import (
	"errors"
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// FallbackModelHeader is the response header naming the model a request
// was served by when its fallback chain moved it to another model.
const FallbackModelHeader = "x-switchyard-fallback-model"

// The refusal reasons that move a request along its fallback chain: the
// kv-saturation-admitter's admission_reject (C-35: a retryable 503), and
// the served-model-filter's model_not_found (no endpoint of the pool
// serves the model) and model_unavailable (none of them is a candidate
// now). extproc imports no plugin, so the names are repeated here; a test
// pins them to the plugins' constants.
const (
	FallbackTriggerAdmissionReject  = "admission_reject"
	FallbackTriggerModelNotFound    = "model_not_found"
	FallbackTriggerModelUnavailable = "model_unavailable"
)

// The outcome label values of switchyard_model_fallbacks_total.
const (
	// FallbackServed: a model of the chain was scheduled.
	FallbackServed = "served"
	// FallbackExhausted: the chain ended without a model scheduled (each
	// refused retryably, or one refused non-retryably); the client got
	// the first refusal, its own model's.
	FallbackExhausted = "exhausted"
)

// FallbackMetric counts requests that took their fallback chain.
const FallbackMetric = "switchyard_model_fallbacks_total"

// FallbackTriggers returns the closed set of trigger label values.
func FallbackTriggers() []string {
	return []string{FallbackTriggerAdmissionReject, FallbackTriggerModelNotFound, FallbackTriggerModelUnavailable}
}

// FallbackOutcomes returns the closed set of outcome label values.
func FallbackOutcomes() []string { return []string{FallbackServed, FallbackExhausted} }

// MaxFallbackAttempts bounds the fallback models one request tries,
// whatever the chain (config.MaxFallbackChainLength bounds chains to the
// same number).
const MaxFallbackAttempts = 8

// fallbackTrigger returns the index of a refusal reason in
// FallbackTriggers, -1 when it does not move a request along its chain.
func fallbackTrigger(reason string) int {
	switch reason {
	case FallbackTriggerAdmissionReject:
		return 0
	case FallbackTriggerModelNotFound:
		return 1
	case FallbackTriggerModelUnavailable:
		return 2
	}
	return -1
}

// FallbackMetrics counts fallbacks in
// switchyard_model_fallbacks_total{trigger,outcome}: trigger is the
// refusal that started the chain (FallbackTriggers), outcome whether a
// model of it was served (FallbackOutcomes). Both label sets are closed.
// A nil *FallbackMetrics counts nothing.
type FallbackMetrics struct {
	c [3][2]prometheus.Counter
}

// NewFallbackMetrics registers the fallback counter on reg, or reuses the
// one registered there already.
func NewFallbackMetrics(reg prometheus.Registerer) (*FallbackMetrics, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: FallbackMetric,
		Help: "Requests that admission refused retryably and that were scheduled again for the models of their fallback chain, by the refusal that started it (admission_reject, model_not_found, model_unavailable) and outcome (served: a fallback model was scheduled; exhausted: the chain ended without one, the client got its own model's refusal).",
	}, []string{"trigger", "outcome"})
	if err := reg.Register(vec); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, fmt.Errorf("register %s: %w", FallbackMetric, err)
		}
		existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
		if !ok {
			return nil, fmt.Errorf("register %s: registered as another kind", FallbackMetric)
		}
		vec = existing
	}
	m := &FallbackMetrics{}
	for i, t := range FallbackTriggers() {
		for j, o := range FallbackOutcomes() {
			m.c[i][j] = vec.WithLabelValues(t, o)
		}
	}
	return m, nil
}

func (m *FallbackMetrics) inc(trigger, outcome int) {
	if m != nil {
		m.c[trigger][outcome].Inc()
	}
}

// fallbackChain returns the chain of a request: its target model's, else
// its client model's.
func (r *Runtime) fallbackChain(req *scheduling.Request) []string {
	if r == nil || len(r.FallbackChains) == 0 {
		return nil
	}
	if c, ok := r.FallbackChains[req.TargetModel]; ok {
		return c
	}
	return r.FallbackChains[req.Model]
}

// schedule runs the scheduler for req and, when admission refuses it
// retryably and its model has a fallback chain, for the models of the
// chain in order, each on a fresh request whose TargetModel is that model
// (the served-model-filter then keeps the endpoints serving it, and the
// body is rewritten to it). Only the request's own chain is followed, at
// most MaxFallbackAttempts models: a fallback model's chain is not. It
// returns the request that was scheduled (req itself without a
// fallback), the model of the chain it was scheduled for ("" for none)
// and the result. A chain that ends refuses as before: with the first
// refusal (the client asked for its own model, so the answer is about
// that model, retryable with its Retry-After), also when a fallback model
// refuses non-retryably, which ends the chain. Only a fallback attempt
// that fails without a refusal (an internal error) returns its own error.
// A refused attempt leaves nothing to complete: Process runs PreRequest
// hooks only after admission.
func (st *stream) schedule(req *scheduling.Request, cands []*scheduling.Endpoint) (*scheduling.Request, string, *scheduling.Result, error) {
	res, err := st.rt.Scheduler.Process(st.ctx, req, cands)
	if err == nil {
		return req, "", res, nil
	}
	var re *scheduling.RefusalError
	if !errors.As(err, &re) {
		return req, "", nil, err
	}
	trigger := fallbackTrigger(re.Refusal.Reason)
	chain := st.rt.fallbackChain(req)
	if trigger < 0 || len(chain) == 0 {
		return req, "", nil, err
	}
	first := err
	for i, model := range chain {
		if i == MaxFallbackAttempts {
			break
		}
		next := fallbackRequest(req, model)
		scheduling.ShareExplanation(next, req)
		res, err = st.rt.Scheduler.Process(st.ctx, next, cands)
		if err == nil {
			st.s.opts.FallbackMetrics.inc(trigger, 0)
			if st.v(2).Enabled() {
				st.v(2).Info("Fallback model scheduled", "request", req.ID, "model", req.Model,
					"trigger", FallbackTriggers()[trigger], "fallbackModel", model, "attempt", i+1)
			}
			return next, model, res, nil
		}
		if !errors.As(err, &re) {
			// Not a refusal: an internal failure, which is the answer.
			return req, "", nil, err
		}
		if fallbackTrigger(re.Refusal.Reason) < 0 {
			// Not retryable: the chain ends here.
			break
		}
	}
	st.s.opts.FallbackMetrics.inc(trigger, 1)
	// V(4): the refusal that follows is the request's one line at the
	// levels below.
	if st.v(4).Enabled() {
		st.v(4).Info("Fallback chain exhausted", "request", req.ID, "model", req.Model,
			"trigger", FallbackTriggers()[trigger], "chain", len(chain), "lastError", err.Error())
	}
	return req, "", nil, first
}

// fallbackRequest is req for another target model, without the state the
// first attempt's producers left on it.
func fallbackRequest(req *scheduling.Request, model string) *scheduling.Request {
	return &scheduling.Request{
		ID:              req.ID,
		Model:           req.Model,
		TargetModel:     model,
		Prompt:          req.Prompt,
		Headers:         req.Headers,
		Objective:       req.Objective,
		Priority:        req.Priority,
		FairnessID:      req.FairnessID,
		PromptTokens:    req.PromptTokens,
		BodyBytes:       req.BodyBytes,
		MaxOutputTokens: req.MaxOutputTokens,
		Stream:          req.Stream,
	}
}

// appendFallbackHeader adds FallbackModelHeader to the response headers
// when the request was served by a fallback model.
func (st *stream) appendFallbackHeader(set []*corev3.HeaderValueOption) []*corev3.HeaderValueOption {
	if st.fallbackModel == "" {
		return set
	}
	return append(set, headerOption(FallbackModelHeader, st.fallbackModel))
}
