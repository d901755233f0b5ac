package modelsim

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// Errors the engine fails or refuses a sequence with.
var (
	// ErrClosed is the error of requests refused or cut off because the
	// server was closed (HTTP 503).
	ErrClosed = errors.New("modelsim: server closed")
	// ErrQueueFull is returned when Config.MaxWaiting requests already wait
	// (HTTP 429).
	ErrQueueFull = errors.New("modelsim: waiting queue full")
)

// seqState is the life-cycle state of a sequence.
type seqState int32

const (
	stateWaiting seqState = iota
	stateRunning
	stateFinished // generated all its tokens
	stateAborted  // the client went away
	stateFailed   // the server closed; err says why
)

func (s seqState) terminal() bool { return s >= stateFinished }

// Finish reasons, also the finished_reason label values of
// vllm:request_success_total.
const (
	finishStop   = "stop"
	finishLength = "length"
	finishAbort  = "abort"
)

var finishReasons = [...]string{finishStop, finishLength, finishAbort}

// seq is one request inside the engine.
type seq struct {
	// Immutable after creation.
	lora         string
	promptTokens int
	maxTokens    int
	finish       string   // finish reason when all tokens are generated
	hashes       []uint64 // chained hashes of the full prompt blocks

	// Owned by the engine, guarded by engine.mu.
	prev, next    *seq     // waiting-queue links
	blocks        []*block // pinned hashed prompt blocks, in prompt order
	private       int      // unhashed blocks held
	prefillLeft   int      // tokens still to prefill before the next token
	admitted      bool     // admitted at least once
	firstToken    bool     // produced its first token
	arrival       time.Time
	simArrival    time.Duration
	simFirstToken time.Duration // engine clock at the first token

	// Shared with the HTTP handler. The engine writes generated (and err)
	// before state, the handler reads state first.
	state     atomic.Int32
	generated atomic.Int32
	cached    atomic.Int32 // prompt tokens served from the prefix cache
	err       error
	notify    chan struct{} // capacity 1; signalled after every change
}

func newSeq(lora string, promptTokens, maxTokens int, finish string, hashes []uint64) *seq {
	return &seq{
		lora:         lora,
		promptTokens: promptTokens,
		maxTokens:    maxTokens,
		finish:       finish,
		hashes:       hashes,
		notify:       make(chan struct{}, 1),
	}
}

func (s *seq) loadState() seqState { return seqState(s.state.Load()) }

func (s *seq) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// tokens returns the tokens the sequence holds KV for: prompt plus output.
func (s *seq) tokens() int { return s.promptTokens + int(s.generated.Load()) }

// seqList is an intrusive FIFO of sequences.
type seqList struct {
	head, tail *seq
	n          int
}

func (l *seqList) pushBack(s *seq) {
	s.prev, s.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = s
	} else {
		l.head = s
	}
	l.tail = s
	l.n++
}

func (l *seqList) pushFront(s *seq) {
	s.prev, s.next = nil, l.head
	if l.head != nil {
		l.head.prev = s
	} else {
		l.tail = s
	}
	l.head = s
	l.n++
}

func (l *seqList) remove(s *seq) {
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		l.head = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	} else {
		l.tail = s.prev
	}
	s.prev, s.next = nil, nil
	l.n--
}

// planItem is one sequence's share of a step: prefill tokens, or a decode.
type planItem struct {
	s       *seq
	prefill int // > 0: prefill chunk; 0: decode one token
}

// counters are the engine's cumulative statistics.
type counters struct {
	finished      [len(finishReasons)]uint64
	failed        uint64
	rejected      uint64
	preemptions   uint64
	promptTokens  uint64
	prefixQueries uint64
	prefixHits    uint64
	genTokens     uint64
	steps         uint64
}

// engine is the simulated vLLM engine: a FIFO waiting queue, a running batch,
// the KV cache, and the step clock. One goroutine (run) drives it; handlers
// submit and abort sequences concurrently under mu.
type engine struct {
	cfg     Config
	budget  int // token budget per step
	log     logr.Logger
	metrics *engineMetrics // nil in some tests

	wake chan struct{} // capacity 1; signalled on arrivals

	mu          sync.Mutex
	waiting     seqList
	running     []*seq
	cache       *kvCache
	closed      bool
	simNow      time.Duration
	c           counters
	loraRunning map[string]int
	loraWaiting map[string]int
	loraStamp   float64 // unix time of the last change of the adapter sets
	plan        []planItem
}

func newEngine(cfg Config, m *engineMetrics, log logr.Logger) *engine {
	budget := cfg.MaxBatchedTokens
	if budget == 0 {
		budget = math.MaxInt
	}
	return &engine{
		cfg:         cfg,
		budget:      budget,
		log:         log,
		metrics:     m,
		wake:        make(chan struct{}, 1),
		running:     make([]*seq, 0, cfg.MaxRunning),
		cache:       newKVCache(cfg.KVBlocks),
		loraRunning: make(map[string]int),
		loraWaiting: make(map[string]int),
		loraStamp:   float64(time.Now().UnixNano()) / 1e9,
	}
}

// submit queues a new sequence. It fails with ErrClosed or ErrQueueFull.
func (e *engine) submit(s *seq) error {
	now := time.Now()
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	if e.cfg.MaxWaiting > 0 && e.waiting.n >= e.cfg.MaxWaiting {
		e.c.rejected++
		e.mu.Unlock()
		return ErrQueueFull
	}
	s.arrival = now
	s.simArrival = e.simNow
	s.state.Store(int32(stateWaiting))
	e.waiting.pushBack(s)
	e.loraAdd(e.loraWaiting, s.lora)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return nil
}

// abort removes a sequence whose client went away, freeing its KV blocks at
// once. Aborting a finished sequence does nothing.
func (e *engine) abort(s *seq) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch s.loadState() {
	case stateWaiting:
		e.waiting.remove(s)
		e.loraDel(e.loraWaiting, s.lora)
	case stateRunning:
		e.releaseSeq(s)
		e.running = slices.DeleteFunc(e.running, func(r *seq) bool { return r == s })
		e.loraDel(e.loraRunning, s.lora)
	default:
		return
	}
	e.c.finished[2]++
	s.state.Store(int32(stateAborted))
	s.signal()
	e.log.V(4).Info("request aborted", "generated", s.generated.Load())
}

// shutdown fails every waiting and running sequence with err and refuses new
// ones. It is idempotent.
func (e *engine) shutdown(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.closed = true
	fail := func(s *seq) {
		s.err = err
		s.state.Store(int32(stateFailed))
		s.signal()
		e.c.failed++
	}
	for s := e.waiting.head; s != nil; {
		next := s.next
		e.waiting.remove(s)
		fail(s)
		s = next
	}
	for _, s := range e.running {
		e.releaseSeq(s)
		fail(s)
	}
	clear(e.running)
	e.running = e.running[:0]
	clear(e.loraRunning)
	clear(e.loraWaiting)
}

// releaseSeq returns a sequence's KV blocks: hashed prompt blocks stay cached
// (evictable), private blocks become empty.
func (e *engine) releaseSeq(s *seq) {
	e.cache.release(s.blocks)
	clear(s.blocks)
	s.blocks = s.blocks[:0]
	e.cache.freePrivate(s.private)
	s.private = 0
}

func (e *engine) loraAdd(m map[string]int, lora string) {
	if lora == "" {
		return
	}
	m[lora]++
	if m[lora] == 1 {
		e.loraStamp = float64(time.Now().UnixNano()) / 1e9
	}
}

func (e *engine) loraDel(m map[string]int, lora string) {
	if lora == "" {
		return
	}
	if m[lora]--; m[lora] <= 0 {
		delete(m, lora)
		e.loraStamp = float64(time.Now().UnixNano()) / 1e9
	}
}

// blocksFor returns the KV blocks needed to hold n tokens.
func (e *engine) blocksFor(n int) int { return (n + e.cfg.BlockSize - 1) / e.cfg.BlockSize }

// schedule plans the next step (vLLM V1's scheduler, simplified): running
// sequences first, oldest first, each decoding one token or continuing its
// prefill; a decode that needs a new block and finds none preempts the newest
// running sequence. Then, if nothing was preempted, waiting sequences are
// admitted in FIFO order while the batch, the token budget and the KV cache
// allow. It returns the plan and the step's simulated duration. e.mu is held.
func (e *engine) schedule() ([]planItem, time.Duration) {
	plan := e.plan[:0]
	budget := e.budget
	preempted := false
	prefillTokens := 0
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		if s.prefillLeft > 0 {
			chunk := min(s.prefillLeft, budget)
			budget -= chunk
			prefillTokens += chunk
			plan = append(plan, planItem{s: s, prefill: chunk})
			continue
		}
		scheduled := true
		for e.blocksFor(s.tokens()) > len(s.blocks)+s.private {
			if e.cache.allocPrivate() {
				s.private++
				continue
			}
			victim := e.running[len(e.running)-1]
			e.preempt(victim)
			preempted = true
			if victim == s {
				scheduled = false
				break
			}
		}
		if !scheduled {
			break
		}
		budget--
		plan = append(plan, planItem{s: s})
	}
	// vLLM admits nobody in a step that preempted; an empty plan would
	// leave the engine idle with work queued, so admit then anyway.
	if !preempted || len(plan) == 0 {
		for s := e.waiting.head; s != nil && len(e.running) < e.cfg.MaxRunning && budget > 0; {
			next := s.next
			if s.lora != "" && e.loraRunning[s.lora] == 0 && len(e.loraRunning) >= e.cfg.MaxLoRAs {
				s = next // its adapter cannot be loaded now; later requests may go first
				continue
			}
			if !e.admit(s) {
				break // FIFO: nobody overtakes a request that waits for KV space
			}
			chunk := min(s.prefillLeft, budget)
			budget -= chunk
			prefillTokens += chunk
			plan = append(plan, planItem{s: s, prefill: chunk})
			s = next
		}
	}
	e.plan = plan
	if len(plan) == 0 {
		return plan, 0
	}
	d := e.cfg.DecodeBase + time.Duration(len(plan)-1)*e.cfg.DecodePerSeq + time.Duration(prefillTokens)*e.cfg.PrefillPerToken
	return plan, d
}

// admit moves s from the waiting queue into the running batch if the KV cache
// can hold all its tokens, pinning its cached prefix. e.mu is held.
func (e *engine) admit(s *seq) bool {
	n := s.tokens()
	total := e.blocksFor(n)
	// At least one token is always computed: a fully cached prompt still
	// recomputes its last block (vLLM caps hits at n−1 tokens).
	hits, hitsFree := e.cache.lookup(s.hashes, (n-1)/e.cfg.BlockSize)
	if total-hits > e.cache.available()-hitsFree {
		return false
	}
	e.waiting.remove(s)
	e.loraDel(e.loraWaiting, s.lora)
	hashed := min(len(s.hashes), total)
	for _, h := range s.hashes[:hashed] {
		s.blocks = append(s.blocks, e.cache.pin(h)) // cannot fail: space was checked
	}
	for range total - hashed {
		e.cache.allocPrivate()
		s.private++
	}
	hitTokens := hits * e.cfg.BlockSize
	s.prefillLeft = n - hitTokens
	s.cached.Store(int32(hitTokens))
	if !s.admitted {
		s.admitted = true
		e.c.promptTokens += uint64(s.promptTokens)
		e.c.prefixQueries += uint64(s.promptTokens)
		e.c.prefixHits += uint64(hitTokens)
		if e.metrics != nil {
			e.metrics.queueTime.Observe(time.Since(s.arrival).Seconds())
		}
	}
	s.state.Store(int32(stateRunning))
	e.running = append(e.running, s)
	e.loraAdd(e.loraRunning, s.lora)
	e.log.V(4).Info("request admitted", "promptTokens", s.promptTokens, "cachedTokens", hitTokens, "running", len(e.running))
	return true
}

// preempt sends a running sequence back to the front of the waiting queue and
// frees its blocks; it will recompute its prompt and output so far (recompute
// preemption), usually hitting its own cached prompt blocks. e.mu is held.
func (e *engine) preempt(s *seq) {
	e.releaseSeq(s)
	e.running = slices.DeleteFunc(e.running, func(r *seq) bool { return r == s })
	e.loraDel(e.loraRunning, s.lora)
	s.prefillLeft = 0
	s.state.Store(int32(stateWaiting))
	e.waiting.pushFront(s)
	e.loraAdd(e.loraWaiting, s.lora)
	e.c.preemptions++
	e.log.V(4).Info("request preempted", "generated", s.generated.Load(), "running", len(e.running))
}

// apply completes a planned step that lasted d of simulated time (wall
// seconds measured by the caller): prefill chunks advance, sequences that
// finished their prefill or were decoding produce one token, and finished
// sequences leave the batch. Sequences aborted during the step are skipped.
// e.mu is held.
func (e *engine) apply(plan []planItem, d time.Duration, wall float64) {
	e.simNow += d
	e.c.steps++
	now := time.Now()
	done := 0
	for _, it := range plan {
		s := it.s
		if s.loadState() != stateRunning {
			continue
		}
		if it.prefill > 0 {
			s.prefillLeft -= it.prefill
			if s.prefillLeft > 0 {
				continue
			}
		} else if e.metrics != nil {
			e.metrics.itl.Observe(wall)
		}
		g := s.generated.Add(1)
		e.c.genTokens++
		if !s.firstToken {
			s.firstToken = true
			s.simFirstToken = e.simNow
			if e.metrics != nil {
				e.metrics.ttft.Observe(now.Sub(s.arrival).Seconds())
			}
		}
		if int(g) >= s.maxTokens {
			e.finish(s, now)
			done++
		}
		s.signal()
	}
	if done > 0 {
		e.running = slices.DeleteFunc(e.running, func(r *seq) bool { return r.loadState() != stateRunning })
	}
	clear(e.plan) // drop references to finished sequences
}

// finish completes a sequence that generated all its tokens. The caller
// removes it from e.running. e.mu is held.
func (e *engine) finish(s *seq, now time.Time) {
	e.releaseSeq(s)
	e.loraDel(e.loraRunning, s.lora)
	reason := 0
	if s.finish == finishLength {
		reason = 1
	}
	e.c.finished[reason]++
	if e.metrics != nil {
		e.metrics.e2e.Observe(now.Sub(s.arrival).Seconds())
	}
	s.state.Store(int32(stateFinished))
	e.log.V(4).Info("request finished", "promptTokens", s.promptTokens, "generated", s.generated.Load(), "reason", s.finish)
}

// step runs one step without sleeping and reports whether there was work.
// Tests drive the engine with it.
func (e *engine) step() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	plan, d := e.schedule()
	if len(plan) == 0 {
		return false
	}
	e.apply(plan, d, e.cfg.scale(d).Seconds())
	return true
}

// run is the engine loop. It sleeps until the next step ends or, when idle,
// until a request arrives; it never spins. It returns when ctx is done or
// stop is closed, failing whatever is still in flight.
func (e *engine) run(ctx context.Context, stop <-chan struct{}) {
	defer e.shutdown(ErrClosed)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		e.mu.Lock()
		plan, d := e.schedule()
		e.mu.Unlock()
		if len(plan) == 0 {
			select {
			case <-e.wake:
				continue
			case <-ctx.Done():
				return
			case <-stop:
				return
			}
		}
		start := time.Now()
		if sleep := e.cfg.scale(d); sleep > 0 {
			timer.Reset(sleep)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			case <-stop:
				return
			}
		} else {
			// No simulated time: still give arrivals and aborts a chance
			// to take the lock between steps.
			select {
			case <-ctx.Done():
				return
			case <-stop:
				return
			default:
			}
		}
		wall := time.Since(start).Seconds()
		e.mu.Lock()
		e.apply(plan, d, wall)
		e.mu.Unlock()
	}
}

// Stats is a snapshot of a server's engine.
type Stats struct {
	Waiting        int     // sequences in the waiting queue (including preempted ones)
	Running        int     // sequences in the running batch
	KVUsedBlocks   int     // blocks held by running sequences
	KVCachedBlocks int     // free blocks that still hold a cached prefix (evictable)
	KVTotalBlocks  int     // Config.KVBlocks
	KVUsage        float64 // KVUsedBlocks / KVTotalBlocks, as vllm:kv_cache_usage_perc
	Served         uint64  // requests that generated all their tokens
	Aborted        uint64  // requests whose client went away
	Failed         uint64  // requests cut off by Close
	Rejected       uint64  // requests refused because the waiting queue was full
	Preemptions    uint64  // running sequences sent back to the queue for lack of KV space
	Evictions      uint64  // cached blocks evicted to make room
	// PromptTokens counts the prompt tokens of admitted requests (once per
	// request, also the prefix-cache query count); PrefixHitTokens those of
	// them served from the cache.
	PromptTokens     uint64
	PrefixHitTokens  uint64
	GenerationTokens uint64        // output tokens generated
	Steps            uint64        // engine steps run
	SimTime          time.Duration // simulated (unscaled) time of all steps
	RunningLoRAs     []string      // adapters of running requests, sorted
	WaitingLoRAs     []string      // adapters of waiting requests, sorted
}

func (e *engine) stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.statsLocked()
}

func (e *engine) statsLocked() Stats {
	used := e.cache.used()
	return Stats{
		Waiting:          e.waiting.n,
		Running:          len(e.running),
		KVUsedBlocks:     used,
		KVCachedBlocks:   e.cache.cached(),
		KVTotalBlocks:    e.cache.total,
		KVUsage:          float64(used) / float64(e.cache.total),
		Served:           e.c.finished[0] + e.c.finished[1],
		Aborted:          e.c.finished[2],
		Failed:           e.c.failed,
		Rejected:         e.c.rejected,
		Preemptions:      e.c.preemptions,
		Evictions:        e.cache.evictions,
		PromptTokens:     e.c.promptTokens,
		PrefixHitTokens:  e.c.prefixHits,
		GenerationTokens: e.c.genTokens,
		Steps:            e.c.steps,
		SimTime:          e.simNow,
		RunningLoRAs:     sortedKeys(e.loraRunning),
		WaitingLoRAs:     sortedKeys(e.loraWaiting),
	}
}

func sortedKeys(m map[string]int) []string {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func joinKeys(m map[string]int) string {
	switch len(m) {
	case 0:
		return ""
	case 1:
		for k := range m {
			return k
		}
	}
	return strings.Join(sortedKeys(m), ",")
}
