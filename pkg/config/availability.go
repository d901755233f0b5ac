package config

import (
	"errors"

	"github.com/switchyard-ai/switchyard/pkg/internal/yamldoc"
	"github.com/switchyard-ai/switchyard/pkg/multisite/learner"
)

// The `availability` block: the multi-site availability settings (seed
// 000, G-80 … G-82), the learner's Settings. Nothing needs setting: an
// absent block means learner.DefaultSettings(), and a block that names
// some keys keeps the defaults of the others; the loaded configuration
// (and so `epp validate -o yaml`) shows the block with every value in
// effect. The keys are the seed's snake_case names spelled camelCase, as
// every key of this document is (`ceiling_half_life_ms` is
// `ceilingHalfLifeMs`); see learner.Settings.

// availabilityKeys are the keys of the block, in declaration order.
var availabilityKeys = []string{"shedding", "smoothing", "ceilingHalfLifeMs", "ceilingFloor", "exploreFloor", "fullAfterMs", "roomAfterMs", "queueFull", "freshnessWindowMs"}

// availability decodes and validates the block at path: unknown keys,
// values of the wrong type and values out of range are reported with
// their paths (availability.fullAfterMs).
func (d decoder) availability(path string, v any) *learner.Settings {
	o, ok := d.object(path, v)
	if !ok {
		return nil
	}
	d.keys(path, o, availabilityKeys...)
	s := learner.DefaultSettings()
	if b, ok := o["shedding"]; ok && b != nil {
		if on, ok := b.(bool); ok {
			s.Shedding = on
		} else {
			d.errs.Add(field(path, "shedding"), "expected a boolean, got %s", yamldoc.TypeName(b))
		}
	}
	floats := []struct {
		key string
		dst *float64
	}{{"smoothing", &s.Smoothing}, {"ceilingFloor", &s.CeilingFloor}, {"exploreFloor", &s.ExploreFloor}, {"queueFull", &s.QueueFull}}
	for _, f := range floats {
		if x, ok := o[f.key]; ok && x != nil {
			if p := d.float(field(path, f.key), x); p != nil {
				*f.dst = *p
			}
		}
	}
	ints := []struct {
		key string
		dst *int64
	}{{"ceilingHalfLifeMs", &s.CeilingHalfLifeMs}, {"fullAfterMs", &s.FullAfterMs}, {"roomAfterMs", &s.RoomAfterMs}, {"freshnessWindowMs", &s.FreshnessWindowMs}}
	for _, f := range ints {
		if x, ok := o[f.key]; ok && x != nil {
			if p := d.int(field(path, f.key), x); p != nil {
				*f.dst = int64(*p)
			}
		}
	}
	if err := s.Validate(); err != nil {
		for _, e := range unjoin(err) {
			var fe *learner.FieldError
			if errors.As(e, &fe) {
				d.errs.Add(field(path, fe.Field), "%s", fe.Message)
			} else {
				d.errs.Add(path, "%v", e)
			}
		}
	}
	return &s
}

// unjoin returns the errors an errors.Join holds, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// AvailabilitySettings returns the availability settings in effect: the
// configuration's block, or the defaults without one.
func (l *Loaded) AvailabilitySettings() learner.Settings {
	if l == nil || l.Config == nil || l.Config.Availability == nil {
		return learner.DefaultSettings()
	}
	return *l.Config.Availability
}
