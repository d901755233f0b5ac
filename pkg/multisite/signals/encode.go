package signals

import (
	"cmp"
	"io"
	"math"
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
	idx   []int32
	buf   []byte
	spans []span
	sites []siteShare
}

// span is one encoded target in encoder.buf.
type span struct {
	start, end int
	class      int8 // classRound, classLocal or classPeer
	publishes  bool // the target's grid_provider_publishes_load rows only
	alone      bool // publishes: the target has no other rows
	led        bool // the target's publishes_load rows are spans[i-1]
	keep       bool
	store      string
	site       string
}

// Emission classes, in body order.
const (
	classRound int8 = iota // every site's peer-round rows (provider "")
	classLocal             // the local site's provider targets
	classPeer              // the peer sites' provider targets
)

// siteShare is a peer site's provider targets (spans[first:last]) and
// their size, for the fair share of the room left.
type siteShare struct {
	first, last int
	size        int
}

// Encode writes samples as one body, in three parts: every site's
// peer-round rows (the local site's first, then by site), then the local
// site's provider targets (those isLocal accepts; a nil isLocal makes
// every site a peer), then the peer sites' provider targets; sorted by
// (site, provider, series name) within each part, except that a target's
// grid_provider_publishes_load rows lead it. Rows of one series keep
// their order in samples.
//
// Each target (grid_site, grid_provider) is cut at lim.MaxLinesPerTarget
// rows (its publishes_load rows first, so they stay), and the providers
// of a site beyond the first lim.MaxProvidersPerSite by name are dropped.
// Then the body is held within lim.MaxBytes by dropping targets, keeping
// in this order as long as they fit: the round rows; the local site's
// grid_provider_publishes_load rows; the local targets in order; then the
// room left is shared fairly between the peer sites (max-min: a site that
// needs less than an equal share keeps everything, and what it leaves is
// shared by the others). A peer site over its share keeps its
// publishes_load rows first (charged to its share), then its other
// targets in name order, as long as they fit in it. The publishes_load
// rows go first because the EPP's store takes a provider whose row a body
// leaves out for unmeasured: a target dropped for room keeps them when
// they fit, loses its other rows, and counts as dropped; a target whose
// publishes_load rows do not fit loses all its rows. So one site serving
// huge targets cannot push the local rows, another site's rows, or any
// round row out of the body. It reports what it cut: the body never
// exceeds lim.MaxBytes, and every target not whole in it (within the line
// cap) is counted in Truncation.Targets.
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
	class := func(s *Sample) int8 {
		switch {
		case s.Provider == "":
			return classRound
		case local(s.Site):
			return classLocal
		}
		return classPeer
	}
	e.idx = e.idx[:0]
	for i := range samples {
		e.idx = append(e.idx, int32(i))
	}
	slices.SortStableFunc(e.idx, func(a, b int32) int {
		x, y := &samples[a], &samples[b]
		if cx, cy := class(x), class(y); cx != cy {
			return cmp.Compare(cx, cy)
		}
		if lx, ly := local(x.Site), local(y.Site); lx != ly {
			if lx {
				return -1
			}
			return 1
		}
		if c := cmp.Or(cmp.Compare(x.Site, y.Site), cmp.Compare(x.Provider, y.Provider)); c != 0 {
			return c
		}
		// A target's publishes_load rows come first: they are its own
		// span, kept outside the cut.
		if px, py := x.Name == NamePublishesLoad, y.Name == NamePublishesLoad; px != py {
			if px {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(x.Name, y.Name), cmp.Compare(x.Cluster, y.Cluster))
	})

	// Encode every target within the line and provider caps, each into
	// its own span of buf.
	var tr Truncation
	e.buf, e.spans = e.buf[:0], e.spans[:0]
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
		if first.Provider != "" {
			if prev := &samples[e.idx[max(start-1, 0)]]; start == 0 || prev.Site != first.Site || prev.Provider == "" {
				providers = 0
			}
			providers++
		}
		if first.Provider != "" && providers > lim.MaxProvidersPerSite {
			tr.addTarget(store)
			start = end
			continue
		}
		n := end - start
		if n > lim.MaxLinesPerTarget {
			tr.addLines(store, n-lim.MaxLinesPerTarget)
			n = lim.MaxLinesPerTarget
		}
		rows := e.idx[start : start+n]
		led := false
		if first.Provider != "" && first.Name == NamePublishesLoad {
			k := 1
			for k < len(rows) && samples[rows[k]].Name == NamePublishesLoad {
				k++
			}
			mark := len(e.buf)
			for _, j := range rows[:k] {
				e.buf = appendLine(e.buf, &samples[j])
			}
			rows = rows[k:]
			led = true
			e.spans = append(e.spans, span{start: mark, end: len(e.buf), class: class(first), publishes: true, alone: len(rows) == 0, store: store, site: first.Site})
		}
		if len(rows) > 0 {
			mark := len(e.buf)
			for _, j := range rows {
				e.buf = appendLine(e.buf, &samples[j])
			}
			e.spans = append(e.spans, span{start: mark, end: len(e.buf), class: class(first), led: led, store: store, site: first.Site})
		}
		start = end
	}

	// Choose what fits, in this order: the round rows; the local site's
	// publishes_load rows; the local targets in order; then the room left
	// is shared fairly between the peer sites, each site's publishes_load
	// rows charged to its own share and kept before its other targets. A
	// target's other rows are kept only with its publishes_load rows, so
	// a target is either whole in the body (within the line cap), or
	// present by its publishes_load rows only and counted as dropped, or
	// absent and counted as dropped.
	room := int(min(lim.MaxBytes, int64(math.MaxInt)))
	take := func(i int) {
		sp := &e.spans[i]
		if n := sp.end - sp.start; n <= room && (!sp.led || e.spans[i-1].keep) {
			sp.keep = true
			room -= n
		}
	}
	for i := range e.spans {
		if e.spans[i].class == classRound {
			take(i)
		}
	}
	for i := range e.spans {
		if sp := &e.spans[i]; sp.class == classLocal && sp.publishes {
			take(i)
		}
	}
	for i := range e.spans {
		if sp := &e.spans[i]; sp.class == classLocal && !sp.publishes {
			take(i)
		}
	}
	e.sites = e.sites[:0]
	for i := range e.spans {
		sp := &e.spans[i]
		if sp.class != classPeer {
			continue
		}
		if n := len(e.sites); n == 0 || e.spans[e.sites[n-1].first].site != sp.site {
			e.sites = append(e.sites, siteShare{first: i, last: i})
		}
		ss := &e.sites[len(e.sites)-1]
		ss.last = i + 1
		ss.size += sp.end - sp.start
	}
	slices.SortStableFunc(e.sites, func(a, b siteShare) int { return cmp.Compare(a.size, b.size) })
	for k := range e.sites {
		ss := &e.sites[k]
		share := room / (len(e.sites) - k)
		if ss.size <= share {
			for i := ss.first; i < ss.last; i++ {
				e.spans[i].keep = true
			}
			room -= ss.size
			continue
		}
		// Over its share: its publishes_load rows first, then its other
		// targets in name order, as long as they fit in the share.
		left := room
		room = share
		for _, publishes := range [2]bool{true, false} {
			for i := ss.first; i < ss.last; i++ {
				if e.spans[i].publishes == publishes {
					take(i)
				}
			}
		}
		room = left - (share - room)
	}

	// Move the kept spans to the front of buf, in body order. A target
	// counts as dropped when its load rows are, even though its
	// publishes_load rows stay.
	out := 0
	for i := range e.spans {
		sp := &e.spans[i]
		if !sp.keep {
			if !sp.publishes || sp.alone {
				tr.addTarget(sp.store)
			}
			continue
		}
		out += copy(e.buf[out:], e.buf[sp.start:sp.end])
	}
	e.buf = e.buf[:out]
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
