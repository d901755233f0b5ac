// Package usageweight provides the usage-weight-scorer: the Continuum
// Router's routing.usage_weight term (C-36 … C-39) with its
// routing.quota_aware observation (C-40).
//
// Endpoints declare their provider's limits (providerTpm, providerRpm,
// published by the datastore as the switchyard.io/provider-tpm and
// switchyard.io/provider-rpm attributes). The scorer gives a candidate
// weight × remaining, where remaining is the share of the declared limit
// that the EPP's own metering (tumbling windows of stalenessInterval, fed
// by ResponseComplete from the usage responses report) has not used, the
// smaller axis counting; undeclared and exhausted candidates score 0. With
// quota-aware observation, the provider's rate-limit response headers
// (ParseRateLimitHeaders, from ResponseReceived) replace the estimate per
// axis while fresh. When the term differentiates (its largest contribution
// is above 0 and strictly ahead), Score sets
// scheduling.StrictDominanceKey, so the strategy-picker decides by strict
// dominance of the total scores (C-37). PreRequest counts the pass, once, in
// routing_usage_weight_decisions_total and
// routing_quota_aware_decisions_total against the chosen endpoint.
//
// State is per endpoint, reached through a copy-on-write map (the request
// path takes no shared lock) and updated with atomics; Run drops the
// state and series of endpoints that left the pool or changed address.
// DeclarationWarnings gives the configuration warnings; EndpointStats the
// admin API's view.
package usageweight
