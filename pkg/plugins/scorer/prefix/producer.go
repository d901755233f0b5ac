package prefix

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/go-logr/logr"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

const (
	// staleAfter is how long an endpoint may go unseen (neither a candidate
	// in a sampled request nor a target) before the index drops it; GIE
	// purges pods missing from its datastore every 2 minutes.
	staleAfter = 2 * time.Minute
	// seenSampleInterval is how often Produce records which candidates are
	// alive and sweeps stale endpoints. Sampling keeps the per-request cost
	// at one clock read.
	seenSampleInterval = 5 * time.Second
)

// requestHashes is what Produce leaves on the request for PreRequest.
type requestHashes struct {
	hashes    []uint64
	blockSize int
}

var hashesPool = sync.Pool{New: func() any { return &requestHashes{} }}

// Producer is approx-prefix-cache-producer. It is safe for concurrent use.
type Producer struct {
	typedName scheduling.TypedName
	params    Params
	idx       *index
	metrics   *indexerMetrics
	logger    logr.Logger
	hashesKey scheduling.StateKey[*requestHashes]

	now        func() time.Time
	nextSample atomic.Int64 // Unix nanoseconds of the next seen-sample
	closed     atomic.Bool
}

// NewProducer builds an approx-prefix-cache-producer.
func NewProducer(name string, p Params, h scheduling.Handle) (*Producer, error) {
	if h == nil {
		return nil, errors.New("nil handle")
	}
	if name == "" {
		name = ProducerType
	}
	m, err := newIndexerMetrics(h.Registerer(), name)
	if err != nil {
		return nil, err
	}
	logger := h.Logger().WithValues("plugin", name)
	if dep := p.deprecatedKeys(); len(dep) > 0 {
		logger.Info("deprecated parameters are ignored; the block size comes from blockSizeTokens", "parameters", dep, "blockSizeTokens", p.BlockSizeTokens)
	}
	return &Producer{
		typedName: scheduling.TypedName{Type: ProducerType, Name: name},
		params:    p,
		idx:       newIndex(),
		metrics:   m,
		logger:    logger,
		hashesKey: scheduling.NewStateKey[*requestHashes](ProducerType + "/" + name + "/hashes"),
		now:       time.Now,
	}, nil
}

// TypedName implements scheduling.Plugin.
func (p *Producer) TypedName() scheduling.TypedName { return p.typedName }

// Produces implements scheduling.DataProducer.
func (p *Producer) Produces() []string { return []string{scheduling.PrefixMatchKey.Name()} }

// Consumes implements scheduling.DataProducer.
func (p *Producer) Consumes() []string { return nil }

// matchResult is what Produce stores for a request with hits: the
// PrefixMatch and the hits it points to, in one allocation. It is never
// pooled, because plugins may read it until the request is gone.
type matchResult struct {
	pm   scheduling.PrefixMatch
	hits prefixHits
}

// Produce hashes the prompt, matches it against the index and stores a
// *scheduling.PrefixMatch on the request. Its Hits are backed by the index
// (see prefixHits) and nil when no endpoint has a hit.
func (p *Producer) Produce(_ context.Context, req *scheduling.Request, candidates []*scheduling.Endpoint) {
	bs := p.params.blockSizeFor(candidates)
	// A request produced again before PreRequest reuses its hash buffer
	// rather than leaking it from the pool.
	rh, ok := p.hashesKey.Get(req)
	if !ok || rh == nil {
		rh = hashesPool.Get().(*requestHashes)
	}
	rh.blockSize = bs
	rh.hashes = hashPrompt(rh.hashes[:0], req.TargetModel, req.Prompt.CacheSalt, req.Prompt.Text, bs, p.params.maxBlocksFor(bs))

	var pm *scheduling.PrefixMatch
	if hits, ok := p.idx.match(rh.hashes); ok {
		hits.cands = p.idx.candidates(hits.table, candidates)
		r := &matchResult{hits: hits}
		r.pm = scheduling.PrefixMatch{TotalBlocks: len(rh.hashes), BlockSizeTokens: bs, Hits: &r.hits}
		pm = &r.pm
	} else {
		pm = &scheduling.PrefixMatch{TotalBlocks: len(rh.hashes), BlockSizeTokens: bs}
	}
	scheduling.PrefixMatchKey.Set(req, pm)
	p.hashesKey.Set(req, rh)

	p.maybeSweep(candidates)
}

// maybeSweep, at most once per seenSampleInterval, marks the candidates as
// alive and drops endpoints unseen for staleAfter.
func (p *Producer) maybeSweep(candidates []*scheduling.Endpoint) {
	now := p.now().UnixNano()
	next := p.nextSample.Load()
	if now < next || !p.nextSample.CompareAndSwap(next, now+int64(seenSampleInterval)) {
		return
	}
	p.idx.markSeen(candidates, now)
	if n := p.idx.sweep(now - int64(staleAfter)); n > 0 && !p.closed.Load() {
		p.metrics.size.Set(float64(p.idx.size.Load()))
		p.logger.V(1).Info("dropped endpoints unseen for a while from the prefix index", "endpoints", n, "after", staleAfter)
	}
}

// PreRequest records the request's blocks in the index for the primary
// target and for the target of a profile named "prefill", and records the
// hit metrics for the primary target.
func (p *Producer) PreRequest(_ context.Context, req *scheduling.Request, result *scheduling.Result) {
	rh, ok := p.hashesKey.Get(req)
	if !ok || rh == nil {
		return
	}
	p.hashesKey.Delete(req)
	defer hashesPool.Put(rh)

	targets := result.Targets()
	if len(targets) == 0 || p.closed.Load() {
		return
	}
	target := targets[0]
	now := p.now().UnixNano()
	p.idx.add(target.Key(), rh.hashes, p.params.capacityFor(target), now)
	if pr := result.ProfileResults[prefillProfile]; pr != nil && len(pr.Targets) > 0 && pr.Targets[0].Key() != target.Key() {
		p.idx.add(pr.Targets[0].Key(), rh.hashes, p.params.capacityFor(pr.Targets[0]), now)
	}

	pm, _ := scheduling.PrefixMatchKey.Get(req)
	matched := pm.MatchedBlocks(target)
	total := len(rh.hashes)
	blockBytes := rh.blockSize * charsPerToken
	p.metrics.hitBytes.Observe(float64(matched) * float64(blockBytes))
	if total > 0 {
		p.metrics.hitRatio.Observe(float64(matched) / float64(total))
	}
	p.metrics.size.Set(float64(p.idx.size.Load()))
}

// Prune drops from the index every endpoint for which keep returns false and
// returns how many were dropped. Hosts that know the pool's membership (the
// datastore) may call it when endpoints go away; without it, endpoints not
// seen as candidates or targets for two minutes are dropped on a later
// request.
func (p *Producer) Prune(keep func(key string) bool) int {
	n := p.idx.prune(keep)
	if n > 0 && !p.closed.Load() {
		p.metrics.size.Set(float64(p.idx.size.Load()))
	}
	return n
}

// Close implements scheduling.Closer: it drops the index and, unless an
// instance of the same name succeeds this one, deletes the instance's
// prefix_indexer_size series. Requests of the old configuration still
// running afterwards find no prefix hits and add nothing to the index or
// the metrics.
func (p *Producer) Close(info scheduling.CloseInfo) {
	p.closed.Store(true)
	p.idx.prune(func(string) bool { return false })
	if !info.Successor {
		p.metrics.deleteSeries()
	}
}

// IndexSize returns the number of block hashes in the index over all
// endpoints.
func (p *Producer) IndexSize() int { return int(p.idx.size.Load()) }

// hashPrompt appends to dst the chained hashes of the leading whole blocks
// of text: blocks are blockSizeTokens×4 bytes, at most maxBlocks of them; a
// text shorter than one block gives none. The chain starts from a hash of
// the model and the cache salt, and every block is hashed with the previous
// block's hash as the xxhash64 seed, so equal blocks after different
// prefixes (or for different models or salts) hash differently.
func hashPrompt(dst []uint64, model, salt string, text []byte, blockSizeTokens, maxBlocks int) []uint64 {
	blockBytes := blockSizeTokens * charsPerToken
	if blockBytes <= 0 || maxBlocks <= 0 {
		return dst
	}
	n := min(len(text)/blockBytes, maxBlocks)
	if n == 0 {
		return dst
	}
	if cap(dst)-len(dst) < n {
		dst = append(make([]uint64, 0, len(dst)+n), dst...)
	}
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString(model)
	if salt != "" {
		_, _ = d.WriteString("\x00")
		_, _ = d.WriteString(salt)
	}
	prev := d.Sum64()
	for i := range n {
		d.ResetWithSeed(prev)
		_, _ = d.Write(text[i*blockBytes : (i+1)*blockBytes])
		prev = d.Sum64()
		dst = append(dst, prev)
	}
	return dst
}
