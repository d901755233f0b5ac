package decisions

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// The query parameters of /debug/decisions.
const (
	ParamRequestID = "request_id"
	ParamModel     = "model"
	ParamEndpoint  = "endpoint"
	ParamLimit     = "limit"
)

// Document is the JSON of /debug/decisions.
type Document struct {
	// Size is the ring's number of records; Added how many were ever
	// added (Added - Size were overwritten, once positive).
	Size  int    `json:"size"`
	Added uint64 `json:"added"`
	// Records pass the query's filters, newest first.
	Records []*Record `json:"records"`
}

// Handler serves r as JSON: GET /debug/decisions?request_id=&model=&
// endpoint=&limit=N, the newest DefaultLimit records (or the ring's size,
// if smaller) when no limit is given. Unknown or repeated parameters and
// a limit that is not an integer in [1, size] are answered with 400 and a
// message saying which (the first bad parameter in name order). With r nil (recording off) every request gets 404.
func Handler(r *Ring) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed: use GET", http.StatusMethodNotAllowed)
			return
		}
		if r == nil {
			http.Error(w, "decision recording is off: start the EPP with --decision-buffer-size > 0", http.StatusNotFound)
			return
		}
		f, err := ParseFilter(req.URL.RawQuery, r.Size())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		doc := Document{Size: r.Size(), Added: r.Added(), Records: r.Snapshot(f)}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(doc)
	})
}

// queryError is a bad query parameter.
type queryError struct{ msg string }

func (e *queryError) Error() string { return e.msg }

// ParseFilter parses the query of /debug/decisions for a ring of size
// records. The parameters are checked in name order, so that the error of
// a query with several bad ones is always the same.
func ParseFilter(rawQuery string, size int) (Filter, error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return Filter{}, &queryError{"query: " + err.Error()}
	}
	f := Filter{Limit: min(DefaultLimit, size)}
	allowed := []string{ParamRequestID, ParamModel, ParamEndpoint, ParamLimit}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		vs := q[k]
		if len(vs) > 1 {
			return Filter{}, &queryError{"query parameter " + strconv.Quote(k) + ": given " + strconv.Itoa(len(vs)) + " times, at most once"}
		}
		v := vs[0]
		switch k {
		case ParamRequestID:
			f.RequestID = v
		case ParamModel:
			f.Model = v
		case ParamEndpoint:
			f.Endpoint = v
		case ParamLimit:
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > size {
				return Filter{}, &queryError{"query parameter " + ParamLimit + ": must be an integer in [1, " + strconv.Itoa(size) + "], got " + strconv.Quote(v)}
			}
			f.Limit = n
		default:
			return Filter{}, &queryError{"query parameter " + strconv.Quote(k) + ": unknown; use " + strings.Join(allowed, ", ")}
		}
	}
	return f, nil
}
