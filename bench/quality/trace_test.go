package quality

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testWorkload() Workload {
	return Workload{Name: "shared", Seed: 7, Prefixes: 20, PrefixTokens: 64, QuestionTokens: 16, OutputTokens: 4,
		Steps: []Step{{Rate: 50, Duration: 20 * time.Second}, {Rate: 200, Duration: 20 * time.Second}}}
}

// TestGenerateShape: arrivals follow the ramp (per-step counts near
// rate × duration, exponential gaps with mean 1/rate), every prefix is
// used about equally, questions are unique, and the same workload gives
// the same trace.
func TestGenerateShape(t *testing.T) {
	w := testWorkload()
	reqs, err := Generate(w)
	require.NoError(t, err)
	again, err := Generate(w)
	require.NoError(t, err)
	assert.Equal(t, reqs, again, "deterministic")

	perStep := make([][]time.Duration, len(w.Steps))
	perPrefix := map[int]int{}
	questions := map[uint64]bool{}
	for i, r := range reqs {
		assert.Equal(t, i, r.ID)
		require.GreaterOrEqual(t, r.Step, 0)
		require.Less(t, r.Step, len(w.Steps))
		assert.GreaterOrEqual(t, r.At, w.StepStart(r.Step))
		assert.Less(t, r.At, w.StepStart(r.Step+1))
		if i > 0 {
			assert.GreaterOrEqual(t, r.At, reqs[i-1].At, "sorted by time")
		}
		perStep[r.Step] = append(perStep[r.Step], r.At)
		perPrefix[r.Prefix]++
		assert.False(t, questions[r.Question], "question %d repeats", r.Question)
		questions[r.Question] = true
	}
	for i, s := range w.Steps {
		want := s.Rate * s.Duration.Seconds()
		n := float64(len(perStep[i]))
		assert.InDelta(t, want, n, 4*math.Sqrt(want), "step %d count", i) // Poisson: σ = √mean
		var sum, sq float64
		for j := 1; j < len(perStep[i]); j++ {
			g := (perStep[i][j] - perStep[i][j-1]).Seconds()
			sum += g
			sq += g * g
		}
		mean := sum / (n - 1)
		sd := math.Sqrt(sq/(n-1) - mean*mean)
		assert.InDelta(t, 1/s.Rate, mean, 0.1/s.Rate, "step %d mean gap", i)
		assert.InDelta(t, 1.0, sd/mean, 0.1, "step %d: exponential gaps have CV 1", i)
	}
	assert.Len(t, perPrefix, w.Prefixes, "every prefix used")
	exp := float64(len(reqs)) / float64(w.Prefixes)
	for p, n := range perPrefix {
		assert.InDelta(t, exp, float64(n), 5*math.Sqrt(exp), "prefix %d", p)
	}

	other := w
	other.Seed = 8
	o, err := Generate(other)
	require.NoError(t, err)
	assert.NotEqual(t, reqs[:10], o[:10], "the seed changes the trace")
}

// TestPromptTexts: prefixes and questions have exactly the token counts
// asked for (4 bytes each), a prefix is the same text every time and
// differs between prefixes.
func TestPromptTexts(t *testing.T) {
	w := testWorkload()
	assert.Len(t, w.PrefixText(3), 64*BytesPerToken)
	assert.Equal(t, w.PrefixText(3), w.PrefixText(3))
	assert.NotEqual(t, w.PrefixText(3), w.PrefixText(4))
	assert.Len(t, w.QuestionText(99), 16*BytesPerToken)
	assert.NotEqual(t, w.QuestionText(99), w.QuestionText(100))
	w.PrefixTokens = 0
	assert.Empty(t, w.PrefixText(1))
}

func TestTraceRoundTrip(t *testing.T) {
	w := testWorkload()
	reqs, err := Generate(w)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, WriteTrace(&buf, w, reqs))
	assert.Equal(t, len(reqs)+1, strings.Count(buf.String(), "\n"), "one line per request after the header")
	w2, back, err := ReadTrace(&buf)
	require.NoError(t, err)
	assert.Equal(t, w, w2)
	assert.Equal(t, reqs, back)
}

func TestReadTraceRejects(t *testing.T) {
	for _, tc := range []struct{ name, in, err string }{
		{"empty", "", "trace header"},
		{"unknown field", `{"name":"x","prefixes":1,"questionTokens":1,"outputTokens":1,"steps":[{"rate":1,"duration":1}],"extra":1}`, "unknown field"},
		{"invalid header", `{"name":"","prefixes":0,"questionTokens":1,"outputTokens":1,"steps":[]}`, "prefixes"},
		{"step out of range", `{"name":"x","prefixes":1,"questionTokens":1,"outputTokens":1,"steps":[{"rate":1,"duration":1}]}` + "\n" + `{"id":0,"step":3,"at":0,"prefix":0,"question":1}`, "step 3 out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ReadTrace(strings.NewReader(tc.in))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
		})
	}
}

// TestWorkloadValidate reports every bad field with its name.
func TestWorkloadValidate(t *testing.T) {
	err := Workload{Steps: []Step{{Rate: 0, Duration: -1}}, PrefixTokens: -1}.Validate()
	require.Error(t, err)
	for _, f := range []string{"name:", "prefixes:", "prefixTokens:", "questionTokens:", "outputTokens:", "steps[0].rate:", "steps[0].duration:"} {
		assert.Contains(t, err.Error(), f)
	}
	assert.Contains(t, Workload{Name: "x", Prefixes: 1, QuestionTokens: 1, OutputTokens: 1}.Validate().Error(), "steps: must not be empty")
	assert.NoError(t, testWorkload().Validate())
}

func TestWithConfig(t *testing.T) {
	args := []string{"--pool-name", "p", "--config-file", "/config/default-plugins.yaml", "--zap-encoder", "json"}
	assert.Equal(t, []string{"--pool-name", "p", "--config-file", "/x.yaml", "--zap-encoder", "json"}, WithConfig(args, "/x.yaml"))
	assert.Equal(t, []string{"--pool-name", "p", "--zap-encoder", "json"}, WithConfig(args, ""), "dropped: the built-in default")
	assert.Equal(t, []string{"--config-file=/y"}, WithConfig([]string{"--config-file=/c"}, "/y"))
	assert.Empty(t, WithConfig([]string{"--config-file=/c"}, ""))
	assert.Equal(t, "/config/default-plugins.yaml", args[3], "the input is not changed")
}
