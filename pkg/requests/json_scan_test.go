package requests

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestStringEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		end     int
		escaped bool
	}{
		{`"abc"x`, 5, false},
		{`""`, 2, false},
		{`"a\"b"`, 6, true},
		{`"a\\"b"`, 5, true},
		{`"a\\\"b"`, 8, true},
		{`"\\\\"`, 6, true},
		{`"abc`, -1, false},
		{`"a\"`, -1, false},
		{`x`, -1, false},
	} {
		end, esc := stringEnd([]byte(tc.in), 0)
		if end != tc.end || (end >= 0 && esc != tc.escaped) {
			t.Errorf("stringEnd(%q) = %d, %v; want %d, %v", tc.in, end, esc, tc.end, tc.escaped)
		}
	}
}

func TestSkipValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in  string
		end int
	}{
		{`{"a":[1,{"b":"}]"}],"c":"\""}rest`, 29},
		{`[]`, 2},
		{`123,`, 3},
		{`-1.5e3}`, 6},
		{`true]`, 4},
		{`null `, 4},
		{`{"a":`, -1},
		{`[1,2`, -1},
		{`]`, -1},
		{``, -1},
		{`,`, -1},
	} {
		if got := skipValue([]byte(tc.in), 0); got != tc.end {
			t.Errorf("skipValue(%q) = %d, want %d", tc.in, got, tc.end)
		}
	}
}

func TestMembersAndElements(t *testing.T) {
	t.Parallel()
	obj := []byte(`{ "a" : 1 , "b\"c" : [ 1 , { } ] , "d":"x"}`)
	var keys, vals []string
	m := objectMembers(obj)
	for {
		k, _, vs, ve, ok := m.next()
		if !ok {
			break
		}
		keys = append(keys, string(k))
		vals = append(vals, string(obj[vs:ve]))
	}
	if m.bad || strings.Join(keys, "|") != `a|b\"c|d` || strings.Join(vals, "|") != `1|[ 1 , { } ]|"x"` {
		t.Errorf("members: bad=%v keys=%q vals=%q", m.bad, keys, vals)
	}
	var els []string
	e := arrayElements([]byte(`[ 1 ,"two", [3] ,{"4":4} ]`))
	for {
		v, ok := e.next()
		if !ok {
			break
		}
		els = append(els, string(v))
	}
	if e.bad || strings.Join(els, "|") != `1|"two"|[3]|{"4":4}` {
		t.Errorf("elements: bad=%v %q", e.bad, els)
	}
	for _, bad := range []string{`{"a" 1}`, `{"a":1 "b":2}`, `{"a":`, `{1:2}`, `x`} {
		m := objectMembers([]byte(bad))
		for {
			if _, _, _, _, ok := m.next(); !ok {
				break
			}
		}
		if !m.bad {
			t.Errorf("objectMembers(%q) not flagged bad", bad)
		}
	}
	for _, bad := range []string{`[1 2]`, `[1,`, `{`} {
		e := arrayElements([]byte(bad))
		for {
			if _, ok := e.next(); !ok {
				break
			}
		}
		if !e.bad {
			t.Errorf("arrayElements(%q) not flagged bad", bad)
		}
	}
	if got := member([]byte(`{"k":1,"x":{"k":2},"k":3}`), "k"); string(got) != "3" {
		t.Errorf("member = %q, want last top-level 3", got)
	}
	if got := member([]byte(`{"\u006b":1}`), "k"); string(got) != "1" {
		t.Errorf("member with escaped key = %q", got)
	}
}

func TestPickMembers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		obj  string
		keys []string
		want []string // "-" for nil
		ok   bool
	}{
		{`{"a":1,"b":{"a":2},"c":"x"}`, []string{"c", "a", "z"}, []string{`"x"`, "1", "-"}, true},
		{`{"a":1,"a":[2]}`, []string{"a"}, []string{"[2]"}, true},
		{`{"\u0061":1,"b\"":2}`, []string{"a", `b"`}, []string{"1", "2"}, true},
		{`{}`, []string{"a"}, []string{"-"}, true},
		{`{"a":1,"b" 2}`, []string{"a", "b"}, []string{"1", "-"}, false},
		{`[1]`, []string{"a"}, []string{"-"}, false},
		{``, []string{"a"}, []string{"-"}, false},
		{`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6}`, []string{"a", "b", "c", "d", "e"}, []string{"1", "2", "3", "4", "5"}, true},
	} {
		vals, ok := pickMembers([]byte(tc.obj), tc.keys...)
		var got []string
		for i := range tc.keys {
			if vals[i] == nil {
				got = append(got, "-")
			} else {
				got = append(got, string(vals[i]))
			}
		}
		if ok != tc.ok || strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("pickMembers(%s, %q) = %q, %v; want %q, %v", tc.obj, tc.keys, got, ok, tc.want, tc.ok)
		}
	}
	obj := []byte(`{"b":{},"c":2,"a":[1],"b":3}`)
	vals, _ := pickMembers(obj, "a", "b", "c", "z")
	if got := lastGiven(vals[:4]); got != 1 {
		t.Errorf("lastGiven = %d, want 1 (the second b)", got)
	}
	if got := lastGiven(vals[2:4]); got != 0 {
		t.Errorf("lastGiven of c and absent z = %d, want 0", got)
	}
	if got := lastGiven(vals[3:4]); got != -1 {
		t.Errorf("lastGiven of absent z = %d, want -1", got)
	}
}

func TestPickMembersTooManyKeys(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Error("pickMembers with more than maxPicked keys did not panic")
		}
	}()
	pickMembers([]byte(`{}`), "a", "b", "c", "d", "e", "f")
}

func TestAppendUnescaped(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		``, `plain`, `a\nb\tc\r\b\f\/\\\"`, `\u0041\u00e9\u4e2d`, `\ud83d\ude00`, `\ud83d`, `\ude00x`,
		`\ud83d\u0041`, `\ud83dx\ude00`, `end\\`, `\u0000`, `\u2028`,
	} {
		var want string
		if err := json.Unmarshal([]byte(`"`+raw+`"`), &want); err != nil {
			t.Fatalf("bad test input %q: %v", raw, err)
		}
		if got := appendUnescaped(nil, []byte(raw)); string(got) != want {
			t.Errorf("appendUnescaped(%q) = %q, want %q", raw, got, want)
		}
	}
	// Invalid UTF-8 is kept, not replaced.
	if got := appendUnescaped(nil, []byte("a\xffb\\n")); string(got) != "a\xffb\n" {
		t.Errorf("invalid UTF-8: %q", got)
	}
}

func TestAppendQuoted(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", `q"b\`, "\n\r\t\b\f\x00\x1f\x7f", "<&>", "\u2028\u2029", "é中😀", "a\xffb\xc3"} {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		want := strings.TrimSuffix(buf.String(), "\n")
		if got := string(appendQuoted(nil, s)); got != want {
			t.Errorf("appendQuoted(%q) = %s, want %s", s, got, want)
		}
		if needsQuoting(s) != (want != `"`+s+`"`) {
			t.Errorf("needsQuoting(%q) = %v", s, needsQuoting(s))
		}
	}
}

func TestParseInteger(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int64
		res  int
		note string
	}{
		{"0", 0, intOK, ""},
		{"-0", 0, intOK, ""},
		{"42", 42, intOK, ""},
		{"100.0", 100, intOK, ""},
		{"1e3", 1000, intOK, ""},
		{"1E+2", 100, intOK, ""},
		{"2147483648", math.MaxInt32, intOK, "clamped"},
		{"99999999999999999999", math.MaxInt32, intOK, "beyond int64, clamped"},
		{"1e400", math.MaxInt32, intOK, "infinite, clamped"},
		{"1.5", 0, intNotInt, ""},
		{"1e-400", 0, intNotInt, "underflow is not integral"},
		{"-1", 0, intNegative, ""},
		{"-99999999999999999999", 0, intNegative, ""},
		{"-1e400", 0, intNegative, ""},
		{"-2.0", 0, intNegative, ""},
		{`"5"`, 0, intNotInt, ""},
		{"true", 0, intNotInt, ""},
		{"", 0, intNotInt, ""},
	} {
		n, res := parseInteger([]byte(tc.in), math.MaxInt32)
		if n != tc.n || res != tc.res {
			t.Errorf("parseInteger(%q) = %d, %d; want %d, %d %s", tc.in, n, res, tc.n, tc.res, tc.note)
		}
	}
}

func TestErrorString(t *testing.T) {
	t.Parallel()
	if got := (&Error{Field: "messages[2].content", Message: "must be a string or an array of content parts"}).Error(); got != "messages[2].content: must be a string or an array of content parts" {
		t.Errorf("Error() = %q", got)
	}
	if got := (&Error{Message: "body is empty"}).Error(); got != "body is empty" {
		t.Errorf("Error() = %q", got)
	}
	p := root("a").idx(1).key("b").idx(2).key("c").idx(3).key("overflow")
	if got := p.String(); got != "a[1].b[2].c[3]" {
		t.Errorf("deep path = %q", got)
	}
}

func TestValidJSONDepth(t *testing.T) {
	t.Parallel()
	for _, n := range []int{maxDepth - 1, maxDepth, maxDepth + 1} {
		for _, open := range []string{"[", `{"a":`} {
			closer := "]"
			if open != "[" {
				closer = "}"
			}
			b := []byte(strings.Repeat(open, n) + strings.Repeat(closer, n))
			if got, want := validJSON(b), json.Valid(b); got != want {
				t.Errorf("depth %d %q: validJSON = %v, json.Valid = %v", n, open, got, want)
			}
		}
		b := []byte(strings.Repeat("[", n-1) + "[]" + strings.Repeat("]", n-1))
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Errorf("depth %d with empty innermost: validJSON = %v, json.Valid = %v", n, got, want)
		}
	}
}

func TestValidJSON(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		``, ` `, `{}`, `[]`, `{"a":[1,2,{"b":null}],"c":"d"}`, `-0`, `-0.0e-0`, `01`, `1.`, `.5`, `+1`, `1e`, `1e+`, `-`,
		`"\u12g4"`, `"\u12"`, "\"\x1f\"", "\"\x7f\xff\"", `[1,]`, `{"a":1,}`, `{"a" 1}`, `{1:2}`, `truex`, `tru`, `nul`,
		`[[[]]]`, ` {} `, `"\/"`, `"\x"`, `"abc`, `"abcdefghijklmnop\"qrstuvwxyz"`, `"abcdefgh\\"`, `{"a":1}}`, `[1]]`,
		`{"a":1]`, `[1}`, `1 2`, `"a" "b"`, `[,1]`, `{,}`, `{"a":}`, `[1 2]`, "\t[\n1\r]\n",
	} {
		if got, want := validJSON([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("validJSON(%q) = %v, json.Valid = %v", s, got, want)
		}
	}
}
