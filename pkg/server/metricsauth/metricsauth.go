package metricsauth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
)

// Cache lifetimes of review answers.
const (
	TokenTTL        = time.Minute      // an accepted token
	RejectedTTL     = 10 * time.Second // a rejected token
	AllowTTL        = 5 * time.Minute  // an allowed user and path
	DenyTTL         = 30 * time.Second // a denied user and path
	maxCacheEntries = 4096             // per cache; a full cache is emptied
	reviewTimeout   = 10 * time.Second
)

// Reviewer asks the API server (TokenReview, SubjectAccessReview); tests
// may stub it.
type Reviewer interface {
	ReviewToken(ctx context.Context, token string) (*authnv1.TokenReviewStatus, error)
	ReviewAccess(ctx context.Context, user authnv1.UserInfo, verb, path string) (*authzv1.SubjectAccessReviewStatus, error)
}

// Filter returns a wrapper that authenticates and authorizes every request
// of a handler against the API server reached with cfg.
func Filter(cfg *rest.Config, log logr.Logger) (func(http.Handler) http.Handler, error) {
	authn, err := authnclient.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, err
	}
	authz, err := authzclient.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, err
	}
	return FilterWith(apiReviewer{authn, authz}, log), nil
}

// FilterWith is Filter with another Reviewer.
func FilterWith(r Reviewer, log logr.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return &guard{next: next, r: r, log: log}
	}
}

type apiReviewer struct {
	authn authnclient.AuthenticationV1Interface
	authz authzclient.AuthorizationV1Interface
}

func (a apiReviewer) ReviewToken(ctx context.Context, token string) (*authnv1.TokenReviewStatus, error) {
	tr, err := a.authn.TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return &tr.Status, nil
}

func (a apiReviewer) ReviewAccess(ctx context.Context, u authnv1.UserInfo, verb, path string) (*authzv1.SubjectAccessReviewStatus, error) {
	extra := make(map[string]authzv1.ExtraValue, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := a.authz.SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
	}}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return &sar.Status, nil
}

type tokenEntry struct {
	ok   bool
	user authnv1.UserInfo
}

type accessEntry struct {
	allowed bool
	reason  string
}

// ttlCache keeps review answers until they expire; a full cache is emptied
// (the answers are cheap to ask again, and the cache stays bounded).
type ttlCache[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]ttlEntry[V]
}

type ttlEntry[V any] struct {
	v       V
	expires time.Time
}

func (c *ttlCache[K, V]) get(k K, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || !now.Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (c *ttlCache[K, V]) put(k K, v V, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCacheEntries {
		c.m = make(map[K]ttlEntry[V])
	}
	c.m[k] = ttlEntry[V]{v: v, expires: expires}
}

type guard struct {
	next http.Handler
	r    Reviewer
	log  logr.Logger

	tokens ttlCache[[32]byte, tokenEntry] // by SHA-256 of the token: no token is kept
	access ttlCache[string, accessEntry]  // by user, verb and path
}

func (g *guard) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	scheme, token, _ := strings.Cut(req.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="switchyard-metrics"`)
		http.Error(w, "Unauthorized: send a Kubernetes bearer token (Authorization: Bearer ...)", http.StatusUnauthorized)
		return
	}
	user, ok, err := g.authenticate(req.Context(), token)
	switch {
	case err != nil:
		g.log.Error(err, "Metrics request: cannot review the token with the API server", "path", req.URL.Path)
		http.Error(w, "Service Unavailable: cannot check the token with the API server", http.StatusServiceUnavailable)
		return
	case !ok:
		g.log.V(1).Info("Metrics request refused: the API server does not accept the token", "path", req.URL.Path, "remote", req.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="switchyard-metrics", error="invalid_token"`)
		http.Error(w, "Unauthorized: the token is not accepted by the API server", http.StatusUnauthorized)
		return
	}
	verb := strings.ToLower(req.Method)
	allowed, reason, err := g.authorize(req.Context(), user, verb, req.URL.Path)
	switch {
	case err != nil:
		g.log.Error(err, "Metrics request: cannot review access with the API server", "path", req.URL.Path, "user", user.Username)
		http.Error(w, "Service Unavailable: cannot check access with the API server", http.StatusServiceUnavailable)
	case !allowed:
		g.log.V(1).Info("Metrics request refused: no access", "path", req.URL.Path, "user", user.Username, "reason", reason)
		http.Error(w, fmt.Sprintf("Forbidden: user %q may not %s %s", user.Username, strings.ToUpper(verb), req.URL.Path), http.StatusForbidden)
	default:
		g.next.ServeHTTP(w, req)
	}
}

// authenticate reviews a token (cached by its hash). A review that the API
// server could not answer is an error, not a rejection.
func (g *guard) authenticate(ctx context.Context, token string) (authnv1.UserInfo, bool, error) {
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	if e, ok := g.tokens.get(key, now); ok {
		return e.user, e.ok, nil
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	st, err := g.r.ReviewToken(ctx, token)
	if err != nil {
		return authnv1.UserInfo{}, false, err
	}
	ttl := RejectedTTL
	if st.Authenticated {
		ttl = TokenTTL
	}
	g.tokens.put(key, tokenEntry{ok: st.Authenticated, user: st.User}, now.Add(ttl))
	return st.User, st.Authenticated, nil
}

// authorize asks whether the user may use verb on path (cached).
func (g *guard) authorize(ctx context.Context, u authnv1.UserInfo, verb, path string) (bool, string, error) {
	key := u.Username + "\x00" + u.UID + "\x00" + strings.Join(u.Groups, ",") + "\x00" + verb + "\x00" + path
	now := time.Now()
	if e, ok := g.access.get(key, now); ok {
		return e.allowed, e.reason, nil
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	st, err := g.r.ReviewAccess(ctx, u, verb, path)
	if err != nil {
		return false, "", err
	}
	e := accessEntry{allowed: st.Allowed && !st.Denied, reason: st.Reason}
	ttl := DenyTTL
	if e.allowed {
		ttl = AllowTTL
	}
	g.access.put(key, e, now.Add(ttl))
	return e.allowed, e.reason, nil
}
