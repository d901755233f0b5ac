package manifests_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// codeBlock is a fenced block of README.md.
type codeBlock struct {
	lang, text string
	line       int
}

func readmeBlocks(t testing.TB) []codeBlock {
	t.Helper()
	var out []codeBlock
	var cur *codeBlock
	var indent string
	for i, line := range strings.Split(string(readFile(t, "README.md")), "\n") {
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			indent = line[:len(line)-len(trimmed)]
			cur = &codeBlock{lang: strings.TrimPrefix(trimmed, "```"), line: i + 1}
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += strings.TrimPrefix(line, indent) + "\n"
		}
	}
	if cur != nil {
		t.Fatalf("README.md:%d: unterminated code block", cur.line)
	}
	return out
}

// fileComment marks a README block that shows a file of this folder.
var fileComment = regexp.MustCompile(`^# (manifests/\S+)\n`)

// readmeObjects returns the Kubernetes objects README.md shows that are
// not copies of files here (those are checked by TestReadme and rendered
// with their folders); TestManifestsOnAPIServer applies them.
func readmeObjects(t testing.TB) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, b := range readmeBlocks(t) {
		if b.lang != "yaml" || fileComment.MatchString(b.text) {
			continue
		}
		docs := yamlDocs(t, b)
		if !isObjects(docs) {
			continue
		}
		for _, d := range docs {
			u, err := decodeObject(d)
			if err != nil {
				t.Fatalf("README.md:%d: %v", b.line, err)
			}
			out = append(out, u)
		}
	}
	return out
}

func yamlDocs(t testing.TB, b codeBlock) [][]byte {
	t.Helper()
	var docs [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(b.text)))
	for {
		d, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("README.md:%d: %v", b.line, err)
		}
		var v any
		if err := yaml.UnmarshalStrict(d, &v); err != nil {
			t.Fatalf("README.md:%d: not YAML: %v", b.line, err)
		}
		docs = append(docs, d)
	}
}

func isObjects(docs [][]byte) bool {
	for _, d := range docs {
		var m struct{ APIVersion, Kind string }
		if yaml.Unmarshal(d, &m) != nil || m.APIVersion == "" || m.Kind == "" {
			return false
		}
	}
	return len(docs) > 0
}

// TestReadme keeps README.md honest: a YAML block headed by a file's path
// is that file, byte for byte; other YAML blocks parse (objects among them
// go to the API server in TestManifestsOnAPIServer); every manifests/ path
// it names exists; every metric it names is one the EPP exports.
func TestReadme(t *testing.T) {
	blocks := readmeBlocks(t)
	shown := map[string]bool{}
	for _, b := range blocks {
		if b.lang != "yaml" {
			continue
		}
		if m := fileComment.FindStringSubmatch(b.text); m != nil {
			rel, ok := strings.CutPrefix(m[1], "manifests/")
			if !ok {
				t.Fatalf("README.md:%d: %s", b.line, m[1])
			}
			if !bytes.Equal(readFile(t, filepath.FromSlash(rel)), []byte(b.text)) {
				t.Errorf("README.md:%d: the block differs from %s", b.line, m[1])
			}
			shown[rel] = true
			continue
		}
		docs := yamlDocs(t, b)
		for _, d := range docs {
			if bytes.Contains(d, []byte("kind: Kustomization")) {
				t.Errorf("README.md:%d: a kustomization must be a file under examples/ shown with its path", b.line)
			}
		}
	}
	// Every example folder is shown.
	for _, dir := range kustomizations(t) {
		if strings.HasPrefix(dir, "examples/") && !shown[dir+"/kustomization.yaml"] {
			t.Errorf("README.md does not show %s/kustomization.yaml", dir)
		}
	}

	text := string(readFile(t, "README.md"))
	for _, sm := range regexp.MustCompile(`(?:^|[^A-Za-z0-9_./-])(manifests/[A-Za-z0-9_./-]*[A-Za-z0-9_])`).FindAllStringSubmatch(text, -1) {
		m := sm[1]
		rel := strings.TrimPrefix(m, "manifests/")
		if _, err := os.Stat(filepath.FromSlash(rel)); err != nil {
			t.Errorf("README.md names %s, which does not exist", m)
		}
	}
	metricsSrc := string(readFile(t, filepath.Join("..", "pkg", "metrics", "metrics.go")))
	for _, name := range regexp.MustCompile("`(inference_[a-z_]+)`").FindAllStringSubmatch(text, -1) {
		if !strings.Contains(metricsSrc, `"`+name[1]+`"`) {
			t.Errorf("README.md names metric %s, which pkg/metrics does not define", name[1])
		}
	}
}
