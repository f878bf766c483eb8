// Package s3test runs a real S3-compatible server for tests: the Versity
// S3 Gateway (versitygw, github.com/versity/versitygw) on its posix
// backend in a temporary directory. Its binary is found as
// $OUTPOST_VERSITYGW or versitygw on PATH; without one, Start skips the
// test, or fails it when the CI environment variable is set. Build one
// (cached) with
//
//	OUTPOST_VERSITYGW=$(bash scripts/s3-server.sh)
package s3test

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/blob"
)

// Bucket is the bucket Start creates.
const Bucket = "outpost"

// Binary returns the path of versitygw, or "" when there is none.
func Binary() string {
	if p := os.Getenv("OUTPOST_VERSITYGW"); p != "" {
		return p
	}
	p, _ := exec.LookPath("versitygw")
	return p
}

// Start starts a server with the bucket Bucket, stopped when tb ends, and
// returns the options that reach it.
func Start(tb testing.TB) blob.S3Options {
	tb.Helper()
	bin := Binary()
	if bin == "" && os.Getenv("CI") != "" {
		tb.Fatal("no S3-compatible server, and CI is set: run scripts/s3-server.sh and set OUTPOST_VERSITYGW to the path it prints")
	}
	if bin == "" {
		tb.Skip("no S3-compatible server: set OUTPOST_VERSITYGW or put versitygw on PATH (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)")
	}
	dir := tb.TempDir()
	// The posix backend keeps a bucket as a directory.
	if err := os.Mkdir(filepath.Join(dir, Bucket), 0o700); err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	o := blob.S3Options{Endpoint: addr, Bucket: Bucket, Insecure: true, Region: "us-east-1",
		AccessKey: "outpost-test", SecretKey: hex.EncodeToString(secret)}
	log, err := os.Create(filepath.Join(tb.TempDir(), "versitygw.log"))
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "--access", o.AccessKey, "--secret", o.SecretKey, "--region", o.Region, "--port", addr, "posix", dir)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start versitygw: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		log.Close()
	})
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-done:
			b, _ := os.ReadFile(log.Name())
			tb.Fatalf("versitygw exited at start:\n%s", b)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			tb.Fatalf("versitygw did not listen on %s within 30s", addr)
		}
	}
	return o
}
