package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// A claim-next request that has to wait (api.ClaimNextRequest.WaitSeconds)
// waits, over HTTP/1.x, on its hijacked connection: once its first pick
// found nothing, the handler returns and a small goroutine parks it, so an
// idle claimer costs the server what an idle watch does — no handler
// stack, no net/http connection state or buffers — rather than a
// request's worth for as long as it waits. The answer is written on the
// connection as net/http would, with Connection: close; the claimer's next
// request opens a new connection. Over HTTP/2 the handler waits itself.

// claimAnswerTimeout bounds writing a parked request's answer.
const claimAnswerTimeout = 10 * time.Second

// parkClaim hijacks the connection of claim-next request r, whose waiter
// cw joined the wait list and whose first pick found nothing, and waits
// for a claim on a goroutine of its own until deadline. false, with
// nothing written, when the connection cannot be hijacked or the server
// stops: the handler then answers it.
func (s *Server) parkClaim(w http.ResponseWriter, r *http.Request, outpostID string, req api.ClaimNextRequest, cw *claimWaiter, deadline time.Time) bool {
	if !s.track() {
		return false
	}
	header := w.Header().Clone()
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		s.wg.Done()
		return false
	}
	_ = conn.SetDeadline(time.Time{}) // net/http's deadlines are this goroutine's now
	// The wait outlives the request's context, which ends as the handler
	// returns: it keeps the request's values (the principal), ends when
	// the token is revoked or expires, or when the client closes.
	valid, stopChecks := s.whileValid(context.WithoutCancel(r.Context()), r, principalFrom(r.Context()))
	ctx, cancel := context.WithCancel(valid)
	method, path := r.Method, r.URL.Path
	stopPeer := s.watchPeer(conn, cancel)
	go func() {
		defer s.wg.Done() // track's
		defer stopChecks()
		defer cancel()
		defer conn.Close()
		defer stopPeer()
		res, ok, err := s.waitForClaim(ctx, outpostID, req, cw, deadline, false)
		s.claimWaits.leave(cw)
		if ok && peekable && peerClosed(conn) {
			cancel() // gone since the last sweep: the claim goes back (answerClaim)
		}
		ans := &bufferedAnswer{header: header}
		if err := s.answerClaim(ctx, ans, req, res, ok, err); err != nil {
			s.writeError(ans, (&http.Request{Method: method, URL: &url.URL{Path: path}}).WithContext(ctx), err)
		}
		if ctx.Err() != nil {
			return // the claimer is gone; a claim was released by answerClaim
		}
		_ = conn.SetWriteDeadline(time.Now().Add(claimAnswerTimeout))
		_, _ = conn.Write(ans.bytes())
	}()
	return true
}

// bufferedAnswer is an http.ResponseWriter that keeps one small answer to
// write on a hijacked connection.
type bufferedAnswer struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (a *bufferedAnswer) Header() http.Header { return a.header }

func (a *bufferedAnswer) WriteHeader(code int) {
	if a.code == 0 {
		a.code = code
	}
}

func (a *bufferedAnswer) Write(p []byte) (int, error) {
	a.WriteHeader(http.StatusOK)
	return a.body.Write(p)
}

// bytes is the answer as HTTP/1.1 puts it on the wire, the connection to
// be closed after it.
func (a *bufferedAnswer) bytes() []byte {
	code := a.code
	if code == 0 {
		code = http.StatusOK
	}
	a.header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	resp := &http.Response{StatusCode: code, ProtoMajor: 1, ProtoMinor: 1, Header: a.header, Close: true,
		ContentLength: int64(a.body.Len())}
	if a.body.Len() > 0 {
		resp.Body = io.NopCloser(&a.body)
	}
	var out bytes.Buffer
	_ = resp.Write(&out)
	return out.Bytes()
}
