package coremetrics

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// MetricSpec selects one metric: series of the family Name whose labels
// equal every entry of Labels. It is parsed from the PromQL instant
// selector subset `name` or `name{label="value",label2=value2}`.
type MetricSpec struct {
	// Name is the metric family name.
	Name string
	// Labels are the required label values. Read-only. A label required to
	// be "" matches series without that label, as in PromQL.
	Labels map[string]string
}

// ParseMetricSpec parses a metric specification. It accepts the PromQL
// instant-vector-selector subset GIE's engineConfigs use:
//
//	name
//	name{}
//	name{label="value", label2=value2}
//
// Names follow Prometheus' legacy rules ([a-zA-Z_:][a-zA-Z0-9_:]*), label
// names [a-zA-Z_][a-zA-Z0-9_]*; label values are double-quoted strings
// with Go/PromQL escapes, or unquoted runs of characters other than `"`,
// `,`, `}` and white space. Only equality matchers are supported; label
// names starting with "__" are reserved; a trailing comma and white space
// between tokens are allowed. The empty string means "not configured" and
// returns nil without error.
func ParseMetricSpec(s string) (*MetricSpec, error) {
	if s == "" {
		return nil, nil
	}
	p := specParser{s: s}
	spec, err := p.parse()
	if err != nil {
		return nil, fmt.Errorf("invalid metric spec %q: %w", s, err)
	}
	return spec, nil
}

// String formats the spec in the syntax ParseMetricSpec reads, with labels
// sorted and values quoted.
func (m *MetricSpec) String() string {
	if m == nil {
		return ""
	}
	if len(m.Labels) == 0 {
		return m.Name
	}
	var b strings.Builder
	b.WriteString(m.Name)
	b.WriteByte('{')
	for i, k := range slices.Sorted(maps.Keys(m.Labels)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(m.Labels[k]))
	}
	b.WriteByte('}')
	return b.String()
}

// Matches reports whether a series with these labels is selected: every
// required label has the required value (a missing label counts as "").
func (m *MetricSpec) Matches(labels map[string]string) bool {
	for k, v := range m.Labels {
		if labels[k] != v {
			return false
		}
	}
	return true
}

type specParser struct {
	s   string
	pos int
}

func (p *specParser) errorf(format string, args ...any) error {
	return fmt.Errorf("%s at offset %d", fmt.Sprintf(format, args...), p.pos)
}

// isSpace is the white space GIE's label-quoting rule stops at (RE2 \s).
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'
}

func (p *specParser) skipSpace() {
	for p.pos < len(p.s) && isSpace(p.s[p.pos]) {
		p.pos++
	}
}

func (p *specParser) peek() (byte, bool) {
	if p.pos < len(p.s) {
		return p.s[p.pos], true
	}
	return 0, false
}

func isNameStart(c byte, colon bool) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || colon && c == ':'
}

func isNameChar(c byte, colon bool) bool {
	return isNameStart(c, colon) || c >= '0' && c <= '9'
}

// ident reads a metric name (colon true) or a label name (colon false).
func (p *specParser) ident(colon bool) (string, bool) {
	start := p.pos
	if c, ok := p.peek(); !ok || !isNameStart(c, colon) {
		return "", false
	}
	p.pos++
	for p.pos < len(p.s) && isNameChar(p.s[p.pos], colon) {
		p.pos++
	}
	return p.s[start:p.pos], true
}

func (p *specParser) parse() (*MetricSpec, error) {
	p.skipSpace()
	name, ok := p.ident(true)
	if !ok {
		if c, more := p.peek(); more && c == '{' {
			return nil, p.errorf("missing metric name before \"{\"")
		}
		return nil, p.errorf("expected a metric name")
	}
	spec := &MetricSpec{Name: name, Labels: map[string]string{}}
	p.skipSpace()
	if c, ok := p.peek(); ok && c == '{' {
		p.pos++
		if err := p.matchers(spec.Labels); err != nil {
			return nil, err
		}
		p.skipSpace()
	}
	if p.pos < len(p.s) {
		return nil, p.errorf("unexpected %q", p.s[p.pos:p.pos+1])
	}
	return spec, nil
}

// matchers reads `label=value, …}` after the opening brace.
func (p *specParser) matchers(labels map[string]string) error {
	for {
		p.skipSpace()
		c, ok := p.peek()
		if !ok {
			return p.errorf("missing \"}\"")
		}
		if c == '}' {
			p.pos++
			return nil
		}
		labelPos := p.pos
		label, ok := p.ident(false)
		if !ok {
			return p.errorf("expected a label name or \"}\"")
		}
		if strings.HasPrefix(label, "__") {
			p.pos = labelPos
			return p.errorf("label name %q is reserved (names starting with \"__\")", label)
		}
		if _, dup := labels[label]; dup {
			p.pos = labelPos
			return p.errorf("label %q given twice", label)
		}
		p.skipSpace()
		switch {
		case strings.HasPrefix(p.s[p.pos:], "!=") || strings.HasPrefix(p.s[p.pos:], "=~") || strings.HasPrefix(p.s[p.pos:], "!~"):
			return p.errorf("only equality matchers (label=\"value\") are supported, got %q", p.s[p.pos:p.pos+2])
		case strings.HasPrefix(p.s[p.pos:], "="):
			p.pos++
		default:
			return p.errorf("expected \"=\" after label %q", label)
		}
		p.skipSpace()
		value, err := p.value()
		if err != nil {
			return err
		}
		labels[label] = value
		p.skipSpace()
		c, ok = p.peek()
		switch {
		case !ok:
			return p.errorf("missing \"}\"")
		case c == ',':
			p.pos++
		case c == '}':
		default:
			return p.errorf("expected \",\" or \"}\" after the value of %q", label)
		}
	}
}

// value reads a double-quoted string or an unquoted value.
func (p *specParser) value() (string, error) {
	c, ok := p.peek()
	if !ok {
		return "", p.errorf("missing label value")
	}
	if c == '"' {
		start := p.pos
		for i := start + 1; i < len(p.s); i++ {
			switch p.s[i] {
			case '\\':
				i++ // skip the escaped byte
			case '"':
				v, err := strconv.Unquote(p.s[start : i+1])
				if err != nil {
					return "", p.errorf("invalid quoted value %s", p.s[start:i+1])
				}
				p.pos = i + 1
				return v, nil
			}
		}
		return "", p.errorf("unterminated quoted value")
	}
	start := p.pos
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		if c == '"' || c == ',' || c == '}' || isSpace(c) {
			break
		}
		p.pos++
	}
	if p.pos == start {
		return "", p.errorf("missing label value")
	}
	return p.s[start:p.pos], nil
}
