package prefixawarehash_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/prefixawarehash"
)

// TestREADMEExample loads the README's example with the real loader and
// the in-tree registry.
func TestREADMEExample(t *testing.T) {
	doc, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	start := strings.Index(s, "```yaml\n") + len("```yaml\n")
	end := strings.Index(s[start:], "```")
	loaded, err := config.Load([]byte(s[start:start+end]), config.Options{Registry: plugins.InTree(), Context: context.Background(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	if _, ok := loaded.Plugins[prefixawarehash.Type].(*prefixawarehash.Picker); !ok {
		t.Errorf("plugins = %v", loaded.Plugins)
	}
}
