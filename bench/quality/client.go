package quality

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/gateway"
)

// Outcome is one replayed request as the client saw it.
type Outcome struct {
	ID, Step int
	At       time.Duration // scheduled send time from the trace start
	Lag      time.Duration // how late it was actually sent
	Status   int
	Endpoint string // the x-modelsim-id response header: who served it
	// Reason is the x-switchyard-reason header of a reply that the gateway
	// or the EPP generated (a refusal), "" otherwise.
	Reason string
	Err    string
	StreamResult
}

// OK reports whether the request completed with tokens.
func (o Outcome) OK() bool { return o.Err == "" && o.Status == http.StatusOK && o.Tokens > 0 }

// ErrorKind is why a request did not complete, from a small bounded set:
// "HTTP <status> <reason>" for an error reply (the reason header, or "-"
// when the model server sent it), "client timeout", "stream cut" (it ended
// without [DONE]), "error event", "bad event", "no tokens", or "transport"
// (the request or its stream failed otherwise). "" for a request that
// completed.
func (o Outcome) ErrorKind() string {
	switch {
	case o.OK():
		return ""
	case o.Status != 0 && o.Status != http.StatusOK:
		reason := o.Reason
		if reason == "" {
			reason = "-"
		}
		return fmt.Sprintf("HTTP %d %s", o.Status, reason)
	case strings.Contains(o.Err, context.DeadlineExceeded.Error()) || strings.Contains(o.Err, "Client.Timeout"):
		return "client timeout"
	case strings.HasPrefix(o.Err, errStreamCut):
		return "stream cut"
	case strings.HasPrefix(o.Err, "error event"):
		return "error event"
	case strings.HasPrefix(o.Err, "bad event"):
		return "bad event"
	case o.Err == "":
		return "no tokens"
	default:
		return "transport"
	}
}

// Replayer sends a trace's requests to URL (the gateway) as streamed
// /v1/completions, each at its scheduled time (open loop).
type Replayer struct {
	URL     string // base URL, e.g. http://127.0.0.1:8081
	Model   string
	Client  *http.Client
	Timeout time.Duration // per request, first byte to last; 0 = 2 min
	// OnStep, if set, is called at the start of every step (i) and once
	// after the last one (i = len(Steps)): for step 0 before the first
	// request, for the others in order in one goroutine of their own, so
	// a slow call does not delay the requests. Replay waits for every call
	// before it returns.
	OnStep func(i int)
}

type completionBody struct {
	Model         string `json:"model"`
	Prompt        string `json:"prompt"`
	MaxTokens     int    `json:"max_tokens"`
	Stream        bool   `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// Body returns the request body of r.
func Body(w Workload, model string, prefix string, r Request) []byte {
	b := completionBody{Model: model, Prompt: prefix + w.QuestionText(r.Question), MaxTokens: w.OutputTokens, Stream: true}
	b.StreamOptions.IncludeUsage = true
	out, _ := json.Marshal(b) // strings and ints only: cannot fail
	return out
}

// Replay sends every request and returns their outcomes, indexed like
// reqs. It returns when all have finished (or timed out) and ctx's
// cancellation stops the remaining ones.
func (p *Replayer) Replay(ctx context.Context, w Workload, reqs []Request) []Outcome {
	timeout := p.Timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	out := make([]Outcome, len(reqs))
	prefixes := map[int]string{}
	var wg sync.WaitGroup
	hooks := make(chan int, len(w.Steps))
	hooksDone := make(chan struct{})
	go func() {
		defer close(hooksDone)
		for i := range hooks {
			if p.OnStep != nil {
				p.OnStep(i)
			}
		}
	}()
	hook := func(i int) { hooks <- i }
	if p.OnStep != nil {
		p.OnStep(0)
	}
	start := time.Now()
	step := 0
	for i, r := range reqs {
		for step < r.Step {
			step++
			sleepUntil(ctx, start.Add(w.StepStart(step)))
			hook(step)
		}
		pre, ok := prefixes[r.Prefix]
		if !ok {
			pre = w.PrefixText(r.Prefix)
			prefixes[r.Prefix] = pre
		}
		body := Body(w, p.Model, pre, r)
		sleepUntil(ctx, start.Add(r.At))
		if ctx.Err() != nil {
			out[i] = Outcome{ID: r.ID, Step: r.Step, At: r.At, Err: "not sent: " + ctx.Err().Error()}
			continue
		}
		lag := time.Since(start) - r.At
		wg.Go(func() {
			o := p.one(ctx, body, timeout)
			o.ID, o.Step, o.At, o.Lag = r.ID, r.Step, r.At, lag
			out[i] = o
		})
	}
	for step < len(w.Steps) {
		step++
		sleepUntil(ctx, start.Add(w.StepStart(step)))
		hook(step)
	}
	close(hooks)
	wg.Wait()
	<-hooksDone
	return out
}

func (p *Replayer) one(ctx context.Context, body []byte, timeout time.Duration) Outcome {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return Outcome{Err: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := p.Client.Do(req)
	if err != nil {
		return Outcome{Err: err.Error(), StreamResult: StreamResult{End: time.Since(t0)}}
	}
	defer resp.Body.Close()
	o := Outcome{Status: resp.StatusCode, Endpoint: resp.Header.Get("x-modelsim-id"), Reason: resp.Header.Get(gateway.ReasonHeader)}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		o.Err = fmt.Sprintf("status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
		o.End = time.Since(t0)
		return o
	}
	o.StreamResult, err = ReadStream(resp.Body, t0, time.Now)
	if err != nil {
		o.Err = err.Error()
	}
	return o
}

func sleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
	case <-tm.C:
	}
}

func nan() float64 { return math.NaN() }
