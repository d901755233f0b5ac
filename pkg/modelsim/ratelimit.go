package modelsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// RateLimit is a provider-style rate-limit budget the simulator reports
// in OpenAI's x-ratelimit-{limit,remaining}-{requests,tokens} response
// headers on every generation response, so that a router's quota-aware
// observation can be exercised. A value < 0 leaves its header out. The
// budget is static: it changes only when set again (SetRateLimit, the
// PUT /modelsim/ratelimit control, the --ratelimit flag), never by the
// requests served; nothing is enforced.
type RateLimit struct {
	LimitRequests     int64 `json:"limitRequests"`
	RemainingRequests int64 `json:"remainingRequests"`
	LimitTokens       int64 `json:"limitTokens"`
	RemainingTokens   int64 `json:"remainingTokens"`
}

// The rate-limit header names.
const (
	HeaderLimitRequests     = "x-ratelimit-limit-requests"
	HeaderRemainingRequests = "x-ratelimit-remaining-requests"
	HeaderLimitTokens       = "x-ratelimit-limit-tokens"
	HeaderRemainingTokens   = "x-ratelimit-remaining-tokens"
)

// RateLimitPath is the runtime control: GET shows the budget (null when
// off), PUT sets it from a JSON RateLimit, DELETE turns the headers off.
const RateLimitPath = "/modelsim/ratelimit"

// maxRateLimitBody bounds the control's request body.
const maxRateLimitBody = 4 << 10

// maxRateLimitValue bounds each value.
const maxRateLimitValue = 1 << 50

// Validate checks that every value is below 2^50 (negative: header off).
func (rl RateLimit) Validate() error {
	for _, v := range []struct {
		name string
		v    int64
	}{{"limitRequests", rl.LimitRequests}, {"remainingRequests", rl.RemainingRequests}, {"limitTokens", rl.LimitTokens}, {"remainingTokens", rl.RemainingTokens}} {
		if v.v > maxRateLimitValue {
			return fmt.Errorf("%s: must be at most %d (negative: header left out), got %d", v.name, int64(maxRateLimitValue), v.v)
		}
	}
	return nil
}

// ParseRateLimit parses the --ratelimit flag: "requests=REMAINING/LIMIT,
// tokens=REMAINING/LIMIT", either part optional (its headers are then
// left out), e.g. "requests=2/100,tokens=90000/100000".
func ParseRateLimit(s string) (RateLimit, error) {
	rl := RateLimit{-1, -1, -1, -1}
	seen := map[string]bool{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		axis, val, ok := strings.Cut(part, "=")
		if !ok || (axis != "requests" && axis != "tokens") || seen[axis] {
			return RateLimit{}, fmt.Errorf("ratelimit %q: want requests=REMAINING/LIMIT and/or tokens=REMAINING/LIMIT, each once", s)
		}
		seen[axis] = true
		rem, lim, ok := strings.Cut(val, "/")
		r, err1 := strconv.ParseInt(strings.TrimSpace(rem), 10, 64)
		l, err2 := strconv.ParseInt(strings.TrimSpace(lim), 10, 64)
		if !ok || err1 != nil || err2 != nil || r < 0 || l < 0 {
			return RateLimit{}, fmt.Errorf("ratelimit %q: %s: want REMAINING/LIMIT with non-negative integers, got %q", s, axis, val)
		}
		if axis == "requests" {
			rl.RemainingRequests, rl.LimitRequests = r, l
		} else {
			rl.RemainingTokens, rl.LimitTokens = r, l
		}
	}
	if len(seen) == 0 {
		return RateLimit{}, fmt.Errorf("ratelimit %q: want requests=REMAINING/LIMIT and/or tokens=REMAINING/LIMIT", s)
	}
	return rl, rl.Validate()
}

// SetRateLimit sets the budget reported from the next response on; nil
// turns the headers off.
func (s *Server) SetRateLimit(rl *RateLimit) {
	if rl == nil {
		s.rateLimit.Store(nil)
		s.log.V(1).Info("Rate-limit headers off")
		return
	}
	c := *rl
	s.rateLimit.Store(&c)
	s.log.V(1).Info("Rate-limit budget", "limitRequests", c.LimitRequests, "remainingRequests", c.RemainingRequests,
		"limitTokens", c.LimitTokens, "remainingTokens", c.RemainingTokens)
}

// RateLimitBudget returns the budget reported, nil when off.
func (s *Server) RateLimitBudget() *RateLimit {
	if rl := s.rateLimit.Load(); rl != nil {
		c := *rl
		return &c
	}
	return nil
}

// withRateLimit adds the rate-limit headers to generation responses and
// serves the runtime control.
func (s *Server) withRateLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == RateLimitPath {
			s.controlRateLimit(w, r)
			return
		}
		if rl := s.rateLimit.Load(); rl != nil && strings.HasPrefix(r.URL.Path, "/v1/") && r.Method == http.MethodPost {
			h := w.Header()
			for _, kv := range [...]struct {
				name string
				v    int64
			}{{HeaderLimitRequests, rl.LimitRequests}, {HeaderRemainingRequests, rl.RemainingRequests}, {HeaderLimitTokens, rl.LimitTokens}, {HeaderRemainingTokens, rl.RemainingTokens}} {
				if kv.v >= 0 {
					h.Set(kv.name, strconv.FormatInt(kv.v, 10))
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) controlRateLimit(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodDelete:
		s.SetRateLimit(nil)
	case http.MethodPut:
		var rl RateLimit
		dec := json.NewDecoder(io.LimitReader(r.Body, maxRateLimitBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rl); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "ratelimit: "+err.Error())
			return
		}
		if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "ratelimit: one JSON object expected")
			return
		}
		if err := rl.Validate(); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "ratelimit: "+err.Error())
			return
		}
		s.SetRateLimit(&rl)
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "ratelimit: use GET, PUT or DELETE")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s.RateLimitBudget())
}
