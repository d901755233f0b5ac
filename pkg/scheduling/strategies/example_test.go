package strategies_test

import (
	"fmt"

	"github.com/switchyard-ai/switchyard/pkg/scheduling/strategies"
)

func ExampleParse() {
	name, pluginType, _ := strategies.Parse("least_busy")
	fmt.Println(name, pluginType)
	_, _, err := strategies.Parse("fastest")
	fmt.Println(err)
	// Output:
	// LeastBusy least-busy-picker
	// unknown strategy "fastest"; valid: RoundRobin, WeightedRoundRobin, LeastLatency, Random, ConsistentHash, PrefixAwareHash, EngineLoad, LeastBusy, LeastCost (case-insensitive; PascalCase, snake_case or kebab-case)
}
