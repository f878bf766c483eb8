// Package client is the Go SDK for the Outpost API: outposts, the fleet
// queue (list, watch, claim, release), sessions and their transcripts, and
// API tokens. The outpost CLI, the worker and orchestrators are built on it.
//
// Every method takes a context first and returns the wire types of
// api. Failed calls return a *Error when the server answered;
// IsConflict and IsNotFound test for the answers callers usually branch on.
// Idempotent reads are retried on connection errors and 5xx answers.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
)

// DefaultUserAgent is sent when no WithUserAgent option is given.
const DefaultUserAgent = "outpost-go-client"

// requestTimeout bounds ordinary calls whose context has no deadline.
// Streams (Watch, Follow), downloads and tool calls are not bounded by it:
// they last as long as what they carry.
const requestTimeout = 60 * time.Second

// maxBody bounds how much of a JSON answer is read.
const maxBody = 64 << 20

// Client talks to one Outpost server with one token. It is safe for
// concurrent use.
type Client struct {
	base      *url.URL
	token     string
	http      *http.Client
	userAgent string
	retry     retryPolicy
	// clock times the waits between retries; nil is the real clock. Tests
	// set a fake one to step time.
	clock clockwork.Clock

	// Outposts manages outposts.
	Outposts *OutpostsService
	// Queue reads, watches, claims and releases queue entries.
	Queue *QueueService
	// Sessions creates, reads and follows sessions.
	Sessions *SessionsService
	// Tokens manages API tokens (admin scope).
	Tokens *TokensService
	// Audit reads the audit log.
	Audit *AuditService
	// Webhooks manages webhook subscriptions (admin scope).
	Webhooks *WebhooksService
	// Users lists users and grants and revokes their roles.
	Users *UsersService
	// Artifacts lists and downloads the files sessions uploaded.
	Artifacts *ArtifactsService
	// Workers announces workers and orchestrators and lists connected ones.
	Workers *WorkersService
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client send its requests through hc. Do not set a
// Timeout on hc: it would cut watch and follow streams; use contexts.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.http = hc }
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// New returns a client of the server at baseURL (for example
// "http://127.0.0.1:7420", optionally with a path prefix) that authenticates
// with token. An empty token sends no Authorization header.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimSpace(baseURL))
	if err != nil {
		return nil, fmt.Errorf("parse server URL %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("server URL %q must be an absolute http:// or https:// URL", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	c := &Client{
		base:      u,
		token:     token,
		http:      &http.Client{},
		userAgent: DefaultUserAgent,
		retry:     defaultRetryPolicy,
	}
	for _, o := range opts {
		o(c)
	}
	c.Outposts = &OutpostsService{c: c}
	c.Queue = &QueueService{c: c}
	c.Sessions = &SessionsService{c: c}
	c.Tokens = &TokensService{c: c}
	c.Audit = &AuditService{c: c}
	c.Webhooks = &WebhooksService{c: c}
	c.Users = &UsersService{c: c}
	c.Artifacts = &ArtifactsService{c: c}
	c.Workers = &WorkersService{c: c}
	return c, nil
}

// BaseURL returns the server URL the client talks to.
func (c *Client) BaseURL() string { return c.base.String() }

// Health reports whether the server process answers GET /healthz.
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/healthz", nil, nil, nil)
}

// Ready reports whether the server and its store answer GET /readyz.
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/readyz", nil, nil, nil)
}

// endpoint builds the URL of path (already escaped) with query q.
func (c *Client) endpoint(path string, q url.Values) string {
	u := c.base.String() + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// newRequest builds a request with the client's headers.
func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body []byte) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint(path, q), r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// do sends one JSON call and decodes the answer into out (when not nil).
// GETs are retried according to c.retry.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("encode %s %s: %w", method, path, err)
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, requestTimeout)
		defer cancel()
	}
	for attempt := 1; ; attempt++ {
		err := c.doOnce(ctx, method, path, q, body, out)
		if err == nil || !c.retry.retryable(method, err) || attempt >= c.retry.attempts {
			return err
		}
		if werr := c.retry.wait.Wait(ctx, c.clock, attempt); werr != nil {
			return err
		}
	}
}

func (c *Client) doOnce(ctx context.Context, method, path string, q url.Values, body []byte, out any) error {
	req, err := c.newRequest(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return &transportError{op: method + " " + path, err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return parseError(resp)
	}
	if h, ok := out.(headerReader); ok {
		h.readHeader(resp.Header)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
		return nil
	}
	br := bufio.NewReader(io.LimitReader(resp.Body, maxBody))
	if isMarkup(br) {
		// Not temporary: retrying would get the same answer.
		return &foreignAnswerError{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type")}
	}
	if err := json.NewDecoder(br).Decode(out); err != nil {
		return &transportError{op: method + " " + path, err: fmt.Errorf("decode answer: %w", err)}
	}
	return nil
}

// headerReader is an answer that wants its response's headers too.
type headerReader interface{ readHeader(http.Header) }

// isMarkup reports whether a body starts, after white space, with '<': an
// HTML or XML page where the API answers JSON.
func isMarkup(r *bufio.Reader) bool {
	for {
		b, err := r.ReadByte()
		if err != nil {
			return false
		}
		if b != ' ' && b != '\t' && b != '\r' && b != '\n' {
			_ = r.UnreadByte()
			return b == '<'
		}
	}
}

// openStream starts a long-lived GET whose answer is read as server-sent
// events. The caller closes the body.
func (c *Client) openStream(ctx context.Context, path string, q url.Values, hdr http.Header) (*http.Response, error) {
	req, err := c.newRequest(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, &transportError{op: "GET " + path, err: err}
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, parseError(resp)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		// Not temporary: retrying would get the same answer.
		return nil, &foreignAnswerError{status: resp.StatusCode, contentType: ct}
	}
	return resp, nil
}

// transportError is a failure to get an answer at all: the server could not
// be reached, the connection broke, or the answer was not understood.
type transportError struct {
	op  string
	err error
}

func (e *transportError) Error() string { return e.op + ": " + e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// isCtxErr reports whether err is the end of a context.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
