package learner

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Settings is the `availability` block of the EPP configuration (seed
// 000's availability settings, G-80 … G-82). Nothing needs setting: every
// field has a default (DefaultSettings), and a block that names only some
// fields keeps the defaults of the others.
//
// Key names: the seed's filter spells them in snake_case
// (`ceiling_half_life_ms`); the EPP configuration is a Kubernetes-style
// document whose keys are camelCase (conventions.md), so the same names
// are spelled camelCase here, with the unit kept as the suffix:
// `ceiling_half_life_ms` is `ceilingHalfLifeMs`, `full_after_ms`
// `fullAfterMs`, and so on. Durations are integer milliseconds, as in the
// seed.
type Settings struct {
	// Shedding turns on per-model shedding (G-60): off by default.
	Shedding bool `json:"shedding"`
	// Smoothing is the weight of a new sample in the smoothed rho (G-14),
	// in (0, 1]; 1 means no smoothing. Default 0.3.
	Smoothing float64 `json:"smoothing"`
	// CeilingHalfLifeMs is the half-life with which the soft bound decays
	// toward the floor and the hard bound relaxes upward (G-13). Default
	// 600000 (10 min).
	CeilingHalfLifeMs int64 `json:"ceilingHalfLifeMs"`
	// CeilingFloor is the least ceiling (G-13), in requests in flight.
	// Default 8.
	CeilingFloor float64 `json:"ceilingFloor"`
	// ExploreFloor lifts every measured site's weight to at least this
	// fraction of the largest ceiling (G-17), in [0, 1]. Default 0.25.
	ExploreFloor float64 `json:"exploreFloor"`
	// FullAfterMs is how long a site must be at its ceiling with work
	// waiting to be full (G-16), and every site serving a model full for
	// the model to shed (G-61). Default 5000.
	FullAfterMs int64 `json:"fullAfterMs"`
	// RoomAfterMs is how long no sample of a site may have shown "at its
	// ceiling with work waiting" before a shed model routes again (G-62).
	// Default 2000.
	RoomAfterMs int64 `json:"roomAfterMs"`
	// QueueFull is the queue per serving unit (ready endpoint) that counts
	// as work waiting for "full" (G-16). Default 1.0.
	QueueFull float64 `json:"queueFull"`
	// FreshnessWindowMs is the freshness window (G-40, §2.11 #3): a site
	// that sent nothing for longer is silent, and rho older than it is
	// not fresh. Default 6000: three times the slower of the relay's
	// scrape interval (1 s) and its peer poll interval (2 s).
	FreshnessWindowMs int64 `json:"freshnessWindowMs"`
}

// Defaults (G-80, and the public defaults of seed-requirements.md §1.1).
const (
	DefaultSmoothing         = 0.3
	DefaultCeilingHalfLifeMs = 600000
	DefaultCeilingFloor      = 8
	DefaultExploreFloor      = 0.25
	DefaultFullAfterMs       = 5000
	DefaultRoomAfterMs       = 2000
	DefaultQueueFull         = 1.0
	DefaultFreshnessWindowMs = 6000
)

// Bounds of the duration fields (one day): a longer value is a typo, and
// keeps the arithmetic far from overflow.
const maxDurationMs = 24 * 60 * 60 * 1000

// DefaultSettings returns the settings with every default.
func DefaultSettings() Settings {
	return Settings{
		Smoothing:         DefaultSmoothing,
		CeilingHalfLifeMs: DefaultCeilingHalfLifeMs,
		CeilingFloor:      DefaultCeilingFloor,
		ExploreFloor:      DefaultExploreFloor,
		FullAfterMs:       DefaultFullAfterMs,
		RoomAfterMs:       DefaultRoomAfterMs,
		QueueFull:         DefaultQueueFull,
		FreshnessWindowMs: DefaultFreshnessWindowMs,
	}
}

// FieldError is one problem of Settings, with the key it is about.
type FieldError struct {
	// Field is the key (`smoothing`, `fullAfterMs`, …).
	Field string
	// Message says what is wrong, with the value given.
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Validate reports every problem (each a *FieldError, joined), each
// prefixed by its key.
func (s Settings) Validate() error {
	var errs []error
	bad := func(key, msg string, v any) {
		errs = append(errs, &FieldError{Field: key, Message: fmt.Sprintf("%s, got %v", msg, v)})
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	if !finite(s.Smoothing) || s.Smoothing <= 0 || s.Smoothing > 1 {
		bad("smoothing", "must be in (0, 1] (1: no smoothing)", s.Smoothing)
	}
	if s.CeilingHalfLifeMs <= 0 || s.CeilingHalfLifeMs > maxDurationMs {
		bad("ceilingHalfLifeMs", fmt.Sprintf("must be in 1 … %d", maxDurationMs), s.CeilingHalfLifeMs)
	}
	if !finite(s.CeilingFloor) || s.CeilingFloor < 1 || s.CeilingFloor > 1e6 {
		bad("ceilingFloor", "must be in 1 … 1000000", s.CeilingFloor)
	}
	if !finite(s.ExploreFloor) || s.ExploreFloor < 0 || s.ExploreFloor > 1 {
		bad("exploreFloor", "must be in [0, 1]", s.ExploreFloor)
	}
	if s.FullAfterMs < 0 || s.FullAfterMs > maxDurationMs {
		bad("fullAfterMs", fmt.Sprintf("must be in 0 … %d", maxDurationMs), s.FullAfterMs)
	}
	if s.RoomAfterMs < 0 || s.RoomAfterMs > maxDurationMs {
		bad("roomAfterMs", fmt.Sprintf("must be in 0 … %d", maxDurationMs), s.RoomAfterMs)
	}
	if !finite(s.QueueFull) || s.QueueFull <= 0 || s.QueueFull > 1e6 {
		bad("queueFull", "must be in (0, 1000000]", s.QueueFull)
	}
	if s.FreshnessWindowMs <= 0 || s.FreshnessWindowMs > maxDurationMs {
		bad("freshnessWindowMs", fmt.Sprintf("must be in 1 … %d", maxDurationMs), s.FreshnessWindowMs)
	}
	return errors.Join(errs...)
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// FreshnessWindow returns the freshness window as a duration.
func (s Settings) FreshnessWindow() time.Duration { return ms(s.FreshnessWindowMs) }
