// Package web is Outpost's browser UI: server-rendered pages (html/template)
// over the REST API, one small script for live transcripts through the
// session event stream, and one stylesheet, all embedded in the binary.
//
// The UI holds no state of its own. A user signs in with an API token,
// kept in an HttpOnly, SameSite=Strict cookie; every page calls the REST
// API in-process with that token, so the API's scopes and outpost limits
// apply to the UI exactly as to any client.
//
// Every form post must come from a page of this site (the browser's
// Sec-Fetch-Site and Origin headers, http.CrossOriginProtection) and carry
// the CSRF value of its visitor: an HMAC of the token cookie once signed
// in, of a random sign-in cookie before. So no other site can post a form
// for a visitor — not even the sign-in form, which would sign the visitor
// in with the other site's token.
package web

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/outpost-sh/outpost/api"
)

//go:embed templates/*.html static/*
var assets embed.FS

// CookieName is the cookie holding the signed-in user's API token.
const CookieName = "outpost_token"

// signinCookieName is the cookie a signed-out visitor gets with the
// sign-in form: a random value the form's CSRF value is bound to, so that
// value differs per visitor and another site cannot learn it. Over HTTPS it
// has the __Host- prefix, so a neighbouring subdomain cannot plant one.
const signinCookieName = "outpost_signin"

// signinCookieBytes is the length of a sign-in cookie's random value.
const signinCookieBytes = 32

// Options configure a Handler.
type Options struct {
	// API serves the REST API (/v1/...). The UI calls it in-process with
	// the signed-in user's token.
	API http.Handler
	// PublicURL is the server's public base URL; an https URL marks the
	// cookie Secure.
	PublicURL string
	// Logger receives template errors; nil means slog.Default().
	Logger *slog.Logger
	// FormKey keys the forms' CSRF values. Servers behind one address
	// (replicas on one database) pass the same key, so a form one of them
	// served posts to any other and survives a restart; nil means a random
	// key of this process's.
	FormKey []byte
	// SignIn, when set, is told of each sign-in with a token: the token
	// entered, and "" when it was accepted or the sentence that refused
	// it. The server writes it to the audit log; nil tells no one.
	SignIn func(r *http.Request, token, refusal string)
	// SSOName, when set, names the OpenID Connect provider the sign-in
	// page offers beside the token ("Sign in with <SSOName>", at
	// /ui/auth/login, which the server serves).
	SSOName string
}

// Handler serves the UI under /, /ui/ and /static/.
type Handler struct {
	api     http.Handler
	secure  bool
	log     *slog.Logger
	csrfKey []byte
	signIn  func(r *http.Request, token, refusal string)
	ssoName string
	// publicURL is the server's public base URL without a trailing
	// slash, "" when not configured.
	publicURL string
	pages     map[string]*template.Template
	static    http.Handler
	mux       *http.ServeMux

	// sameOrigin refuses form posts a browser sent from another site.
	sameOrigin *http.CrossOriginProtection
}

// New builds the UI handler.
func New(opts Options) (*Handler, error) {
	if opts.API == nil {
		return nil, fmt.Errorf("web: an API handler is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	h := &Handler{
		api:     opts.API,
		secure:  strings.HasPrefix(strings.ToLower(opts.PublicURL), "https://"),
		log:     opts.Logger,
		csrfKey: make([]byte, 32),
		signIn:  opts.SignIn,
		ssoName: opts.SSOName,

		publicURL: strings.TrimRight(opts.PublicURL, "/"),
		pages:     map[string]*template.Template{},

		sameOrigin: http.NewCrossOriginProtection(),
	}
	if len(opts.FormKey) > 0 {
		h.csrfKey = opts.FormKey
	} else if _, err := rand.Read(h.csrfKey); err != nil {
		return nil, fmt.Errorf("web: csrf key: %w", err)
	}
	// Behind a reverse proxy the Host the server sees may not be the one
	// the browser shows; the public URL's origin is this site too.
	if u, err := url.Parse(opts.PublicURL); err == nil && u.Scheme != "" && u.Host != "" {
		if err := h.sameOrigin.AddTrustedOrigin(u.Scheme + "://" + u.Host); err != nil {
			return nil, fmt.Errorf("web: public URL %q: %w", opts.PublicURL, err)
		}
	}
	for _, p := range []string{"signin", "outposts", "outpost", "sessions", "session", "newsession", "tokens", "audit", "webhooks", "webhook", "device", "error", "worker", "dashboard"} {
		// policy.html only defines the network policy section, which the
		// outpost and session pages share.
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/policy.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("web: parse %s: %w", p, err)
		}
		h.pages[p] = t
	}
	sub, err := fs.Sub(assets, "static")
	if err != nil {
		return nil, err
	}
	h.static = http.StripPrefix("/static/", http.FileServerFS(sub))
	h.mux = h.routes()
	return h, nil
}

func (h *Handler) routes() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", h.home)
	m.Handle("GET /static/", h.static)
	m.HandleFunc("GET /ui/signin", h.signinPage)
	m.HandleFunc("POST /ui/signin", h.signin)
	m.HandleFunc("POST /ui/signout", h.signout)
	m.HandleFunc("GET /ui/outposts", h.authed(h.outpostsPage))
	m.HandleFunc("POST /ui/outposts", h.authed(h.createOutpost))
	m.HandleFunc("POST /ui/outposts/{outpost}/delete", h.authed(h.deleteOutpost))
	m.HandleFunc("GET /ui/outposts/{outpost}", h.authed(h.outpostPage))
	m.HandleFunc("GET /ui/outposts/{outpost}/workers/{acceptor}", h.authed(h.workerPage))
	m.HandleFunc("GET /ui/outposts/{outpost}/dashboard", h.authed(h.dashboardPage))
	m.HandleFunc("GET /ui/dashboard", h.authed(h.dashboardPage))
	m.HandleFunc("GET /ui/fleet", h.authed(h.dashboardPage))
	m.HandleFunc("POST /ui/outposts/{outpost}/network-policy", h.authed(h.setOutpostPolicy))
	m.HandleFunc("POST /ui/outposts/{outpost}/secrets", h.authed(h.setOutpostSecret))
	m.HandleFunc("POST /ui/outposts/{outpost}/secrets/{name}/delete", h.authed(h.deleteOutpostSecret))
	m.HandleFunc("GET /ui/sessions", h.authed(h.sessionsPage))
	m.HandleFunc("GET /ui/sessions/new", h.authed(h.newSessionPage))
	m.HandleFunc("POST /ui/sessions", h.authed(h.createSession))
	m.HandleFunc("GET /ui/sessions/{session}", h.authed(h.sessionPage))
	m.HandleFunc("GET /ui/sessions/{session}/events", h.authed(h.sessionEvents))
	m.HandleFunc("GET /ui/sessions/{session}/log", h.authed(h.sessionLog))
	m.HandleFunc("GET /ui/sessions/{session}/artifacts/{name}", h.authed(h.artifact))
	m.HandleFunc("GET /ui/sessions/{session}/events/{seq}/image", h.authed(h.shotImage))
	m.HandleFunc("POST /ui/sessions/{session}/terminate", h.authed(h.terminate))
	m.HandleFunc("POST /ui/sessions/{session}/rerun", h.authed(h.rerun))
	m.HandleFunc("POST /ui/sessions/{session}/token", h.authed(h.sessionToken))
	m.HandleFunc("POST /ui/sessions/{session}/fork", h.authed(h.fork))
	m.HandleFunc("POST /ui/sessions/{session}/messages", h.authed(h.message))
	m.HandleFunc("POST /ui/sessions/{session}/suspend", h.authed(h.suspend))
	m.HandleFunc("POST /ui/sessions/{session}/resume", h.authed(h.resume))
	m.HandleFunc("POST /ui/sessions/{session}/network-policy", h.authed(h.setSessionPolicy))
	m.HandleFunc("POST /ui/sessions/{session}/network-requests/{request}/grant", h.authed(h.grantRequest))
	m.HandleFunc("POST /ui/sessions/{session}/network-requests/{request}/deny", h.authed(h.denyRequest))
	m.HandleFunc("POST /ui/sessions/{session}/calls/{seq}/approve", h.authed(h.approveCall))
	m.HandleFunc("POST /ui/sessions/{session}/calls/{seq}/deny", h.authed(h.denyCall))
	m.HandleFunc("GET /ui/tokens", h.authed(h.tokensPage))
	m.HandleFunc("POST /ui/tokens", h.authed(h.createToken))
	m.HandleFunc("POST /ui/tokens/{token}/revoke", h.authed(h.revokeToken))
	m.HandleFunc("GET /ui/audit", h.authed(h.auditPage))
	m.HandleFunc("GET /ui/webhooks", h.authed(h.webhooksPage))
	m.HandleFunc("GET /ui/webhooks/{webhook}", h.authed(h.webhookPage))
	m.HandleFunc("POST /ui/webhooks/{webhook}/deliveries/{delivery}/redeliver", h.authed(h.redeliver))
	m.HandleFunc("GET "+api.DeviceVerifyPath, h.devicePage)
	m.HandleFunc("POST "+api.DeviceVerifyPath+"/approve", h.authed(h.deviceDecide(api.DeviceApprovePath)))
	m.HandleFunc("POST "+api.DeviceVerifyPath+"/deny", h.authed(h.deviceDecide(api.DeviceDenyPath)))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusNotFound, "There is no such page.")
	})
	return m
}

// ServeHTTP checks that every POST came from this site with its visitor's
// CSRF value, then serves the page.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; media-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		if err := h.sameOrigin.Check(r); err != nil {
			h.fail(w, r, http.StatusForbidden, "This form was sent from another site, so it was refused. Open this site's page and send the form from there.")
			return
		}
		want := h.csrf(r)
		if want == "" || !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(want)) {
			h.fail(w, r, http.StatusForbidden, "This form has expired or did not come from this site (missing CSRF token). Reload the page and try again.")
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

// token is the signed-in user's API token, or "".
func token(r *http.Request) string {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return ""
	}
	return c.Value
}

// csrf is the form token of the request's visitor: an HMAC, with the
// form key, of the token cookie when signed in, else of the
// sign-in cookie. It is "" for a signed-out visitor without a sign-in
// cookie, whose posts are all refused.
func (h *Handler) csrf(r *http.Request) string {
	if tok := token(r); tok != "" {
		return h.mac("outpost-csrf\x00" + tok)
	}
	if v := h.signinValue(r); v != "" {
		return h.mac("outpost-signin\x00" + v)
	}
	return ""
}

func (h *Handler) mac(s string) string {
	m := hmac.New(sha256.New, h.csrfKey)
	m.Write([]byte(s))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// formCSRF is the CSRF value for the forms of the page answering r. A
// signed-out visitor without a sign-in cookie gets one here, so every
// visitor's sign-in form carries a value of its own.
func (h *Handler) formCSRF(w http.ResponseWriter, r *http.Request) string {
	if token(r) != "" || h.signinValue(r) != "" {
		return h.csrf(r)
	}
	b := make([]byte, signinCookieBytes)
	if _, err := rand.Read(b); err != nil {
		h.log.Error("web: sign-in cookie", "err", err)
		return ""
	}
	v := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{
		Name: h.signinCookie(r), Value: v, Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: h.https(r),
	})
	return h.mac("outpost-signin\x00" + v)
}

// signinValue is the request's sign-in cookie, or "" when it has none of
// the right shape.
func (h *Handler) signinValue(r *http.Request) string {
	c, err := r.Cookie(h.signinCookie(r))
	if err != nil {
		return ""
	}
	if b, err := base64.RawURLEncoding.DecodeString(c.Value); err != nil || len(b) != signinCookieBytes {
		return ""
	}
	return c.Value
}

// signinCookie is the sign-in cookie's name for r: with the __Host- prefix
// over HTTPS, where browsers take such a cookie only from this very host.
func (h *Handler) signinCookie(r *http.Request) string {
	if h.https(r) {
		return "__Host-" + signinCookieName
	}
	return signinCookieName
}

// https reports whether the browser reaches the UI over HTTPS.
func (h *Handler) https(r *http.Request) bool { return h.secure || r.TLS != nil }

// clearSigninCookie removes the sign-in cookie once it has done its job.
func (h *Handler) clearSigninCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name: h.signinCookie(r), Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: h.https(r),
	})
}

// authed sends signed-out users to the sign-in page.
func (h *Handler) authed(f http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if token(r) == "" {
			http.Redirect(w, r, "/ui/signin", http.StatusSeeOther)
			return
		}
		f(w, r)
	}
}

// apiError is a non-2xx answer of the API.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s (%d %s)", e.Message, e.Status, http.StatusText(e.Status))
}

// memWriter collects an in-process API answer.
type memWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (m *memWriter) Header() http.Header { return m.header }
func (m *memWriter) WriteHeader(code int) {
	if m.status == 0 {
		m.status = code
	}
}
func (m *memWriter) Write(b []byte) (int, error) {
	if m.status == 0 {
		m.status = http.StatusOK
	}
	return m.body.Write(b)
}

// call makes one REST call with the user's token and decodes the answer
// into out. A non-2xx answer is an *apiError.
func (h *Handler) call(r *http.Request, method, path string, body, out any) error {
	return h.callToken(r.Context(), r, token(r), method, path, body, out)
}

func (h *Handler) callToken(ctx context.Context, orig *http.Request, tok, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, path, rd)
	if err != nil {
		return err
	}
	req.RemoteAddr = orig.RemoteAddr
	req.Host = orig.Host
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	mw := &memWriter{header: http.Header{}}
	h.api.ServeHTTP(mw, req)
	if mw.status == 0 {
		mw.status = http.StatusOK
	}
	if mw.status >= 300 {
		var er api.ErrorResponse
		e := &apiError{Status: mw.status, Message: http.StatusText(mw.status)}
		if json.Unmarshal(mw.body.Bytes(), &er) == nil && er.Error.Message != "" {
			e.Code, e.Message = er.Error.Code, er.Error.Message
		}
		return e
	}
	if out != nil && mw.body.Len() > 0 {
		if err := json.Unmarshal(mw.body.Bytes(), out); err != nil {
			return fmt.Errorf("decode %s %s: %w", method, path, err)
		}
	}
	return nil
}

// proxy forwards a streaming or binary GET to the API with the user's
// token, writing straight to the browser (SSE, artifact downloads).
func (h *Handler) proxy(w http.ResponseWriter, r *http.Request, path string, query url.Values, headers ...string) {
	req := r.Clone(r.Context())
	req.URL = &url.URL{Path: path, RawQuery: query.Encode()}
	req.RequestURI = ""
	req.Header = http.Header{}
	req.Header.Set("Authorization", "Bearer "+token(r))
	for _, k := range headers {
		if v := r.Header.Get(k); v != "" {
			req.Header.Set(k, v)
		}
	}
	h.api.ServeHTTP(w, req)
}

// page is what every template gets.
type page struct {
	Title    string
	Nav      string
	CSRF     string
	SignedIn bool
	Error    string
	Notice   string
	Data     any
	// SSO names the OpenID Connect provider to sign in with; "" for none.
	SSO string
}

// render writes a page with status.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.CSRF = h.formCSRF(w, r)
	p.SignedIn = token(r) != ""
	p.SSO = h.ssoName
	var buf bytes.Buffer
	if err := h.pages[name].Execute(&buf, p); err != nil {
		h.log.Error("web: render", "page", name, "err", err)
		http.Error(w, "The page could not be rendered.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail renders the error page.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, "error", page{Title: http.StatusText(status), Error: msg, Data: status})
}

// failAPI renders an API error, sending a signed-out user to sign in.
func (h *Handler) failAPI(w http.ResponseWriter, r *http.Request, err error) {
	if ae, ok := err.(*apiError); ok {
		if ae.Status == http.StatusUnauthorized {
			h.clearCookie(w, r)
			http.Redirect(w, r, "/ui/signin?expired=1", http.StatusSeeOther)
			return
		}
		h.fail(w, r, ae.Status, errText(err))
		return
	}
	h.log.Error("web: api call", "path", r.URL.Path, "err", err)
	h.fail(w, r, http.StatusInternalServerError, "Something went wrong on the server.")
}

// errText is an error as the user sees it.
func errText(err error) string {
	if ae, ok := err.(*apiError); ok {
		return fmt.Sprintf("Refused (%d %s): %s", ae.Status, http.StatusText(ae.Status), ae.Message)
	}
	return "Something went wrong on the server."
}

// statusOf is the HTTP status to answer an API error with.
func statusOf(err error) int {
	if ae, ok := err.(*apiError); ok {
		return ae.Status
	}
	return http.StatusInternalServerError
}

func (h *Handler) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: h.https(r),
	})
}

func (h *Handler) clearCookie(w http.ResponseWriter, r *http.Request) {
	h.setCookie(w, r, "", -1)
}
