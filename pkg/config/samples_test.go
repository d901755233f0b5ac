package config_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	configfiles "github.com/switchyard-ai/switchyard/config"
)

// TestShippedConfigsLoad loads config/default.yaml and every sample through
// the real loader, with no warnings: what we ship must be clean.
func TestShippedConfigsLoad(t *testing.T) {
	entries, err := fs.ReadDir(configfiles.Samples, "samples")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(entries), 4)
	docs := map[string][]byte{"default.yaml": configfiles.Default}
	for _, e := range entries {
		data, err := fs.ReadFile(configfiles.Samples, "samples/"+e.Name())
		require.NoError(t, err)
		docs["samples/"+e.Name()] = data
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			loaded, err := load(t, string(doc))
			require.NoError(t, err)
			require.Empty(t, loaded.Warnings)
		})
	}
}

var yamlFence = regexp.MustCompile("(?ms)^```yaml\n(.*?)^```")

// TestPluginReadmeExamplesLoad loads the example configuration of every
// plugin README through the real loader, so documentation cannot rot.
func TestPluginReadmeExamplesLoad(t *testing.T) {
	root := filepath.Join("..", "plugins")
	var readmes []string
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "README.md" {
			readmes = append(readmes, path)
		}
		return err
	}))
	require.NotEmpty(t, readmes)
	for _, path := range readmes {
		rel, _ := filepath.Rel(root, path)
		t.Run(filepath.ToSlash(rel), func(t *testing.T) {
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			examples := 0
			for _, m := range yamlFence.FindAllSubmatch(data, -1) {
				if !strings.Contains(string(m[1]), "kind: EndpointPickerConfig") {
					continue
				}
				examples++
				_, err := load(t, string(m[1]))
				require.NoError(t, err, "example in %s:\n%s", path, m[1])
			}
			require.Positive(t, examples, "%s has no EndpointPickerConfig example", path)
		})
	}
}
