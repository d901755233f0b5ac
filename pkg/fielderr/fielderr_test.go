package fielderr_test

import (
	"errors"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/fielderr"
)

type widgets struct{}

func (widgets) Subject() string { return "widgets" }

type gadgets struct{}

func (gadgets) Subject() string { return "gadgets" }

func TestFieldErrorError(t *testing.T) {
	tests := []struct {
		in   fielderr.FieldError
		want string
	}{
		{fielderr.FieldError{Msg: "the file is empty"}, "the file is empty"},
		{fielderr.FieldError{Path: "a[1].b", Msg: "must not be empty"}, "a[1].b: must not be empty"},
	}
	for _, tt := range tests {
		if got := tt.in.Error(); got != tt.want {
			t.Errorf("%+v.Error() = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestList(t *testing.T) {
	tests := []struct {
		name string
		add  [][2]string // path, message
		want string      // "" means Err returns nil
	}{
		{name: "none"},
		{name: "one", add: [][2]string{{"port", "must be 1..65535, got 0"}}, want: "invalid widgets: port: must be 1..65535, got 0"},
		{name: "document", add: [][2]string{{"", "the file is empty"}}, want: "invalid widgets: the file is empty"},
		{
			name: "several",
			add:  [][2]string{{"a", "x"}, {"", "y"}, {"b[0]", "z"}},
			want: "invalid widgets: 3 errors:\n  a: x\n  y\n  b[0]: z",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l fielderr.List[widgets]
			for _, a := range tt.add {
				l.Add(a[0], "%s", a[1])
			}
			if l.Len() != len(tt.add) {
				t.Fatalf("Len() = %d, want %d", l.Len(), len(tt.add))
			}
			err := l.Err()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Err() = %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Err() = %v, want %q", err, tt.want)
			}
			var ve *fielderr.ValidationError[widgets]
			if !errors.As(err, &ve) || len(ve.Errors) != len(tt.add) {
				t.Fatalf("errors.As: %T %v", err, err)
			}
			var other *fielderr.ValidationError[gadgets]
			if errors.As(err, &other) {
				t.Fatal("a widgets error matched a gadgets ValidationError")
			}
		})
	}
}

func TestErrCopies(t *testing.T) {
	var l fielderr.List[widgets]
	l.Add("a", "first")
	err := l.Err()
	l.Add("b", "second")
	if got := err.Error(); got != "invalid widgets: a: first" {
		t.Fatalf("an Add after Err changed the error: %q", got)
	}
}

func TestFormatArgs(t *testing.T) {
	var l fielderr.List[gadgets]
	l.Add("n", "got %d, want %q", 3, "x")
	if got, want := l.Err().Error(), `invalid gadgets: n: got 3, want "x"`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func BenchmarkList(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		var l fielderr.List[widgets]
		l.Add("endpoints[0].port", "must be 1..65535, got %d", 0)
		l.Add("endpoints[1].name", "must not be empty")
		_ = l.Err().Error()
	}
}
