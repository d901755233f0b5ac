package report

import (
	"encoding/xml"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTableMarkdown(t *testing.T) {
	tb := &Table{Header: []string{"a", "b|c"}, Rows: [][]string{{"1", "2"}}}
	assert.Equal(t, "| a | b\\|c |\n| --- | --- |\n| 1 | 2 |\n", tb.Markdown())
}

// TestBarChartSVG: the chart is well-formed XML with one bar per finite
// positive value, on a linear and a log scale.
func TestBarChartSVG(t *testing.T) {
	for _, log := range []bool{false, true} {
		c := &BarChart{Title: "t <&>", YLabel: "req/s", Groups: []string{"g1", "g2"}, Log: log,
			Series: []Series{{Name: "x", Values: []float64{10, 2000}}, {Name: "y", Values: []float64{math.NaN(), 300}}}}
		svg := c.SVG()
		dec := xml.NewDecoder(strings.NewReader(svg))
		for {
			_, err := dec.Token()
			if err != nil {
				require.Equal(t, "EOF", err.Error(), svg)
				break
			}
		}
		assert.Equal(t, 3, strings.Count(svg, "<title>"), "one bar per value, none for NaN")
		assert.Contains(t, svg, "t &lt;&amp;&gt;")
	}
}

func TestNum(t *testing.T) {
	assert.Equal(t, "1234", Num(1234.4))
	assert.Equal(t, "12.3", Num(12.34))
	assert.Equal(t, "1.23", Num(1.234))
	assert.Equal(t, "0.0123", Num(0.01234))
	assert.Equal(t, "–", Num(math.NaN()))
}

func TestMachine(t *testing.T) {
	assert.Contains(t, Machine(), "cores")
	if _, err := os.Stat("/proc/loadavg"); err == nil {
		assert.Regexp(t, `^[0-9.]+/[0-9.]+/[0-9.]+$`, loadAverage())
	}
	// The machine line reports what was read at the start, not now.
	defer func(s time.Time, l string) { started, startLoad = s, l }(started, startLoad)
	started, startLoad = time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), "9.99/8.88/7.77"
	assert.Contains(t, Machine(), ", started 2026-01-02 03:04 UTC, load average at the start 9.99/8.88/7.77 (1/5/15 min)")
	if c := commit(); c != "" { // empty without git or outside a checkout
		assert.Regexp(t, `^, code at [0-9a-f]+( with local changes)?$`, c)
	}
}
