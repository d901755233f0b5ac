package datastore

import "github.com/switchyard-ai/switchyard/pkg/scheduling"

// Endpoint attributes the store sets on every scheduling.Endpoint it
// publishes. The endpoint data plugins read (pkg/scheduling's endpoint
// data keys) are set under the scheduling package's names, so a plugin
// reads them with scheduling.LoadKey, WeightKey, ModelsKey, InternalKey
// and HealthKey without importing this package:
//
//   - scheduling.LoadKey: the endpoint's *EndpointStats (StatsKey reads
//     the same attribute with its concrete type);
//   - scheduling.WeightKey: EndpointSpec.Weight (1 when unset);
//   - scheduling.ModelsKey: EndpointSpec.Models, when the endpoint
//     declares any;
//   - scheduling.InternalKey: true when EndpointSpec.Internal is set
//     (absent otherwise);
//   - scheduling.HealthKey: the endpoint's *scheduling.EndpointHealth,
//     one per endpoint for its life;
//   - EngineKey, ProviderTPMKey and ProviderRPMKey, below.
var (
	// StatsKey holds the endpoint's *EndpointStats: live in-flight counts
	// and latency averages, updated by the request path. The pointer is the
	// same in every snapshot for the endpoint's life. It is the attribute
	// scheduling.LoadKey reads (as a scheduling.EndpointLoad).
	StatsKey = scheduling.NewAttributeKey[*EndpointStats](scheduling.LoadKey.Name())
	// WeightKey holds the endpoint's relative capacity (EndpointSpec.Weight,
	// 1 when unset). It is scheduling.WeightKey.
	WeightKey = scheduling.WeightKey
	// EngineKey holds the name of the engine whose metric mapping the
	// scraper reads the endpoint with; before the first scrape it is
	// EndpointSpec.Engine. It is absent when neither is known.
	EngineKey = scheduling.NewAttributeKey[string]("switchyard.io/endpoint-engine")
	// ProviderTPMKey holds EndpointSpec.ProviderTPM (an int, tokens per
	// minute) when the endpoint declares it; absent otherwise. Plugins that
	// do not import this package read it under the same name
	// ("switchyard.io/provider-tpm").
	ProviderTPMKey = scheduling.NewAttributeKey[int]("switchyard.io/provider-tpm")
	// ProviderRPMKey holds EndpointSpec.ProviderRPM (an int, requests per
	// minute) when the endpoint declares it; absent otherwise
	// ("switchyard.io/provider-rpm").
	ProviderRPMKey = scheduling.NewAttributeKey[int]("switchyard.io/provider-rpm")
)

var _ scheduling.EndpointLoad = (*EndpointStats)(nil)
