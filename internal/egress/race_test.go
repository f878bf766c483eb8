//go:build linux

package egress

import (
	"fmt"
	"io"
	"sync"
	"testing"
	"time"
)

// TestSetPolicyWhilePeeking changes the policy over and over while
// connections allowed by name are being decided. SetPolicy reads each open
// flow's name as the flow's goroutine sets it (a data race under -race),
// and it must not close a connection whose name is still being read
// (judged by its address alone, every such connection was reset by any
// policy change, even one that allows it).
func TestSetPolicyWhilePeeking(t *testing.T) {
	names := &testPolicy{names: []string{"web.test"}}
	s := newSession(t, names, nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			s.eng.SetPolicy(&testPolicy{names: []string{"web.test"}})
		}
	}()
	ok := 0
	for i := 0; i < 20; i++ {
		c, err := s.dial("tcp", hostPort(hostWeb4, 80))
		if err != nil {
			continue
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: web.test\r\nConnection: close\r\n\r\n")
		if b, _ := io.ReadAll(c); len(b) > 0 {
			ok++
		}
		c.Close()
	}
	close(stop)
	wg.Wait()
	if ok == 0 {
		t.Fatal("no connection allowed by name got through")
	}
}
