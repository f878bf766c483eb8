package remote

import (
	"sync"

	"github.com/outpost-sh/outpost/api"
)

const (
	// maxChunk is the largest output frame payload.
	maxChunk = 64 << 10
	// maxBuffered is how much output may wait for the gateway. While the
	// gateway is connected a writer past it waits (the command's pipe
	// fills and the command slows to the gateway's pace); while it is not,
	// more is dropped with a marker line.
	maxBuffered = 8 << 20
)

// dropMarker replaces output dropped because too much was buffered.
const dropMarker = "\n[outpost: output dropped: more than 8 MiB was buffered while the gateway was unreachable]\n"

// outItem is either a chunk of output or the seq of a result to send.
type outItem struct {
	output    *api.OutputFrame
	resultSeq int64
	// artifact is a frame of an artifact upload (see artifacts.go).
	artifact *artifactItem
	// frame is a JSON notice to send as it is (restored).
	frame *api.Frame
	// desktop is a binary frame of the live desktop (api.DesktopTiles).
	desktop []byte
	// size is what the item counts against maxBuffered.
	size int
}

type streamKey struct {
	seq    int64
	stream string
}

// outbox is the FIFO of frames waiting for the gateway. Output waits here
// while the remote is disconnected, up to maxBuffered bytes. Results are
// queued by seq only; the result itself lives in the session's done set and
// the journal, so it is never dropped.
type outbox struct {
	mu        sync.Mutex // guards the following
	items     []outItem
	bytes     int
	dropped   map[streamKey]bool
	connected bool
	space     *sync.Cond // signalled when bytes shrink or the connection changes
	notify    chan struct{}
}

func newOutbox() *outbox {
	o := &outbox{dropped: map[streamKey]bool{}, notify: make(chan struct{}, 1)}
	o.space = sync.NewCond(&o.mu)
	return o
}

// setConnected records whether a gateway connection is draining the
// outbox, waking writers that wait for room.
func (o *outbox) setConnected(c bool) {
	o.mu.Lock()
	o.connected = c
	o.mu.Unlock()
	o.space.Broadcast()
}

func (o *outbox) signal() {
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// pushOutput queues a copy of data as output of seq on stream, in chunks of
// at most maxChunk bytes.
func (o *outbox) pushOutput(seq int64, stream string, data []byte) {
	if len(data) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	key := streamKey{seq, stream}
	for len(data) > 0 {
		n := min(len(data), maxChunk)
		for o.connected && o.bytes+n > maxBuffered {
			o.signal()
			o.space.Wait()
		}
		if o.bytes+n > maxBuffered {
			if !o.dropped[key] {
				o.dropped[key] = true
				o.items = append(o.items, outItem{output: &api.OutputFrame{Seq: seq, Stream: stream, Data: []byte(dropMarker)}})
			}
			break
		}
		if last := o.tailOutput(key); last != nil && len(last.output.Data)+n <= maxChunk {
			// Coalesce with the chunk still waiting at the tail: fewer,
			// larger frames while the gateway is behind.
			last.output.Data = append(last.output.Data, data[:n]...)
			last.size += n
		} else {
			var buf []byte
			if 4*n >= maxChunk { // bulk output: a recycled full-size buffer
				buf = (*chunkBuffers.Get().(*[]byte))[:n]
			} else {
				buf = make([]byte, n, 4*n)
			}
			copy(buf, data)
			o.items = append(o.items, outItem{output: &api.OutputFrame{Seq: seq, Stream: stream, Data: buf}, size: n})
		}
		o.bytes += n
		data = data[n:]
	}
	o.signal()
}

// chunkBuffers recycles the maxChunk buffers of bulk output items; the
// write loop returns a buffer once its frame is sent (recycleChunk).
var chunkBuffers = sync.Pool{New: func() any { b := make([]byte, 0, maxChunk); return &b }}

// recycleChunk returns the buffer of a sent output item to chunkBuffers.
func recycleChunk(f *api.OutputFrame) {
	if cap(f.Data) == maxChunk {
		b := f.Data[:0]
		f.Data = nil
		chunkBuffers.Put(&b)
	}
}

// tailOutput returns the last queued item if it is output of key.
func (o *outbox) tailOutput(key streamKey) *outItem {
	if len(o.items) == 0 {
		return nil
	}
	it := &o.items[len(o.items)-1]
	if it.output == nil || it.size == 0 || it.output.Seq != key.seq || it.output.Stream != key.stream {
		return nil
	}
	return it
}

// pushResult queues the result of seq, after the output already queued.
func (o *outbox) pushResult(seq int64) {
	o.mu.Lock()
	o.items = append(o.items, outItem{resultSeq: seq})
	o.mu.Unlock()
	o.signal()
}

// pushFrame queues a JSON frame, after what is already queued.
func (o *outbox) pushFrame(f api.Frame) {
	o.mu.Lock()
	o.items = append(o.items, outItem{frame: &f})
	o.mu.Unlock()
	o.signal()
}

// pushDesktop queues a frame of the live desktop. Its stream queues one
// at a time (see liveview.go), so it is not counted against maxBuffered.
func (o *outbox) pushDesktop(msg []byte) {
	o.mu.Lock()
	o.items = append(o.items, outItem{desktop: msg})
	o.mu.Unlock()
	o.signal()
}

// pop takes the oldest item, if any.
func (o *outbox) pop() (outItem, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.items) == 0 {
		return outItem{}, false
	}
	it := o.items[0]
	o.items[0] = outItem{}
	o.items = o.items[1:]
	o.bytes -= it.size
	if len(o.items) == 0 {
		o.items = nil
		o.bytes = 0
		clear(o.dropped)
	}
	if it.size > 0 {
		o.space.Broadcast()
	}
	return it, true
}

// unpop puts an item back at the head after a failed send.
func (o *outbox) unpop(it outItem) {
	o.mu.Lock()
	o.items = append([]outItem{it}, o.items...)
	o.bytes += it.size
	o.mu.Unlock()
	o.signal()
}
