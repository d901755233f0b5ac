// Package engineload implements the engine-load-scorer, the Continuum
// Router's engine-load term of the KV overlap scorer (C-30 … C-34): among
// the endpoints that already hold at least minOverlapThreshold of the
// prompt's prefix (the prefix producer's match, scheduling.PrefixMatchKey),
// those whose model servers report a shorter waiting queue and a lower
// KV-cache usage earn a bonus of at most engineLoadWeight.
//
// For every candidate holding enough of the prefix and with fresh metrics
// (scraped no longer than scrapeInterval × maxStalenessIntervals ago, the
// engine-load-picker's rule, C-21):
//
//	score = engineLoadWeight × (1 − (0.5·q + 0.5·kv))
//
// where kv is the KV-cache usage clamped to [0, 1] and q the normalised
// waiting queue: waiting / total slots when every such candidate declares
// its total slots (the endpoint label named by totalSlotsLabel), else
// waiting / the largest waiting queue among them (C-31). The term is 0
// for everyone while the deadband is closed: it opens only when the
// waiting queues of those candidates differ by more than
// balanceAbsThreshold and the largest is more than balanceRelThreshold
// times the smallest (C-33); KV-only differences never open it. A
// candidate that does not hold enough of the prefix, or whose metrics are
// stale or were never scraped, gets 0: it keeps its base score (C-32,
// C-34).
//
// The score is already multiplied by engineLoadWeight, so the scorer's
// profile weight is the sum of the other scorers' weights (1 when they
// sum to 1, as in the Continuum Router): its contribution is then at most
// engineLoadWeight of the base scale. See README.md.
package engineload
