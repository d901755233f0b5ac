package config_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/fcfs"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/globalstrict"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/staticusagelimit"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// gieLoaderConstants returns the string constants of GIE v1.5.0's loader
// test data (pkg/epp/config/loader/testdata_test.go), parsed as Go.
func gieLoaderConstants(t *testing.T) map[string]string {
	t.Helper()
	path := filepath.Join(downloadGIE(t), "pkg", "epp", "config", "loader", "testdata_test.go")
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	require.NoError(t, err)
	out := map[string]string{}
	for _, decl := range file.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				s, err := strconv.Unquote(lit.Value)
				require.NoError(t, err, name.Name)
				out[name.Name] = s
			}
		}
	}
	return out
}

// TestGIEFlowControlConfigs loads the flow-control configurations of GIE
// v1.5.0's own loader tests: the two flow-control ones load with the gate
// on and give the values GIE gives them, and the two others that turn the
// gate on fail only because they use GIE's test-only plugin types.
func TestGIEFlowControlConfigs(t *testing.T) {
	if testing.Short() {
		t.Skip("downloads GIE " + gieVersion + " from the module proxy")
	}
	consts := gieLoaderConstants(t)
	for _, name := range []string{"successFlowControlConfigText", "successComplexFlowControlConfigText", "successConfigText", "successSchedulerConfigText"} {
		require.Contains(t, consts, name, "GIE %s's loader test data no longer has %s", gieVersion, name)
	}

	t.Run("successFlowControlConfigText", func(t *testing.T) {
		l, err := load(t, consts["successFlowControlConfigText"])
		require.NoError(t, err)
		fc := l.FlowControl
		require.NotNil(t, fc)
		require.Equal(t, uint64(1024), fc.MaxBytes)
		require.Zero(t, fc.MaxRequests)
		require.Equal(t, time.Minute, fc.DefaultRequestTTL)
		require.Equal(t, time.Minute, fc.NoEndpointRequestTTL, "noEndpointRequestTTL follows defaultRequestTTL (llm-d)")
		require.Equal(t, uint64(1_000_000_000), fc.DefaultBand.MaxBytes, "GIE's band byte default")
		require.IsType(t, &globalstrict.Policy{}, fc.DefaultBand.Fairness)
		require.IsType(t, &fcfs.Policy{}, fc.DefaultBand.Ordering)
		require.IsType(t, &staticusagelimit.Policy{}, fc.UsageLimit)
		require.Equal(t, 1.0, fc.UsageLimit.Ceiling(0, 0))
		_, err = flowcontrol.New(*fc, flowcontrol.PoolFunc(func() (float64, int) { return 0, 1 }))
		require.NoError(t, err)
	})
	t.Run("successComplexFlowControlConfigText", func(t *testing.T) {
		l, err := load(t, consts["successComplexFlowControlConfigText"])
		require.NoError(t, err)
		fc := l.FlowControl
		require.NotNil(t, fc)
		require.Len(t, fc.Bands, 1)
		b := fc.Bands[0]
		require.Equal(t, 100, b.Priority)
		require.Equal(t, "customFCFS", b.Ordering.(scheduling.Plugin).TypedName().Name)
		require.Equal(t, "customFairness", b.Fairness.(scheduling.Plugin).TypedName().Name)
		require.Equal(t, uint64(1_000_000_000), b.MaxBytes)
	})
	for _, name := range []string{"successConfigText", "successSchedulerConfigText"} {
		t.Run(name, func(t *testing.T) {
			doc := consts[name]
			require.Contains(t, doc, "- flowControl")
			_, err := load(t, doc)
			require.Error(t, err)
			var testTypes []string
			for _, typ := range pluginTypes([]byte(doc)) {
				if strings.HasPrefix(typ, "test-") {
					testTypes = append(testTypes, typ)
				}
			}
			require.NotEmpty(t, testTypes)
			errs := errorStrings(t, err)
			for _, e := range errs {
				require.Regexp(t, `unknown plugin type "test-[a-z-]+"`, e, "the only errors are GIE's test-only plugin types")
			}
			for _, typ := range testTypes {
				require.ErrorContains(t, err, `unknown plugin type "`+typ+`"`)
			}
		})
	}
}
