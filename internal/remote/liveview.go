package remote

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/desktop"
)

// The live view of the session's desktop: while the server says viewers
// watch (api.FrameDesktopStream), one goroutine captures the screen at up
// to the asked frame rate and queues the tiles that changed; it captures
// the next frame only once the last one was written to the gateway, so a
// slow connection lowers the frame rate instead of growing a queue, and an
// unchanged screen sends nothing. A person who took control
// (api.FrameDesktopControl) holds the computer tool's calls back until
// they hand back; their input goes to the display through XTEST.

// inputQueue bounds the input events waiting for the display; more are
// dropped (a person's input arrives at the rate of their hands).
const inputQueue = 256

// liveView is the session's desktop stream and takeover state.
type liveView struct {
	mu sync.Mutex // guards the following
	// on is set while the server wants frames; keyframe when the next
	// frame must hold every tile.
	on, keyframe bool
	fps          int
	// running is set while the stream's goroutine runs.
	running bool
	// pending counts the messages of the last frame still in the outbox.
	pending int
	// controlled is set while a person has control; released is closed
	// when they hand back.
	controlled bool
	released   chan struct{}
	// Captures counts screen captures (tests: several viewers, one stream).
	captures int

	wake   chan struct{} // a change of on, keyframe or pending
	inputs chan api.DesktopInput
	wg     sync.WaitGroup // the stream and input goroutines
}

func (v *liveView) init() {
	v.wake = make(chan struct{}, 1)
	v.inputs = make(chan api.DesktopInput, inputQueue)
	v.released = make(chan struct{})
	close(v.released)
}

func (v *liveView) poke() {
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

// handleDesktopStream starts, stops or keyframes the stream.
func (s *session) handleDesktopStream(f api.Frame) {
	if f.DesktopStream == nil {
		return
	}
	v := &s.live
	v.mu.Lock()
	v.on = f.DesktopStream.On
	v.keyframe = v.keyframe || f.DesktopStream.Keyframe
	v.fps = f.DesktopStream.FPS
	start := v.on && !v.running
	if start {
		v.running = true
	}
	v.mu.Unlock()
	if start {
		v.wg.Go(func() { s.stream(s.callCtx) })
	}
	v.poke()
}

// handleDesktopControl records a take-over or a hand-back.
func (s *session) handleDesktopControl(f api.Frame) {
	v := &s.live
	v.mu.Lock()
	defer v.mu.Unlock()
	switch f.DesktopControl {
	case api.DesktopTakeControl:
		if !v.controlled {
			v.controlled, v.released = true, make(chan struct{})
			s.log.Info("a person took control of the desktop")
		}
	case api.DesktopHandBack:
		if v.controlled {
			v.controlled = false
			close(v.released)
			s.log.Info("the desktop was handed back")
		}
	default:
		s.log.Warn("ignoring an unknown desktop control", "control", f.DesktopControl)
	}
}

// maxControlWait bounds how long an agent's screen action waits for a
// person to hand back (a call's own timeout may be shorter); the call then
// fails and the agent may try again.
const maxControlWait = 30 * time.Minute

// waitControl waits while a person has control of the desktop.
func (s *session) waitControl(ctx context.Context) error {
	s.live.mu.Lock()
	released := s.live.released
	s.live.mu.Unlock()
	t := time.NewTimer(maxControlWait)
	defer t.Stop()
	select {
	case <-released:
		return nil
	case <-t.C:
		return fmt.Errorf("waited %s", maxControlWait)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// handleDesktopInput queues a person's input for the display.
func (s *session) handleDesktopInput(f api.Frame) {
	if f.DesktopInput == nil {
		return
	}
	v := &s.live
	v.mu.Lock()
	if v.inputs == nil {
		v.mu.Unlock()
		return
	}
	select {
	case v.inputs <- *f.DesktopInput:
	default:
		s.log.Warn("dropped a person's desktop input: too many waiting")
	}
	v.mu.Unlock()
}

// runInputs sends queued input to the display until ctx ends.
func (s *session) runInputs(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case in := <-s.live.inputs:
			d := s.desk.running()
			if d == nil {
				continue
			}
			ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
			if err := d.Input(ictx, in); err != nil {
				s.log.Warn("a person's desktop input", "kind", in.Kind, "err", err)
			}
			cancel()
		}
	}
}

// stream sends frames while the server wants them. With the X server's
// DAMAGE extension it captures only after the screen changed; without it
// it polls at the frame rate.
func (s *session) stream(ctx context.Context) {
	v := &s.live
	var st *desktop.Streamer
	var watch *desktop.DamageWatch
	defer func() {
		if watch != nil {
			watch.Close()
		}
	}()
	var next time.Time
	dirty := true // capture the first frame whatever the damage says
	for {
		v.mu.Lock()
		on, pending, fps, keyframe := v.on, v.pending > 0, v.fps, v.keyframe
		if !on || ctx.Err() != nil {
			// Cleared under the lock that on is read under, so a start
			// that comes now finds the stream stopped and starts another.
			v.running = false
			v.mu.Unlock()
			return
		}
		v.mu.Unlock()
		if fps <= 0 || fps > api.DesktopMaxFPS {
			fps = api.DesktopMaxFPS
		}
		d := s.desk.running()
		if d != nil && (st == nil || st.Desktop() != d) {
			st, dirty = desktop.NewStreamer(d), true
			if watch != nil {
				watch.Close()
			}
			var err error
			if watch, err = d.WatchDamage(); err != nil {
				s.log.Info("the live desktop polls the screen", "reason", err)
				watch = nil
			} else {
				st.UseDamage(watch) // capture only the damaged tiles
			}
		}
		var damaged <-chan struct{}
		wait := time.Until(next)
		switch {
		case d == nil:
			wait = time.Second // no desktop yet: look again
		case pending:
			wait = time.Hour // until the frame is written
		case watch != nil && !dirty && !keyframe:
			damaged, wait = watch.Changed(), time.Hour
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-v.wake:
			case <-damaged:
				dirty = true
			case <-t.C:
			}
			t.Stop()
			continue
		}
		next = time.Now().Add(time.Second / time.Duration(fps))
		dirty = false
		v.mu.Lock()
		if v.keyframe {
			st.Reset()
			v.keyframe = false
		}
		v.captures++
		v.mu.Unlock()
		f, ok, err := st.Next()
		if err != nil {
			s.log.Warn("capture a desktop frame", "err", err)
			next, dirty = time.Now().Add(time.Second), true
			continue
		}
		if !ok {
			continue
		}
		msgs := splitFrame(f, maxDesktopMessage)
		v.mu.Lock()
		v.pending += len(msgs)
		v.mu.Unlock()
		for _, m := range msgs {
			s.out.pushDesktop(m)
		}
	}
}

// desktopSent is told that the queued frame left (or was dropped).
func (s *session) desktopSent() {
	s.live.mu.Lock()
	s.live.pending = max(0, s.live.pending-1)
	s.live.mu.Unlock()
	s.live.poke()
}

// maxDesktopMessage bounds one message of a frame, well under the
// gateway's 32 MiB read limit: a keyframe of a large screen full of noise
// is split into several (only the first marked a keyframe).
const maxDesktopMessage = 4 << 20

// splitFrame encodes f as messages of at most max bytes each (a single
// tile larger than that goes alone).
func splitFrame(f api.DesktopTiles, max int) [][]byte {
	var out [][]byte
	part := api.DesktopTiles{Keyframe: f.Keyframe, Width: f.Width, Height: f.Height}
	size := 0
	for _, t := range f.Tiles {
		n := 12 + len(t.PNG)
		if len(part.Tiles) > 0 && (size+n > max || len(part.Tiles) == 0xffff) {
			out = append(out, part.AppendBinary(nil))
			part = api.DesktopTiles{Width: f.Width, Height: f.Height}
			size = 0
		}
		part.Tiles = append(part.Tiles, t)
		size += n
	}
	return append(out, part.AppendBinary(nil))
}

// liveDisconnected stops the stream and hands control back when the
// gateway connection ends: the server that wanted them may not be the one
// the remote reconnects to, and the one it reaches says again what it
// wants (it resends both after a hello).
func (s *session) liveDisconnected() {
	v := &s.live
	v.mu.Lock()
	v.on = false
	if v.controlled {
		v.controlled = false
		close(v.released)
	}
	v.mu.Unlock()
	v.poke()
}
