package client

import (
	"bufio"
	"io"
	"strings"
)

// maxSSELine bounds one line of an event stream; an output chunk or a queue
// entry fits well within it.
const maxSSELine = 16 << 20

// sseEvent is one dispatched server-sent event.
type sseEvent struct {
	ID    string
	Event string
	Data  string
}

// readSSE reads server-sent events from r and calls fn for each event that
// carries data. Comment lines (": keepalive") are skipped. It returns nil when
// the stream ends cleanly, fn's error when fn fails, and the read error
// otherwise. An event cut off by the end of the stream is dropped, as the
// EventSource rules say.
func readSSE(r io.Reader, fn func(sseEvent) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxSSELine)
	var (
		ev      sseEvent
		data    strings.Builder
		hasData bool
	)
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line == "" {
			if hasData {
				ev.Data = data.String()
				if err := fn(ev); err != nil {
					return err
				}
			}
			ev, hasData = sseEvent{}, false
			data.Reset()
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		case "id":
			ev.ID = value
		case "event":
			ev.Event = value
		}
	}
	return sc.Err()
}
