package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// lockedBuffer is a buffer a running command writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDeviceLoginTrustsCAFile: a device login to a server signed by a
// private CA goes through --ca-file, and saves it with the login.
func TestDeviceLoginTrustsCAFile(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "tls")
	if code := newTestFactory(t, nil).run(t, "certs", "create", "--name", "127.0.0.1", "--dir", dir); code != 0 {
		t.Fatal("certs create failed")
	}
	srv := servertest.Start(t, server.Options{TLSCertFile: filepath.Join(dir, "tls.crt"), TLSKeyFile: filepath.Join(dir, "tls.key"),
		DevicePollInterval: time.Nanosecond})
	tf := newTestFactory(t, nil)
	errOut := &lockedBuffer{}
	tf.IO.ErrOut = errOut
	ca := filepath.Join(dir, "ca.crt")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"login", "--server", srv.URL(), "--ca-file", ca, "--no-browser"}, tf.Factory)
	}()

	var code string
	re := regexp.MustCompile(`(?m)^code: ([A-Z]{4}-[A-Z]{4})$`)
	waitfor.Within(t, 20*time.Second, "the user code", func() bool {
		m := re.FindStringSubmatch(errOut.String())
		if m != nil {
			code = m[1]
		}
		return m != nil
	})
	tr, err := tlsconfig.Transport(ca)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(srv.URL(), srv.AdminToken(), client.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Tokens.ApproveDevice(ctx, strings.ToLower(code)); err != nil {
		t.Fatalf("approve %s: %v", code, err)
	}
	if exit := <-done; exit != 0 {
		t.Fatalf("login: exit %d: %s", exit, errOut)
	}
	var cfg config
	b, err := os.ReadFile(filepath.Join(tf.configDir, "outpost", "config.json"))
	if err != nil || json.Unmarshal(b, &cfg) != nil || cfg.CAFile != ca || cfg.Server != srv.URL() || !strings.HasPrefix(cfg.Token, "opt_") {
		t.Fatalf("saved login %s: %v", b, err)
	}
	if !strings.Contains(tf.out.String(), "trusting the CA in "+ca) {
		t.Errorf("login said %q", tf.out)
	}
}
