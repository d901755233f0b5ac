package usageweight

import (
	"fmt"
	"sort"
	"strings"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// maxListed bounds the endpoint names a warning lists.
const maxListed = 5

// DeclarationWarnings returns the `epp validate` and server warnings of
// C-39 for a configuration whose profiles use the usage-weight-scorer
// instances named on (empty: the term is off) over endpoints:
//
//   - the term is on but no endpoint declares providerTpm or providerRpm
//     (every candidate scores 0 unless quota-aware observation reports);
//   - the term is off but some endpoints declare limits (the declarations
//     do nothing).
//
// quotaAware says whether one of the instances observes rate-limit
// headers, which lets undeclared endpoints take part.
func DeclarationWarnings(on []string, quotaAware bool, endpoints []*scheduling.Endpoint) []string {
	var declaring []string
	for _, e := range endpoints {
		if Declared(e) {
			declaring = append(declaring, e.Key())
		}
	}
	sort.Strings(declaring)
	switch {
	case len(on) > 0 && len(declaring) == 0 && len(endpoints) > 0:
		more := "every candidate scores 0 and the term never decides"
		if quotaAware {
			more = "only endpoints whose responses carry rate-limit headers (quotaAware) take part"
		}
		return []string{fmt.Sprintf("%s %s is in a scheduling profile, but no endpoint declares providerTpm or providerRpm: %s; declare the providers' limits on their endpoints, or remove the term",
			Type, quoteAll(on), more)}
	case len(on) == 0 && len(declaring) > 0:
		return []string{fmt.Sprintf("endpoints %s declare providerTpm/providerRpm, but no scheduling profile uses a %s: the declarations have no effect; add the term to a profile (see its README) or remove them",
			list(declaring), Type)}
	}
	return nil
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

func list(names []string) string {
	if len(names) <= maxListed {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxListed], ", "), len(names)-maxListed)
}
