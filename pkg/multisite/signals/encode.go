package signals

import (
	"cmp"
	"io"
	"slices"
	"strconv"
	"sync"
)

// Truncation is what Encode left out, by store (StoreLocal, StorePeer):
// Targets counts whole targets dropped (beyond MaxProvidersPerSite, or
// past MaxBytes), Lines counts rows cut beyond MaxLinesPerTarget. A map is
// nil when nothing of its kind was cut.
type Truncation struct{ Targets, Lines map[string]int }

// Empty reports whether nothing was cut.
func (t Truncation) Empty() bool { return len(t.Targets) == 0 && len(t.Lines) == 0 }

func (t *Truncation) addTarget(store string) {
	if t.Targets == nil {
		t.Targets = make(map[string]int, 2)
	}
	t.Targets[store]++
}

func (t *Truncation) addLines(store string, n int) {
	if t.Lines == nil {
		t.Lines = make(map[string]int, 2)
	}
	t.Lines[store] += n
}

var encPool = sync.Pool{New: func() any { return new(encoder) }}

type encoder struct {
	idx []int32
	buf []byte
}

// Encode writes samples as one body: sorted by (site, provider, series
// name) with the targets of the sites isLocal accepts first (a nil isLocal
// makes every site a peer), each target (grid_site, grid_provider) cut at
// lim.MaxLinesPerTarget rows, the providers of a site beyond the first
// lim.MaxProvidersPerSite by name dropped, and then every target from the
// first one that would take the body past lim.MaxBytes on dropped. Rows of
// one series keep their order in samples. It reports what it cut.
//
// A sample that is not a valid row (Sample.Validate) makes Encode return
// that error before writing anything. The only other error is w's.
func Encode(w io.Writer, samples []Sample, isLocal func(site string) bool, lim Limits) (Truncation, error) {
	lim = lim.withDefaults()
	for i := range samples {
		if err := samples[i].Validate(); err != nil {
			return Truncation{}, err
		}
	}
	e := encPool.Get().(*encoder)
	defer func() {
		if cap(e.buf) <= 2*DefaultMaxBytes {
			encPool.Put(e)
		}
	}()
	local := func(site string) bool { return isLocal != nil && isLocal(site) }
	e.idx = e.idx[:0]
	for i := range samples {
		e.idx = append(e.idx, int32(i))
	}
	slices.SortStableFunc(e.idx, func(a, b int32) int {
		x, y := &samples[a], &samples[b]
		if lx, ly := local(x.Site), local(y.Site); lx != ly {
			if lx {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(x.Site, y.Site), cmp.Compare(x.Provider, y.Provider),
			cmp.Compare(x.Name, y.Name), cmp.Compare(x.Cluster, y.Cluster))
	})

	var tr Truncation
	e.buf = e.buf[:0]
	full := false
	providers := 0 // providers of the current site so far
	for start := 0; start < len(e.idx); {
		first := &samples[e.idx[start]]
		end := start + 1
		for end < len(e.idx) {
			s := &samples[e.idx[end]]
			if s.Site != first.Site || s.Provider != first.Provider {
				break
			}
			end++
		}
		store := StorePeer
		if local(first.Site) {
			store = StoreLocal
		}
		if start == 0 || samples[e.idx[start-1]].Site != first.Site {
			providers = 0
		}
		if first.Provider != "" {
			providers++
		}
		switch {
		case full:
			tr.addTarget(store)
		case first.Provider != "" && providers > lim.MaxProvidersPerSite:
			tr.addTarget(store)
		default:
			n := end - start
			if n > lim.MaxLinesPerTarget {
				tr.addLines(store, n-lim.MaxLinesPerTarget)
				n = lim.MaxLinesPerTarget
			}
			mark := len(e.buf)
			for _, j := range e.idx[start : start+n] {
				e.buf = appendLine(e.buf, &samples[j])
			}
			if int64(len(e.buf)) > lim.MaxBytes {
				e.buf = e.buf[:mark]
				full = true
				tr.addTarget(store)
			}
		}
		start = end
	}
	_, err := w.Write(e.buf)
	return tr, err
}

// appendLine appends one row of the format.
func appendLine(b []byte, s *Sample) []byte {
	b = append(b, s.Name...)
	b = append(b, `{`+LabelSite+`="`...)
	b = appendLabelValue(b, s.Site)
	if s.Provider != "" || s.Cluster != "" {
		b = append(b, `",`+LabelCluster+`="`...)
		b = appendLabelValue(b, s.Cluster)
		b = append(b, `",`+LabelProvider+`="`...)
		b = appendLabelValue(b, s.Provider)
	}
	b = append(b, `"} `...)
	b = strconv.AppendFloat(b, s.Value, 'g', -1, 64)
	b = append(b, ' ')
	b = strconv.AppendInt(b, s.Stamp.UnixMilli(), 10)
	return append(b, '\n')
}

// appendLabelValue escapes as the text format does; valid rows never need
// it, but a body must stay well formed whatever it carries.
func appendLabelValue(b []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			b = append(b, `\\`...)
		case '"':
			b = append(b, `\"`...)
		case '\n':
			b = append(b, `\n`...)
		default:
			b = append(b, c)
		}
	}
	return b
}
