package server

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/lifecycle"
)

// A claim-next request that has to wait (api.ClaimNextRequest.WaitSeconds)
// waits, over HTTP/1.x, on its hijacked connection: once its first pick
// found nothing, the handler returns and the request is parked with no
// goroutine at all — its waiter on the wait list, a timer for its
// deadline, hooks on its context and on the server's, and the sweep that
// sees its client close (peers.go). A wake starts a goroutine to claim.
// So an idle claimer costs the server little more than its connection,
// rather than a request's worth for as long as it waits. The answer is
// written on the connection as net/http would, with Connection: close; the
// claimer's next request opens a new connection. Over HTTP/2 the handler
// waits itself.

// claimAnswerTimeout bounds writing a parked request's answer.
const claimAnswerTimeout = 10 * time.Second

// parkClaim hijacks the connection of claim-next request r, whose waiter
// cw joined the wait list and whose first pick found nothing, and parks
// it until deadline with no goroutine of its own: a wake starts one to
// claim (cw.resume), the deadline's timer or the end of the wait's
// context one to answer. false, with nothing written, when the connection
// cannot be hijacked or the server stops: the handler then answers it.
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
	_ = conn.SetDeadline(time.Time{}) // net/http's deadlines are the park's now
	// The wait outlives the request's context, which ends as the handler
	// returns: it keeps the request's values (the principal), and ends
	// when the token is revoked or expires, or when the client closes.
	valid, stopChecks := s.whileValid(context.WithoutCancel(r.Context()), r, principalFrom(r.Context()))
	ctx, cancel := context.WithCancel(valid)
	p := &parkedClaim{s: s, conn: conn, header: header, outpostID: outpostID, req: req, cw: cw,
		ctx: ctx, cancel: cancel, stopChecks: stopChecks, method: r.Method, path: r.URL.Path, ready: make(chan struct{})}
	// The hooks below may fire at once: what they start waits for ready,
	// closed once p is whole.
	defer close(p.ready)
	cw.resume = p.resume // read under the wait list's lock, set before the park
	p.stopPeer = s.watchPeer(conn, cancel)
	p.stopCtx = context.AfterFunc(ctx, p.end)
	p.stopRun = context.AfterFunc(s.runCtx, p.end)
	p.timer = time.AfterFunc(time.Until(deadline), p.end)
	if k, took, ended := s.claimWaits.parkOrTake(cw); took || ended {
		// Woken, or over, while the first pick ran: go on at once.
		go p.resumeWith(k, took)
	}
	return true
}

// parkedClaim is a claim-next request parked on its hijacked connection.
type parkedClaim struct {
	s          *Server
	conn       net.Conn
	header     http.Header
	outpostID  string
	req        api.ClaimNextRequest
	cw         *claimWaiter
	ctx        context.Context
	cancel     context.CancelFunc
	stopChecks func()
	method     string
	path       string

	ready    chan struct{} // closed once parkClaim has set the hooks below
	stopPeer func()
	stopCtx  func() bool
	stopRun  func() bool
	timer    *time.Timer

	once sync.Once
}

// resume claims for a parked request the wake that started it.
func (p *parkedClaim) resume() {
	var k wakeKey
	woken := true
	select {
	case k = <-p.cw.wake:
	default:
		woken = false // taken by its leaving: it is over
	}
	p.resumeWith(k, woken)
}

// resumeWith claims for wake k (when woken), and for each wake that comes
// while it claims, until a pick answers the request, no wake is left
// (parked again) or the wait ended (answered that there is nothing).
func (p *parkedClaim) resumeWith(k wakeKey, woken bool) {
	<-p.ready
	q := p.s.claimWaits
	for {
		if !woken {
			var ended bool
			if k, woken, ended = q.parkOrTake(p.cw); ended {
				p.finish(lifecycle.Grant{}, false, nil)
				return
			} else if !woken {
				return // parked: the next wake starts resume
			}
		}
		woken = false
		if p.ctx.Err() != nil || peekable && peerClosed(p.conn) {
			p.cancel() // gone
			p.finish(lifecycle.Grant{}, false, nil)
			q.wake(p.outpostID, k) // the next waiter takes the wake
			return
		}
		if res, ok, err, done := p.s.claimPick(p.ctx, p.outpostID, p.req, p.cw, &k); done {
			p.finish(res, ok, err)
			return
		}
	}
}

// end ends the wait (its deadline, the server stopping, the token or the
// client gone): a parked request is answered here, one claiming when its
// pick is over.
func (p *parkedClaim) end() {
	if p.s.claimWaits.end(p.cw) {
		p.finish(lifecycle.Grant{}, false, nil)
	}
}

// finish answers the request once with what its picks found and closes
// its connection: 204 for nothing (its wait over, the server stopping),
// nothing at all when its client is gone or its token no longer valid.
func (p *parkedClaim) finish(res lifecycle.Grant, ok bool, err error) {
	p.once.Do(func() {
		s := p.s
		defer s.wg.Done() // track's
		<-p.ready
		p.stopPeer()
		p.stopCtx()
		p.stopRun()
		p.timer.Stop()
		defer p.stopChecks()
		defer p.cancel()
		defer p.conn.Close()
		s.claimWaits.leave(p.cw)
		if ok && peekable && peerClosed(p.conn) {
			p.cancel() // gone since the last sweep: the claim goes back (answerClaim)
		}
		ans := &bufferedAnswer{header: p.header}
		if err := s.answerClaim(p.ctx, ans, p.req, res, ok, err); err != nil {
			s.writeError(ans, (&http.Request{Method: p.method, URL: &url.URL{Path: p.path}}).WithContext(p.ctx), err)
		}
		if p.ctx.Err() != nil {
			return // the client or its token is gone: nobody to answer (a claim was released)
		}
		_ = p.conn.SetWriteDeadline(time.Now().Add(claimAnswerTimeout))
		_, _ = p.conn.Write(ans.bytes())
	})
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
