// Package report turns benchmark results into the files bench/results
// publishes: markdown tables, grouped bar charts as SVG, and the machine
// description every table carries.
//
// Who imports it: the benchmark drivers (bench/matrix, bench/quality). No goroutines.
package report

import (
	"bufio"
	"bytes"
	"fmt"
	"html"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Table is a markdown table.
type Table struct {
	Header []string
	Rows   [][]string
}

// Markdown renders the table.
func (t *Table) Markdown() string {
	var b strings.Builder
	row := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" " + strings.ReplaceAll(c, "|", `\|`) + " |")
		}
		b.WriteString("\n")
	}
	row(t.Header)
	sep := make([]string, len(t.Header))
	for i := range sep {
		sep[i] = "---"
	}
	row(sep)
	for _, r := range t.Rows {
		row(r)
	}
	return b.String()
}

// Series is one bar colour of a chart: a value per group (NaN: no bar).
type Series struct {
	Name   string
	Values []float64
}

// BarChart is a grouped bar chart.
type BarChart struct {
	Title, YLabel string
	Groups        []string
	Series        []Series
	// Log draws the bars on a log10 scale (values must be > 0).
	Log bool
}

var palette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948"}

// SVG renders the chart.
func (c *BarChart) SVG() string {
	const (
		w, h                   = 900.0, 420.0
		left, right, top, bott = 80.0, 20.0, 50.0, 90.0
	)
	maxV := 0.0
	minV := math.Inf(1)
	for _, s := range c.Series {
		for _, v := range s.Values {
			if !math.IsNaN(v) && v > 0 {
				maxV = math.Max(maxV, v)
				minV = math.Min(minV, v)
			}
		}
	}
	if maxV == 0 {
		maxV, minV = 1, 1
	}
	scale := func(v float64) float64 { // 0..1 of the plot height
		if c.Log {
			lo, hi := math.Floor(math.Log10(minV)), math.Ceil(math.Log10(maxV))
			if hi == lo {
				hi = lo + 1
			}
			return (math.Log10(v) - lo) / (hi - lo)
		}
		return v / (maxV * 1.1)
	}
	ph := h - top - bott
	pw := w - left - right
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="24" font-size="16" text-anchor="middle">%s</text>`+"\n", w/2, html.EscapeString(c.Title))
	fmt.Fprintf(&b, `<text x="18" y="%.0f" transform="rotate(-90 18 %.0f)" text-anchor="middle">%s</text>`+"\n", top+ph/2, top+ph/2, html.EscapeString(c.YLabel))
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", left, top+ph, left+pw, top+ph)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", left, top, left, top+ph)
	// Y ticks.
	for i := 0; i <= 4; i++ {
		f := float64(i) / 4
		var v float64
		if c.Log {
			lo, hi := math.Floor(math.Log10(minV)), math.Ceil(math.Log10(maxV))
			if hi == lo {
				hi = lo + 1
			}
			v = math.Pow(10, lo+f*(hi-lo))
		} else {
			v = f * maxV * 1.1
		}
		y := top + ph - f*ph
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/><text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n",
			left, y, left+pw, y, left-6, y+4, Num(v))
	}
	ng, ns := len(c.Groups), len(c.Series)
	if ng > 0 && ns > 0 {
		gw := pw / float64(ng)
		bw := gw * 0.8 / float64(ns)
		for g, name := range c.Groups {
			gx := left + float64(g)*gw
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", gx+gw/2, top+ph+18, html.EscapeString(name))
			for s, ser := range c.Series {
				if g >= len(ser.Values) || math.IsNaN(ser.Values[g]) || ser.Values[g] <= 0 {
					continue
				}
				bh := math.Max(scale(ser.Values[g]), 0) * ph
				x := gx + gw*0.1 + float64(s)*bw
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s</title></rect>`+"\n",
					x, top+ph-bh, bw*0.95, bh, palette[s%len(palette)], html.EscapeString(ser.Name), html.EscapeString(name), Num(ser.Values[g]))
			}
		}
	}
	for s, ser := range c.Series {
		x := left + float64(s)*180
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="12" height="12" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n",
			x, h-30, palette[s%len(palette)], x+18, h-20, html.EscapeString(ser.Name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// Num formats a value with three significant digits.
func Num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// Machine describes the machine the benchmarks ran on: CPU model, cores,
// memory, kernel, Go version, when the run started, how busy the machine
// was then (the load averages and this process's nice value, since other
// work on a 2-core machine shows in the numbers) and the commit measured.
func Machine() string {
	model, mem, kernel, load := "unknown CPU", "", "", ""
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "MemTotal:") {
				var kb int64
				fmt.Sscanf(strings.TrimPrefix(sc.Text(), "MemTotal:"), "%d", &kb)
				mem = fmt.Sprintf(", %.0f GiB", float64(kb)/(1<<20))
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = ", Linux " + strings.TrimSpace(string(b))
	}
	if startLoad != "" {
		load = ", load average at the start " + startLoad + " (1/5/15 min)"
	}
	if prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0); err == nil {
		// The raw value is 20 - nice on Linux.
		if nice := 20 - prio; nice != 0 {
			load += fmt.Sprintf(", run at nice %d", nice)
		}
	}
	return fmt.Sprintf("%s, %d cores%s%s, %s, started %s%s%s", model, runtime.NumCPU(), mem, kernel, runtime.Version(), started.UTC().Format("2006-01-02 15:04 MST"), load, codeAt)
}

// started and startLoad are read when the process starts, like codeAt:
// a table is written when its run ends, and the load average then is
// mostly the run's own (the EPPs and the load generator on 2 cores). At
// the start it still includes what ran just before (the test binary's
// own build, or the quality run that `make bench-full` runs first).
var (
	started   = time.Now()
	startLoad = loadAverage()
)

// loadAverage is /proc/loadavg's 1, 5 and 15 minute averages as "a/b/c"
// ("" where it cannot be read).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return f[0] + "/" + f[1] + "/" + f[2]
}

// codeAt is read when the process starts, before a driver builds the
// binaries it measures: a commit made during a long run must not be named
// as the code measured.
var codeAt = commit()

// commit names the code in the working directory's checkout: its commit,
// and whether it has local changes (empty without git or outside a
// checkout).
func commit() string {
	rev, err := exec.Command("git", "--no-optional-locks", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	s := ", code at " + strings.TrimSpace(string(rev))
	// Results are not a change to the code measured; a new source file
	// not yet committed is (build outputs are ignored by .gitignore).
	if st, err := exec.Command("git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=normal", "--", ":(top)", ":(top,exclude)bench/results").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		s += " with local changes"
	}
	return s
}
