// Package hashring is the consistent-hash ring shared by the
// consistent-hash-picker and the prefix-aware-hash-picker.
//
// One ring is built over a superset of the candidates the picker has been
// given (every endpoint seen as a candidate recently, which is the pool
// once each endpoint has been a candidate), and cached behind an atomic
// pointer. A request maps its candidates onto the ring's members (a View)
// and walks clockwise from its key, skipping the members that are not
// among its candidates and visiting each candidate once, however many
// virtual nodes it has. The first candidate the walk meets is the one
// whose nearest point clockwise of the key is nearest, so the result
// depends only on the key and the candidate set: it is exactly what a ring
// of these candidates alone would give, whatever else the superset holds
// (EPP replicas with different histories agree), and removing a candidate
// remaps only the keys it owned.
//
// The ring is rebuilt only when a candidate is not among its members (a
// new endpoint), over the candidates and the members seen within
// MemberTTL, at most MaxRetained of those: filters that vary by request
// (served models, caller scope, health) narrow the candidates without any
// build, and the ring holds at most candidates + MaxRetained members.
// A walk that finds candidates sparse among the members (a small subset
// of a large pool) switches, after a bounded number of steps, to ranking
// the remaining candidates by their nearest point (a binary search each),
// which gives the same order.
package hashring
