package metricsauth

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	apiserverapi "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
)

// backoff retries a review the API server failed to answer.
var backoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// Filter returns a wrapper that authenticates and authorizes every request
// of a handler against the API server reached with cfg.
func Filter(cfg *rest.Config, log logr.Logger) (func(http.Handler) http.Handler, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	authn, err := authenticationv1.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	authz, err := authorizationv1.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	tokens, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserverapi.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                 time.Minute,
		TokenAccessReviewClient:  authn,
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      &backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("token authenticator: %w", err)
	}
	access, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: authz,
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       &backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("access authorizer: %w", err)
	}
	return func(next http.Handler) http.Handler {
		return &guard{next: next, tokens: tokens, access: access, log: log}
	}, nil
}

type guard struct {
	next   http.Handler
	tokens authenticator.Request
	access authorizer.Authorizer
	log    logr.Logger
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		w.Header().Set("WWW-Authenticate", `Bearer realm="switchyard-metrics"`)
		http.Error(w, "Unauthorized: send a Kubernetes bearer token (Authorization: Bearer ...)", http.StatusUnauthorized)
		return
	}
	res, ok, err := g.tokens.AuthenticateRequest(r)
	if err != nil || !ok {
		// A token the API server rejects is the client's problem (401);
		// the reason stays in the log, not in the answer.
		g.log.V(1).Info("Metrics request refused: token not accepted", "path", r.URL.Path, "remote", r.RemoteAddr, "reason", errString(err))
		w.Header().Set("WWW-Authenticate", `Bearer realm="switchyard-metrics", error="invalid_token"`)
		http.Error(w, "Unauthorized: the token is not accepted by the API server", http.StatusUnauthorized)
		return
	}
	attrs := authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(r.Method), Path: r.URL.Path}
	decision, reason, err := g.access.Authorize(r.Context(), attrs)
	switch {
	case err != nil:
		g.log.Error(err, "Metrics request: cannot ask the API server for access", "path", r.URL.Path, "user", res.User.GetName())
		http.Error(w, "Service Unavailable: cannot check access with the API server", http.StatusServiceUnavailable)
	case decision != authorizer.DecisionAllow:
		g.log.V(1).Info("Metrics request refused: no access", "path", r.URL.Path, "user", res.User.GetName(), "reason", reason)
		http.Error(w, fmt.Sprintf("Forbidden: user %q may not %s %s", res.User.GetName(), strings.ToUpper(attrs.Verb), r.URL.Path), http.StatusForbidden)
	default:
		g.next.ServeHTTP(w, r)
	}
}

func errString(err error) string {
	if err == nil {
		return "not authenticated"
	}
	return err.Error()
}
