package scrape

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
)

// connServer is a metrics server that counts the TCP connections it
// accepts, with a handler of the test's choosing.
type connServer struct {
	*httptest.Server
	conns atomic.Int64
	hits  atomic.Int64
}

func newConnServer(t *testing.T, h http.HandlerFunc, configure func(*http.Server)) *connServer {
	t.Helper()
	cs := &connServer{}
	cs.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs.hits.Add(1)
		h(w, r)
	}))
	cs.Config.ErrorLog = log.New(io.Discard, "", 0)
	cs.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			cs.conns.Add(1)
		}
	}
	if configure != nil {
		configure(cs.Config)
	}
	cs.Start()
	t.Cleanup(cs.Close)
	return cs
}

func (cs *connServer) spec(t *testing.T, name string) datastore.EndpointSpec {
	t.Helper()
	u, err := url.Parse(cs.URL)
	require.NoError(t, err)
	host, port, err := net.SplitHostPort(u.Host)
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	return datastore.EndpointSpec{Name: name, Address: host, Port: p}
}

// TestConnectionReuse: a worker scrapes over one kept-alive connection,
// whether the body has a Content-Length or is chunked.
func TestConnectionReuse(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			srv := newConnServer(t, func(w http.ResponseWriter, _ *http.Request) {
				body := fmt.Sprintf(vllmBody, 3)
				if chunked {
					_, _ = io.WriteString(w, body[:20])
					w.(http.Flusher).Flush()
					_, _ = io.WriteString(w, body[20:])
					return
				}
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				_, _ = io.WriteString(w, body)
			}, nil)
			h := start(t, 0, defaultConfig(t), Options{}, srv.spec(t, "a"))
			require.Eventually(t, func() bool { return srv.hits.Load() >= 20 }, wait, time.Millisecond)
			assert.Equal(t, []string{"a"}, h.ready())
			assert.Equal(t, int64(1), srv.conns.Load(), "one connection for every scrape")
			for _, r := range reasons {
				assert.Zero(t, h.errorsFor(r), r)
			}
		})
	}
}

// TestConnectionClosedByServer: a server that closes its connections —
// after each answer (Connection: close) or when they sit idle longer than
// the interval — costs new connections, never a failed scrape.
func TestConnectionClosedByServer(t *testing.T) {
	body := fmt.Sprintf(vllmBody, 2)
	for _, c := range []struct {
		name      string
		configure func(*http.Server)
	}{
		{"connection close", func(s *http.Server) { s.SetKeepAlivesEnabled(false) }},
		{"idle timeout below the interval", func(s *http.Server) { s.IdleTimeout = 2 * time.Millisecond }},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newConnServer(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }, c.configure)
			h := start(t, 0, defaultConfig(t), Options{Interval: 20 * time.Millisecond}, srv.spec(t, "a"))
			require.Eventually(t, func() bool { return srv.hits.Load() >= 10 }, wait, time.Millisecond)
			assert.Greater(t, srv.conns.Load(), int64(5), "the server's closes cost new connections")
			for _, r := range reasons {
				assert.Zero(t, h.errorsFor(r), r)
			}
			assert.Equal(t, []string{"a"}, h.ready())
		})
	}
}

// TestResponseEncodingsAndStatuses: a gzipped body is read although it was
// not asked for; another encoding is a parse error; a redirect is not
// followed (an http_status error) and a non-200 answer closes the
// connection.
func TestResponseEncodingsAndStatuses(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = io.WriteString(zw, fmt.Sprintf(vllmBody, 7))
	require.NoError(t, zw.Close())

	t.Run("gzip", func(t *testing.T) {
		srv := newConnServer(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(gz.Bytes())
		}, nil)
		h := start(t, 0, defaultConfig(t), Options{}, srv.spec(t, "a"))
		require.Eventually(t, func() bool {
			ep, ok := h.store.Snapshot().Lookup("a")
			return ok && ep.Metrics().WaitingQueueSize == 7 && srv.hits.Load() >= 5
		}, wait, time.Millisecond)
		assert.Equal(t, int64(1), srv.conns.Load())
	})
	t.Run("unsupported encoding", func(t *testing.T) {
		srv := newConnServer(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Encoding", "br")
			_, _ = io.WriteString(w, "x")
		}, nil)
		h := start(t, 0, defaultConfig(t), Options{}, srv.spec(t, "a"))
		require.Eventually(t, func() bool { return h.errorsFor(ReasonParse) > 0 }, wait, time.Millisecond)
		st, _ := h.store.ScrapeStatus("a")
		assert.Contains(t, st.LastError, `unsupported Content-Encoding "br"`)
	})
	t.Run("redirect", func(t *testing.T) {
		srv := newConnServer(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}, nil)
		h := start(t, 0, defaultConfig(t), Options{MaxBackoff: 10 * time.Millisecond}, srv.spec(t, "a"))
		require.Eventually(t, func() bool { return srv.hits.Load() >= 3 }, wait, time.Millisecond)
		assert.Positive(t, h.errorsFor(ReasonHTTPStatus))
		assert.Empty(t, h.ready())
		assert.GreaterOrEqual(t, srv.conns.Load(), srv.hits.Load()-1, "each non-200 answer closes the connection")
	})
}

// BenchmarkScrape is one scrape of a name-filtered vLLM body over the
// worker's kept-alive connection, as the scraper does it 20 times a
// second per endpoint.
func BenchmarkScrape(b *testing.B) {
	body := fmt.Sprintf(vllmBody, 3)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }))
	defer srv.Close()
	u, err := url.Parse(srv.URL + "/metrics")
	require.NoError(b, err)
	store := datastore.New(datastore.Options{})
	s, err := NewScraper(store, defaultConfig(b), Options{})
	require.NoError(b, err)
	w := &worker{s: s}
	defer w.conn.close()
	req := newScrapeRequest(u, false)
	m := defaultConfig(b).Extractor.Engines()["vllm"]
	b.ReportAllocs()
	for b.Loop() {
		var pe *PartialError // no LoRA or cache info in the body
		if _, err := s.fetch(b.Context(), w, req, m); err != nil && !errors.As(err, &pe) {
			b.Fatal(err)
		}
	}
}
