package dist

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// testSelfID is the id of the fake executable a test Handler publishes.
const testSelfID = "5e1f00000001"

// distServer serves a Handler over loopback at <url>/dist/.
func distServer(t *testing.T, opts HandlerOptions) (*Handler, string) {
	t.Helper()
	h, err := NewHandler(opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/dist/", http.StripPrefix("/dist/", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return h, srv.URL + "/dist/"
}

// writeFile writes a file of the test and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// get fetches u with method and returns status, headers and body.
func get(t *testing.T, method, u string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestHandlerServesSelfAndDir(t *testing.T) {
	t.Parallel()
	host := HostSuffix()
	if host == "" {
		t.Skip("no platform suffix for this machine")
	}
	tmp := t.TempDir()
	self := writeFile(t, tmp, "outpost", "#!/bin/sh\necho self\n")
	dir := filepath.Join(tmp, "dist")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const older, newer = "0a0a0a0a0a01", "0b0b0b0b0b02"
	writeFile(t, dir, BinaryName(older, host), "older build")
	writeFile(t, dir, ChecksumName(older, host), CheckLine(sha("older build"), host))
	writeFile(t, dir, BinaryName(newer, host), "newer build")
	// No .sha256 for newer: the server computes its check line.
	writeFile(t, dir, LatestName(host), newer+"\n") // a newline in the file is trimmed
	writeFile(t, dir, BinaryName(newer, SuffixMacOSArm64), "mac build")
	writeFile(t, tmp, "secret", "TOP-SECRET-CONTENT")

	h, base := distServer(t, HandlerOptions{Dir: dir, Executable: self, SelfID: testSelfID})

	// The latest pointer: the id alone, no newline, never cached unrevalidated.
	code, hd, body := get(t, "GET", base+LatestName(host))
	if code != 200 || body != newer || hd.Get("Content-Type") != "text/plain; charset=utf-8" ||
		hd.Get("Cache-Control") != "no-cache" || hd.Get("Content-Length") != "12" {
		t.Errorf("latest = %d %q %v", code, body, hd)
	}
	// Binaries, from the dir (two ids) and the executable, byte for byte.
	for id, want := range map[string]string{older: "older build", newer: "newer build", testSelfID: "#!/bin/sh\necho self\n"} {
		code, hd, body := get(t, "GET", base+BinaryName(id, host))
		if code != 200 || body != want || hd.Get("Content-Type") != "application/octet-stream" ||
			hd.Get("Cache-Control") != "public, max-age=31536000, immutable" || hd.Get("ETag") != `"`+sha(want)+`"` {
			t.Errorf("binary %s = %d %q %v", id, code, body, hd)
		}
		code, hd, body = get(t, "GET", base+ChecksumName(id, host))
		if code != 200 || body != sha(want)+"  devin-remote\n" || hd.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Errorf("checksum %s = %d %q %v", id, code, body, hd)
		}
		code, hd, body = get(t, "HEAD", base+BinaryName(id, host))
		if code != 200 || body != "" || hd.Get("Content-Length") != strconv.Itoa(len(want)) {
			t.Errorf("HEAD %s = %d %q %v", id, code, body, hd)
		}
	}
	// A short id (a git SHA prefix) finds its build.
	if code, _, body := get(t, "GET", base+BinaryName(older[:7], host)); code != 200 || body != "older build" {
		t.Errorf("prefix = %d %q", code, body)
	}
	// Another platform: only what the dir has.
	if code, _, body := get(t, "GET", base+BinaryName(newer, SuffixMacOSArm64)); code != 200 || body != "mac build" {
		t.Errorf("mac binary = %d %q", code, body)
	}
	for _, name := range []string{
		LatestName(SuffixMacOSArm64), // no pointer for it in the dir
		BinaryName(testSelfID, SuffixMacOSArm64),
		BinaryName("0c0c0c0c0c03", host),
		ChecksumName("0c0c0c0c0c03", host),
		"secret", "..%2fsecret", "..%2F..%2Fetc%2Fpasswd", "%2e%2e/secret", "devin-remote_0a0a0a0a0a01_..%2f..%2fsecret",
		"latest_linux", "", "sub/" + LatestName(host),
	} {
		code, hd, body := get(t, "GET", base+name)
		var e api.ErrorResponse
		if code != 404 || json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != api.CodeNotFound || e.Error.Message == "" ||
			hd.Get("Content-Type") != "application/json" || strings.Contains(body, "TOP-SECRET") {
			t.Errorf("GET %s = %d %q, want a 404 JSON error", name, code, body)
		}
	}
	if code, _, _ := get(t, "POST", base+LatestName(host)); code != http.StatusMethodNotAllowed {
		t.Errorf("POST = %d", code)
	}

	// Each binary was hashed once, however often it was asked for.
	before := h.hashes.count()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { get(t, "GET", base+ChecksumName(newer, host)) })
	}
	wg.Wait()
	if after := h.hashes.count(); after != before {
		t.Errorf("hashed %d more files for repeated requests", after-before)
	}
	// A changed file is hashed again.
	writeFile(t, dir, BinaryName(newer, host), "newer build, rebuilt")
	if _, _, body := get(t, "GET", base+ChecksumName(newer, host)); body != CheckLine(sha("newer build, rebuilt"), host) {
		t.Errorf("checksum after change = %q", body)
	}
}

func TestHandlerWithoutDir(t *testing.T) {
	t.Parallel()
	host := HostSuffix()
	if host == "" {
		t.Skip("no platform suffix for this machine")
	}
	_, base := distServer(t, HandlerOptions{}) // this test binary, under its own id
	id, err := SelfID()
	if err != nil {
		t.Fatal(err)
	}
	if code, _, body := get(t, "GET", base+LatestName(host)); code != 200 || body != id {
		t.Fatalf("latest = %d %q, want %s", code, body, id)
	}
	exe, _ := os.Executable()
	want, _ := FileSHA256(exe)
	if code, _, body := get(t, "GET", base+ChecksumName(id, host)); code != 200 || body != want+"  devin-remote\n" {
		t.Errorf("checksum = %d %q", code, body)
	}
}

func TestHandlerRefusesBadDir(t *testing.T) {
	t.Parallel()
	if _, err := NewHandler(HandlerOptions{Dir: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("a missing dist dir was accepted")
	}
	// A latest pointer that is not an id is a server error, not a bad id.
	dir := t.TempDir()
	writeFile(t, dir, LatestName(SuffixLinuxArm64), "v1.2.3\n")
	_, base := distServer(t, HandlerOptions{Dir: dir, NoSelf: true})
	if code, _, _ := get(t, "GET", base+LatestName(SuffixLinuxArm64)); code != 500 {
		t.Errorf("bad latest = %d, want 500", code)
	}
}
