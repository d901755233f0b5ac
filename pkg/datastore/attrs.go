package datastore

import "github.com/switchyard-ai/switchyard/pkg/scheduling"

// Endpoint attributes the store sets on every scheduling.Endpoint it
// publishes.
var (
	// StatsKey holds the endpoint's *EndpointStats: live in-flight counts
	// and latency averages, updated by the request path. The pointer is the
	// same in every snapshot for the endpoint's life.
	StatsKey = scheduling.NewAttributeKey[*EndpointStats]("switchyard.io/endpoint-stats")
	// WeightKey holds the endpoint's relative capacity (EndpointSpec.Weight,
	// 1 when unset).
	WeightKey = scheduling.NewAttributeKey[int]("switchyard.io/endpoint-weight")
	// EngineKey holds the name of the engine whose metric mapping the
	// scraper reads the endpoint with; before the first scrape it is
	// EndpointSpec.Engine. It is absent when neither is known.
	EngineKey = scheduling.NewAttributeKey[string]("switchyard.io/endpoint-engine")
)
