package extproc

// Explaining decisions (issue 16): with Options.Decisions.Ring set, every
// request the stream routes or refuses leaves one decisions.Record (the
// scheduling explanation of its profile runs, the site stage's decision,
// the chosen endpoints or the refusal); with EmitEndpointScores, the
// scores of the primary profile's run go into the dynamic metadata of
// the headers response. With both off, a stream does nothing here but
// two nil checks.

import (
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/pkg/decisions"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestage"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// EndpointScoresKey is the dynamic-metadata key, in LBNamespace, of the
// per-endpoint scores (--emit-endpoint-scores): a struct from the
// host:port of every scored candidate of the primary profile's run to its
// weighted total (not capped by DecisionOptions.MaxEndpoints). It sits
// beside DestinationHeader, whose value it explains; llm-d's router emits
// the same namespace and key, one entry per scored candidate.
const EndpointScoresKey = "x-gateway-destination-endpoint-scores"

// DecisionOptions configure the recording of decisions.
type DecisionOptions struct {
	// Ring receives one Record per routed or refused request; nil records
	// nothing (--decision-buffer-size 0).
	Ring *decisions.Ring
	// EmitEndpointScores puts the weighted totals of every scored
	// candidate of the primary profile's run into the headers response's
	// dynamic metadata (EndpointScoresKey), whether or not Ring is set.
	EmitEndpointScores bool
	// MaxEndpoints bounds the endpoints listed per filter step and per run
	// (scheduling.ExplainLimits); 0 means scheduling.DefaultExplainEndpoints.
	MaxEndpoints int
}

func (o *DecisionOptions) on() bool { return o.Ring != nil || o.EmitEndpointScores }

// decisionState is a stream's part of its decision.
type decisionState struct {
	x    *scheduling.Explanation
	site *decisions.Site
	// primary is the primary run of a routed request (for the emitted
	// scores); done is set once the record is written.
	primary *scheduling.ProfileRun
	done    bool
	cuts    int // strings of site cut to their caps
}

// explainStart attaches an explanation to the request about to be
// scheduled.
func (st *stream) explainStart(req *scheduling.Request) {
	if o := &st.s.opts.Decisions; o.on() {
		st.dec.x = scheduling.Explain(req, scheduling.ExplainLimits{MaxEndpoints: o.MaxEndpoints, AllScores: o.EmitEndpointScores})
	}
}

// explainSite keeps the site stage's decision, a refusal's too (the
// record then says which stage refused, and why).
func (st *stream) explainSite(d *sitestage.Decision) {
	if st.s.opts.Decisions.Ring == nil {
		return
	}
	s := &decisions.Site{Local: d.Local, Tier: d.Tier.String(), Path: d.Path, Reason: d.Reason}
	for _, f := range []struct {
		dst *string
		src string
	}{{&s.Site, d.Site}, {&s.Cluster, d.Cluster}, {&s.Gateway, d.Gateway}} {
		var cut bool
		if *f.dst, cut = decisions.Cut(f.src, decisions.MaxTextBytes); cut {
			st.dec.cuts++
		}
	}
	st.dec.site = s
}

// newRecord starts the record of the stream's request.
func (st *stream) newRecord() *decisions.Record {
	r := &decisions.Record{Time: st.s.now(), Site: st.dec.site, Truncated: st.dec.cuts}
	var cut bool
	count := func() {
		if cut {
			r.Truncated++
		}
	}
	r.RequestID, cut = decisions.Cut(st.reqID, decisions.MaxIDBytes)
	count()
	r.Model, cut = decisions.Cut(st.parsed.Model, decisions.MaxModelBytes)
	count()
	r.TargetModel, cut = decisions.Cut(st.targetModel(), decisions.MaxModelBytes)
	count()
	r.FallbackModel, cut = decisions.Cut(st.fallbackModel, decisions.MaxModelBytes)
	count()
	if x := st.dec.x; x != nil {
		r.Profiles, r.DroppedRuns = x.Runs, x.DroppedRuns
		// A run's TargetModel is the request's, from the client: copied
		// and capped like the record's own model names.
		for i := range r.Profiles {
			r.Profiles[i].TargetModel, cut = decisions.Cut(r.Profiles[i].TargetModel, decisions.MaxModelBytes)
			count()
		}
	}
	return r
}

// recordRouted writes the record of a request routed to res's targets,
// or to a remote site (res nil).
func (st *stream) recordRouted(res *scheduling.Result) {
	if res != nil && st.dec.x != nil {
		st.dec.primary = st.dec.x.Primary(res.PrimaryProfile)
	}
	ring := st.s.opts.Decisions.Ring
	if ring == nil || st.dec.done {
		return
	}
	st.dec.done = true
	r := st.newRecord()
	if res != nil {
		r.PrimaryProfile = res.PrimaryProfile
	}
	if len(st.targets) > 0 {
		r.Endpoint = st.targets[0].Name()
		r.Targets = make([]string, len(st.targets))
		for i, e := range st.targets {
			r.Targets[i] = e.HostPort()
		}
	}
	ring.Add(r)
}

// recordRefusal writes the record of a refused request.
func (st *stream) recordRefusal(rf *refusal) {
	ring := st.s.opts.Decisions.Ring
	if ring == nil || st.dec.done {
		return
	}
	st.dec.done = true
	r := st.newRecord()
	msg, cut := decisions.Cut(rf.message, decisions.MaxTextBytes)
	if cut {
		r.Truncated++
	}
	r.Refusal = &decisions.Refusal{Status: rf.status, Reason: rf.reason, Message: msg}
	ring.Add(r)
}

// scoresMetadata adds the primary run's scores to md
// (--emit-endpoint-scores).
func (st *stream) scoresMetadata(md *structpb.Struct) *structpb.Struct {
	if !st.s.opts.Decisions.EmitEndpointScores {
		return md
	}
	all := st.dec.x.RunScores(st.dec.primary)
	if len(all) == 0 {
		return md
	}
	scores := make(map[string]*structpb.Value, len(all))
	for _, e := range all {
		scores[e.Address] = structpb.NewNumberValue(e.Total)
	}
	md.Fields[LBNamespace].GetStructValue().Fields[EndpointScoresKey] = structpb.NewStructValue(&structpb.Struct{Fields: scores})
	return md
}

// refusalLogInterval is how often the V(0) line of one pool-trouble
// reason is written; the refusals between two of them are logged at V(1)
// and counted in the next V(0) line ("suppressed").
const refusalLogInterval = 10 * time.Second

// refusalLogLevel is the verbosity of a refusal's one log line: a
// request the client got wrong or that load turned away (4xx, 429, and
// the 503s of load or of the request: the buffer budget, flow control
// stopping, a subset or filters that match nothing, an unhealthy site)
// at V(1); the pool's trouble (503 no_endpoints: no ready endpoint at
// all) at V(0), at most once per refusalLogInterval (poolTrouble); any
// other 5xx is logged as an error.
func refusalLogLevel(status int, reason string) (level int, poolTrouble, isError bool) {
	switch {
	case status >= 500 && status != 503:
		return 0, false, true
	case status == 503 && reason == ReasonNoEndpoints:
		return 0, true, false
	}
	return 1, false, false
}

// logLimiter lets one line through per interval and counts the others;
// lock-free, for the request path.
type logLimiter struct {
	next       atomic.Int64 // unix nanoseconds of the next line let through
	suppressed atomic.Int64
}

// allow reports whether a line may be written at now, and how many were
// held back since the last one.
func (l *logLimiter) allow(now time.Time, every time.Duration) (bool, int64) {
	t := now.UnixNano()
	n := l.next.Load()
	if t < n || !l.next.CompareAndSwap(n, t+int64(every)) {
		l.suppressed.Add(1)
		return false, 0
	}
	return true, l.suppressed.Swap(0)
}

// logRefusal writes the one line of a refusal (refusalLogLevel).
func (st *stream) logRefusal(r *refusal, model string) {
	level, pool, isErr := refusalLogLevel(r.status, r.reason)
	if isErr {
		st.logger().Error(errors.New(r.message), "Request failed", "status", r.status, "reason", r.reason, "model", model)
		return
	}
	if pool {
		if ok, suppressed := st.s.noEndpointsLog.allow(st.s.now(), refusalLogInterval); ok {
			st.logger().Info("Request refused", "status", r.status, "reason", r.reason, "message", r.message, "model", model,
				"suppressed", suppressed)
			return
		}
		level = 1
	}
	if l := st.v(level); l.Enabled() {
		l.Info("Request refused", "status", r.status, "reason", r.reason, "message", r.message, "model", model)
	}
}
