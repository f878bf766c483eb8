package remote

import "testing"

func TestOutboxDropsBeyondLimit(t *testing.T) {
	o := newOutbox()
	chunk := make([]byte, 1<<20)
	for range 9 {
		o.pushOutput(1, "stdout", chunk)
	}
	o.pushResult(1)
	var data, markers int
	var sawResult bool
	for {
		it, ok := o.pop()
		if !ok {
			break
		}
		switch {
		case it.output == nil:
			sawResult = true
		case string(it.output.Data) == dropMarker:
			markers++
		default:
			if len(it.output.Data) > maxChunk {
				t.Fatalf("chunk of %d bytes", len(it.output.Data))
			}
			data += len(it.output.Data)
		}
	}
	if data != maxBuffered || markers != 1 || !sawResult {
		t.Errorf("data=%d markers=%d result=%v", data, markers, sawResult)
	}
	if o.bytes != 0 {
		t.Errorf("bytes = %d after draining", o.bytes)
	}
}
