package server

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/gateway"
	"github.com/outpost-sh/outpost/internal/store"
)

// Forwarding to the owner. A request that needs a session's remote
// connection — an outside agent's tool call, MCP, a message, terminate,
// suspend, resume, a remote's snapshot upload or download — is served by
// the replica that holds it. Any other replica that gets one forwards it
// (net/http/httputil) to the owner's URL with the client's own credentials,
// which the owner checks again, and with HeaderForwardedBy, which stops a
// second hop. A request that names HeaderForwardedBy is served where it
// arrives: the header grants nothing a client could not get by sending the
// request to that replica itself. When the owner is not live, has no URL
// or does not answer before the request's body was read, the request is
// served here, which answers as one server does (e.g. 503 "no machine
// connected yet").

// HeaderForwardedBy names the replica that forwarded a request to the
// session's owner.
const HeaderForwardedBy = "Outpost-Forwarded-By"

// forwardTarget returns the URL of the replica to forward a request of
// the session to, or nil to serve it here.
func (s *Server) forwardTarget(ctx context.Context, r *http.Request, sessionID string) *url.URL {
	if !s.shared || sessionID == "" || r.Header.Get(HeaderForwardedBy) != "" {
		return nil
	}
	if s.hub.Get(sessionID) != nil {
		return nil
	}
	e, err := s.store.GetQueueEntry(ctx, sessionID)
	if err != nil || e.Owner == "" || e.Owner == s.opts.ReplicaID {
		return nil
	}
	raw := s.replicaURL(ctx, e.Owner)
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		s.log.Warn("a replica's URL does not parse; serving here", "replica", e.Owner, "url", raw)
		return nil
	}
	return u
}

// toOwner wraps an authenticated handler of a session's request (the
// session in the path): it is forwarded to the session's owner when
// another replica owns it.
func (s *Server) toOwner(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		if t := s.forwardTarget(r.Context(), r, r.PathValue("session")); t != nil {
			return s.forward(w, r, t, h)
		}
		return h(w, r)
	}
}

// toOwnerGateway wraps a handler of the gateway's HTTP side, which the
// remote authenticates with its connect token: the token names the session.
func (s *Server) toOwnerGateway(h func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if !s.shared || r.Header.Get(HeaderForwardedBy) != "" {
			return h(w, r)
		}
		if sid := r.Header.Get(api.HeaderSessionID); sid != "" && s.hub.Get(sid) != nil {
			return h(w, r) // which checks the token names that session
		}
		secret := bearer(r)
		if secret == "" {
			return h(w, r) // which refuses it
		}
		ct, err := s.store.LookupConnectToken(r.Context(), hashSecret(secret))
		if err != nil {
			return h(w, r)
		}
		if t := s.forwardTarget(r.Context(), r, ct.SessionID); t != nil {
			return s.forward(w, r, t, h)
		}
		return h(w, r)
	}
}

// forward proxies r to the replica at target. When the owner cannot be
// reached before anything of the body was sent, h serves r here.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, target *url.URL, h func(http.ResponseWriter, *http.Request) error) error {
	body := &trackedBody{ReadCloser: r.Body}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = body
	}
	var fallback error
	servedHere := false
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			pr.SetXForwarded()
			pr.Out.Header.Set(HeaderForwardedBy, s.opts.ReplicaID)
		},
		Transport:     s.forwardClient.Transport,
		FlushInterval: -1, // streamed answers (a snapshot) go on as they come
		ErrorHandler: func(w http.ResponseWriter, out *http.Request, err error) {
			if !body.read.Load() && r.Context().Err() == nil {
				s.log.Info("the session's owner did not answer; serving the request here", "owner", target.Host, "path", r.URL.Path, "err", err)
				servedHere = true
				fallback = h(w, r)
				return
			}
			s.log.Warn("forward to the session's owner", "owner", target.Host, "path", r.URL.Path, "err", err)
			s.writeError(w, r, &httpError{http.StatusBadGateway, api.CodeUnavailable,
				"The server running this session did not answer; try again."})
		},
	}
	s.metrics.forwarded.Inc()
	p.ServeHTTP(w, r)
	if servedHere {
		return fallback
	}
	return nil
}

// replicaTLS is the TLS of requests to other replicas, whose replica URLs
// name their own addresses (a pod's IP), which the certificate of the
// public name does not cover. A peer is trusted when it presents this
// server's own current certificate — every replica serves the same one, and
// the handshake proves the peer holds its key — or a certificate valid, in
// the system's roots, for the public URL's host.
func (s *Server) replicaTLS() *tls.Config {
	host := ""
	if u, err := url.Parse(s.publicURL); err == nil {
		host = u.Hostname()
	}
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // VerifyConnection checks the peer instead
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the replica presented no certificate")
			}
			leaf := cs.PeerCertificates[0]
			if own := s.certs.Certificate(); own != nil && len(own.Certificate) > 0 && bytes.Equal(own.Certificate[0], leaf.Raw) {
				return nil
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Intermediates: inter}); err != nil {
				return fmt.Errorf("the replica's certificate is neither this server's nor valid for %s: %w", host, err)
			}
			return nil
		},
	}
}

// trackedBody is a request body that records whether it was read (by the
// transport's goroutine), and that the proxy's transport cannot close, so
// a request not sent can still be served here; the server closes the real
// body.
type trackedBody struct {
	io.ReadCloser
	read atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.ReadCloser.Read(p)
}

func (b *trackedBody) Close() error { return nil }

// Requests between replicas. A replica a remote connected through tells
// the replica that held the remote before to drop it:
// POST /internal/v1/sessions/{session}/drop. It is authenticated with
// HMAC-SHA256 under a key derived from the secret key every replica of one
// database shares (replicaAuthKey): "Authorization: Outpost-Replica <from
// replica id> <unix seconds> <hex mac>" over the method, path, sender and
// time, accepted within replicaAuthSkew of the receiver's clock. A replayed
// drop does no harm: the receiver drops only when the store says another
// replica owns the session.

// dropPath is the path of the drop request of a session.
func dropPath(sessionID string) string {
	return "/internal/v1/sessions/" + url.PathEscape(sessionID) + "/drop"
}

// replicaAuthSkew bounds the clock difference a signed request survives.
const replicaAuthSkew = time.Minute

// replicaAuthScheme is the Authorization scheme of requests between
// replicas.
const replicaAuthScheme = "Outpost-Replica"

// replicaAuthKey derives the key of requests between replicas from the
// secret key; nil without one.
func replicaAuthKey(secretKey []byte) []byte {
	if len(secretKey) == 0 {
		return nil
	}
	m := hmac.New(sha256.New, secretKey)
	m.Write([]byte("outpost replica requests v1"))
	return m.Sum(nil)
}

// formKey is the web UI's key for its forms' CSRF values, derived from the
// secret key every replica shares (through replicaKey), so a form one
// replica served posts to another; nil without a secret key.
func formKey(replicaKey []byte) []byte {
	if len(replicaKey) == 0 {
		return nil
	}
	m := hmac.New(sha256.New, replicaKey)
	m.Write([]byte("outpost web forms v1"))
	return m.Sum(nil)
}

// replicaMAC signs one request between replicas.
func replicaMAC(key []byte, method, path, from string, at int64) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s\n%s\n%s\n%d", method, path, from, at)
	return hex.EncodeToString(m.Sum(nil))
}

// signReplicaRequest sets the Authorization of a request to another replica.
func (s *Server) signReplicaRequest(req *http.Request) {
	at := time.Now().Unix()
	req.Header.Set("Authorization", fmt.Sprintf("%s %s %d %s", replicaAuthScheme, s.opts.ReplicaID, at,
		replicaMAC(s.replicaKey, req.Method, req.URL.Path, s.opts.ReplicaID, at)))
}

// checkReplicaRequest returns the sending replica of a signed request.
func (s *Server) checkReplicaRequest(r *http.Request) (string, error) {
	refused := errUnauthorized("This endpoint is for other replicas of this server, signed with the shared secret key.")
	if s.replicaKey == nil {
		return "", refused
	}
	f := strings.Fields(r.Header.Get("Authorization"))
	if len(f) != 4 || f[0] != replicaAuthScheme {
		return "", refused
	}
	at, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return "", refused
	}
	if d := time.Since(time.Unix(at, 0)); d > replicaAuthSkew || d < -replicaAuthSkew {
		return "", refused
	}
	want := replicaMAC(s.replicaKey, r.Method, r.URL.Path, f[1], at)
	if !hmac.Equal([]byte(want), []byte(f[3])) {
		return "", refused
	}
	return f[1], nil
}

// dropHandler answers another replica's drop: when the store says another
// replica owns the session, this one closes the session's connection and
// stops its runner.
func (s *Server) dropHandler(w http.ResponseWriter, r *http.Request) {
	from, err := s.checkReplicaRequest(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	markAuthenticated(r.Context())
	id := r.PathValue("session")
	// The connection is taken before the store is read: one that attaches
	// after the read (its hello made this replica the owner again) is not
	// the one this drop is about.
	held := s.hub.Get(id)
	e, err := s.store.GetQueueEntry(r.Context(), id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.writeError(w, r, err)
		return
	}
	if e.Owner == s.opts.ReplicaID {
		// The remote came back here after the sender took it: keep it.
		writeJSON(w, http.StatusConflict, map[string]string{"status": "owned here"})
		return
	}
	dropped := s.dropSession(id, held, "the session's remote connected through another server")
	s.log.Info("dropped a session that moved to another replica", "session", id, "to", e.Owner, "asked_by", from, "had_connection", dropped)
	writeJSON(w, http.StatusOK, map[string]bool{"dropped": dropped})
}

// dropSession closes the session's connection held, if it is still the
// one attached, and stops its runner; with held nil it stops the runner
// unless a connection has attached since. It reports whether it closed a
// connection. A connection that attached after held was taken belongs to
// a newer hello and is kept, with its runner.
func (s *Server) dropSession(sessionID string, held *gateway.Conn, why string) bool {
	if held == nil {
		if s.hub.Get(sessionID) == nil {
			s.agents.StopSession(sessionID)
		}
		return false
	}
	if !s.hub.DropIf(sessionID, held) {
		return false
	}
	held.Moved.Store(true)
	held.Close(websocket.StatusPolicyViolation, why)
	s.agents.StopSession(sessionID)
	return true
}

// tellDrop asks replica prev, which owned the session before this one, to
// drop it. A replica not live, without a URL or not answering is left to
// the fence of ownedStore and to its gateway's pings.
func (s *Server) tellDrop(ctx context.Context, prev, sessionID string) {
	if s.replicaKey == nil {
		return
	}
	base := s.replicaURL(ctx, prev)
	if base == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+dropPath(sessionID), nil)
	if err != nil {
		s.log.Warn("tell a replica to drop a session", "replica", prev, "session", sessionID, "err", err)
		return
	}
	s.signReplicaRequest(req)
	resp, err := s.forwardClient.Do(req)
	if err != nil {
		s.log.Info("tell a replica to drop a session", "replica", prev, "session", sessionID, "err", err)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusConflict {
		s.log.Warn("tell a replica to drop a session", "replica", prev, "session", sessionID, "status", resp.Status)
	}
}
