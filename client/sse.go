package client

import (
	"bufio"
	"bytes"
	"io"
)

// maxSSELine bounds one line of an event stream; an output chunk or a queue
// entry fits well within it.
const maxSSELine = 16 << 20

// sseEvent is one dispatched server-sent event. Data is only valid during
// the callback it is passed to.
type sseEvent struct {
	ID    string
	Event string
	Data  []byte
}

// readSSE reads server-sent events from r and calls fn for each event that
// carries data. Comment lines (": keepalive") are skipped. It returns nil when
// the stream ends cleanly, fn's error when fn fails, and the read error
// otherwise. An event cut off by the end of the stream is dropped, as the
// EventSource rules say. Lines are handled as bytes, so a large output
// event is not copied on its way to fn.
func readSSE(r io.Reader, fn func(sseEvent) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 256<<10), maxSSELine)
	var (
		ev      sseEvent
		data    []byte
		hasData bool
	)
	for sc.Scan() {
		line := bytes.TrimSuffix(sc.Bytes(), []byte("\r"))
		if len(line) == 0 {
			if hasData {
				ev.Data = data
				if err := fn(ev); err != nil {
					return err
				}
			}
			ev, hasData = sseEvent{}, false
			data = data[:0]
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		case "id":
			ev.ID = string(value)
		case "event":
			ev.Event = string(value)
		}
	}
	return sc.Err()
}
