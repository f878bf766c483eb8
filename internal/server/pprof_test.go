package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestPprofListen: with PprofListen the profiles are served on that
// listener and nowhere on the API's; without it, nowhere.
func TestPprofListen(t *testing.T) {
	t.Parallel()
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	ts := startServer(t, Options{PprofListen: "127.0.0.1:0"})
	base := "http://" + ts.srv.pprofLn.Addr().String()
	if code, body := get(base + "/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") || !strings.Contains(body, "heap") {
		t.Fatalf("the profile index on the profiling listener: %d %.300s", code, body)
	}
	if code, body := get(base + "/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile:") {
		t.Fatalf("the goroutine profile: %d %.300s", code, body)
	}
	if code, body := get(base + "/debug/pprof/heap"); code != 200 || len(body) == 0 {
		t.Fatalf("the heap profile: %d, %d bytes", code, len(body))
	}
	// Nothing but the profiles there: not the API, not /metrics.
	for _, path := range []string{"/v1/outposts", "/metrics", "/healthz"} {
		if code, _ := get(base + path); code != 404 {
			t.Errorf("GET %s on the profiling listener: %d, want 404", path, code)
		}
	}
	// And the profiles are not on the API listener, with or without a token.
	for _, token := range []string{"", ts.admin} {
		ts.mustDo(404, "GET", "/debug/pprof/", token, nil, nil)
		ts.mustDo(404, "GET", "/debug/pprof/heap", token, nil, nil)
	}

	off := startServer(t, Options{})
	if off.srv.pprofLn != nil {
		t.Fatal("a server without PprofListen opened a profiling listener")
	}
	off.mustDo(404, "GET", "/debug/pprof/", off.admin, nil, nil)
}

func TestIsLoopbackAddr(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:6060": true, "[::1]:6060": true, "localhost:6060": true, "127.0.0.2:1": true,
		":6060": false, "0.0.0.0:6060": false, "10.0.0.5:6060": false, "[::]:6060": false, "bad": false,
	} {
		if got := isLoopbackAddr(addr); got != want {
			t.Errorf("isLoopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}
