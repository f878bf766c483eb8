package liveview

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// remoteLog records the frames a Hub sends to a session's remote.
type remoteLog struct {
	mu     sync.Mutex
	frames []api.Frame
}

func (r *remoteLog) Send(_ context.Context, f api.Frame) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.frames = append(r.frames, f)
	return nil
}

func (r *remoteLog) last() api.Frame {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.frames[len(r.frames)-1]
}

func (r *remoteLog) count(typ string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, f := range r.frames {
		if f.Type == typ {
			n++
		}
	}
	return n
}

type record struct{ action, actor string }

func newHub(t *testing.T) (*Hub, *remoteLog, *[]record) {
	r := &remoteLog{}
	var recs []record
	h := New(Options{
		Remote: func(string) (Remote, error) { return r, nil },
		Record: func(_ context.Context, _, action, actor, _ string) error {
			recs = append(recs, record{action, actor})
			return nil
		},
		Queue: 4,
	})
	return h, r, &recs
}

func tiles(key bool) []byte {
	return api.DesktopTiles{Keyframe: key, Width: 64, Height: 64, Tiles: []api.DesktopTile{{W: 64, H: 64, PNG: []byte("x")}}}.AppendBinary(nil)
}

// TestSlowViewerDropsFramesUntilAKeyframe: a viewer that does not read
// holds at most Queue frames, costs the others nothing, and after it lost
// one takes only a keyframe, which the hub asks the remote for.
func TestSlowViewerDropsFramesUntilAKeyframe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, r, _ := newHub(t)
	fast, err := h.Join(ctx, "s", "tok_a", false)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := h.Join(ctx, "s", "tok_b", false)
	if err != nil {
		t.Fatal(err)
	}
	if f := r.last(); f.Type != api.FrameDesktopStream || !f.DesktopStream.On || !f.DesktopStream.Keyframe {
		t.Fatalf("a join sent %+v, want a keyframe request", f)
	}
	h.Tiles("s", tiles(false)) // before any keyframe: nobody takes it
	if len(fast.Frames()) != 0 {
		t.Fatal("a viewer got a frame before its keyframe")
	}
	h.Tiles("s", tiles(true))
	for range 10 {
		h.Tiles("s", tiles(false))
		<-fast.Frames()
	}
	<-fast.Frames()
	if n := len(slow.Frames()); n != 4 {
		t.Errorf("the slow viewer holds %d frames, want its queue's 4", n)
	}
	asked := r.count(api.FrameDesktopStream)
	if asked != 2 {
		t.Errorf("the remote was asked %d times; a viewer still behind must not ask for keyframes", asked)
	}
	for range 4 {
		<-slow.Frames()
		h.Caught(slow)
	}
	h.Caught(slow)
	if n := r.count(api.FrameDesktopStream); n != asked+1 {
		t.Errorf("a viewer that caught up asked %d times, want once", n-asked)
	}
	h.Tiles("s", tiles(false))
	if len(slow.Frames()) != 0 {
		t.Error("a viewer that lost frames took a frame that is not a keyframe")
	}
	h.Tiles("s", tiles(true))
	if b := <-slow.Frames(); b[1]&1 == 0 {
		t.Error("the slow viewer's next frame is not a keyframe")
	}
	if got := h.FramesIn("s"); got != 14 {
		t.Errorf("FramesIn = %d, want 14", got)
	}
	h.Leave(ctx, fast)
	h.Leave(ctx, slow)
	if f := r.last(); f.Type != api.FrameDesktopStream || f.DesktopStream.On {
		t.Errorf("the last viewer left with %+v, want the stream stopped", f)
	}
}

// TestResync: a viewer that dropped frames of its own takes nothing but a
// keyframe next, and asking again and again costs the remote one request
// until that keyframe comes.
func TestResync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, r, _ := newHub(t)
	v, err := h.Join(ctx, "s", "tok_a", false)
	if err != nil {
		t.Fatal(err)
	}
	h.Tiles("s", tiles(true))
	h.Tiles("s", tiles(false))
	<-v.Frames()
	<-v.Frames()
	asked := r.count(api.FrameDesktopStream)
	for range 5 {
		h.Resync(v)
	}
	if n := r.count(api.FrameDesktopStream) - asked; n != 1 {
		t.Fatalf("five resyncs asked the remote %d times, want once", n)
	}
	if f := r.last(); !f.DesktopStream.On || !f.DesktopStream.Keyframe {
		t.Errorf("a resync sent %+v, want a keyframe request", f)
	}
	h.Tiles("s", tiles(false))
	if len(v.Frames()) != 0 {
		t.Fatal("a viewer that asked for a keyframe took a frame that is not one")
	}
	h.Tiles("s", tiles(true))
	if b := <-v.Frames(); b[1]&1 == 0 {
		t.Fatal("the frame after a resync is not a keyframe")
	}
	h.Resync(v)
	if n := r.count(api.FrameDesktopStream) - asked; n != 2 {
		t.Errorf("a resync after the keyframe came asked %d times in all, want 2", n)
	}
	h.Leave(ctx, v)
}

// TestControlRules: only a writer takes control, one at a time; only the
// controller sends input, and leaving hands back.
func TestControlRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, r, recs := newHub(t)
	ro, _ := h.Join(ctx, "s", "tok_ro", false)
	w1, _ := h.Join(ctx, "s", "tok_w1", true)
	w2, _ := h.Join(ctx, "s", "tok_w2", true)
	move := api.DesktopInput{Kind: api.DesktopPointerMove, X: 1, Y: 1}
	for name, err := range map[string]error{
		"read-only take":  h.TakeControl(ctx, ro),
		"read-only input": h.Input(ctx, ro, move),
		"input first":     h.Input(ctx, w1, move),
		"hand back first": h.HandBack(ctx, w1),
	} {
		if !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
	if err := h.TakeControl(ctx, w1); err != nil {
		t.Fatal(err)
	}
	if err := h.TakeControl(ctx, w2); !errors.Is(err, ErrRefused) {
		t.Errorf("a second taker: %v", err)
	}
	if err := h.Input(ctx, w1, move); err != nil {
		t.Error(err)
	}
	if err := h.Input(ctx, w1, api.DesktopInput{Kind: "wiggle"}); !errors.Is(err, ErrRefused) {
		t.Errorf("bad input: %v", err)
	}
	if n := r.count(api.FrameDesktopInput); n != 1 {
		t.Errorf("%d input frames sent, want 1", n)
	}
	h.Leave(ctx, w1)
	if f := r.last(); f.DesktopControl != api.DesktopHandBack {
		t.Errorf("a controller left with %+v last sent, want hand_back", f)
	}
	if err := h.TakeControl(ctx, w2); err != nil {
		t.Errorf("after the controller left: %v", err)
	}
	want := []record{{api.DesktopTakeControl, "tok_w1"}, {api.DesktopHandBack, "tok_w1"}, {api.DesktopTakeControl, "tok_w2"}}
	if len(*recs) != 3 || (*recs)[0] != want[0] || (*recs)[1] != want[1] || (*recs)[2] != want[2] {
		t.Errorf("records %+v, want %+v", *recs, want)
	}
	for _, v := range []*Viewer{ro, w2} {
		h.Leave(ctx, v)
	}
}
