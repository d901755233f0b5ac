package scrape

import (
	"bufio"
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
	"strings"
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
	return specOf(t, cs.Server, name)
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
	t.Run("redirect to the same host is followed", func(t *testing.T) {
		srv := newConnServer(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/metrics" {
				http.Redirect(w, r, "/metrics/?"+r.URL.RawQuery, http.StatusTemporaryRedirect)
				return
			}
			assert.NotEmpty(t, r.URL.Query()[NameFilterParam], "the query survives the redirect")
			_, _ = io.WriteString(w, fmt.Sprintf(vllmBody, 5))
		}, nil)
		h := start(t, 0, defaultConfig(t), Options{}, srv.spec(t, "a"))
		require.Eventually(t, func() bool {
			ep, ok := h.store.Snapshot().Lookup("a")
			return ok && ep.Metrics().WaitingQueueSize == 5 && srv.hits.Load() >= 10
		}, wait, time.Millisecond)
		assert.Equal(t, int64(1), srv.conns.Load(), "the redirect's body is drained and the connection kept")
		assert.Equal(t, 1, h.logs.count("The metrics URL redirects"), "logged once")
	})
	t.Run("redirect elsewhere or in a loop is not", func(t *testing.T) {
		for _, loc := range []string{"http://127.0.0.2:1/metrics", "/metrics"} {
			srv := newConnServer(t, func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, loc, http.StatusFound)
			}, nil)
			h := start(t, 0, defaultConfig(t), Options{MaxBackoff: 10 * time.Millisecond}, srv.spec(t, "a"))
			require.Eventually(t, func() bool { return h.errorsFor(ReasonHTTPStatus) > 0 }, wait, time.Millisecond)
			st, _ := h.store.ScrapeStatus("a")
			assert.Contains(t, st.LastError, map[bool]string{true: "not followed", false: "more than 3 redirects"}[loc[0] == 'h'], loc)
			assert.Empty(t, h.ready())
		}
	})
	t.Run("non-200 closes the connection", func(t *testing.T) {
		srv := newConnServer(t, func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "no", http.StatusServiceUnavailable)
		}, nil)
		h := start(t, 0, defaultConfig(t), Options{MaxBackoff: 10 * time.Millisecond}, srv.spec(t, "a"))
		require.Eventually(t, func() bool { return srv.hits.Load() >= 3 }, wait, time.Millisecond)
		assert.Positive(t, h.errorsFor(ReasonHTTPStatus))
		assert.GreaterOrEqual(t, srv.conns.Load(), srv.hits.Load()-1)
	})
	t.Run("informational answers are skipped", func(t *testing.T) {
		srv := newConnServer(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			_, _ = io.WriteString(w, fmt.Sprintf(vllmBody, 6))
		}, nil)
		h := start(t, 0, defaultConfig(t), Options{}, srv.spec(t, "a"))
		require.Eventually(t, func() bool {
			ep, ok := h.store.Snapshot().Lookup("a")
			return ok && ep.Metrics().WaitingQueueSize == 6
		}, wait, time.Millisecond)
	})
}

// rawServer answers every connection with fn.
func rawServer(t *testing.T, fn func(net.Conn)) datastore.EndpointSpec {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fn(c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = lis.Close()
		<-done
	})
	addr := lis.Addr().(*net.TCPAddr)
	return datastore.EndpointSpec{Name: "a", Address: addr.IP.String(), Port: addr.Port}
}

// readRequest reads one request's header from c.
func readRequest(c net.Conn, br *bufio.Reader) bool {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := http.ReadRequest(br)
	return err == nil
}

// TestMisbehavingServers: a server that closes every connection at once,
// one whose header never ends, and one that sends more than its
// Content-Length each fail cleanly (the process keeps serving) or are
// read without reusing a connection out of step.
func TestMisbehavingServers(t *testing.T) {
	t.Run("accepts and closes", func(t *testing.T) {
		spec := rawServer(t, func(net.Conn) {})
		h := start(t, 0, defaultConfig(t), Options{MaxBackoff: 10 * time.Millisecond}, spec)
		require.Eventually(t, func() bool { return h.errorsFor(ReasonConnect) >= 3 }, wait, time.Millisecond)
		assert.Empty(t, h.ready())
	})
	t.Run("endless header", func(t *testing.T) {
		spec := rawServer(t, func(c net.Conn) {
			if !readRequest(c, bufio.NewReader(c)) {
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n")
			line := []byte("X-Padding: " + strings.Repeat("x", 1000) + "\r\n")
			for range maxHeaderBytes/len(line) + 10 {
				if _, err := c.Write(line); err != nil {
					return
				}
			}
		})
		h := start(t, 0, defaultConfig(t), Options{}, spec)
		require.Eventually(t, func() bool { return h.errorsFor(ReasonConnect) > 0 }, wait, time.Millisecond)
		st, _ := h.store.ScrapeStatus("a")
		assert.Contains(t, st.LastError, "response header exceeds 1048576 bytes")
	})
	t.Run("more than its Content-Length", func(t *testing.T) {
		var conns atomic.Int64
		body := fmt.Sprintf(vllmBody, 4)
		spec := rawServer(t, func(c net.Conn) {
			conns.Add(1)
			br := bufio.NewReader(c)
			for readRequest(c, br) {
				if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%sGARBAGE", len(body), body); err != nil {
					return
				}
			}
		})
		h := start(t, 0, defaultConfig(t), Options{}, spec)
		require.Eventually(t, func() bool { return conns.Load() >= 5 }, wait, time.Millisecond)
		for _, r := range reasons {
			assert.Zero(t, h.errorsFor(r), r)
		}
		assert.Equal(t, []string{"a"}, h.ready())
	})
}

// TestNameFilterAnsweredEmpty: a server that answers the name-filtered
// request without the families its whole body has (client_python's
// restricted registry with a multiprocess collector) is asked again whole
// in the same scrape, and whole from then on.
func TestNameFilterAnsweredEmpty(t *testing.T) {
	var filtered, whole atomic.Int64
	srv := newConnServer(t, func(w http.ResponseWriter, r *http.Request) {
		if len(r.URL.Query()[NameFilterParam]) > 0 {
			filtered.Add(1)
			return // 200, empty body
		}
		whole.Add(1)
		_, _ = io.WriteString(w, fmt.Sprintf(vllmBody, 8))
	}, nil)
	h := start(t, 0, defaultConfig(t), Options{}, srv.spec(t, "a"))
	require.Eventually(t, func() bool { return whole.Load() >= 10 }, wait, time.Millisecond)
	assert.Equal(t, []string{"a"}, h.ready())
	ep, _ := h.store.Snapshot().Lookup("a")
	assert.Equal(t, 8, ep.Metrics().WaitingQueueSize)
	assert.Equal(t, int64(1), filtered.Load(), "asked filtered once")
	for _, r := range reasons {
		assert.Zero(t, h.errorsFor(r), r)
	}
	assert.Equal(t, 1, h.logs.count("scraping its whole /metrics from now on"))
}

// TestNameFilterFallbackIsRemembered: the fallback to the whole body
// survives store changes that leave the endpoint's target as it was, and
// is not taken when the whole request fails too.
func TestNameFilterFallbackIsRemembered(t *testing.T) {
	t.Run("survives an unrelated store change", func(t *testing.T) {
		var filtered, whole atomic.Int64
		srv := newConnServer(t, func(w http.ResponseWriter, r *http.Request) {
			if len(r.URL.Query()[NameFilterParam]) > 0 {
				filtered.Add(1)
				return
			}
			whole.Add(1)
			_, _ = io.WriteString(w, fmt.Sprintf(vllmBody, 8))
		}, nil)
		other := newMetricsServer(t, fmt.Sprintf(vllmBody, 1))
		a := srv.spec(t, "a")
		h := start(t, 0, defaultConfig(t), Options{}, a)
		require.Eventually(t, func() bool { return whole.Load() >= 5 }, wait, time.Millisecond)
		require.NoError(t, h.store.Replace([]datastore.EndpointSpec{a, other.spec(t, "b")}))
		require.Eventually(t, func() bool { return len(h.ready()) == 2 }, wait, time.Millisecond)
		n := whole.Load()
		require.Eventually(t, func() bool { return whole.Load() >= n+5 }, wait, time.Millisecond)
		assert.Equal(t, int64(1), filtered.Load(), "the store change did not reset the fallback")
		assert.Equal(t, 1, h.logs.count("scraping its whole /metrics from now on"))
	})
	t.Run("not taken when the whole request fails", func(t *testing.T) {
		var filtered atomic.Int64
		srv := newConnServer(t, func(w http.ResponseWriter, r *http.Request) {
			if len(r.URL.Query()[NameFilterParam]) > 0 {
				filtered.Add(1)
				return
			}
			http.Error(w, "busy", http.StatusServiceUnavailable)
		}, nil)
		h := start(t, 0, defaultConfig(t), Options{MaxBackoff: 10 * time.Millisecond}, srv.spec(t, "a"))
		require.Eventually(t, func() bool { return filtered.Load() >= 5 }, wait, time.Millisecond, "still asked filtered")
		assert.Zero(t, h.logs.count("scraping its whole /metrics from now on"))
	})
}

// TestLargeBodiesOnOneConnection: bodies larger than the header bound are
// read whole, scrape after scrape, on one connection.
func TestLargeBodiesOnOneConnection(t *testing.T) {
	body := fmt.Sprintf(vllmBody, 3) + strings.Repeat("# padding "+strings.Repeat("x", 1000)+"\n", 2100)
	srv := newConnServer(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }, nil)
	h := start(t, 0, defaultConfig(t), Options{}, srv.spec(t, "a"))
	require.Eventually(t, func() bool { return srv.hits.Load() >= 4 }, wait, time.Millisecond)
	for _, r := range reasons {
		assert.Zero(t, h.errorsFor(r), r)
	}
	assert.Equal(t, int64(1), srv.conns.Load())
	assert.Equal(t, []string{"a"}, h.ready())
}

// TestRequestTimeoutOnKeptAliveConnection: a server that answers a
// kept-alive connection's next request with 408 and closes it (as some do
// with idle connections) costs a new connection, not a failed scrape.
func TestRequestTimeoutOnKeptAliveConnection(t *testing.T) {
	var conns atomic.Int64
	body := fmt.Sprintf(vllmBody, 4)
	spec := rawServer(t, func(c net.Conn) {
		conns.Add(1)
		br := bufio.NewReader(c)
		if !readRequest(c, br) {
			return
		}
		if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
			return
		}
		if readRequest(c, br) {
			_, _ = io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
		}
	})
	h := start(t, 0, defaultConfig(t), Options{}, spec)
	require.Eventually(t, func() bool { return conns.Load() >= 5 }, wait, time.Millisecond)
	for _, r := range reasons {
		assert.Zero(t, h.errorsFor(r), r)
	}
	assert.Equal(t, []string{"a"}, h.ready())
}

func TestHostHeader(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:8000":        "127.0.0.1:8000",
		"[::1]:8000":            "[::1]:8000",
		"[fe80::1%25eth0]:8000": "[fe80::1]:8000",
		"vllm.default.svc:8000": "vllm.default.svc:8000",
		"[fe80::1%25eth0]":      "[fe80::1]",
	} {
		assert.Equal(t, want, hostHeader(in), in)
	}
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
