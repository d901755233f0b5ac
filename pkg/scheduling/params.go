package scheduling

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	sigsjson "sigs.k8s.io/json"
)

// NoParams is the parameter type of plugins that take none: any key given
// is an unknown field.
type NoParams struct{}

// ParamsRecorder is implemented by handles that keep each instance's
// effective parameters (defaults applied), so `epp validate -o yaml` can
// show them.
type ParamsRecorder interface {
	RecordParams(name string, params any)
}

// Typed builds a Factory from a defaults function and a typed constructor.
// Every plugin factory goes through it, so every plugin decodes the same
// way: start from defaults(), decode the JSON parameters over them strictly
// (an unknown key is an error), call Validate if *P has one (it should
// report every problem, each prefixed by its JSON field path), then call
// newFn.
func Typed[P any, T Plugin](defaults func() P, newFn func(name string, p P, h Handle) (T, error)) Factory {
	return func(name string, raw json.RawMessage, h Handle) (Plugin, error) {
		p := defaults()
		if err := DecodeParams(raw, &p); err != nil {
			return nil, err
		}
		if v, ok := any(&p).(interface{ Validate() error }); ok {
			if err := v.Validate(); err != nil {
				return nil, err
			}
		}
		plugin, err := newFn(name, p, h)
		if err != nil {
			return nil, err
		}
		if rec, ok := h.(ParamsRecorder); ok {
			if ep, ok := any(plugin).(interface{ EffectiveParams() any }); ok {
				// The plugin resolved a setting its parameters left open.
				rec.RecordParams(name, ep.EffectiveParams())
			} else if _, none := any(p).(NoParams); !none {
				rec.RecordParams(name, p)
			}
		}
		return plugin, nil
	}
}

// DecodeParams decodes raw JSON parameters into out strictly: keys match
// case-sensitively, and every unknown or duplicate key is reported with its
// path (e.g. `unknown field "sessionIdConfig.sourcez"`); trailing data and
// type errors are errors too, the latter naming the field.
func DecodeParams(raw json.RawMessage, out any) error {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil
	}
	strictErrs, err := sigsjson.UnmarshalStrict(trimmed, out)
	if err != nil {
		// A type or syntax error stops the decoding, so unknown keys after
		// it are reported once it is fixed.
		return describeDecodeError(err)
	}
	return errors.Join(strictErrs...)
}

// describeDecodeError describes an error of sigs.k8s.io/json's decoder.
// Its type errors are its own copy of encoding/json's UnmarshalTypeError,
// whose exported fields are read by reflection so that the message names
// the field exactly as the user spelled it.
func describeDecodeError(err error) error {
	if isSyntax, offset := sigsjson.SyntaxErrorOffset(err); isSyntax {
		return fmt.Errorf("invalid JSON at byte %d: %s", offset, strings.TrimPrefix(err.Error(), "json: "))
	}
	v := reflect.ValueOf(err)
	if v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().Kind() == reflect.Struct && v.Elem().Type().Name() == "UnmarshalTypeError" {
		e := v.Elem()
		field, value, typ := e.FieldByName("Field"), e.FieldByName("Value"), e.FieldByName("Type")
		if field.Kind() == reflect.String && value.Kind() == reflect.String && typ.IsValid() {
			if t, ok := typ.Interface().(reflect.Type); ok && t != nil {
				want := jsonKind(t.Kind().String())
				if field.String() == "" {
					return fmt.Errorf("expected %s, got %s", want, value.String())
				}
				return fmt.Errorf("%s: expected %s, got %s", field.String(), want, value.String())
			}
		}
	}
	return DescribeJSONError(err)
}

// DescribeJSONError rewrites an encoding/json error so that it names the
// field and says what was expected, without Go type names.
func DescribeJSONError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		want := jsonKind(typeErr.Type.Kind().String())
		if typeErr.Field == "" {
			return fmt.Errorf("expected %s, got %s", want, typeErr.Value)
		}
		return fmt.Errorf("%s: expected %s, got %s", typeErr.Field, want, typeErr.Value)
	}
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		return fmt.Errorf("invalid JSON at byte %d: %s", syntaxErr.Offset, strings.TrimPrefix(syntaxErr.Error(), "json: "))
	}
	return errors.New(strings.TrimPrefix(err.Error(), "json: "))
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	case "slice", "array":
		return "a list"
	case "map", "struct":
		return "an object"
	}
	return goKind
}

// Errors flattens joined errors (errors.Join, or any error with
// Unwrap() []error) into their leaves.
func Errors(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, Errors(e)...)
		}
		return out
	}
	return []error{err}
}
