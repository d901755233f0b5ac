// Package healthparam holds what the health plugins (active-health-check,
// circuit-breaker) share: a duration parameter type written as a Go
// duration string, and metric registration that tolerates a second
// instance or a configuration reload. Only those plugins import it.
package healthparam

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Duration is a time.Duration written in JSON as a Go duration string such
// as "30s" or "500ms", like GIE's metav1.Duration. Numbers are rejected. A
// string that does not parse is kept as an error that Err returns, so that
// the plugin's Validate reports it with the field's path.
type Duration struct {
	time.Duration
	parseErr error
}

// D returns a Duration of d.
func D(d time.Duration) Duration { return Duration{Duration: d} }

// Err returns the parse error of the string the value was decoded from.
func (d Duration) Err() error { return d.parseErr }

// UnmarshalJSON implements json.Unmarshaler. null leaves the value unchanged.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	if len(b) == 0 || b[0] != '"' {
		return &json.UnmarshalTypeError{Value: valueKind(b), Type: reflect.TypeFor[string]()}
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		*d = Duration{parseErr: fmt.Errorf("invalid duration %q: use a Go duration such as \"30s\" or \"500ms\"", s)}
		return nil
	}
	*d = Duration{Duration: v}
	return nil
}

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.Duration.String())
}

// Check reports a duration outside [lo, hi] (or that did not parse),
// prefixed by its field name.
func (d Duration) Check(field string, lo, hi time.Duration) error {
	switch {
	case d.parseErr != nil:
		return fmt.Errorf("%s: %w", field, d.parseErr)
	case d.Duration < lo || d.Duration > hi:
		return fmt.Errorf("%s: must be between %s and %s, got %s", field, lo, hi, d.Duration)
	}
	return nil
}

func valueKind(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	}
	return "number"
}

// RegisterOrReuse registers c on reg, or returns the collector already
// registered there under the same description (a second instance, or a
// configuration reload).
func RegisterOrReuse[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}
