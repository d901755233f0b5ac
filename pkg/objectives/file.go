package objectives

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/switchyard-ai/switchyard/pkg/fielderr"
	"github.com/switchyard-ai/switchyard/pkg/internal/filewatch"
	"github.com/switchyard-ai/switchyard/pkg/internal/yamldoc"
)

// MaxFileBytes bounds the size of an objectives file.
const MaxFileBytes = 4 << 20

type subject struct{}

func (subject) Subject() string { return "objectives" }

// ValidationError lists every problem of an objectives file, each with
// its field path.
type ValidationError = fielderr.ValidationError[subject]

type errorList = fielderr.List[subject]

// Parse decodes and validates an objectives file (YAML or JSON): an
// object with one key, objectives, a list of {name, priority}. Decoding
// is strict; every problem is reported at once as a *ValidationError.
func Parse(data []byte) (*Table, error) {
	var errs errorList
	t := parse(data, &errs)
	if err := errs.Err(); err != nil {
		return nil, err
	}
	return t, nil
}

func parse(data []byte, errs *errorList) *Table {
	root, problem := yamldoc.Decode(data, yamldoc.Rules{
		Empty:            "the file is empty; write `objectives: []` for none",
		Check:            checkDocuments,
		Strict:           true,
		NotDecoded:       "not valid YAML",
		MaxExpandedBytes: MaxFileBytes,
	})
	if problem != "" {
		errs.Add("", "%s", problem)
		return nil
	}
	obj, ok := root.(map[string]any)
	if !ok {
		errs.Add("", "expected an object with an objectives list, got %s", yamldoc.TypeName(root))
		return nil
	}
	unknownKeys(errs, "", obj, "objectives")
	raw, present := obj["objectives"]
	if !present {
		errs.Add("objectives", "required; write `objectives: []` for none")
		return nil
	}
	if raw == nil {
		return NewTable(nil)
	}
	list, ok := raw.([]any)
	if !ok {
		errs.Add("objectives", "expected a list, got %s", yamldoc.TypeName(raw))
		return nil
	}
	if len(list) > MaxObjectives {
		errs.Add("objectives", "%d objectives exceed the limit of %d", len(list), MaxObjectives)
		return nil
	}
	m := make(map[string]int, len(list))
	first := make(map[string]int, len(list))
	for i, item := range list {
		path := fmt.Sprintf("objectives[%d]", i)
		o, ok := item.(map[string]any)
		if !ok {
			errs.Add(path, "expected an object with name and priority, got %s", yamldoc.TypeName(item))
			continue
		}
		unknownKeys(errs, path, o, "name", "priority")
		name, nameOK := "", false
		switch v := o["name"].(type) {
		case nil:
			errs.Add(path+".name", "required")
		case string:
			if msgs := validation.IsDNS1123Subdomain(v); len(msgs) > 0 {
				errs.Add(path+".name", "%q is not a valid objective name: %s", v, strings.Join(msgs, "; "))
			} else if j, dup := first[v]; dup {
				errs.Add(path+".name", "%q is already defined by objectives[%d]", v, j)
			} else {
				name, nameOK = v, true
				first[v] = i
			}
		default:
			errs.Add(path+".name", "expected a string, got %s", yamldoc.TypeName(v))
		}
		prio, prioOK := 0, true
		if v, ok := o["priority"]; ok && v != nil {
			prio, prioOK = priority(errs, path+".priority", v)
		}
		if nameOK && prioOK {
			m[name] = prio
		}
	}
	if errs.Len() > 0 {
		return nil
	}
	return &Table{m: m}
}

// priority decodes an int32.
func priority(errs *errorList, path string, v any) (int, bool) {
	n, ok := v.(json.Number)
	if !ok {
		errs.Add(path, "expected an integer, got %s", yamldoc.TypeName(v))
		return 0, false
	}
	i, err := n.Int64()
	if err != nil {
		if f, ferr := n.Float64(); ferr == nil && f == math.Trunc(f) {
			errs.Add(path, "%s is out of range (%d..%d)", n, math.MinInt32, math.MaxInt32)
		} else {
			errs.Add(path, "expected an integer, got %s", n)
		}
		return 0, false
	}
	if i > math.MaxInt32 || i < math.MinInt32 {
		errs.Add(path, "%s is out of range (%d..%d)", n, math.MinInt32, math.MaxInt32)
		return 0, false
	}
	return int(i), true
}

func unknownKeys(errs *errorList, path string, obj map[string]any, allowed ...string) {
	for _, k := range yamldoc.UnknownKeys(obj, allowed) {
		errs.Add(keyPath(path, k), "unknown field %q (allowed: %s)", k, strings.Join(allowed, ", "))
	}
}

// keyPath is the path of key k under path: path.k, or path["k"] when k is
// not a plain word (so that every path is non-empty and unambiguous).
func keyPath(path, k string) string {
	plain := k != ""
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			plain = false
			break
		}
	}
	switch {
	case !plain:
		return path + "[" + strconv.Quote(k) + "]"
	case path == "":
		return k
	}
	return path + "." + k
}

// checkDocuments refuses a second YAML document.
func checkDocuments(data []byte) string {
	content := false
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimRight(line, " \t\r")
		if line == "---" || strings.HasPrefix(line, "--- ") {
			if content {
				rest := strings.Join(strings.Split(string(data), "\n")[i+1:], "\n")
				if hasContent(rest) || hasContent(strings.TrimPrefix(line, "---")) {
					return fmt.Sprintf("a second YAML document starts at line %d; an objectives file holds exactly one", i+1)
				}
			}
			continue
		}
		if hasContent(line) {
			content = true
		}
	}
	return ""
}

func hasContent(s string) bool {
	for line := range strings.SplitSeq(s, "\n") {
		t := strings.TrimSpace(line)
		if t != "" && t != "..." && !strings.HasPrefix(t, "#") {
			return true
		}
	}
	return false
}

// FileSource loads an objectives file into a Set and keeps it in sync.
type FileSource struct {
	path string
	set  *Set
	log  logr.Logger

	mu       sync.Mutex
	lastData []byte
	lastErr  string
}

// NewFileSource returns a source for the file at path.
func NewFileSource(path string, set *Set, logger logr.Logger) *FileSource {
	if logger.GetSink() == nil {
		logger = logr.Discard()
	}
	return &FileSource{path: path, set: set, log: logger.WithValues("path", path)}
}

// Load reads, parses and publishes the file; its error (at start-up it
// should stop the process) names the file and every invalid field.
func (s *FileSource) Load() error {
	_, err := s.reload(true)
	return err
}

// Run keeps the Set in sync with the file until ctx ends: it watches the
// file's directory (atomic renames and ConfigMap symlink swaps are seen)
// and re-reads it every 10 s. A file that cannot be read or is invalid is
// logged and the last good table stays.
func (s *FileSource) Run(ctx context.Context) error {
	opts := filewatch.Options{Logger: s.log}
	err := filewatch.Run(ctx, []string{s.path}, opts, func() ([32]byte, bool) {
		applied, err := s.reload(false)
		switch {
		case err != nil:
			s.log.Error(err, "Objectives file refused; keeping the last good objectives")
		case applied:
			s.log.Info("Objectives file reloaded", "objectives", s.set.Table().Len())
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.lastData == nil {
			return [32]byte{}, false
		}
		return filewatch.Sum(s.lastData), true
	})
	if err != nil {
		s.log.Error(err, "Cannot watch the objectives file")
	}
	return nil
}

func (s *FileSource) reload(force bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := readFile(s.path)
	if err != nil {
		if !force && s.lastErr == err.Error() {
			return false, nil
		}
		s.lastData, s.lastErr = nil, err.Error()
		return false, fmt.Errorf("objectives file %s: %w", s.path, err)
	}
	s.lastErr = ""
	if !force && s.lastData != nil && bytes.Equal(data, s.lastData) {
		return false, nil
	}
	s.lastData = data
	t, err := Parse(data)
	if err != nil {
		return false, fmt.Errorf("objectives file %s: %w", s.path, err)
	}
	s.set.Store(t)
	return true, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, errors.New("the file is larger than 4 MiB")
	}
	return data, nil
}
