//go:build linux

package egress

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net/netip"
	"testing"
	"time"
)

// TestBulkKeepsEveryByte moves megabytes both ways through the engine, over
// IPv4 and IPv6, and compares them byte for byte. The session's segments
// arrive with their checksums left to the device (checksum offload) and
// 64 KB long; the echo's come back through the TUN device as full packets.
// A link that misread the virtio-net header, lost the tail of a packet
// spread over several read buffers or reused a buffer a queued segment
// still held would corrupt or stall the stream.
//
// Each test runs on a device with the virtio-net header and offload, and
// on a plain one, as the engine runs where the kernel refuses them.
func TestBulkKeepsEveryByte(t *testing.T) {
	bothLinks(t, testBulkKeepsEveryByte)
}

// bothLinks runs test with and without TUN offload.
func bothLinks(t *testing.T, test func(t *testing.T, offload bool)) {
	for _, offload := range []bool{true, false} {
		name := "offload"
		if !offload {
			name = "plain"
		}
		t.Run(name, func(t *testing.T) {
			offloadTUN = offload
			defer func() { offloadTUN = true }()
			test(t, offload)
		})
	}
}

// checkLink fails unless s's device is the kind asked for: a kernel that
// refused the offload would otherwise pass the offload tests on the plain
// path.
func checkLink(t *testing.T, s *session, offload bool) {
	t.Helper()
	if s.ns.vnetHdr != offload {
		t.Fatalf("the namespace's TUN device has a virtio-net header: %v, want %v", s.ns.vnetHdr, offload)
	}
}

func testBulkKeepsEveryByte(t *testing.T, offload bool) {
	for _, host := range []netip.Addr{hostWeb4, hostWeb6} {
		t.Run(host.String(), func(t *testing.T) {
			s := newSession(t, &testPolicy{prefixes: []netip.Prefix{netip.PrefixFrom(host, host.BitLen())}}, nil)
			checkLink(t, s, offload)
			c, err := s.dial("tcp", hostPort(host, 7000))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			data := make([]byte, 8<<20)
			rand.Read(data)
			werr := make(chan error, 1)
			go func() {
				// Odd sizes, so segments and reads do not line up with
				// the link's buffers.
				for off := 0; off < len(data); {
					n := min(len(data)-off, 100_003)
					if _, err := c.Write(data[off : off+n]); err != nil {
						werr <- err
						return
					}
					off += n
				}
				werr <- nil
			}()
			got := make([]byte, len(data))
			if _, err := io.ReadFull(c, got); err != nil {
				t.Fatalf("read the echo: %v", err)
			}
			if err := <-werr; err != nil {
				t.Fatalf("write: %v", err)
			}
			if !bytes.Equal(got, data) {
				i := 0
				for i < len(got) && got[i] == data[i] {
					i++
				}
				t.Fatalf("echo differs from byte %d (sha256 %x, want %x)", i, sha256.Sum256(got), sha256.Sum256(data))
			}
			// The engine counts a chunk after writing it, so the session
			// may read the last bytes just before they are counted.
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			deadline := time.After(5 * time.Second)
			for {
				st := s.eng.Stats()
				if st.BytesOut >= int64(len(data)) && st.BytesIn >= int64(len(data)) {
					break
				}
				select {
				case <-tick.C:
				case <-deadline:
					t.Fatalf("stats count %d out, %d in; want at least %d each way", st.BytesOut, st.BytesIn, len(data))
				}
			}
		})
	}
}

// TestLargeDatagramsKeepEveryByte: UDP datagrams up to near the IPv4 limit
// cross the engine both ways intact (their checksums, too, are left to the
// device on the way in).
func TestLargeDatagramsKeepEveryByte(t *testing.T) {
	bothLinks(t, testLargeDatagramsKeepEveryByte)
}

func testLargeDatagramsKeepEveryByte(t *testing.T, offload bool) {
	s := newSession(t, &testPolicy{prefixes: []netip.Prefix{netip.MustParsePrefix("10.99.0.11/32"), netip.MustParsePrefix("fd99::11/128")}}, nil)
	checkLink(t, s, offload)
	for _, host := range []netip.Addr{hostWeb4, hostWeb6} {
		c, err := s.dial("udp", hostPort(host, 7001))
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 65535)
		for _, size := range []int{1, 1400, 9000, 40_000, 60_000} {
			msg := make([]byte, size)
			rand.Read(msg)
			// A datagram may be lost; the echo of one of a few tries must
			// come back whole.
			ok := false
			for try := 0; try < 5 && !ok; try++ {
				if _, err := c.Write(msg); err != nil {
					t.Fatalf("%s: write %d bytes: %v", host, size, err)
				}
				c.SetReadDeadline(time.Now().Add(time.Second))
				n, err := c.Read(buf)
				if err != nil {
					continue
				}
				if !bytes.Equal(buf[:n], msg) {
					t.Fatalf("%s: a %d-byte datagram came back as %d different bytes", host, size, n)
				}
				ok = true
			}
			if !ok {
				t.Fatalf("%s: no echo of a %d-byte datagram in 5 tries", host, size)
			}
		}
		c.Close()
	}
}
