package quality

import (
	"bufio"
	"encoding/json"
	"fmt"
	"github.com/switchyard-ai/switchyard/pkg/fielderr"
	"io"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/bench/loadgen"
)

// BytesPerToken is how many prompt bytes make one token, for modelsim and
// for the EPPs' character-based estimates alike.
const BytesPerToken = 4

// Workload describes a trace: tenants' shared prefixes (system prompts,
// documents) followed by a per-request question, arriving as a Poisson
// process whose rate steps up.
type Workload struct {
	Name string `json:"name"`
	Seed uint64 `json:"seed"`
	// Prefixes is the number of distinct shared prefixes; each request
	// picks one uniformly. A large number relative to the request count
	// makes a low-sharing workload.
	Prefixes       int `json:"prefixes"`
	PrefixTokens   int `json:"prefixTokens"`
	QuestionTokens int `json:"questionTokens"`
	OutputTokens   int `json:"outputTokens"`
	// Steps is the load ramp: each step is Poisson arrivals at Rate per
	// second for Duration.
	Steps []Step `json:"steps"`
}

// Step is one load level of the ramp.
type Step struct {
	Rate     float64       `json:"rate"`
	Duration time.Duration `json:"duration"`
}

// Request is one trace entry. The prompt is derived from the workload's
// seed, Prefix and Question (see Prompt), so a trace file stays small.
type Request struct {
	ID       int           `json:"id"`
	Step     int           `json:"step"`
	At       time.Duration `json:"at"` // from the start of the trace
	Prefix   int           `json:"prefix"`
	Question uint64        `json:"question"`
}

// Validate reports every invalid field with its name.
func (w Workload) Validate() error {
	var errs fielderr.List[workloadSubject]
	bad := errs.Add
	if w.Name == "" {
		bad("name", "must not be empty")
	}
	if w.Prefixes < 1 {
		bad("prefixes", "must be at least 1, got %d", w.Prefixes)
	}
	if w.PrefixTokens < 0 {
		bad("prefixTokens", "must not be negative, got %d", w.PrefixTokens)
	}
	if w.QuestionTokens < 1 {
		bad("questionTokens", "must be at least 1, got %d", w.QuestionTokens)
	}
	if w.OutputTokens < 1 {
		bad("outputTokens", "must be at least 1, got %d", w.OutputTokens)
	}
	if len(w.Steps) == 0 {
		bad("steps", "must not be empty")
	}
	for i, s := range w.Steps {
		if !(s.Rate > 0) {
			bad(fmt.Sprintf("steps[%d].rate", i), "must be > 0, got %v", s.Rate)
		}
		if s.Duration <= 0 {
			bad(fmt.Sprintf("steps[%d].duration", i), "must be > 0, got %s", s.Duration)
		}
	}
	return errs.Err()
}

// StepStart returns the offset of step i from the start of the trace
// (i = len(Steps) gives the trace's length).
func (w Workload) StepStart(i int) time.Duration {
	var d time.Duration
	for _, s := range w.Steps[:i] {
		d += s.Duration
	}
	return d
}

// Generate returns the trace: for each step, Poisson arrivals at its rate
// (bench/loadgen's schedule, seeded per step), each with a uniformly
// chosen prefix and a unique question. The same workload always gives
// the same trace.
func Generate(w Workload) ([]Request, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	var out []Request
	rng := splitmix(w.Seed ^ 0x5eed)
	for i, s := range w.Steps {
		base := w.StepStart(i)
		for _, at := range loadgen.Arrivals(s.Rate, s.Duration, w.Seed+uint64(i)*0x9e37) {
			rng = splitmix(rng)
			q := splitmix(rng ^ 0xa5a5)
			out = append(out, Request{ID: len(out), Step: i, At: base + at, Prefix: int(rng % uint64(w.Prefixes)), Question: q})
		}
	}
	return out, nil
}

// PrefixText returns prefix p's text: PrefixTokens × 4 bytes of words,
// the same for the same seed and p.
func (w Workload) PrefixText(p int) string {
	return words(splitmix(w.Seed^uint64(p)*0x100000001b3), fmt.Sprintf("tenant %d context:", p), w.PrefixTokens*BytesPerToken)
}

// QuestionText returns the question's text: QuestionTokens × 4 bytes.
func (w Workload) QuestionText(q uint64) string {
	return words(q, fmt.Sprintf(" question %x:", q), w.QuestionTokens*BytesPerToken)
}

var vocabulary = strings.Fields("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu cache block prefix tenant router model token")

// words returns exactly n bytes starting with head, then words chosen
// from key.
func words(key uint64, head string, n int) string {
	var b strings.Builder
	b.Grow(n + 16)
	b.WriteString(head)
	for b.Len() < n {
		key = splitmix(key)
		b.WriteByte(' ')
		b.WriteString(vocabulary[key%uint64(len(vocabulary))])
	}
	return b.String()[:n]
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// WriteTrace writes the workload as a first JSON line and then one line
// per request (JSON Lines).
func WriteTrace(out io.Writer, w Workload, reqs []Request) error {
	bw := bufio.NewWriter(out)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(w); err != nil {
		return err
	}
	for _, r := range reqs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// ReadTrace reads what WriteTrace wrote, strictly (unknown fields are
// errors).
func ReadTrace(in io.Reader) (Workload, []Request, error) {
	dec := json.NewDecoder(in)
	dec.DisallowUnknownFields()
	var w Workload
	if err := dec.Decode(&w); err != nil {
		return w, nil, fmt.Errorf("trace header: %w", err)
	}
	if err := w.Validate(); err != nil {
		return w, nil, fmt.Errorf("trace header: %w", err)
	}
	var reqs []Request
	for {
		var r Request
		err := dec.Decode(&r)
		if err == io.EOF {
			return w, reqs, nil
		}
		if err != nil {
			return w, nil, fmt.Errorf("trace line %d: %w", len(reqs)+2, err)
		}
		if r.Step < 0 || r.Step >= len(w.Steps) {
			return w, nil, fmt.Errorf("trace line %d: step %d out of range", len(reqs)+2, r.Step)
		}
		reqs = append(reqs, r)
	}
}

// workloadSubject names what a Workload.Validate error is about ("invalid workload: ...").
type workloadSubject struct{}

func (workloadSubject) Subject() string { return "workload" }
