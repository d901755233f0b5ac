package plugins

import (
	"github.com/switchyard-ai/switchyard/pkg/plugins/admitter/kvsaturation"
	"github.com/switchyard-ai/switchyard/pkg/plugins/datalayer/coremetrics"
	"github.com/switchyard-ai/switchyard/pkg/plugins/datalayer/metricssource"
	"github.com/switchyard-ai/switchyard/pkg/plugins/filter/bylabel"
	"github.com/switchyard-ai/switchyard/pkg/plugins/filter/callerscope"
	"github.com/switchyard-ai/switchyard/pkg/plugins/filter/headerbased"
	"github.com/switchyard-ai/switchyard/pkg/plugins/filter/labelselector"
	"github.com/switchyard-ai/switchyard/pkg/plugins/filter/prefixaffinity"
	"github.com/switchyard-ai/switchyard/pkg/plugins/filter/servedmodel"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/edf"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/fcfs"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/globalstrict"
	fcroundrobin "github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/roundrobin"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/slodeadline"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/staticusagelimit"
	"github.com/switchyard-ai/switchyard/pkg/plugins/health/activehealthcheck"
	"github.com/switchyard-ai/switchyard/pkg/plugins/health/circuitbreaker"
	"github.com/switchyard-ai/switchyard/pkg/plugins/parser/openai"
	"github.com/switchyard-ai/switchyard/pkg/plugins/parser/passthrough"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/consistenthash"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/engineload"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/leastbusy"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/leastcost"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/leastlatency"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/maxscore"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/prefixawarehash"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/random"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/roundrobin"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/strategy"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/weightedrandom"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/weightedroundrobin"
	"github.com/switchyard-ai/switchyard/pkg/plugins/producer/inflightload"
	"github.com/switchyard-ai/switchyard/pkg/plugins/profile/single"
	"github.com/switchyard-ai/switchyard/pkg/plugins/saturation/concurrency"
	"github.com/switchyard-ai/switchyard/pkg/plugins/saturation/utilization"
	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/activerequest"
	engineloadscorer "github.com/switchyard-ai/switchyard/pkg/plugins/scorer/engineload"
	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/kvcache"
	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/lora"
	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/nohitlru"
	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/prefix"
	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/queue"
	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/runningrequests"
	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/sessionaffinity"
	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/tokenload"
	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/usageweight"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// InTree returns a new registry holding every in-tree plugin type. It is
// the one list of plugins: one line per type, grouped by kind.
func InTree() *scheduling.Registry {
	return scheduling.NewRegistry().MustRegister(
		// Profile handlers.
		single.Registration,
		// Filters.
		bylabel.Registration,
		headerbased.Registration,
		labelselector.Registration,
		labelselector.AliasRegistration,
		prefixaffinity.Registration,
		// Scorers.
		activerequest.Registration,
		kvcache.Registration,
		lora.Registration,
		nohitlru.Registration,
		prefix.ScorerRegistration,
		queue.Registration,
		runningrequests.Registration,
		sessionaffinity.Registration,
		tokenload.Registration,
		// Pickers.
		maxscore.Registration,
		random.Registration,
		weightedrandom.Registration,
		// Data producers.
		inflightload.Registration,
		prefix.ProducerRegistration,
		// Saturation detectors (also filters).
		concurrency.Registration,
		utilization.Registration,
		// Data layer.
		coremetrics.Registration,
		metricssource.Registration,
		// Parsers.
		openai.Registration,
		passthrough.Registration,
		// issue 10: strategies
		roundrobin.Registration,
		weightedroundrobin.Registration,
		leastlatency.Registration,
		consistenthash.Registration,
		leastbusy.Registration,
		strategy.Registration,
		// issue 10: eligibility
		activehealthcheck.Registration,
		circuitbreaker.Registration,
		servedmodel.Registration,
		callerscope.Registration,
		// issue 10: strategies group 2
		prefixawarehash.Registration,
		engineload.Registration,
		leastcost.Registration,
		// issue 12: engine-load term, KV-saturation admission
		engineloadscorer.Registration,
		kvsaturation.Registration,
		// issue 12: usage weight and quota-aware observation
		usageweight.Registration,
		// issue 14: flow-control policies
		fcfs.Registration,
		edf.Registration,
		slodeadline.Registration,
		globalstrict.Registration,
		fcroundrobin.Registration,
		staticusagelimit.Registration,
	)
}
