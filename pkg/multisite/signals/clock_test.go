package signals

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestResponseClock: Date and X-Grid-Now-Ms come from one reading; the
// millisecond reading is used when it lies in the second Date names, and
// Date otherwise.
func TestResponseClock(t *testing.T) {
	now := date.Add(1234 * time.Millisecond)
	h := http.Header{}
	SetClock(h, now)
	assert.Equal(t, "Thu, 01 Jan 2026 00:00:01 GMT", h.Get("Date"))
	assert.Equal(t, "1767225601234", h.Get(HeaderNow))
	d, n, err := ResponseClock(h)
	require.NoError(t, err)
	assert.True(t, d.Equal(date.Add(time.Second)))
	assert.True(t, n.Equal(now), "%v", n)

	for _, bad := range []string{"", "x", "1767225602000", "1767225600999", "-1", "1767225601234.5"} {
		h.Set(HeaderNow, bad)
		d, n, err := ResponseClock(h)
		require.NoError(t, err, bad)
		assert.True(t, n.Equal(d), "%q: falls back to Date", bad)
	}
	h.Del("Date")
	_, _, err = ResponseClock(h)
	assert.ErrorIs(t, err, ErrNoDate)
	assert.ErrorContains(t, err, "no Date header")
	h.Set("Date", "yesterday")
	_, _, err = ResponseClock(h)
	assert.ErrorIs(t, err, ErrNoDate)
	assert.ErrorContains(t, err, `"yesterday" cannot be parsed`)
}
