package config_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/switchyard-ai/switchyard/internal/testmod"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
)

// gieVersion is the last GIE release that shipped the full EPP; its
// configuration files are the compatibility target.
const gieVersion = "v1.5.0"

// downloadGIE fetches the GIE module (not the v1.6.x our go.mod requires
// for the API types) and returns its directory.
func downloadGIE(t *testing.T) string {
	t.Helper()
	return testmod.Dir(t, "sigs.k8s.io/gateway-api-inference-extension", gieVersion)
}

type gieConfig struct {
	where string // file and position, for messages
	doc   []byte
}

var fence = regexp.MustCompile("(?ms)^[ \t]*```ya?ml[^\n]*\n(.*?)^[ \t]*```")

// gieConfigs finds every EndpointPickerConfig in the module: YAML files
// (also inside ConfigMaps) and ```yaml blocks in Markdown. Helm templates
// are skipped: they are not YAML until rendered.
func gieConfigs(t *testing.T, root string) []gieConfig {
	t.Helper()
	var out []gieConfig
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ext := filepath.Ext(path)
		if ext != ".yaml" && ext != ".yml" && ext != ".md" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Contains(data, []byte("EndpointPickerConfig")) || bytes.Contains(data, []byte("{{")) && ext != ".md" {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		var blocks [][]byte
		if ext == ".md" {
			for _, m := range fence.FindAllSubmatch(data, -1) {
				blocks = append(blocks, m[1])
			}
		} else {
			blocks = [][]byte{data}
		}
		for bi, block := range blocks {
			for ci, c := range extract(block) {
				out = append(out, gieConfig{where: rel + "#" + strconv.Itoa(bi) + "." + strconv.Itoa(ci), doc: c})
			}
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// placeholder matches the elisions of schematic snippets in GIE's docs
// ("- ....", "# ...", "  ..."): such snippets show a shape, not a
// configuration anyone can run.
var placeholder = regexp.MustCompile(`(?m)^\s*(-\s*)?(#\s*)?\.{3,}\s*$`)

var configStart = regexp.MustCompile(`^(\s*)apiVersion:\s*\S+\s*$`)

// extract returns every EndpointPickerConfig in a text: top-level
// documents, and configurations embedded as indented text (a ConfigMap's
// data, a Deployment's --config-text argument, Helm values). A
// configuration starts with an apiVersion line followed by
// "kind: EndpointPickerConfig" at the same indentation and runs until the
// indentation drops or the document ends.
func extract(text []byte) [][]byte {
	lines := strings.Split(string(text), "\n")
	var out [][]byte
	for i := 0; i+1 < len(lines); i++ {
		m := configStart.FindStringSubmatch(lines[i])
		if m == nil || strings.TrimSpace(lines[i+1]) != "kind: EndpointPickerConfig" || !strings.HasPrefix(lines[i+1], m[1]+"kind:") {
			continue
		}
		indent := m[1]
		end := i + 2
		for ; end < len(lines); end++ {
			l := lines[end]
			if strings.TrimSpace(l) == "" {
				continue
			}
			if !strings.HasPrefix(l, indent) || (len(l) > len(indent) && indent == "" && strings.HasPrefix(l, "---")) {
				break
			}
			if len(indent) > 0 && len(l)-len(strings.TrimLeft(l, " ")) < len(indent) {
				break
			}
		}
		block := make([]string, 0, end-i)
		for _, l := range lines[i:end] {
			block = append(block, strings.TrimPrefix(l, indent))
		}
		doc := []byte(strings.Join(block, "\n"))
		i = end - 1
		if placeholder.Match(doc) {
			continue // a schematic, not a configuration
		}
		var probe map[string]any
		if yaml.Unmarshal(doc, &probe) != nil {
			continue // prose (one snippet even holds merge-conflict markers)
		}
		out = append(out, doc)
	}
	return out
}

// pluginTypes lists the plugin types a configuration declares.
func pluginTypes(doc []byte) []string {
	var cfg struct {
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	_ = yaml.Unmarshal(doc, &cfg)
	var out []string
	for _, p := range cfg.Plugins {
		out = append(out, p.Type)
	}
	return out
}

// TestGIEConfigsLoad loads every EndpointPickerConfig that GIE v1.5.0 ships:
// those whose plugins Switchyard has must load unchanged; the others must
// fail naming each missing plugin type.
func TestGIEConfigsLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("downloads GIE " + gieVersion + " from the module proxy")
	}
	root := downloadGIE(t)
	configs := gieConfigs(t, root)
	reg := plugins.InTree()
	var supported, unsupported []string
	for _, c := range configs {
		var missing []string
		for _, typ := range pluginTypes(c.doc) {
			if _, ok := reg.Lookup(typ); !ok {
				missing = append(missing, typ)
			}
		}
		t.Run(c.where, func(t *testing.T) {
			_, err := load(t, string(c.doc))
			if len(missing) == 0 {
				supported = append(supported, c.where)
				require.NoError(t, err, "GIE %s ships this configuration and Switchyard has all its plugins:\n%s", gieVersion, c.doc)
				return
			}
			unsupported = append(unsupported, c.where)
			require.Error(t, err)
			for _, typ := range missing {
				require.ErrorContains(t, err, `unknown plugin type "`+typ+`"`)
			}
		})
	}
	t.Logf("GIE %s: %d configurations load, %d use plugins Switchyard lacks", gieVersion, len(supported), len(unsupported))
	// The test must not pass vacuously: the integration-test default and
	// the documented examples are among the supported ones.
	require.Contains(t, supported, "test/integration/epp/testdata/default-config.yaml#0.0")
	require.Contains(t, unsupported, "test/integration/epp/testdata/datalayer-config.yaml#0.0") // mock-metrics-source
	require.Contains(t, unsupported, "test/testdata/configloader_1_test.yaml#0.0")              // test-one and other test types
	require.GreaterOrEqual(t, len(supported), 5, "supported: %v", supported)
}
