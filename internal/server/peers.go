package server

import (
	"net"
	"sync"
	"time"
)

// Hijacked connections that wait (a queue watch between events, a parked
// claim-next) must learn when their client goes away. A goroutine blocked
// reading each would cost a stack per connection; instead one sweep peeks
// at every such connection now and then (peerClosed) and ends the ones
// whose peer closed. Where peeking is not possible, a goroutine reads.

// peerSweepEvery is how often the sweep peeks at the connections.
const peerSweepEvery = 2 * time.Second

// peerSweep is the server's set of hijacked connections followed for
// their peer's close.
type peerSweep struct {
	mu      sync.Mutex
	conns   map[*sweptConn]struct{}
	started bool
}

// sweptConn is a connection and what ends its stream.
type sweptConn struct {
	conn net.Conn
	gone func()
}

// watchPeer calls gone once conn's peer closes it, until stop is called.
// gone runs on a goroutine of the sweep's (or of its own) and must not
// block.
func (s *Server) watchPeer(conn net.Conn, gone func()) (stop func()) {
	if !peekable {
		s.wg.Go(func() {
			var b [1]byte
			for {
				if _, err := conn.Read(b[:]); err != nil {
					gone() // the client closed, or the stream ended
					return
				}
			}
		})
		return func() {}
	}
	p := &s.peers
	c := &sweptConn{conn: conn, gone: gone}
	p.mu.Lock()
	if p.conns == nil {
		p.conns = map[*sweptConn]struct{}{}
	}
	p.conns[c] = struct{}{}
	if !p.started {
		p.started = true
		s.wg.Go(s.sweepPeers)
	}
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}
}

// sweepPeers peeks at the followed connections every peerSweepEvery until
// the server stops.
func (s *Server) sweepPeers() {
	t := time.NewTicker(peerSweepEvery)
	defer t.Stop()
	p := &s.peers
	var batch []*sweptConn
	for {
		select {
		case <-s.runCtx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		batch = batch[:0]
		for c := range p.conns {
			batch = append(batch, c)
		}
		p.mu.Unlock()
		for _, c := range batch {
			if !peerClosed(c.conn) {
				continue
			}
			p.mu.Lock()
			_, ok := p.conns[c]
			delete(p.conns, c)
			p.mu.Unlock()
			if ok {
				c.gone()
			}
		}
		clear(batch) // hold no connection until the next round
	}
}
