package prefix

import (
	"math/bits"
	"slices"
)

// smallSetMax is the largest holder set kept as a list of endpoint ids;
// larger sets are bitsets over endpoint ids, so that intersecting them with
// the endpoints still matching costs one word operation per 64 endpoints.
const smallSetMax = 16

// holderSet is the set of endpoints holding one block hash when there are
// more than two of them.
type holderSet struct {
	ids  []uint32 // the members, while bits is nil
	bits []uint64 // membership bitset, once the set has grown large
	n    int      // number of members
}

func (s *holderSet) has(id uint32) bool {
	if s.bits != nil {
		w := int(id >> 6)
		return w < len(s.bits) && s.bits[w]&(1<<(id&63)) != 0
	}
	return slices.Contains(s.ids, id)
}

func (s *holderSet) add(id uint32) {
	if s.has(id) {
		return
	}
	s.n++
	if s.bits == nil {
		s.ids = append(s.ids, id)
		if len(s.ids) <= smallSetMax {
			return
		}
		for _, x := range s.ids {
			s.setBit(x)
		}
		s.ids = nil
		return
	}
	s.setBit(id)
}

func (s *holderSet) setBit(id uint32) {
	w := int(id >> 6)
	if w >= len(s.bits) {
		s.bits = append(s.bits, make([]uint64, w+1-len(s.bits))...)
	}
	s.bits[w] |= 1 << (id & 63)
}

func (s *holderSet) remove(id uint32) {
	if !s.has(id) {
		return
	}
	s.n--
	if s.bits != nil {
		s.bits[id>>6] &^= 1 << (id & 63)
		return
	}
	i := slices.Index(s.ids, id)
	s.ids[i] = s.ids[len(s.ids)-1]
	s.ids = s.ids[:len(s.ids)-1]
}

// appendIDs appends the members to dst.
func (s *holderSet) appendIDs(dst []uint32) []uint32 {
	if s.bits == nil {
		return append(dst, s.ids...)
	}
	for w, word := range s.bits {
		for ; word != 0; word &= word - 1 {
			dst = append(dst, uint32(w<<6|bits.TrailingZeros64(word)))
		}
	}
	return dst
}
