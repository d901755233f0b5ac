package signals

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// HeaderNow is the response header that carries the sender's clock
// reading in Unix milliseconds, the same reading as its Date header (and
// as the rows it stamped "now"). Date has a precision of one second; a
// row's age at the sender (now minus its stamp) needs the milliseconds.
const HeaderNow = "X-Grid-Now-Ms"

// ErrNoDate is what ResponseClock's error is (errors.Is) for a response
// whose Date header is missing or cannot be parsed (no_date).
var ErrNoDate = errors.New("signals: no usable Date header")

// noDateError says what is wrong with the Date header; it is ErrNoDate.
type noDateError struct{ msg string }

func (e noDateError) Error() string      { return e.msg }
func (noDateError) Is(target error) bool { return target == ErrNoDate }

// SetClock sets a response's Date (RFC 1123, whole seconds) and
// X-Grid-Now-Ms (milliseconds) headers from one clock reading.
func SetClock(h http.Header, now time.Time) {
	h.Set("Date", now.UTC().Format(http.TimeFormat))
	h.Set(HeaderNow, strconv.FormatInt(now.UnixMilli(), 10))
}

// ResponseClock reads a response's clock: date is its Date header (the
// skew rule's reference, G-75); now is the sender's reading at
// millisecond precision, from X-Grid-Now-Ms when that is an integer inside
// the second Date names (Date ≤ now < Date + 1 s), else Date itself (a
// sender without the header, or one whose two headers disagree). When
// Date is missing or does not parse, the error says so and is ErrNoDate.
func ResponseClock(h http.Header) (date, now time.Time, err error) {
	v := h.Get("Date")
	if v == "" {
		return time.Time{}, time.Time{}, noDateError{"the response has no Date header"}
	}
	date, err = http.ParseTime(v)
	if err != nil {
		return time.Time{}, time.Time{}, noDateError{fmt.Sprintf("the Date header %q cannot be parsed", v)}
	}
	now = date
	if s := h.Get(HeaderNow); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			if t := time.UnixMilli(n); !t.Before(date) && t.Before(date.Add(time.Second)) {
				now = t
			}
		}
	}
	return date, now, nil
}
