package tokenauth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/switchyard-ai/switchyard/pkg/internal/filewatch"
)

// MaxTokenBytes bounds the token file. Bearer tokens are short; a larger
// file is a mistake (a certificate or a key given by accident).
const MaxTokenBytes = 4 << 10

// MinTokenBytes is the shortest token accepted: a guessable token would
// guard nothing.
const MinTokenBytes = 16

// Guard checks bearer tokens against the token file. It is safe for
// concurrent use.
type Guard struct {
	path string
	log  logr.Logger
	// sum is the SHA-256 of the current token.
	sum atomic.Pointer[[sha256.Size]byte]
	// read is filewatch.Sum of the file content last read successfully.
	read atomic.Pointer[[sha256.Size]byte]
}

// New reads the token file. It fails when the file cannot be read or does
// not hold a valid token (see ReadToken).
func New(path string, log logr.Logger) (*Guard, error) {
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	g := &Guard{path: path, log: log}
	if err := g.load(); err != nil {
		return nil, err
	}
	return g, nil
}

// ReadToken reads and checks a token file: the token is the file's
// content without surrounding white space (a trailing newline is usual),
// at least MinTokenBytes and at most MaxTokenBytes long, printable ASCII
// without spaces (what an HTTP header can carry).
func ReadToken(path string) (token []byte, raw []byte, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	raw, err = io.ReadAll(io.LimitReader(f, MaxTokenBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("token file %s: %w", path, err)
	}
	token, err = ParseToken(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("token file %s: %w", path, err)
	}
	return token, raw, nil
}

// ParseToken checks a token file's content (see ReadToken) and returns the
// token, a subslice of raw.
func ParseToken(raw []byte) ([]byte, error) {
	if len(raw) > MaxTokenBytes {
		return nil, fmt.Errorf("larger than %d bytes; it should hold one bearer token", MaxTokenBytes)
	}
	token := bytes.TrimSpace(raw)
	if len(token) < MinTokenBytes {
		return nil, fmt.Errorf("the token is %d bytes long; use at least %d (e.g. openssl rand -hex 32)", len(token), MinTokenBytes)
	}
	for i, c := range token {
		if c <= ' ' || c > '~' {
			return nil, fmt.Errorf("byte %d of the token is %q; a bearer token is printable ASCII without spaces", i, c)
		}
	}
	return token, nil
}

func (g *Guard) load() error {
	token, raw, err := ReadToken(g.path)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(token)
	g.sum.Store(&sum)
	read := filewatch.Sum(raw)
	g.read.Store(&read)
	return nil
}

// Run follows the token file until ctx ends, replacing the token when the
// file changes. An unreadable or invalid file is logged and the last good
// token stays.
func (g *Guard) Run(ctx context.Context) {
	opts := filewatch.Options{Debounce: filewatch.DefaultDebounce, Poll: 10 * time.Second, Logger: g.log, Initial: g.read.Load()}
	err := filewatch.Run(ctx, []string{g.path}, opts, func() ([sha256.Size]byte, bool) {
		if err := g.load(); err != nil {
			g.log.Error(err, "Cannot reload the metrics token file; the last good token stays", "file", g.path)
			return [sha256.Size]byte{}, false
		}
		g.log.Info("Metrics token reloaded", "file", g.path)
		return *g.read.Load(), true
	})
	if err != nil {
		g.log.Error(err, "Cannot watch the metrics token file; token rotation needs a restart", "file", g.path)
	}
}

// Check reports whether the request carries the token.
func (g *Guard) Check(req *http.Request) bool {
	token, ok := bearer(req)
	if !ok {
		return false
	}
	got := sha256.Sum256([]byte(token))
	want := g.sum.Load()
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// Wrap returns next guarded by the token: 401 with a WWW-Authenticate
// challenge without it (logged at V(1) with the path and the remote
// address, never the token).
func (g *Guard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if g.Check(req) {
			next.ServeHTTP(w, req)
			return
		}
		_, present := bearer(req)
		g.log.V(1).Info("Metrics port request refused: no valid bearer token", "path", req.URL.Path, "remote", req.RemoteAddr, "tokenPresent", present)
		challenge := `Bearer realm="switchyard-metrics"`
		if present {
			challenge += `, error="invalid_token"`
		}
		w.Header().Set("WWW-Authenticate", challenge)
		http.Error(w, "Unauthorized: send the token of --metrics-token-file (Authorization: Bearer ...)", http.StatusUnauthorized)
	})
}

// bearer returns the request's bearer token.
func bearer(req *http.Request) (string, bool) {
	scheme, token, _ := strings.Cut(req.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}
