package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/switchyard-ai/switchyard/pkg/scheduling/strategies"
)

// selectionStrategyUsage is the help of --selection-strategy.
var selectionStrategyUsage = "selection strategy of every strategy-picker (" + strings.Join(strategies.Names(), ", ") +
	"; any case, PascalCase, snake_case or kebab-case); in a configuration without a strategy-picker it replaces each profile's picker by one, the profile's scorers deciding first. " +
	"Overrides $" + strategies.EnvVar + ", which overrides the configuration; default: the configuration's"

// registerSelectionStrategy adds --selection-strategy to fs.
func registerSelectionStrategy(fs *flag.FlagSet, v *string) {
	fs.StringVar(v, "selection-strategy", "", selectionStrategyUsage)
}

// selectionStrategy resolves the strategy chosen outside the configuration:
// the --selection-strategy flag, else $SWITCHYARD_SELECTION_STRATEGY, else
// none (the configuration's strategy-picker, else the default RoundRobin,
// applies). It returns the canonical name and where it came from; an
// unknown name is an error that names its source and lists the valid
// names.
func selectionStrategy(flagValue string) (canonical, source string, err error) {
	value, source := flagValue, "--selection-strategy"
	if value == "" {
		value, source = os.Getenv(strategies.EnvVar), strategies.EnvVar
	}
	if strings.TrimSpace(value) == "" {
		return "", "", nil
	}
	canonical, _, err = strategies.Parse(value)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", source, err)
	}
	return canonical, source, nil
}
