package usageweight

import (
	"time"

	"github.com/switchyard-ai/switchyard/pkg/internal/monotime"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// QuotaStats is an endpoint's rate-limit snapshot as the admin API shows
// it (the quota object of /admin/stats/backends).
type QuotaStats struct {
	// ObservedAt is when the response that carried the headers arrived.
	ObservedAt time.Time `json:"observedAt"`
	// AgeSeconds is the snapshot's age; TTLSeconds how long it counts as
	// fresh; Fresh whether AgeSeconds <= TTLSeconds.
	AgeSeconds float64 `json:"ageSeconds"`
	TTLSeconds float64 `json:"ttlSeconds"`
	Fresh      bool    `json:"fresh"`
	// Axes are the usable axes ("requests", "tokens") with their
	// remaining/limit ratio; an axis without both values is absent.
	Axes map[string]QuotaAxis `json:"axes"`
	// Headers are the recognised rate-limit headers as received (values
	// cut to 64 bytes), also those that gave no usable axis.
	Headers map[string]string `json:"headers"`
}

// QuotaAxis is one captured axis.
type QuotaAxis struct {
	// Ratio is clamp(remaining/limit, 0, 1); the token axis's is the
	// smallest of its sub-axes.
	Ratio float64 `json:"ratio"`
}

// UsageStats is what the scorer knows of one endpoint.
type UsageStats struct {
	// Scorer is the usage-weight-scorer instance's name.
	Scorer string `json:"scorer"`
	// ProviderTPM and ProviderRPM are the declarations (0: none).
	ProviderTPM int `json:"providerTpm"`
	ProviderRPM int `json:"providerRpm"`
	// WindowStart and WindowSeconds delimit the current metering window;
	// WindowTokens and WindowRequests are what it metered in it.
	WindowStart    time.Time `json:"windowStart"`
	WindowSeconds  float64   `json:"windowSeconds"`
	WindowTokens   int64     `json:"windowTokens"`
	WindowRequests int64     `json:"windowRequests"`
	// Remaining is the share of quota left that the term uses (the
	// smaller axis), absent when the endpoint takes no part; Score is
	// weight × Remaining.
	Remaining *float64 `json:"remaining,omitempty"`
	Score     float64  `json:"score"`
	// QuotaAware says whether rate-limit headers are observed; Quota is
	// the snapshot, absent when there is none (or QuotaAware is false).
	QuotaAware bool        `json:"quotaAware"`
	Quota      *QuotaStats `json:"quota,omitempty"`
}

// EndpointStats reports the scorer's view of e, for the admin API.
func (s *Scorer) EndpointStats(e *scheduling.Endpoint) UsageStats {
	now := s.now()
	win := s.windowIndex(now)
	st := s.lookup(e)
	out := UsageStats{
		Scorer:        s.typedName.Name,
		WindowStart:   s.start.Add(time.Duration(win) * s.window),
		WindowSeconds: s.window.Seconds(),
		QuotaAware:    s.quota,
	}
	out.ProviderTPM, _ = providerTPMKey.Get(e)
	out.ProviderRPM, _ = providerRPMKey.Get(e)
	if st != nil {
		out.WindowTokens, out.WindowRequests = st.used(win)
	}
	if r, ok := s.remaining(e, st, monotime.Nanos(now), win); ok {
		out.Remaining = &r
		out.Score = s.weight * r
	}
	if !s.quota || st == nil {
		return out
	}
	if o := st.obs.Load(); o != nil {
		age := monotime.Since(o.at, now)
		q := &QuotaStats{ObservedAt: o.At, AgeSeconds: age.Seconds(), TTLSeconds: s.ttl.Seconds(), Fresh: age <= s.ttl,
			Axes: map[string]QuotaAxis{}, Headers: map[string]string{}}
		if o.Requests.Usable {
			q.Axes[AxisRequests] = QuotaAxis{Ratio: o.Requests.Ratio}
		}
		if o.Tokens.Usable {
			q.Axes[AxisTokens] = QuotaAxis{Ratio: o.Tokens.Ratio}
		}
		for k, v := range o.Headers {
			q.Headers[k] = v
		}
		out.Quota = q
	}
	return out
}
