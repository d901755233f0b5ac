package sitestage

import (
	"errors"
	"fmt"
	"hash/maphash"
	"sync/atomic"

	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
)

// Affinity defaults (G-24; the public grid gateway's block size and
// sticky run, with a smaller table and fewer blocks per request).
const (
	DefaultBlockBytes  = 256
	DefaultMaxBlocks   = 32
	DefaultMinRun      = 4
	DefaultTableBlocks = 16384
	maxMaxBlocks       = 64
	maxTableBlocks     = 1 << 22
)

// AffinityOptions configures the site-level prefix affinity: a bounded,
// lock-free record of which site the leading prompt blocks of recent
// requests were sent to. The zero value means the defaults.
type AffinityOptions struct {
	// Disabled turns the affinity off (every draw then follows the tier
	// alone).
	Disabled bool
	// BlockBytes is the size of a hashed prompt block (256).
	BlockBytes int
	// MaxBlocks bounds the blocks hashed per request (32, at most 64): the
	// first MaxBlocks × BlockBytes bytes of the prompt count.
	MaxBlocks int
	// MinRun is the fewest leading blocks a request must share with what
	// a site was sent for the affinity to narrow to that site (4).
	MinRun int
	// TableBlocks is the number of remembered blocks, a power of two
	// (16384); a newer block overwrites an older one in its slot.
	TableBlocks int
}

// Validate reports every problem with its field path.
func (o *AffinityOptions) Validate() error {
	var errs []error
	if o.BlockBytes < 0 {
		errs = append(errs, fmt.Errorf("affinity.blockBytes: must not be negative, got %d", o.BlockBytes))
	}
	if o.MaxBlocks < 0 || o.MaxBlocks > maxMaxBlocks {
		errs = append(errs, fmt.Errorf("affinity.maxBlocks: must be 0 … %d, got %d", maxMaxBlocks, o.MaxBlocks))
	}
	if o.MinRun < 0 || (o.MinRun > o.MaxBlocks && o.MaxBlocks > 0) || (o.MaxBlocks == 0 && o.MinRun > DefaultMaxBlocks) {
		errs = append(errs, fmt.Errorf("affinity.minRun: must be 0 … maxBlocks, got %d", o.MinRun))
	}
	if o.TableBlocks < 0 || o.TableBlocks > maxTableBlocks || (o.TableBlocks > 0 && o.TableBlocks&(o.TableBlocks-1) != 0) {
		errs = append(errs, fmt.Errorf("affinity.tableBlocks: must be a power of two up to %d, got %d", maxTableBlocks, o.TableBlocks))
	}
	return errors.Join(errs...)
}

// affinity is the record. Each slot holds the top 40 bits of a block's
// chained hash and 24 bits of the site it was sent to; slots are read
// and written with atomic operations, so a race only loses or replaces an
// entry, never tears one.
type affinity struct {
	blockBytes, maxBlocks, minRun int
	mask                          uint64
	seed                          maphash.Seed
	slots                         []atomic.Uint64
	// keys caches the site tags of the latest snapshot (built once per
	// snapshot, by whichever request sees it first).
	keys atomic.Pointer[snapshotKeys]
}

// snapshotKeys are the site tags of one snapshot's sites, by index.
type snapshotKeys struct {
	sites *sitestate.Site // &Sites[0] of the snapshot they belong to
	n     int
	keys  []uint64
}

// siteKeys returns the site tags of sites (a snapshot's Sites).
func (a *affinity) siteKeys(sites []sitestate.Site) []uint64 {
	if c := a.keys.Load(); c != nil && c.n == len(sites) && len(sites) > 0 && c.sites == &sites[0] {
		return c.keys
	}
	c := &snapshotKeys{n: len(sites), keys: make([]uint64, len(sites))}
	if len(sites) > 0 {
		c.sites = &sites[0]
	}
	for i := range sites {
		c.keys[i] = siteKey(sites[i].Name, sites[i].Cluster)
	}
	a.keys.Store(c)
	return c.keys
}

func newAffinity(o AffinityOptions) (*affinity, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Disabled {
		return nil, nil
	}
	a := &affinity{blockBytes: o.BlockBytes, maxBlocks: o.MaxBlocks, minRun: o.MinRun}
	if a.blockBytes == 0 {
		a.blockBytes = DefaultBlockBytes
	}
	if a.maxBlocks == 0 {
		a.maxBlocks = DefaultMaxBlocks
	}
	if a.minRun == 0 {
		a.minRun = DefaultMinRun
	}
	n := o.TableBlocks
	if n == 0 {
		n = DefaultTableBlocks
	}
	a.mask = uint64(n - 1)
	a.seed = maphash.MakeSeed()
	a.slots = make([]atomic.Uint64, n)
	return a, nil
}

// blockKeys are a request's chained block hashes, on the stack.
type blockKeys struct {
	n int
	h [maxMaxBlocks]uint64
}

// compute hashes the whole leading blocks of prompt (a partial last block
// is not hashed: it cannot be a shared prefix yet).
func (k *blockKeys) compute(a *affinity, prompt []byte) {
	k.n = 0
	if a == nil {
		return
	}
	prev := uint64(0x243f6a8885a308d3)
	for k.n < a.maxBlocks && len(prompt) >= a.blockBytes {
		h := maphash.Bytes(a.seed, prompt[:a.blockBytes])
		prev = mix(h, prev)
		k.h[k.n] = prev
		k.n++
		prompt = prompt[a.blockBytes:]
	}
}

const siteBits = 24

// siteKey is the 24-bit tag of a (site, cluster), never 0.
func siteKey(site, cluster string) uint64 {
	var h maphash.Hash
	h.SetSeed(keySeed)
	h.WriteString(site)
	h.WriteByte(0)
	h.WriteString(cluster)
	return h.Sum64()&(1<<siteBits-1) | 1
}

var keySeed = maphash.MakeSeed()

func (a *affinity) entry(h, site uint64) uint64 { return h&^(1<<siteBits-1) | site }

// match returns the site tag of the longest run of leading blocks the
// record holds, and the run's length.
func (a *affinity) match(k *blockKeys) (site uint64, run int) {
	for i := 0; i < k.n; i++ {
		v := a.slots[k.h[i]&a.mask].Load()
		if v == 0 || v>>siteBits != k.h[i]>>siteBits {
			break
		}
		site, run = v&(1<<siteBits-1), i+1
	}
	return site, run
}

// preferred returns the index (into sites) of the site the request's
// prefix was last sent to, when the shared run is at least minRun blocks
// and that site is in the chosen tier c; otherwise -1. The draw uses it
// only to choose between the two sites it drew (G-24: it never adds a
// site, never leaves the tier, never removes one from the draw), so a
// prefix many requests share does not pull them all to one site.
func (a *affinity) preferred(sites []sitestate.Site, c *set, k *blockKeys) int {
	if c.n < 2 || k.n < a.minRun {
		return -1
	}
	site, run := a.match(k)
	if run < a.minRun {
		return -1
	}
	keys := a.siteKeys(sites)
	for j := 0; j < c.n; j++ {
		if keys[c.idx[j]] == site {
			return int(c.idx[j])
		}
	}
	return -1
}

// record notes that the request's blocks were sent to site.
func (a *affinity) record(k *blockKeys, site uint64) {
	for i := 0; i < k.n; i++ {
		slot := &a.slots[k.h[i]&a.mask]
		e := a.entry(k.h[i], site)
		if slot.Load() != e {
			slot.Store(e)
		}
	}
}
