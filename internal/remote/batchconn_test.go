package remote

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// recordConn is a net.Conn that records each Write.
type recordConn struct {
	net.Conn
	writes [][]byte
}

func (c *recordConn) Write(p []byte) (int, error) {
	c.writes = append(c.writes, bytes.Clone(p))
	return len(p), nil
}
func (c *recordConn) SetWriteDeadline(time.Time) error { return nil }

func TestBatchConn(t *testing.T) {
	rc := &recordConn{}
	bc := &batchConn{Conn: rc}
	if _, err := bc.Write([]byte("direct")); err != nil || len(rc.writes) != 1 {
		t.Fatalf("a write while not held: %d writes, err %v", len(rc.writes), err)
	}
	bc.hold()
	for range 10 {
		if _, err := bc.Write(bytes.Repeat([]byte("x"), 4096)); err != nil {
			t.Fatal(err)
		}
	}
	if len(rc.writes) != 1 {
		t.Fatalf("held writes reached the connection: %d writes", len(rc.writes))
	}
	if err := bc.release(); err != nil {
		t.Fatal(err)
	}
	if len(rc.writes) != 2 || len(rc.writes[1]) != 40960 {
		t.Fatalf("release: %d writes", len(rc.writes))
	}
	// Past batchMax the gathered bytes are written first, in order.
	bc.hold()
	_, _ = bc.Write(bytes.Repeat([]byte("a"), batchMax-10))
	_, _ = bc.Write(bytes.Repeat([]byte("b"), 20))
	_, _ = bc.Write(bytes.Repeat([]byte("c"), batchMax))
	_ = bc.release()
	var all bytes.Buffer
	for _, w := range rc.writes[2:] {
		all.Write(w)
	}
	want := strings.Repeat("a", batchMax-10) + strings.Repeat("b", 20) + strings.Repeat("c", batchMax)
	if all.String() != want {
		t.Fatalf("bytes out of order or lost: %d bytes in %d writes", all.Len(), len(rc.writes)-2)
	}
	if _, err := bc.Write([]byte("after")); err != nil || string(rc.writes[len(rc.writes)-1]) != "after" {
		t.Fatal("a write after release is not direct")
	}
}

func TestOutboxCoalescesOutput(t *testing.T) {
	o := newOutbox()
	o.setConnected(true)
	chunk := bytes.Repeat([]byte("o"), 16<<10)
	for range 5 {
		o.pushOutput(1, api.StreamStdout, chunk)
	}
	o.pushOutput(1, api.StreamStderr, []byte("err"))
	o.pushOutput(1, api.StreamStdout, []byte("more"))
	o.pushResult(1)
	o.pushOutput(2, api.StreamStdout, []byte("next"))
	var got []string
	for {
		it, ok := o.pop()
		if !ok {
			break
		}
		switch {
		case it.output != nil:
			if len(it.output.Data) > maxChunk || it.size != len(it.output.Data) {
				t.Fatalf("item of %d bytes, size %d", len(it.output.Data), it.size)
			}
			got = append(got, it.output.Stream+":"+string(it.output.Data[:min(len(it.output.Data), 4)])+":"+strconv.Itoa(len(it.output.Data)))
		default:
			got = append(got, "result")
		}
	}
	want := []string{"stdout:oooo:65536", "stdout:oooo:16384", "stderr:err:3", "stdout:more:4", "result", "stdout:next:4"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("items:\n got %v\nwant %v", got, want)
	}
	if o.bytes != 0 {
		t.Fatalf("outbox counts %d bytes after draining", o.bytes)
	}
}
