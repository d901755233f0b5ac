package scheduling

// Explaining a decision: when the host attaches an Explanation to a
// request (Explain), every profile run of that request records what its
// filters kept, what every scorer gave each endpoint and what the picker
// chose, bounded by the Explanation's limits. Without one, Profile.Run
// pays a nil check per step and allocates nothing (BenchmarkExplain/off).

import (
	"math"
	"strconv"
	"sync"
)

// PickReasonKey is where a picker (or the selection strategy it runs) may
// record, in a word or two from its closed set of decision reasons, why it
// chose its primary target (e.g. the engine-load picker's "engine_load" or
// "hysteresis"). Profile.Run clears it before the picker runs when the
// request is explained, and copies it into ProfileRun.Reason afterwards;
// nothing else reads it.
var PickReasonKey = NewStateKey[string]("switchyard.io/pick-reason")

// DefaultExplainEndpoints is the default of ExplainLimits.MaxEndpoints.
const DefaultExplainEndpoints = 8

// MaxExplainRuns bounds the profile runs one Explanation keeps (every
// profile of every fallback attempt); later runs are only counted.
const MaxExplainRuns = 16

// ExplainLimits bound what an Explanation records.
type ExplainLimits struct {
	// MaxEndpoints is how many endpoints a filter step lists and how many
	// scored endpoints a run lists (the highest weighted totals, plus the
	// chosen target when it is not among them); the rest are counted in
	// the Truncated fields. 0 means DefaultExplainEndpoints.
	MaxEndpoints int
	// AllScores also keeps every scored endpoint's address and weighted
	// total of each run, uncapped (Explanation.RunScores), beside the
	// capped ProfileRun: for the scores a host emits to the gateway, which
	// must cover every candidate.
	AllScores bool
}

// EndpointTotal is one scored endpoint's weighted total in a run.
type EndpointTotal struct {
	// Address is the endpoint's host:port.
	Address string
	Total   float64
}

// Explanation collects the profile runs of one request. It is used by the
// goroutine that schedules the request; read it once scheduling is over.
type Explanation struct {
	max int
	// Runs are the profile runs in order, at most MaxExplainRuns.
	Runs []ProfileRun
	// DroppedRuns counts runs past MaxExplainRuns.
	DroppedRuns int

	// all holds, with ExplainLimits.AllScores, every scored endpoint of
	// Runs[i] at all[i] (nil for a run that scored nothing). It is not
	// part of the runs, so a record that keeps Runs does not keep it.
	all     [][]EndpointTotal
	keepAll bool

	// Scratch of the run in progress: the endpoints left after the
	// filters, their weighted totals and the raw scores (scorer-major).
	cur     *ProfileRun
	eps     []*Endpoint
	scratch *explainScratch
}

// explainScratch holds the totals and raw scores of a run in progress,
// pooled: they are as long as the candidates times the scorers, and
// only a bounded summary of them is kept.
type explainScratch struct{ totals, raw []float64 }

var scratchPool = sync.Pool{New: func() any { return &explainScratch{} }}

// release gives the scratch back.
func (x *Explanation) release() {
	if x.scratch != nil {
		scratchPool.Put(x.scratch)
		x.scratch = nil
	}
	x.cur, x.eps = nil, nil
}

// ProfileRun is what one profile run did.
type ProfileRun struct {
	// Profile is the profile's name.
	Profile string `json:"profile"`
	// TargetModel is the model the request was scheduled for in this run
	// (a fallback attempt's differs from the first one's).
	TargetModel string `json:"targetModel,omitempty"`
	// Candidates is how many endpoints entered the run.
	Candidates int `json:"candidates"`
	// Filters are the filter steps in order; a run ends at the first
	// one that keeps nothing.
	Filters []FilterStep `json:"filters,omitempty"`
	// Scorers name the scorers and weights, in the order of each
	// EndpointScores.Scores.
	Scorers []ScorerInfo `json:"scorers,omitempty"`
	// Endpoints are the scored endpoints by weighted total, highest first
	// (ties in filter order), at most MaxEndpoints of them plus the chosen
	// target.
	Endpoints []EndpointScores `json:"endpoints,omitempty"`
	// Truncated counts the scored endpoints not listed in Endpoints.
	Truncated int `json:"truncated,omitempty"`
	// Picker is the picker's name.
	Picker string `json:"picker,omitempty"`
	// Targets are the picked endpoints' names, primary first.
	Targets []string `json:"targets,omitempty"`
	// DecidedBy is "scorers" or "strategy" when the picker recorded it
	// (DecidedByKey), "" otherwise (a plain picker: the highest weighted
	// total, or its own rule).
	DecidedBy string `json:"decidedBy,omitempty"`
	// Reason is the picker's reason (PickReasonKey), if it gave one.
	Reason string `json:"reason,omitempty"`
	// Error says why the run chose nothing.
	Error string `json:"error,omitempty"`
}

// FilterStep is what one filter kept.
type FilterStep struct {
	// Filter is the filter's name.
	Filter string `json:"filter"`
	// Kept is how many endpoints it kept.
	Kept int `json:"kept"`
	// Endpoints name the first kept endpoints, at most MaxEndpoints.
	Endpoints []string `json:"endpoints,omitempty"`
	// Truncated counts the kept endpoints not named.
	Truncated int `json:"truncated,omitempty"`
}

// ScorerInfo names a scorer of a run and its weight.
type ScorerInfo struct {
	Scorer string  `json:"scorer"`
	Weight float64 `json:"weight"`
}

// EndpointScores is one endpoint's scores in a run.
type EndpointScores struct {
	// Name and Address identify the endpoint (Address is host:port).
	Name    string `json:"name"`
	Address string `json:"address"`
	// Total is the weighted total the picker saw.
	Total float64 `json:"total"`
	// Scores are the scorers' scores, in the order of ProfileRun.Scorers.
	Scores []ScorePair `json:"scores,omitempty"`
}

// ScorePair is one scorer's raw score for an endpoint and its weighted
// contribution to the total (the raw score clamped to [0, 1], NaN as 0,
// times the weight).
type ScorePair struct {
	Raw      Score   `json:"raw"`
	Weighted float64 `json:"weighted"`
}

// Score is a raw score as the scorer returned it; JSON has no NaN or
// infinity, so those are written as the strings "NaN", "+Inf", "-Inf".
type Score float64

// MarshalJSON implements json.Marshaler.
func (s Score) MarshalJSON() ([]byte, error) {
	f := float64(s)
	switch {
	case math.IsNaN(f):
		return []byte(`"NaN"`), nil
	case math.IsInf(f, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(f, -1):
		return []byte(`"-Inf"`), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// Explain attaches a new Explanation to req, which every later profile run
// of req fills, and returns it.
func Explain(req *Request, l ExplainLimits) *Explanation {
	if l.MaxEndpoints <= 0 {
		l.MaxEndpoints = DefaultExplainEndpoints
	}
	x := &Explanation{max: l.MaxEndpoints, keepAll: l.AllScores}
	req.explain = x
	return x
}

// ShareExplanation makes the profile runs of dst (a fallback attempt of
// src) fill src's Explanation, if src has one.
func ShareExplanation(dst, src *Request) {
	if src != nil && dst != nil {
		dst.explain = src.explain
	}
}

// Explaining reports whether req is explained (Explain): a picker that
// records PickReasonKey checks it first, so that an unexplained request
// pays nothing.
func Explaining(req *Request) bool { return req.explanation() != nil }

// explanation returns the request's Explanation, nil for none.
func (r *Request) explanation() *Explanation {
	if r == nil {
		return nil
	}
	return r.explain
}

// begin opens the run of p.
func (x *Explanation) begin(p *Profile, req *Request, candidates int) {
	x.cur, x.eps = nil, nil
	if len(x.Runs) == MaxExplainRuns {
		x.DroppedRuns++
		return
	}
	x.Runs = append(x.Runs, ProfileRun{Profile: p.name, TargetModel: req.TargetModel, Candidates: candidates, Picker: p.picker.TypedName().Name})
	x.cur = &x.Runs[len(x.Runs)-1]
	PickReasonKey.Delete(req)
}

// filtered records what filter f kept.
func (x *Explanation) filtered(f Filter, eps []*Endpoint) {
	if x.cur == nil {
		return
	}
	n := min(len(eps), x.max)
	names := make([]string, n)
	for i := range n {
		names[i] = eps[i].Name()
	}
	x.cur.Filters = append(x.cur.Filters, FilterStep{Filter: f.TypedName().Name, Kept: len(eps), Endpoints: names, Truncated: len(eps) - n})
}

// startScoring sizes the scratch for n endpoints and the profile's scorers.
func (x *Explanation) startScoring(p *Profile, eps []*Endpoint) {
	if x.cur == nil {
		return
	}
	x.eps = eps
	if x.scratch == nil {
		x.scratch = scratchPool.Get().(*explainScratch)
	}
	x.scratch.raw = growFloats(x.scratch.raw, len(p.scorers)*len(eps))
	x.cur.Scorers = make([]ScorerInfo, len(p.scorers))
	for i, ws := range p.scorers {
		x.cur.Scorers[i] = ScorerInfo{Scorer: ws.Scorer.TypedName().Name, Weight: ws.Weight}
	}
}

// scoredBy records scorer i's raw scores.
func (x *Explanation) scoredBy(i int, scores []float64) {
	if x.cur == nil {
		return
	}
	copy(x.scratch.raw[i*len(scores):], scores)
}

// scoredAll records the weighted totals, before the picker may reorder
// scored.
func (x *Explanation) scoredAll(scored []ScoredEndpoint) {
	if x.cur == nil {
		return
	}
	x.scratch.totals = growFloats(x.scratch.totals, len(scored))
	for i := range scored {
		x.scratch.totals[i] = scored[i].Score
	}
}

// failed records why the run chose nothing.
func (x *Explanation) failed(err error) {
	if x.cur == nil {
		return
	}
	x.cur.Error = err.Error()
	x.release()
}

// picked closes the run: the listed endpoints, the targets and who
// decided.
func (x *Explanation) picked(p *Profile, req *Request, res *ProfileResult) {
	run := x.cur
	if run == nil {
		return
	}
	defer x.release()
	eps := x.eps
	n := len(eps)
	totals := x.scratch.totals[:n]
	keep := topIndexes(totals, x.max)
	if res != nil && len(res.Targets) > 0 {
		chosen := -1
		for i, e := range eps {
			if e == res.Targets[0] {
				chosen = i
				break
			}
		}
		listed := false
		for _, i := range keep {
			listed = listed || i == chosen
		}
		if chosen >= 0 && !listed {
			keep = append(keep, chosen)
		}
		run.Targets = make([]string, len(res.Targets))
		for i, e := range res.Targets {
			run.Targets[i] = e.Name()
		}
	} else {
		run.Error = "the picker chose nothing"
	}
	run.Truncated = n - len(keep)
	run.Endpoints = make([]EndpointScores, len(keep))
	pairs := make([]ScorePair, len(keep)*len(p.scorers))
	for k, i := range keep {
		es := EndpointScores{Name: eps[i].Name(), Address: eps[i].HostPort(), Total: totals[i]}
		if len(p.scorers) > 0 {
			es.Scores = pairs[k*len(p.scorers) : (k+1)*len(p.scorers) : (k+1)*len(p.scorers)]
			for s, ws := range p.scorers {
				raw := x.scratch.raw[s*n+i]
				es.Scores[s] = ScorePair{Raw: Score(raw), Weighted: clampScore(raw) * ws.Weight}
			}
		}
		run.Endpoints[k] = es
	}
	if by, ok := DecidedByKey.Get(req); ok {
		run.DecidedBy = by.String()
	}
	if why, ok := PickReasonKey.Get(req); ok {
		run.Reason = why
	}
	if x.keepAll {
		all := make([]EndpointTotal, n)
		for i, e := range eps {
			all[i] = EndpointTotal{Address: e.HostPort(), Total: totals[i]}
		}
		for len(x.all) < len(x.Runs) {
			x.all = append(x.all, nil)
		}
		x.all[len(x.Runs)-1] = all
	}
}

// RunScores returns every scored endpoint of run, one of x.Runs, with its
// weighted total, in filter order; nil unless the Explanation was made
// with ExplainLimits.AllScores.
func (x *Explanation) RunScores(run *ProfileRun) []EndpointTotal {
	if x == nil || run == nil {
		return nil
	}
	for i := range x.Runs {
		if &x.Runs[i] == run {
			if i < len(x.all) {
				return x.all[i]
			}
			return nil
		}
	}
	return nil
}

// topIndexes returns the indexes of the k highest totals, highest first,
// ties in index order: an insertion into a list of k, O(n·k) for the
// small k of an explanation, with no sort of all n.
func topIndexes(totals []float64, k int) []int {
	top := make([]int, 0, min(k, len(totals))+1)
	for i, t := range totals {
		if len(top) == k && !greater(t, totals[top[k-1]]) {
			continue
		}
		j := len(top)
		if j < k {
			top = append(top, i)
		} else {
			j = k - 1
		}
		for j > 0 && greater(t, totals[top[j-1]]) {
			top[j] = top[j-1]
			j--
		}
		top[j] = i
	}
	return top
}

// greater orders totals highest first, NaN last.
func greater(a, b float64) bool {
	if math.IsNaN(b) {
		return !math.IsNaN(a)
	}
	return a > b
}

// clampScore is the engine's clamp: [0, 1], NaN as 0.
func clampScore(s float64) float64 {
	if !(s > 0) {
		return 0
	}
	return min(s, 1)
}

func growFloats(b []float64, n int) []float64 {
	if cap(b) < n {
		return make([]float64, n)
	}
	b = b[:n]
	clear(b)
	return b
}

// Primary returns the last run of the named profile that chose a target,
// nil if none did.
func (x *Explanation) Primary(profile string) *ProfileRun {
	if x == nil {
		return nil
	}
	for i := len(x.Runs) - 1; i >= 0; i-- {
		if x.Runs[i].Profile == profile && len(x.Runs[i].Targets) > 0 {
			return &x.Runs[i]
		}
	}
	return nil
}
